// The one step vocabulary of ppsched.
//
// Every step type is declared exactly once, in the table in step_types.cpp, with
// everything the rest of the toolkit needs to know about it: its kind, which fields it
// takes, how its peer rank is derived, what message it exchanges and with whom, which
// per-micro-batch caches it produces, reads and consumes, and what a cost model should
// charge for it. Checkers, the simulator and the executor read this table; none of
// them switches over step types. Adding a step type means adding one row.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ppsched {

enum class Op : uint8_t {
  // compute
  FWD, BWD, BWD_INPUT, BWD_WEIGHT, OVERLAP_F_B, OVERLAP_B_F,
  // body point-to-point
  FWD_SEND, FWD_RECV, BWD_SEND, BWD_RECV, BATCH_SEND_RECV,
  // data
  DATA_LOAD, DATA_SEND, DATA_RECV,
  // FSDP / DP and tied parameters
  FSDP_UNSHARD, FSDP_RESHARD, FSDP_REDUCE_GRAD, ALL_REDUCE,
  // replicated stages (Chimera, bidirectional DualPipe)
  REPLICA_GRAD_SYNC,
  // activation swap
  SWAP_LAUNCH_OFFLOAD, SWAP_WAIT_OFFLOAD, SWAP_LAUNCH_LOAD, SWAP_WAIT_LOAD,
  // MPipe Transpose
  MPIPE_PARAM_BROADCAST, MPIPE_TRANSPOSE_FWD, MPIPE_FWD_SEND, MPIPE_FWD_RECV,
  MPIPE_GRAPH_SEND, MPIPE_GRAPH_RECV, MPIPE_TRANSPOSE_BWD, MPIPE_GRAD_SEND,
  MPIPE_GRAD_RECV_WITH_BACKWARD, MPIPE_GRAD_REDUCE,
};
inline constexpr int kOpCount = static_cast<int>(Op::MPIPE_GRAD_REDUCE) + 1;

enum class StepKind : uint8_t { Compute, P2PSend, P2PRecv, Collective, Local, Composite };

// Whether a step type takes a field. Optional: may be given, need not be. RankTag: may be given,
// and then holds the rank whose program holds the step, a tag only (hyper-parallel writes the
// emitting rank in the micro field of MPIPE_PARAM_BROADCAST, reference hyper_parallel.md §1.1).
enum class Field : uint8_t { None, Required, Optional, RankTag };

// How the peer rank of a P2P step is derived (an explicit "peer" on a step overrides it).
enum class PeerRule : uint8_t {
  None,
  NextStage,     // rank of stage s+1
  PrevStage,     // rank of stage s-1
  DataChain,     // stage >= 0: along the body (send: s+1, recv: s-1); prefix (no stage): owner <-> rank 0
  OwnerToRank0,  // MPipe: the step runs on owner(m) and talks to rank 0 ...
  Rank0ToOwner,  // ... or runs on rank 0 and talks to owner(m)
};

// Which rank runs a step. For body steps it is the rank its stage is placed on; MPipe steps
// follow the owner rule instead (reference hyper_parallel.md §1.3): their stage field is only
// a tag (canonical: -1 on the prefix; hyper-parallel writes 0 on the MPIPE_GRAD_* steps, and
// its older MPipe version 0 on the whole prefix), never a placement.
enum class RunsOn : uint8_t {
  StageRank,  // the rank of its stage (a step without a stage: any rank)
  Owner,      // owner(micro)
  Rank0,      // rank 0
  EveryRank,  // every pipeline rank (MPipe collectives)
};

// Which ranks a collective synchronises.
enum class CollectiveScope : uint8_t {
  None,
  AllPipelineRanks,  // every rank of the pipeline (MPipe broadcast / grad reduce)
  ExplicitGroup,     // the step's "group" field (tied-parameter ALL_REDUCE)
  DataParallel,      // a group outside the pipeline (FSDP): no pipeline rank waits on it
  Replicas,          // the ranks holding a copy of the step's stage (Schedule::replica_ranks)
};

// What a compute step costs in a cost model; also the executor's handler class.
enum class ComputeKind : uint8_t {
  None, Forward, Backward, BackwardInput, BackwardWeight, TowerForward, TowerBackward,
  DataLoad, TowerGradBackward, Fsdp, Swap,
};

// The streams of a rank: the compute kernels' and the one the communication of an MoE layer (its
// dispatch and combine all-to-all) runs on beside them (DeepSeek's DualPipe, Megatron-Core's
// --overlap-moe-expert-parallel-comm). Order across the two comes from each chain's own order.
enum class Stream : uint8_t { Compute, Comm };
std::string_view to_string(Stream s);

// What one phase of an MoE layer runs inside a body compute step (issue 38): the layer's
// attention side (attention, router, shared experts, and the dense layers before it on the
// stage), the dispatch all-to-all to the experts' ranks, the routed experts, the combine
// all-to-all back. Which of the layer's FLOPs a compute phase runs (forward, input or weight
// gradient) follows from its step's ComputeKind.
enum class PhaseWork : uint8_t { Attention, Dispatch, Experts, Combine };
struct Phase {
  PhaseWork work;
  Stream stream;
  std::string_view name;  // Megatron-Core's names: attn_fwd, dispatch_fwd, mlp_fwd, combine_fwd, ...
  // A weight-gradient phase that only runs under Megatron-Core's --delay-wgrad-compute (a
  // runtime mode of the MoE lowering: StreamLowering::delay_wgrad, MoeCosts::delay_wgrad): the
  // backward's weight gradients leave the phase before them (which then computes the input
  // gradient only) and run beside the chain, right after it, on the compute stream.
  bool delayed_wgrad = false;
};

// How a composite runs its sub-steps.
enum class CompositeKind : uint8_t {
  None,
  Batch,    // P2P sub-steps posted as one group (batch_isend_irecv / ncclGroupStart..End)
  Overlap,  // a forward and a backward of different micro-batches run together (DualPipe)
};

// The runtime mode under which a P2P step does not block at its step (reference
// hyper_parallel.md §3.2; PyTorch's _PipelineScheduleRuntime). In every other mode it blocks.
enum class Posting : uint8_t {
  Blocking,
  // --overlap-p2p: a receive is posted at its step and waited by the compute step that takes
  // it as input (input_recv); a send is posted at its step and waited at the end of the run.
  OverlapP2P,
  // --mpipe-batched-recv (HYPER_PARALLEL_MPIPE_RECV_BATCH=1): the first such receive posts
  // every outstanding one in ascending micro order and waits them all at once; a send is
  // posted at its step and waited at the end of the run.
  MPipeBatched,
};

// What a collective does to its buffer (the simulator's formula, the executor's call).
enum class CollectiveKind : uint8_t { None, Broadcast, AllReduce, AllGather, ReduceScatter, Release };
// Which byte count of the cost model a collective moves.
enum class CollectiveBytes : uint8_t {
  None,
  TiedParams,   // gradients of the tied parameters (cost model "tied_param_bytes")
  TowerParams,  // the MPipe tower's trainable parameters ("tower_param_bytes")
  StageGrads,   // the gradients of the step's stage (cost model "param_bytes" of that stage)
};

// What a P2P message carries (the simulator prices it by this).
enum class Payload : uint8_t { None, Activation, Gradient, Data, Features, TowerInputs, FeatureGrads };

// Shape/dtype meta messages the runtime exchanges on the same channel before a payload
// (reference hyper_parallel.md §3.3).
enum class Meta : uint8_t {
  None,
  FirstPerStage,  // once per stage object and process (body FWD P2P, dyn_shape=false)
  EveryStep,      // before every payload (MPipe transfers)
};

// Per-micro caches of the runtime (reference hyper_parallel.md §4). Stage caches are keyed
// by (stage, micro); rank caches (MPipe executor, data) by (rank, micro).
enum class Cache : uint8_t {
  // stage caches
  fwd_cache, fwd_outputs_cache, bwd_cache, dw_cache, fwd_recv_buffer, bwd_recv_buffer,
  swap_offloading, swap_on_host, swap_loading,
  // rank caches
  data_batch, tower_features, inputs_for_explicit_forward, outputs_for_stage0, keep_grad,
  outputs_for_bwd, feature_grads,
};
inline constexpr int kCacheCount = static_cast<int>(Cache::feature_grads) + 1;
// How a memory report counts an entry: kept activations (what a forward leaves for its
// backward, or a backward for its weight gradient) or buffers (messages and hand-overs between
// steps: received, waiting to be sent, loaded inputs).
enum class MemoryClass : uint8_t { Activation, Buffer };
struct CacheInfo {
  Cache cache;
  std::string_view name;
  bool per_stage;           // keyed by (stage, micro); else by (rank, micro)
  MemoryClass memory;
  std::string_view meaning;
};
const CacheInfo& cache_info(Cache c);  // inline below, after the table's declaration

enum class Effect : uint8_t {
  Produce,  // creates the entry; it must not exist yet
  Read,     // needs the entry to exist, leaves it
  Consume,  // needs the entry to exist and deletes it
};

// Conditions under which a cache effect applies. A set bit means "requires this to hold";
// the effect applies when all required conditions hold for the step on its rank.
enum Cond : uint32_t {
  Always = 0,
  FirstStage = 1u << 0,
  NotFirstStage = 1u << 1,
  LastStage = 1u << 2,
  NotLastStage = 1u << 3,
  PrevStageLocal = 1u << 4,   // s > 0 and stage s-1 lives on the same rank
  PrevStageRemote = 1u << 5,  // s > 0 and stage s-1 lives on another rank
  NextStageLocal = 1u << 6,
  NextStageRemote = 1u << 7,
  OnRank0 = 1u << 8,
  NotOnRank0 = 1u << 9,
  MPipe = 1u << 10,                 // the schedule has an MPipe layer
  TowerPresent = 1u << 11,          // MPipe with T > 0
  TowerTrainable = 1u << 12,        // MPipe with a trainable tower
  Stage0Backward = 1u << 13,        // trainable tower, backward through it on rank 0 (TB)
  OwnerBackward = 1u << 14,         // trainable tower, owner_backward mode
  OwnerNotRank0 = 1u << 15,         // owner(micro) != 0
  Prefix = 1u << 16,                // no stage (stage < 0): MPipe prefix / suffix
  Body = 1u << 17,                  // stage >= 0
  // The schedule's body carries hyper-parallel's data steps (Schedule::data_steps): the raw
  // micro-batch (inputs and labels) rides the forward chain, DATA_SEND/DATA_RECV beside each
  // FWD_SEND/FWD_RECV, and the last stage takes its labels from what arrived.
  DataSteps = 1u << 18,
  NoDataSteps = 1u << 19,
};

struct CacheEffect {
  Cache cache;
  Effect effect;
  uint32_t when = Always;  // Cond bits
  int stage_offset = 0;    // stage caches: the entry of stage s + offset (V placement hand-over)
};

struct StepTypeInfo {
  Op op;
  std::string_view name;    // canonical spelling (hyper-parallel's), used in JSON
  std::string_view short_name;  // grid notation for `ppsched show` (F, FS, BCAST, ...)
  std::string_view torch_token; // PyTorch action notation token ("" = use the name)
  StepKind kind;
  Field micro;
  Field stage;
  RunsOn runs_on;           // StageRank, or the MPipe owner rule (then `stage` is a tag)
  PeerRule peer;
  Op partner;               // P2P: the op at the other end of the message
  int partner_stage_delta;  // P2P body steps: partner's stage = stage + delta
  Payload payload;
  Meta meta;
  CollectiveScope collective;
  CollectiveKind collective_kind;
  CollectiveBytes collective_bytes;
  ComputeKind compute;
  CompositeKind composite;  // Composite steps: how the sub-steps run
  bool forward_first;       // Overlap: sub-step 0 is the forward (OVERLAP_F_B), else the backward
  // Body compute: the send that hands this step's output to its neighbouring stage when that
  // stage lives on another rank (P2P insertion adds it and its partner receive, reference §4) ...
  std::optional<Op> hands_over;
  // ... and the receive by which its input arrives from another rank (its consumer's wait
  // under --overlap-p2p).
  std::optional<Op> input_recv;
  Posting posting;          // P2P: the mode under which it does not block at its step
  bool mpipe;               // belongs to the MPipe layer: the schedule needs an "mpipe" object
  // A body compute step on a stage with MoE layers runs these phases for each of them, in this
  // order (a backward walks the layers in reverse): lowering/moe_phases expands a step into them
  // and the engine runs them on their streams. Empty: the step has no phases.
  std::vector<Phase> moe_phases;
  std::vector<CacheEffect> effects;
  std::string_view summary;
};

const std::array<StepTypeInfo, kOpCount>& step_table();
namespace detail {
// The table behind step_table(), initialised before any other static object (init_priority),
// so that info() -- hot in every pass -- is one indexed load, without a guard.
extern const std::array<StepTypeInfo, kOpCount> step_table_data;
extern const std::array<CacheInfo, kCacheCount> cache_table_data;
}  // namespace detail
inline const StepTypeInfo& info(Op op) { return detail::step_table_data[static_cast<size_t>(op)]; }
inline const CacheInfo& cache_info(Cache c) { return detail::cache_table_data[static_cast<size_t>(c)]; }
std::string_view op_name(Op op);
// Canonical name, short name or PyTorch token -> op.
std::optional<Op> op_from_name(std::string_view name);
std::optional<Op> op_from_torch_token(std::string_view token);

inline bool is_p2p(Op op) {
  auto k = info(op).kind;
  return k == StepKind::P2PSend || k == StepKind::P2PRecv;
}
inline bool is_send(Op op) { return info(op).kind == StepKind::P2PSend; }
inline bool is_recv(Op op) { return info(op).kind == StepKind::P2PRecv; }
inline bool is_composite(Op op) { return info(op).kind == StepKind::Composite; }
inline bool is_compute(Op op) { return info(op).kind == StepKind::Compute; }
inline bool is_batch(Op op) { return info(op).composite == CompositeKind::Batch; }
inline bool is_overlap(Op op) { return info(op).composite == CompositeKind::Overlap; }
inline bool is_forward(Op op) { return info(op).compute == ComputeKind::Forward; }
// Whether a step's stage field places it (false: the MPipe owner rule does; the stage is a tag).
inline bool stage_places(Op op) { return info(op).runs_on == RunsOn::StageRank; }
// A compute step of the body: FWD, BWD, BWD_INPUT, BWD_WEIGHT (not the tower).
bool is_body_compute(Op op);
// A "full backward" contribution: BWD, or the BWD_INPUT half of a split backward.
inline bool is_backward_input_side(Op op) {
  const ComputeKind k = info(op).compute;
  return k == ComputeKind::Backward || k == ComputeKind::BackwardInput;
}
// A P2P step between neighbouring stages of the body (FWD/BWD send and receive).
inline bool is_body_p2p(Op op) {
  const PeerRule p = info(op).peer;
  return is_p2p(op) && (p == PeerRule::NextStage || p == PeerRule::PrevStage);
}

}  // namespace ppsched
