// The cache effects of the step table, resolved for one step on its rank: the effects whose
// conditions hold (conditions_of), with the entry's absolute stage and its bytes under a
// memory model. The cache walk (checkers/caches.cpp) and the simulator's memory accounting
// (sim/engine.cpp) both read the table through it; the answer depends only on (rank, op,
// stage, whether the micro's MPipe owner is rank 0), so it is computed once per such key.
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/flat_map.hpp"
#include "lowering/options.hpp"
#include "schedule/schedule.hpp"

namespace ppsched {

struct ResolvedEffect {
  Cache cache;
  Effect effect;
  int32_t stage;   // the entry's stage (step's stage + offset) for stage caches, -1 for rank caches
  int64_t bytes;   // what one entry holds under the memory model
};

class EffectResolver {
 public:
  struct Resolved {
    std::vector<ResolvedEffect> effects;
    int64_t consumed_bytes = 0;  // sum over Consume effects
    int64_t produced_bytes = 0;  // sum over Produce effects
    // ... of which kept activations (cache_info(c).memory), for the reports' breakdown
    int64_t consumed_activation = 0, produced_activation = 0;
    auto begin() const { return effects.begin(); }
    auto end() const { return effects.end(); }
  };

  EffectResolver(const Schedule& s, const MemoryModel& memory) : s_(s), memory_(memory) {}

  // The applicable effects of leaf step `st` on `rank`, in table order. The reference stays
  // valid until the next call.
  const Resolved& of(int rank, const Step& st) {
    const uint64_t key = key_of(rank, st);
    if (const uint32_t* hit = memo_.find(key)) return resolved_[*hit];
    return resolve(key, rank, st);
  }

 private:
  // conditions_of reads the rank, the stage's neighbours and, in MPipe, whether owner(micro)
  // is rank 0: the key holds exactly those (and the op).
  uint64_t key_of(int rank, const Step& st) const {
    const bool owner_not_0 = s_.mpipe && st.micro >= 0 && s_.owner_of(st.micro) != 0;
    return static_cast<uint64_t>(st.op) | (static_cast<uint64_t>(static_cast<uint32_t>(st.stage + 1) & 0xFFFFFFu) << 6) |
           (static_cast<uint64_t>(owner_not_0) << 30) | (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 31);
  }
  const Resolved& resolve(uint64_t key, int rank, const Step& st);

  const Schedule& s_;
  const MemoryModel& memory_;
  FlatMap<uint32_t> memo_{256};        // key -> index in resolved_
  std::vector<Resolved> resolved_;
};

}  // namespace ppsched
