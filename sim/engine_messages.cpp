// The engine's message state: building the windows and growing a ring (sim/engine_messages.hpp).
#include "sim/engine_messages.hpp"

#include <utility>

namespace ppsched::des {

MessageStates::MessageStates(const CommModel& m, bool keep_all) : m_(m), keep_all_(keep_all) {
  if (keep_all) {
    all_.resize(m.messages.size());
    return;
  }
  windows_.resize(static_cast<size_t>(m.ranks));
  for (size_t id = m.messages.size(); id-- > 0;) {  // each window starts at its rank's first id
    Window& w = windows_[static_cast<size_t>(m.rank_of(m.messages[id]))];
    w.lo = w.hi = static_cast<int32_t>(id);
  }
}

void MessageStates::grow(Window& w, size_t need) {
  size_t cap = 16;
  while (cap < 2 * need) cap *= 2;
  std::vector<MsgState> ring(cap);
  for (int32_t id = w.lo; id < w.hi; ++id) ring[static_cast<size_t>(id) & (cap - 1)] = slot(w, id);
  w.ring = std::move(ring);
  w.mask = cap - 1;
}

}  // namespace ppsched::des
