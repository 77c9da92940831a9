// The executor of one rank: runs the rank's program step by step, dispatching every step
// through a table indexed by Op (handlers_*.cpp register one handler per step type), keeping
// the per-micro caches of the step table, and exchanging exactly the messages and
// collectives the comm model (lowering/comm_model.cpp, default CheckOptions) lowers the
// program to: blocking P2P at its step, metas where Meta:: says, batches as one group.
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
#include "exec/measured_trace.hpp"
#include "exec/models.hpp"
#include "exec/step_clock.hpp"
#include "exec/transport.hpp"
#include "model/schedule.hpp"

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
};

struct RunContext;

struct Handler {
  // Compute, local and collective steps.
  void (*run)(RunContext&, const StepAt&) = nullptr;
  // P2P steps: `begin` takes what the step sends out of its cache and exchanges the blocking
  // meta messages, returning the payload operations; `finish` stores what arrived.
  std::vector<P2POp> (*begin)(RunContext&, const StepAt&) = nullptr;
  void (*finish)(RunContext&, const StepAt&, std::vector<P2POp>&) = nullptr;
};
using HandlerTable = std::array<Handler, kOpCount>;

void register_compute_handlers(HandlerTable& t);   // handlers_compute.cpp
void register_p2p_handlers(HandlerTable& t);       // handlers_p2p.cpp
void register_mpipe_handlers(HandlerTable& t);     // handlers_mpipe.cpp
const HandlerTable& handler_table();
bool has_handler(Op op);

// MPipe executor state beyond the caches (reference §4, "MPipe executor").
struct MPipeState {
  std::vector<at::Tensor> grad_snapshot;  // owner_backward: tower grads at reset(), for GRAD_REDUCE
  bool snapshot_taken = false;
};

struct RunContext {
  RunContext(const Schedule& s, int r, const ModelConfig& mc, RankModel& m, const Dataset& d, Transport& t, at::Device dev)
      : schedule(s), rank(r), model_config(mc), model(m), data(d), transport(t), device(dev) {}

  const Schedule& schedule;
  int rank;
  const ModelConfig& model_config;
  RankModel& model;
  const Dataset& data;
  Transport& transport;
  at::Device device;

  CacheStore caches;
  MPipeState mpipe;
  std::vector<at::Tensor> tied_snapshot;       // tied-parameter grads at the start of the run
  std::set<std::pair<int, int>> meta_done;     // (op, stage): body FWD metas already exchanged
  std::map<int, TensorMeta> recv_meta;         // stage -> meta received by its first FWD_RECV
  std::map<int, TensorMeta> fwd_output_meta;   // stage -> its output meta (reserves BWD_RECV buffers)
  int iteration = 0;
  double loss = 0;                             // sum of this run's micro losses (last stage)

  std::vector<LoggedMessage> messages;         // this run's traffic, in order
  std::vector<LoggedCollective> collectives;
  StepClock* clock = nullptr;                  // set while an iteration is traced (--trace)
  double collective_bytes = 0;                 // what the last collective step moved (its handler sets it)

  // Helpers shared by the handlers.
  std::string who(const StepAt& at) const;  // "rank 1 step 7 (FS3s1)"
  int peer(const StepAt& at) const { return peer_of(schedule, rank, at.step); }
  void send_meta(const StepAt& at, int peer, const TensorMeta& m, int tensor);
  TensorMeta recv_meta_from(const StepAt& at, int peer, int tensor);
  // Whether a body FWD P2P step exchanges its meta now (once per stage object and direction).
  // With --dyn-shape at every step (the lowering's Meta::FirstPerStage under dyn_shape).
  bool first_meta(const StepAt& at) {
    return meta_done.insert({static_cast<int>(at.step.op), at.step.stage}).second || dyn_shape;
  }
  bool dyn_shape = false;
  void collective(const StepAt& at, const std::vector<int>& members);  // logs one collective call
  // Runs f, timing it as `iv` when this iteration is traced.
  template <class F>
  void timed(const TracedInterval& iv, F&& f) {
    if (!clock) {
      f();
      return;
    }
    const size_t mark = clock->begin();
    f();
    clock->end(mark, iv);
  }
};

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
  StepFailure(int rank, int iteration, int index, std::string label, std::string what, bool comm, int peer);
  int rank, iteration, index;
  std::string label, reason;
  bool comm;  // a communication failed (TransportError): the cause may be another rank
  int peer;   // the step's peer rank, -1 when it has none
};

// Runs `rank`'s program one iteration at a time. Any error drops every cache entry
// (hyper-parallel's abort()) and surfaces as a StepFailure (located) or a PeerFailure.
class Runtime {
 public:
  Runtime(RunContext& ctx, Progress& progress, std::function<void()> poll_peers,
          std::optional<FaultInjection> fault)
      : ctx_(ctx), progress_(progress), poll_peers_(std::move(poll_peers)), fault_(fault) {}
  void run_iteration(int iteration);
  // reset(): refuses to start while an entry is left over (names the caches and micros).
  void reset();
  // abort(): drops every entry, for the error path.
  void abort() noexcept;

 private:
  void dispatch(const Step& step, int index, int sub);
  void run_batch(const Step& batch, int index);
  void inject_fault(int index);
  void corrupt_after(int index);
  int peer_at(int index) const;

  RunContext& ctx_;
  Progress& progress_;
  std::function<void()> poll_peers_;  // throws when another rank reported a failure
  std::optional<FaultInjection> fault_;
};

// Compares this rank's logged traffic and collectives of one run with the comm model's
// lowering under `mode`; returns "" when they agree, else the first difference.
std::string compare_with_comm_model(const Schedule& s, const CheckOptions& mode, int rank,
                                    const std::vector<LoggedMessage>& messages,
                                    const std::vector<LoggedCollective>& collectives);

}  // namespace ppsched::exec
