// Expert parallelism in the executor (issue 39): the all-to-alls of the built-in MoE model
// (`--model moe`, exec/models.cpp) and the thread that runs them, the CPU stand-in for the comm
// stream of the stream lowering (lowering/stream_program.hpp).
//
// A rank's expert-parallel group is its pipeline rank in every replica (`--ep` = `--dp`,
// Megatron's expert parallelism carved out of data parallelism); expert j lives on member
// j mod ep. An MoE block's dispatch sends each token's row to the member that owns each of its
// top-k experts, its combine sends the experts' outputs back; their backwards run the mirror
// exchanges (combine_bwd, dispatch_bwd). All four go through one ExpertLink per process:
//
//  - the compute threads (the runtime's thread, and a second one while an overlapped step runs
//    its two sub-steps) hand an all-to-all to the link's comm thread and wait for it; only one
//    compute thread runs at a time (the baton: one compute stream), so while one waits for its
//    all-to-all the other computes, as Megatron's combined 1F1B overlaps them;
//  - the comm thread runs them in the order the stream lowering lists for the step (Order::
//    Lowered, verified by checkers/stream_order.cpp), or in the order the compute threads hand
//    them over (Order::Ready: a runtime that issues whichever all-to-all became ready first, the
//    pattern of Megatron-LM#1810, which the checker refuses for overlapped steps);
//  - each all-to-all first exchanges a header (kind, step, sub-step, micro-batch, rows) with
//    every member, then the rows, on a channel of its kind (Transport::exchange, one tag per
//    kind): members that call different all-to-alls wait for each other until the timeout, and
//    the error names the call; members that call the same kind for different steps or
//    micro-batches fail at once, naming both.
//
// The all-to-all is an autograd function (expert_all_to_all): its backward is the reverse
// exchange. BWD_INPUT runs it and BWD_WEIGHT, which re-traverses the graph, reuses its result
// instead of communicating again: the lowering puts the backward's all-to-alls in BWD_INPUT.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "exec/moe_streams.hpp"

namespace ppsched::exec {

class Transport;
class StepClock;
struct Progress;

// The step a compute thread is running (set by the runtime, read by the all-to-alls).
struct StepSlot {
  int iteration = -1, index = -1, sub = -1, micro = -1;
  int op = -1;        // the (sub-)step's Op
  std::string label;  // "FS1m3"
};

class ExpertLink {
 public:
  enum class Order { Lowered, Ready };
  // `group`: the expert-parallel group, global ranks ascending; this process is group[index].
  ExpertLink(Transport& world, std::vector<int> group, int index, Progress& progress, Order order);
  ~ExpertLink();
  ExpertLink(const ExpertLink&) = delete;
  ExpertLink& operator=(const ExpertLink&) = delete;

  int size() const { return static_cast<int>(group_.size()); }
  int index() const { return index_; }
  Order order() const { return order_; }
  std::string group_name() const;  // "{1,3}"

  // Per step of this rank's program: the all-to-alls the lowering lists, in order
  // (exec/moe_streams.hpp moe_all_to_alls). Under Order::Lowered the comm thread runs exactly
  // these, in this order.
  void set_lowered(StepAllToAlls per_step);
  // The runtime around each step: begin resets the step's position, end checks that every
  // listed all-to-all ran.
  void begin_step(int index);
  void end_step(int index);
  // Fails every waiting and later all-to-all with `why` (a compute thread failed); one in
  // progress is stopped by aborting the transport (the run is failing: nothing else may wait
  // on an exchange the failing thread's partner will never join).
  void fail(const std::string& why);
  // --trace: the iteration's clock (null: not traced). Each all-to-all becomes a slice on the
  // comm stream's lane, from the comm thread's start of it to the end of its exchange (waiting
  // for the other members included, queueing behind another all-to-all not), with the bytes this member
  // sent the others, its MoE layer and its phase (as the simulator's comm slices).
  void set_clock(StepClock* clock) { clock_.store(clock); }

  // The baton: held by the compute thread that runs.
  void acquire() { baton_.lock(); }
  void release() { baton_.unlock(); }

  // Runs one all-to-all on the comm thread and returns what arrived: rows[k] of `in` (rows
  // grouped by destination member, in member order) go to member k; the result holds every
  // member's rows for this one, in member order; `recv_rows` is set to their counts. Called
  // by a compute thread holding the baton; releases it while waiting.
  // `layer`: the block's MoE layer among its stage's.
  at::Tensor all_to_all(A2aKind kind, int layer, const at::Tensor& in, const std::vector<int64_t>& send_rows,
                        std::vector<int64_t>& recv_rows);

  static thread_local StepSlot current;

  // All-to-alls run so far, and those of them during which another compute thread held the
  // baton (computed while this one communicated).
  int64_t calls() const { return calls_.load(); }
  int64_t overlapped() const { return overlapped_.load(); }

 private:
  struct Request {
    A2aKind kind;
    int layer;
    StepSlot slot;
    at::Tensor in;
    std::vector<int64_t> send_rows, recv_rows;
    at::Tensor out;
    bool done = false;
    std::exception_ptr error;
  };
  void loop();
  Request* next_locked();  // the request the comm thread may run now, or nullptr
  void run(Request& r);
  std::string describe(const Request& r) const;

  Transport& world_;
  std::vector<int> group_;
  int index_;
  Progress& progress_;
  Order order_;
  StepAllToAlls lowered_;
  int step_ = -1;
  size_t pos_ = 0;  // all-to-alls run in the current step
  std::mutex baton_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request*> pending_;
  std::string failed_;
  bool stop_ = false;
  bool busy_ = false;  // the comm thread is in an exchange
  std::atomic<int64_t> calls_{0}, overlapped_{0};
  std::atomic<StepClock*> clock_{nullptr};
  std::thread thread_;
};

// The all-to-all as an autograd function (see above). `link` outlives the graph.
at::Tensor expert_all_to_all(ExpertLink& link, A2aKind forward_kind, int layer, const at::Tensor& in,
                             const std::vector<int64_t>& send_rows, std::vector<int64_t>& recv_rows);

}  // namespace ppsched::exec
