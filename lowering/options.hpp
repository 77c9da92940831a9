// The communication and memory model every check uses (see README "Verification model").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lowering/fsdp2_gather.hpp"
#include "lowering/mesh.hpp"
#include "schedule/step_types.hpp"

namespace ppsched {

enum class CommMode : uint8_t {
  Rendezvous,  // NCCL/HCCL-like: a send or receive blocks until its partner is posted
  Eager,       // sends complete when posted (PyTorch's simulator assumes this)
};

// What carries the P2P operations a rank posts without waiting for them (overlap_p2p's
// receives and deferred sends, MPipe's batched receive): the deadlock verdict of a program that
// posts assumes one of these (README "Verification model"). A program that only posts and waits
// at once (blocking phases) has the same verdict under both: each of its operations starts
// after every earlier one of its rank has completed.
enum class P2PBackend : uint8_t {
  // NCCL runs a communicator's operations in the order they were issued, on its stream: an
  // operation starts only when every earlier one on that stream has completed, so a receive
  // posted after a send is not there for its peer until that send has completed (PyTorch's
  // runtime issues every P2P op through batch_isend_irecv on the pipeline group's
  // communicator, ppsched's NCCL transport through its world communicator: one stream a rank;
  // pytorch/pytorch#172668).
  Nccl,
  // Each posted operation progresses on its own (Gloo's unbound buffers; ppsched-exec on CPUs).
  Gloo,
};
std::string_view to_string(P2PBackend b);

struct DataParallelOptions;

// What a stage holds for the whole step, after data-parallel sharding (lowering/options.hpp,
// MemoryModel::resident).
struct ResidentBytes {
  int64_t weights = 0, grads = 0, optimizer = 0;
  int64_t total() const { return weights + grads + optimizer; }
  ResidentBytes& operator+=(const ResidentBytes& o) {
    weights += o.weights;
    grads += o.grads;
    optimizer += o.optimizer;
    return *this;
  }
  ResidentBytes& operator-=(const ResidentBytes& o) {
    weights -= o.weights;
    grads -= o.grads;
    optimizer -= o.optimizer;
    return *this;
  }
};

// Weights that several stages' resident bytes each count whole: a tied embedding and output
// head, an MTP module's copies of the embedding and the head (workload/stage_plan.hpp,
// SharedTable). A rank that holds several of these stages holds the tensor, its gradient and
// its optimizer state once.
struct SharedWeights {
  std::vector<int> stages;  // ascending, distinct
  ResidentBytes bytes;      // before data-parallel sharding
};

// Bytes each live cache entry holds, for the memory check (and the simulator's memory model),
// and what each stage holds for the whole step.
struct MemoryModel {
  std::vector<int64_t> activation_bytes{int64_t{1} << 30};  // per stage (one value = every stage): F -> B
  std::vector<int64_t> boundary_bytes{int64_t{1} << 24};    // per stage: one activation/gradient message
  int64_t features_bytes = int64_t{1} << 24;                // MPipe tower features of one micro
  int64_t tower_input_bytes = int64_t{1} << 22;             // MPipe tower input of one micro
  int64_t tower_graph_bytes = int64_t{1} << 28;             // owner_backward: kept tower graph per micro
  int64_t data_bytes = int64_t{1} << 16;                    // one loaded micro-batch
  std::vector<int64_t> param_bytes;  // per stage: its parameters (what --fsdp gathers); none: 0
  // Per stage (none: 0): kept from BWD_INPUT to BWD_WEIGHT (none: half the activation); held
  // while a backward runs on top of its inputs (a recomputing backward's recomputed layer).
  std::vector<int64_t> weight_grad_bytes, workspace_bytes;
  // Per stage (none: 0), before data-parallel sharding: weights, gradients, optimizer state.
  std::vector<int64_t> weight_bytes, grad_bytes, optimizer_bytes;
  std::vector<SharedWeights> shared_weights;  // counted by several stages' bytes above
  // Per stage (none: 0): the routed experts' part of param_bytes, split over expert_parallel
  // ranks already; their share of each resident part is sharded over the degree / ep
  // expert-data-parallel ranks instead of the degree (Megatron-Core: 6 + 12 / EDP bytes per
  // expert parameter with the distributed optimizer).
  std::vector<int64_t> expert_param_bytes;
  int expert_parallel = 1;
  // A schedule of one stage (no pipeline) priced from a network: the units FSDP2 wraps, in
  // forward order. Empty: an FSDP_UNSHARD gathers the stage's whole parameters, as PyTorch's
  // pipelining runtime does (each stage gathered across its micro-batches).
  std::vector<FsdpUnit> fsdp_units;

  int64_t activation(int stage) const { return pick(activation_bytes, stage); }
  int64_t boundary(int stage) const { return pick(boundary_bytes, stage); }
  int64_t params(int stage) const { return pick(param_bytes, stage); }
  int64_t workspace(int stage) const { return pick(workspace_bytes, stage); }
  // The bytes an FSDP_UNSHARD of `stage` makes live under `dp` (0 without --fsdp or with one
  // replica): FSDP2's peak of one unit and the prefetched next (fsdp2_gather_peak) where
  // fsdp_units lists them, else the stage's whole parameters.
  int64_t gathered(int stage, const DataParallelOptions& dp) const;
  // FSDP2's gather peak over fsdp_units under `dp` (fsdp2_gather_peak with dp's gathered bytes).
  FsdpGatherPeak fsdp_gather_peak(const DataParallelOptions& dp) const;
  // Bytes one entry of cache `c` holds (stage may be -1 for rank caches).
  int64_t bytes_of(Cache c, int stage) const;
  bool has_resident() const { return !weight_bytes.empty() || !grad_bytes.empty() || !optimizer_bytes.empty(); }
  // What stage `stage` holds for the whole step under `dp`'s sharding: with --fsdp over N
  // replicas 1/N of each part (FSDP2 shards weights, gradients and optimizer state; the gathered
  // weights are live only while gathered), with the distributed optimizer 1/N of the optimizer
  // state (Megatron: 6 + 12/N bytes per parameter), else all of it. A shard rounds up.
  ResidentBytes resident(int stage, const DataParallelOptions& dp) const;
  // What each of `ranks` ranks holds for the whole step: the resident bytes of the stages
  // `rank_of(stage)` puts on it (stages 0 .. stages-1), a shared tensor once per rank.
  template <class RankOf>
  std::vector<ResidentBytes> resident_by_rank(int ranks, int stages, RankOf rank_of, const DataParallelOptions& dp) const;

 private:
  // Bytes before sharding as one replica holds them under `dp` (a shard rounds up).
  static ResidentBytes sharded(const ResidentBytes& b, const DataParallelOptions& dp, int64_t divide = 1);
  static int64_t pick(const std::vector<int64_t>& v, int stage) {
    if (v.empty()) return 0;
    if (v.size() == 1 || stage < 0) return v[0];
    return v[static_cast<size_t>(stage) < v.size() ? static_cast<size_t>(stage) : v.size() - 1];
  }
};

// How a job replicates its pipeline over data-parallel ranks (README "Pipeline x data
// parallel"): `degree` replicas of every pipeline rank, laid out as lowering/mesh.hpp says.
// The FSDP_* steps are collectives over a pipeline rank's replicas (their CollectiveKind in the
// step table is the sharded one; `effective` says what they do under these options).

struct DataParallelOptions {
  int degree = 1;                       // N, data-parallel replicas of every pipeline rank
  MeshOrder mesh_order = MeshOrder::DpPp;
  bool fsdp = false;                    // parameters sharded over the DP group
  bool distributed_optimizer = false;   // optimizer state sharded over the DP group (ZeRO-1)

  // The bytes an FSDP_UNSHARD of a stage with `params` bytes of parameters makes live: the
  // (N-1)/N of them the rank does not hold (0 without --fsdp or with one replica).
  int64_t gathered_bytes(int64_t params) const { return fsdp && degree > 1 ? params - params / degree : 0; }
  // The mesh of a pipeline of `pipeline_ranks` ranks under these options (its global ranks:
  // DeviceMesh::global_rank; a world within kMaxWorldRanks, data_parallel_problem, fits an int).
  DeviceMesh mesh(int pipeline_ranks) const { return DeviceMesh{pipeline_ranks, degree, mesh_order}; }
  // What a DP collective declared as `declared` does: nothing with one replica; without
  // sharding the gradients are all-reduced (DDP) and UNSHARD/RESHARD have nothing to do; with
  // --fsdp UNSHARD all-gathers, REDUCE_GRAD reduce-scatters and RESHARD only frees.
  CollectiveKind effective(CollectiveKind declared) const {
    if (degree <= 1) return CollectiveKind::None;
    switch (declared) {
      case CollectiveKind::ReduceScatter: return fsdp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
      case CollectiveKind::AllGather: return fsdp ? CollectiveKind::AllGather : CollectiveKind::None;
      case CollectiveKind::Release: return CollectiveKind::None;
      default: return declared;
    }
  }
};

inline FsdpGatherPeak MemoryModel::fsdp_gather_peak(const DataParallelOptions& dp) const {
  return fsdp2_gather_peak(fsdp_units, [&dp](int64_t b) { return dp.gathered_bytes(b); });
}

inline int64_t MemoryModel::gathered(int stage, const DataParallelOptions& dp) const {
  return fsdp_units.empty() ? dp.gathered_bytes(params(stage)) : fsdp_gather_peak(dp).bytes;
}

// `divide`: the ranks of the data-parallel group that hold the same shard (expert parallelism:
// the degree / ep expert-data-parallel ranks shard what the ep ranks hold apart).
inline ResidentBytes MemoryModel::sharded(const ResidentBytes& b, const DataParallelOptions& dp, int64_t divide) {
  const int64_t n = std::max<int64_t>(dp.degree > 1 ? dp.degree / std::max<int64_t>(divide, 1) : 1, 1);
  const auto shard = [n](int64_t x, bool on) { return on ? (x + n - 1) / n : x; };
  return {shard(b.weights, dp.fsdp), shard(b.grads, dp.fsdp), shard(b.optimizer, dp.fsdp || dp.distributed_optimizer)};
}

inline ResidentBytes MemoryModel::resident(int stage, const DataParallelOptions& dp) const {
  const ResidentBytes all{pick(weight_bytes, stage), pick(grad_bytes, stage), pick(optimizer_bytes, stage)};
  const int64_t params = pick(param_bytes, stage), experts = std::min(pick(expert_param_bytes, stage), params);
  if (experts <= 0 || expert_parallel <= 1) return sharded(all, dp);
  // Each resident part in proportion to the parameters: the experts' share sharded over EDP.
  const double f = static_cast<double>(experts) / static_cast<double>(params);
  const auto part = [f](int64_t x) { return static_cast<int64_t>(std::llround(static_cast<double>(x) * f)); };
  const ResidentBytes expert{part(all.weights), part(all.grads), part(all.optimizer)};
  ResidentBytes dense = all;
  dense -= expert;
  ResidentBytes out = sharded(dense, dp);
  out += sharded(expert, dp, expert_parallel);
  return out;
}

template <class RankOf>
std::vector<ResidentBytes> MemoryModel::resident_by_rank(int ranks, int stages, RankOf rank_of,
                                                         const DataParallelOptions& dp) const {
  std::vector<ResidentBytes> out(static_cast<size_t>(std::max(ranks, 0)));
  if (!has_resident()) return out;
  const auto on_rank = [&](int st) {
    const int r = st >= 0 && st < stages ? rank_of(st) : -1;
    return r >= 0 && r < ranks ? r : -1;
  };
  for (int st = 0; st < stages; ++st)
    if (const int r = on_rank(st); r >= 0) out[static_cast<size_t>(r)] += resident(st, dp);
  // A shared tensor counted by k of a rank's stages is held once: k - 1 copies less, each
  // sharded as a stage's bytes are.
  for (const SharedWeights& w : shared_weights) {
    const ResidentBytes copy = sharded(w.bytes, dp);
    std::vector<int> seen;
    for (int st : w.stages) {
      const int r = on_rank(st);
      if (r < 0) continue;
      if (std::find(seen.begin(), seen.end(), r) != seen.end()) out[static_cast<size_t>(r)] -= copy;
      else seen.push_back(r);
    }
  }
  return out;
}

// The largest world (pipeline ranks x DP degree) a job may have: the rank limit of the
// schedule files (README "Limits"), so that every global rank fits an int.
inline constexpr int64_t kMaxWorldRanks = int64_t{1} << 20;
// Why `dp` cannot describe a job of `pipeline_ranks` pipeline ranks ("" when it can).
inline std::string data_parallel_problem(const DataParallelOptions& dp, int pipeline_ranks) {
  if (dp.degree < 1 || dp.degree > kMaxWorldRanks)
    return "the data-parallel degree " + std::to_string(dp.degree) + " is outside 1.." + std::to_string(kMaxWorldRanks);
  const int64_t world = int64_t{std::max(pipeline_ranks, 1)} * dp.degree;
  if (world > kMaxWorldRanks)
    return "the world of " + std::to_string(pipeline_ranks) + " pipeline ranks x " + std::to_string(dp.degree) +
           " data-parallel replicas is " + std::to_string(world) + " ranks, over the limit of " +
           std::to_string(kMaxWorldRanks) + " (2^20)";
  return {};
}

struct CheckOptions {
  CommMode comm = CommMode::Rendezvous;
  // What carries posted P2P operations (see P2PBackend): NCCL's stream order unless the run is
  // on Gloo.
  P2PBackend backend = P2PBackend::Nccl;
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
  // The job's data parallelism: the simulator prices the FSDP_* steps over the DP group.
  DataParallelOptions dp;
  // TEST-ONLY: turns off one rule (a compute step running before its receive arrived), so
  // that a test can show the fuzzing machinery finds and shrinks a planted checker bug.
  bool testing_disable_recv_rule = false;
  // TEST-ONLY: a planted lowering bug: a body FWD transfer's meta goes after its payload on
  // both ends (the channels still match, so no pass that starts from the lowering sees it),
  // so that a test can show the reference oracle (tools/fuzz/comm_oracle.hpp) finds it.
  bool testing_meta_after_payload = false;
  // TEST-ONLY: a planted deadlock-verdict bug: the replay completes a rendezvous send as soon
  // as it is posted, as under eager (a send-send cycle passes for deadlock-free), so that a
  // test can show the reference oracle's run (tools/fuzz/comm_oracle.hpp) disagrees.
  bool testing_replay_buffers_sends = false;
  // TEST-ONLY: the cache walk skips its fast clean-case proof and walks every rank with the
  // explaining pass, so a test can show both give the same answers.
  bool testing_exact_cache_walk = false;
};

}  // namespace ppsched
