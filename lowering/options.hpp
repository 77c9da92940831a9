// The communication and memory model every check uses (see README "Verification model").
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/step_types.hpp"

namespace ppsched {

enum class CommMode : uint8_t {
  Rendezvous,  // NCCL/HCCL-like: a send or receive blocks until its partner is posted
  Eager,       // sends complete when posted (PyTorch's simulator assumes this)
};

// Bytes each live cache entry holds, for the memory check (and the simulator's memory model).
struct MemoryModel {
  std::vector<int64_t> activation_bytes{int64_t{1} << 30};  // per stage (one value = every stage): F -> B
  std::vector<int64_t> boundary_bytes{int64_t{1} << 24};    // per stage: one activation/gradient message
  int64_t features_bytes = int64_t{1} << 24;                // MPipe tower features of one micro
  int64_t tower_input_bytes = int64_t{1} << 22;             // MPipe tower input of one micro
  int64_t tower_graph_bytes = int64_t{1} << 28;             // owner_backward: kept tower graph per micro
  int64_t data_bytes = int64_t{1} << 16;                    // one loaded micro-batch

  int64_t activation(int stage) const { return pick(activation_bytes, stage); }
  int64_t boundary(int stage) const { return pick(boundary_bytes, stage); }
  // Bytes one entry of cache `c` holds (stage may be -1 for rank caches).
  int64_t bytes_of(Cache c, int stage) const;

 private:
  static int64_t pick(const std::vector<int64_t>& v, int stage) {
    if (v.empty()) return 0;
    if (v.size() == 1 || stage < 0) return v[0];
    return v[static_cast<size_t>(stage) < v.size() ? static_cast<size_t>(stage) : v.size() - 1];
  }
};

struct CheckOptions {
  CommMode comm = CommMode::Rendezvous;
  // Receives posted at their step and waited by their consumer; sends drained at the end of
  // the run (hyper-parallel overlap_p2p, PyTorch's runtime).
  bool overlap_p2p = false;
  // MPipe executor: the first MPIPE_FWD_RECV posts every outstanding feature receive in
  // ascending micro order and waits them all; MPipe payload sends are deferred to the end.
  bool mpipe_batched_recv = false;
  // Body FWD P2P exchanges shape/dtype meta at every step instead of once per stage.
  bool dyn_shape = false;
  std::optional<int64_t> memory_budget;  // per rank, bytes
  MemoryModel memory;
  // TEST-ONLY: turns off one rule (a compute step running before its receive arrived), so
  // that a test can show the fuzzing machinery finds and shrinks a planted checker bug.
  bool testing_disable_recv_rule = false;
  // TEST-ONLY: a planted lowering bug: a body FWD transfer's meta goes after its payload on
  // both ends (the channels still match, so no pass that starts from the lowering sees it),
  // so that a test can show the reference oracle (tools/fuzz/comm_oracle.hpp) finds it.
  bool testing_meta_after_payload = false;
  // TEST-ONLY: the cache walk skips its fast clean-case proof and walks every rank with the
  // explaining pass, so a test can show both give the same answers.
  bool testing_exact_cache_walk = false;
};

}  // namespace ppsched
