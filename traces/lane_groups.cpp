#include "traces/lane_groups.hpp"

#include <algorithm>

#include "traces/chrome_trace.hpp"

namespace ppsched {

int shown_ranks(const Schedule& s, const RunRecord& r) {
  int n = std::max(s.ranks, static_cast<int32_t>(r.ranks.size()));
  for (const auto& sl : r.slices) n = std::max(n, sl.rank + 1);
  for (const auto& m : r.memory) n = std::max(n, m.rank + 1);
  return n;
}

LaneGroups group_by_lane(const RunRecord& r, int nranks) {
  LaneGroups g;
  auto key = [&](const TimedSlice& sl) {
    return static_cast<size_t>(sl.rank) * kTraceLanes + static_cast<size_t>(sl.lane) % kTraceLanes;
  };
  g.first.assign(static_cast<size_t>(nranks) * kTraceLanes + 1, 0);
  for (const auto& sl : r.slices)
    if (sl.rank >= 0) ++g.first[key(sl) + 1];
  for (size_t k = 1; k < g.first.size(); ++k) g.first[k] += g.first[k - 1];
  g.order.resize(g.first.back());
  std::vector<size_t> next(g.first.begin(), g.first.end() - 1);
  for (size_t i = 0; i < r.slices.size(); ++i)
    if (r.slices[i].rank >= 0) g.order[next[key(r.slices[i])]++] = static_cast<uint32_t>(i);
  return g;
}

}  // namespace ppsched
