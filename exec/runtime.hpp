// The executor of one rank: an interpreter of the rank's lowered actions (lowering/
// comm_model.hpp, under the run's mode), like the simulator. A local or collective action calls
// its step type's handler (handlers_*.cpp register one per step type, indexed by Op), which
// only computes and reads/writes the step table's caches; a phase's messages go to the
// transport exactly as the lowering lists them: metas where it puts them, a single payload
// blocking at its step, a batch's payloads as one group.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/caches.hpp"
#include "exec/config.hpp"
#include "exec/expert_link.hpp"
#include "exec/measured_trace.hpp"
#include "exec/models.hpp"
#include "exec/step_clock.hpp"
#include "exec/transport.hpp"
#include "lowering/comm_model.hpp"
#include "schedule/schedule.hpp"

namespace ppsched::exec {

// A step being run: the leaf step, where it sits, and the table conditions that hold for it.
struct StepAt {
  const Step& step;
  int index;      // in the rank's program
  int sub;        // sub-step of a composite, -1 otherwise
  uint32_t cond;  // conditions_of(schedule, rank, step)
  std::string label() const { return short_label(step); }
};

// Shape / dtype / requires_grad of one tensor, as a meta message carries it (reference §3.3).
struct TensorMeta {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  bool requires_grad = false;
};

struct LoggedCollective {
  Op op;
  std::vector<int> members;  // ascending; all ranks for pipeline-wide collectives
  int step_index;
};

// Progress, read by the watchdog thread (heartbeat) and by error messages.
struct Progress {
  std::atomic<int> iteration{-1};
  std::atomic<int> step{-1};
  // The peer a transport call of this rank is blocked on (-1: none). In the non-blocking
  // modes a rank waits inside a compute step (the consumer's Wait) and a P2P step only posts,
  // so the step alone does not say whom a rank waits for.
  std::atomic<int> waiting_on{-1};
  // The expert all-to-all this rank's comm thread is in (--model moe --ep > 1): kind + 4 x
  // (micro-batch + 1), -1 none; published with the heartbeat so that a peer's wait chain names it.
  std::atomic<int> collective{-1};
};

struct RunContext;

// Per tensor of a P2P step: the meta the lowering delivered before its payload (none where it
// sends none: BWD P2P, a body FWD receive after its stage's first).
using ArrivedMetas = std::vector<std::optional<TensorMeta>>;

struct Handler {
  // Compute, local and collective steps.
  void (*run)(RunContext&, const StepAt&) = nullptr;
  // P2P steps: `begin` takes what a send ships out of its cache, or sizes a receive's buffers
  // (from `metas`, or what earlier metas told), returning one payload operation per tensor;
  // `finish` stores what arrived. Neither communicates: the runtime does, per the lowering.
  std::vector<P2POp> (*begin)(RunContext&, const StepAt&, const ArrivedMetas& metas) = nullptr;
  void (*finish)(RunContext&, const StepAt&, std::vector<P2POp>&) = nullptr;
};
using HandlerTable = std::array<Handler, kOpCount>;

void register_compute_handlers(HandlerTable& t);   // handlers_compute.cpp
// handlers_compute.cpp: one micro-batch's backward of `stage` timed whole and split (BWD_INPUT
// then BWD_WEIGHT, as the handlers run them), the medians of `repetitions`, on the stage's
// first forward input of the run (ctx.probe_inputs); the parameters' .grad are left as they
// were. nullopt when no input was kept for the stage.
std::optional<SplitBackwardProbe> probe_split_backward(RunContext& c, int stage, int repetitions);
void register_p2p_handlers(HandlerTable& t);       // handlers_p2p.cpp
void register_mpipe_handlers(HandlerTable& t);     // handlers_mpipe.cpp
void register_fsdp_handlers(HandlerTable& t);      // handlers_fsdp.cpp
const HandlerTable& handler_table();
bool has_handler(Op op);

// MPipe executor state beyond the caches (reference §4, "MPipe executor").
struct MPipeState {
  std::vector<at::Tensor> grad_snapshot;  // owner_backward: tower grads at reset(), for GRAD_REDUCE
  bool snapshot_taken = false;
};

// One stage's parameters sharded over its data-parallel group (--fsdp, dp > 1): one flat
// buffer of every trainable parameter (module order), padded to a multiple of the group size;
// this replica keeps chunk `index`. The parameter tensors stay the modules' own: FSDP_UNSHARD
// points their data at views of the gathered buffer, FSDP_RESHARD at empty tensors.
struct FsdpShard {
  std::vector<at::Tensor> params;
  std::vector<std::vector<int64_t>> shapes;
  int64_t numel = 0;        // the stage's parameter elements
  int64_t shard_numel = 0;  // per member (padded numel / group size)
  at::Tensor shard;         // this replica's slice of the flat parameters
  at::Tensor shard_grad;    // its averaged gradient; undefined before the first FSDP_REDUCE_GRAD
  bool gathered = false;
  std::vector<at::Tensor> stashed_grads;  // full gradients a RESHARD set aside before the REDUCE_GRAD
};

// This process's place in the pipeline x data parallel mesh (exec/mesh.hpp) and the state of
// the FSDP steps. With dp == 1 every FSDP step is a no-op.
struct DataParallelState {
  DeviceMesh mesh;
  int global_rank = 0;
  int replica = 0;
  bool fsdp = false;            // --fsdp (effective only with dp > 1)
  Transport* world = nullptr;   // the world's transport, in global ranks
  std::vector<int> group;       // this pipeline rank's data-parallel group, global ranks ascending
  std::map<int, std::vector<at::Tensor>> snapshot;  // stage -> its gradients at reset() (without --fsdp)
  std::map<int, std::vector<at::Tensor>> expert_snapshot;  // stage -> its experts' gradients at reset() (--model moe)
  std::map<int, FsdpShard> shards;                   // stage -> its shard (--fsdp)
  bool sharded() const { return fsdp && mesh.dp > 1; }
};

void register_fsdp_handlers(HandlerTable& t);  // handlers_fsdp.cpp

struct RunContext {
  RunContext(const Schedule& s, int r, const ModelConfig& mc, RankModel& m, const Dataset& d, Transport& t, at::Device dev)
      : schedule(s), rank(r), model_config(mc), model(m), data(d), transport(t), device(dev) {
    dp.mesh = DeviceMesh{s.ranks, 1, MeshOrder::DpPp};
    dp.global_rank = r;
    dp.group = {r};
  }

  const Schedule& schedule;
  int rank;  // the pipeline rank (the schedule's); dp.global_rank is the process's
  const ModelConfig& model_config;
  RankModel& model;
  const Dataset& data;
  Transport& transport;
  at::Device device;

  CacheStore caches;
  MPipeState mpipe;
  DataParallelState dp;
  std::vector<at::Tensor> tied_snapshot;       // tied-parameter grads at the start of the run
  std::map<int, std::vector<at::Tensor>> replica_snapshot;  // replicated stage -> its grads at the start of the run
  std::map<int, TensorMeta> recv_meta;         // stage -> meta received by its first FWD_RECV
  std::map<int, TensorMeta> fwd_output_meta;   // stage -> its output meta (reserves BWD_RECV buffers)
  int iteration = 0;
  double loss = 0;                             // sum of this run's micro losses (last stage)

  std::vector<LoggedMessage> messages;         // this run's traffic, in order
  std::vector<LoggedCollective> collectives;
  StepClock* clock = nullptr;                  // set while an iteration is traced (--trace)
  // --trace: each local stage's first forward input, kept for probe_split_backward.
  bool keep_probe_inputs = false;
  std::map<int, at::Tensor> probe_inputs;
  double collective_bytes = 0;                 // what the last collective step moved (its handler sets it)
  // --model moe with --ep > 1: the expert all-to-alls' link (exec/expert_link.hpp); its comm
  // thread runs them, and an overlapped step's two sub-steps run on two compute threads.
  ExpertLink* experts = nullptr;

  // Helpers shared by the handlers.
  std::string who(const StepAt& at) const;  // "rank 1 step 7 (FS3s1)"
  int peer(const StepAt& at) const { return peer_of(schedule, rank, at.step); }
  void send_meta(const StepAt& at, int peer, const TensorMeta& m, int tensor);
  TensorMeta recv_meta_from(const StepAt& at, int peer, int tensor);
  void collective(const StepAt& at, const std::vector<int>& members);  // logs one collective call
  // Runs f, timing it as `iv` when this iteration is traced; returns the interval's index in
  // the clock (for StepClock::extend), kUntimed when not traced.
  static constexpr size_t kUntimed = static_cast<size_t>(-1);
  template <class F>
  size_t timed(const TracedInterval& iv, F&& f) {
    if (!clock) {
      f();
      return kUntimed;
    }
    const size_t mark = clock->begin();
    f();
    return clock->end(mark, iv);
  }
};

// --dp: the shards of every stage this rank holds (--fsdp), taken once before the first run;
// the snapshot of each stage's gradients at the start of a run (without --fsdp); and, after
// the run, the full gradients and parameters gathered back for the parity check, or the SGD
// step applied to the shards.
void shard_parameters(RunContext& c);
void snapshot_stage_grads(RunContext& c);
void gather_full_grads(RunContext& c);
void sgd_step_on_shards(RunContext& c, double lr);
// The parameter elements of this rank's stages (full shapes), and those it holds in memory now.
int64_t parameter_elements(const RunContext& c);
int64_t held_parameter_elements(const RunContext& c);

// A traced interval of the step at `at` (times filled in by the clock).
inline TracedInterval interval_of(const StepAt& at, Lane lane, double bytes = 0, bool meta = false, int first_message = -1,
                                  int messages = 0) {
  TracedInterval iv;
  iv.step_index = at.index;
  iv.sub = at.sub;
  iv.lane = lane;
  iv.bytes = bytes;
  iv.meta = meta;
  iv.first_message = first_message;
  iv.messages = messages;
  return iv;
}
double bytes_of(const std::vector<at::Tensor>& ts);

TensorMeta meta_of(const at::Tensor& t);
// An exception's message without c10's C++ backtrace.
std::string message_of(const std::exception& e);
at::Tensor empty_like_meta(const TensorMeta& m, at::Device device);

// Another rank reported a failure (the watchdog saw it); this rank stops at its current step.
struct PeerFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A step of this rank failed: where, and why.
struct StepFailure : std::runtime_error {
  // `name`: how the message names the rank ("rank 3 (dp 1, pp 1)"); "rank <rank>" when empty.
  StepFailure(int rank, int iteration, int index, std::string label, std::string what, bool comm, int peer,
              const std::string& name = "");
  int rank, iteration, index;
  std::string label, reason;
  bool comm;  // a communication failed (TransportError): the cause may be another rank
  int peer;   // the step's peer rank, -1 when it has none
};

// The meta a receive's tensor `t` arrived with; throws when the lowering delivered none.
const TensorMeta& arrived_meta(const RunContext& c, const StepAt& at, const ArrivedMetas& metas, int t);

// Runs `rank`'s lowered actions one iteration at a time. Any error drops every cache entry
// (hyper-parallel's abort()) and surfaces as a StepFailure (located) or a PeerFailure.
class Runtime {
 public:
  // `lowering`: the schedule lowered under the run's mode, the one the verifier judged; it
  // outlives the runtime.
  Runtime(RunContext& ctx, const CommModel& lowering, Progress& progress, std::function<void()> poll_peers,
          std::optional<FaultInjection> fault);
  void run_iteration(int iteration);
  // reset(): refuses to start while an entry is left over (names the caches and micros).
  void reset();
  // abort(): drops every entry, for the error path.
  void abort() noexcept;

 private:
  // A P2P (sub-)step between its first and its last message: its payloads and metas.
  struct InFlight {
    StepAt at;
    const Handler* handler;
    std::vector<P2POp> ops;  // begun: sends at the first message, receives at the first payload
    ArrivedMetas metas;
    int payloads_left;
  };
  // A local or collective (sub-)step; `timed`: one slice of it when the iteration is traced.
  void run_step(const Step& step, int index, int sub, bool timed = true);
  // An overlapped step's sub-steps with expert parallelism: sub-step 0 on this thread, sub-step
  // 1 on a second one, one at a time (the link's baton); each hands its all-to-alls to the
  // link's comm thread, which runs them in the lowered order. `delay`: sub-step 0 starts late.
  void run_overlap_with_experts(const Step& st, int index, bool delay);
  void run_phase(const Action& a);
  // Post: the payloads start (one transport post); Wait: their posts complete, then the steps
  // they finish store what arrived (--overlap-p2p, --mpipe-batched-recv).
  std::vector<P2POp> payload_ops(const std::vector<const Message*>& msgs, std::vector<InFlight*>& owners, bool& sends,
                                 double& bytes);
  void run_post(const Action& a);
  void run_wait(const Action& a);
  InFlight& in_flight(const Message& msg);
  void begin_payloads(InFlight& f);
  void payload_done(InFlight& f, int32_t key);
  void inject_fault(int index);
  void corrupt_after(int index);
  int peer_at(int index) const;

  RunContext& ctx_;
  const CommModel& lowering_;        // the schedule under the run's mode; this rank's actions
  std::vector<int32_t> payload_count_;  // per (step index, sub + 1) of this rank: payload messages
  std::map<int32_t, InFlight> in_flight_;  // keyed like payload_count_
  std::map<int32_t, int> post_of_;           // posted message id -> transport handle (this run)
  std::map<int, std::vector<int32_t>> posts_;  // handle -> its message ids, until waited
  std::map<int, size_t> post_slice_;            // handle -> its traced interval (--trace), until waited
  Progress& progress_;
  int failed_peer_ = -1;  // the peer of the transport call that threw (this iteration)
  std::function<void()> poll_peers_;  // throws when another rank reported a failure
  std::optional<FaultInjection> fault_;
};


}  // namespace ppsched::exec
