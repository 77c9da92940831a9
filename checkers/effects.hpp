// The cache effects of the step table, resolved for one step on its rank: the effects whose
// conditions hold (conditions_of), with the entry's absolute stage and its bytes under a
// memory model. The cache walk (checkers/caches.cpp) and the simulator's memory accounting
// (sim/engine.cpp) both read the table through it; the answer depends only on (rank, op,
// stage, whether the micro's MPipe owner is rank 0), so it is computed once per such key.
#pragma once

#include <cstdint>
#include <vector>

#include "checkers/flat_map.hpp"
#include "checkers/options.hpp"
#include "model/schedule.hpp"

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
    const ResolvedEffect* first = nullptr;
    uint32_t count = 0;
    int64_t consumed_bytes = 0;  // sum over Consume effects
    int64_t produced_bytes = 0;  // sum over Produce effects
    const ResolvedEffect* begin() const { return first; }
    const ResolvedEffect* end() const { return first + count; }
  };

  EffectResolver(const Schedule& s, const MemoryModel& memory) : s_(s), memory_(memory) {}

  // The applicable effects of leaf step `st` on `rank`, in table order. The reference stays
  // valid until the next call.
  const Resolved& of(int rank, const Step& st);

 private:
  const Schedule& s_;
  const MemoryModel& memory_;
  FlatMap<uint32_t> memo_{256};    // key -> index in resolved_
  std::vector<Resolved> resolved_;
  std::vector<ResolvedEffect> pool_;
  std::vector<uint32_t> first_;    // per resolved_: index in pool_ (pool_ may move while growing)
  Resolved current_;
};

}  // namespace ppsched
