// What the Chrome trace and the SVG timeline both lay out by (internal to traces/): the ranks a
// picture of a run shows, and the run's slices grouped by (rank, lane). The trace gives each
// group its threads, the SVG draws each group as one strip of a rank's row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "schedule/schedule.hpp"
#include "results/run_record.hpp"

namespace ppsched {

// The schedule's ranks, the record's summaries, and every rank a slice or a memory sample
// names (a measured run may name more than its schedule has).
int shown_ranks(const Schedule& s, const RunRecord& r);

// A step of a rank as one key, (rank, index).
inline uint64_t step_key(int rank, int index) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32) | static_cast<uint32_t>(index);
}

// r.slices of ranks 0 .. nranks - 1 (by a counting sort: linear in the slices), each group in
// r.slices order. Group g = rank * kTraceLanes + lane holds order[first[g]] .. order[first[g + 1] - 1].
struct LaneGroups {
  std::vector<uint32_t> order;  // indices into r.slices
  std::vector<size_t> first;    // nranks * kTraceLanes + 1 bounds
};
LaneGroups group_by_lane(const RunRecord& r, int nranks);

}  // namespace ppsched
