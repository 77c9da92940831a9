// What FSDP2 (torch.distributed.fsdp.fully_shard) holds gathered when it trains a model
// without a pipeline: one wrapped unit at a time, the next one prefetched (docs/model.md
// "FSDP without a pipeline"; the sources and their lines are cited there).
//
// torchtitan wraps the embedding, each transformer block and the final norm + output head as
// units of their own (torchtitan/distributed/fsdp.py, apply_fsdp_to_decoder). FSDP2 gathers a
// unit just before its forward and, with reshard_after_forward (torchtitan's default without a
// pipeline), frees it after; the next unit's all-gather runs while the current unit computes
// (implicit forward prefetch), so two units are gathered at a time. The backward gathers the
// units again in reverse order, prefetching the previous one (FSDPParamGroup._backward_prefetch),
// and frees each after its backward. A unit not resharded after its forward (the norm + head,
// which the backward needs first; the tied embedding + head) stays gathered from its forward
// to the end of its backward.
#pragma once

#include <cstdint>
#include <vector>

namespace ppsched {

// One unit fully_shard wraps, in the order the forward runs it.
struct FsdpUnit {
  int64_t bytes = 0;          // its parameters as gathered (one tensor-parallel shard)
  bool kept_gathered = false; // not resharded after its forward: gathered until its backward ends
  int64_t grad_bytes = 0;     // its gradients as reduce-scattered (the gradient bytes per parameter)
};

// The most the units hold gathered at one moment, and which units that is (indices, ascending).
struct FsdpGatherPeak {
  int64_t bytes = 0;
  std::vector<int> units;
};

// The peak over the forward (each unit with the next prefetched, on top of the kept ones
// gathered before it) and the backward (each unit with the previous one prefetched, on top of
// the kept ones whose backward has not run yet) of sum(gathered(unit.bytes)): `gathered` says
// what gathering a unit of so many bytes makes live on a rank (DataParallelOptions::gathered_bytes).
template <class Gathered>
FsdpGatherPeak fsdp2_gather_peak(const std::vector<FsdpUnit>& units, Gathered gathered) {
  const int n = static_cast<int>(units.size());
  // kept_before[j]: what the kept units before unit j hold gathered.
  std::vector<int64_t> kept_before(static_cast<size_t>(n) + 1, 0);
  for (int j = 0; j < n; ++j)
    kept_before[static_cast<size_t>(j) + 1] =
        kept_before[static_cast<size_t>(j)] +
        (units[static_cast<size_t>(j)].kept_gathered ? gathered(units[static_cast<size_t>(j)].bytes) : 0);
  // Units `first` and `second` (second > first, or -1: first alone) gathered together: the one
  // running and the one prefetched, on top of every kept unit before `first` (gathered by its
  // forward, its backward still to come).
  int64_t best = 0;
  int best_first = -1, best_second = -1;
  const auto consider = [&](int first, int second) {
    const int64_t bytes = kept_before[static_cast<size_t>(first)] + gathered(units[static_cast<size_t>(first)].bytes) +
                          (second >= 0 ? gathered(units[static_cast<size_t>(second)].bytes) : 0);
    if (bytes > best) best = bytes, best_first = first, best_second = second;
  };
  for (int i = 0; i < n; ++i) consider(i, i + 1 < n ? i + 1 : -1);  // forward: unit i, unit i + 1 prefetched
  for (int i = n - 1; i >= 0; --i) {                                // backward: unit i, unit i - 1 prefetched
    if (i > 0) consider(i - 1, i);
    else consider(0, -1);
  }
  FsdpGatherPeak peak;
  peak.bytes = best;
  if (best_first < 0) return peak;
  for (int j = 0; j < best_first; ++j)
    if (units[static_cast<size_t>(j)].kept_gathered) peak.units.push_back(j);
  peak.units.push_back(best_first);
  if (best_second >= 0) peak.units.push_back(best_second);
  return peak;
}

}  // namespace ppsched
