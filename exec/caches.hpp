// The executor's per-micro caches: exactly the caches of the step table (schedule/step_types.cpp,
// Cache enum, cache_info(c).name), keyed by (stage, micro) for stage caches and by micro for
// rank caches, so that a cache named in an error ("_keep_grad[micro 3]") is the cache the
// verifier's cache pass reasons about (reference hyper_parallel.md §4).
//
// Handlers produce and consume entries themselves; after every step the runtime audits the
// store against the step's table effects (audit_before / audit_after), so a handler that
// drifts from the table fails loudly at the step where it drifted.
#pragma once

#include <array>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "schedule/schedule.hpp"

namespace ppsched::exec {

struct CacheEntry {
  std::vector<at::Tensor> tensors;  // what the cache holds (activation, gradients, data, features)
  // fwd_cache / dw_cache only:
  std::vector<at::Tensor> inputs;   // the stage's inputs (leaves, or the tower's graph-connected features)
  std::vector<at::Tensor> grads;    // dw_cache: the output gradients the weight half needs
  bool tower_connected = false;     // stage 0 input still attached to the tower graph (owner_backward, own micro)
};

class CacheStore {
 public:
  // Throws std::runtime_error naming the entry (and `who`) when it already exists.
  void put(Cache c, int stage, int micro, CacheEntry e, const std::string& who);
  // Throws when the entry is missing.
  CacheEntry take(Cache c, int stage, int micro, const std::string& who);
  CacheEntry& read(Cache c, int stage, int micro, const std::string& who);
  bool has(Cache c, int stage, int micro) const;

  // "fwd_cache[stage 1, micro 3]" for every entry left in `caches` (all when empty).
  std::vector<std::string> leftovers(const std::vector<Cache>& caches = {}) const;
  void clear();

  static std::string entry_name(Cache c, int stage, int micro);

 private:
  static std::pair<int, int> key(Cache c, int stage, int micro);
  std::array<std::map<std::pair<int, int>, CacheEntry>, kCacheCount> maps_;
};

// hyper-parallel's reset(): a run must start with every per-micro cache empty. Throws
// std::runtime_error naming every entry left over (the previous run was cut short without
// abort(), or a handler leaks).
void refuse_leftovers(const CacheStore& store);

// The step table's cache effects for `step` on its rank (conditions `cond`, from
// conditions_of): before the handler, consumed/read entries must exist and produced ones must
// not; after it, consumed entries are gone and produced ones exist. Throws std::logic_error
// with the table row the executor disagrees with.
void audit_before(const CacheStore& store, const Step& step, uint32_t cond);
void audit_after(const CacheStore& store, const Step& step, uint32_t cond);

}  // namespace ppsched::exec
