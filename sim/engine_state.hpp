// The discrete-event engine's interpreter and its per-rank state, shared by the files that
// define its parts: sim/engine.cpp (the event loop, the host's actions, the results) and
// sim/engine_transfers.cpp (the transfer protocol). What it reads and keeps apart lives in
// sim/engine_prices.hpp (what an action costs), sim/memory_ledger.hpp (live bytes and peaks),
// sim/engine_messages.hpp (message state) and sim/engine_slices.hpp (the recorded slices).
// Private to sim/: the public API is sim/engine.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <queue>
#include <utility>
#include <vector>

#include "lowering/comm_model.hpp"
#include "schedule/flat_map.hpp"
#include "results/recorder.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine.hpp"
#include "sim/engine_messages.hpp"
#include "sim/engine_prices.hpp"
#include "sim/engine_slices.hpp"
#include "sim/memory_ledger.hpp"

namespace ppsched::des {

// A host wake-up. Events are ordered by (time, sequence) in a binary heap: the same inputs give
// the same outputs, and every event costs O(log n).
struct Event {
  Event(double t, uint64_t s, int32_t r) : time(t), seq(s), rank(r) {}
  double time;
  uint64_t seq;
  int32_t rank;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

class Engine {
 public:
  Engine(const Schedule& s, const CostModel& c, const SimOptions& o);
  RunRecord run();

 private:
  // A run keeps every message state while it has fewer messages than this, and drops slices
  // only once it has this many: below, the bookkeeping costs more time than the memory is worth
  // (a search's DES evaluations are that small).
  static constexpr size_t kSmallRun = size_t{1} << 16;
  static size_t small_run(const SimOptions& o) { return o.testing_small_run ? o.testing_small_run : kSmallRun; }

  void push(double t, int r) { queue_.emplace(t, seq_++, r); }  // built in place
  const Step& step_at(int r, int index) const { return des::step_at(s_, r, index); }
  Leaf leaf_of(int r, const Action& a) const { return des::leaf_of(s_, r, a); }
  int32_t add_slice(int r, int index, Lane lane, double start, double end, double bytes, bool meta, int32_t cause) {
    return slices_.add(Span{start, end, r, index, cause, lane, meta}, bytes);
  }
  // Without a trace: the slices any rank's state, message or collective still refers to.
  template <class Fn>
  void for_each_root(Fn&& fn) {
    for (auto* v : {&host_cause_, &compute_last_, &wake_cause_, &action_slice_})
      for (int32_t& k : *v) fn(k);
    msgs_.for_each_held([&](MsgState& st) {
      fn(st.slice);
      fn(st.cause);
      fn(st.ready_cause);
    });
    for (auto& [key, inst] : instances_) fn(inst.cause);
  }
  void collect_slices() {
    slices_.collect([&](auto&& fn) { for_each_root(fn); });
  }

  // Declared inline: a function called per event, action or message and only from the file
  // that defines it, which may then inline it into its caller as when the engine was one file.

  // ---- the host and its actions (sim/engine.cpp) ------------------------------------------
  inline void advance(int r);
  inline void launch_compute(int r, const Action& a);
  void record_streams(int r, int index, bool composite, double start, const StreamTimeline& tl);
  // A Post, Phase or Wait action: false while rank r waits for its messages. Always inlined
  // into advance, as it was when advance was one function: GCC's size limits otherwise keep
  // it a call per P2P action (+2% instructions in a search's timing-only run, callgrind).
  [[gnu::always_inline]] inline bool run_p2p(int r, const Action& a);
  inline void post_action(int r, const Action& a);
  // A collective action: false while rank r waits for its group.
  inline bool run_collective(int r, const Action& a);
  int collective_step(int q, const CollectiveCall& call) const;
  bool last_action_of_step(int r) const {
    const auto& acts = model_.actions[static_cast<size_t>(r)];
    size_t next = static_cast<size_t>(pc_[static_cast<size_t>(r)]) + 1;
    return next >= acts.size() || acts[next].step_index != acts[next - 1].step_index;
  }
  RunRecord finish();
  void summarize_ranks();

  // ---- the transfer protocol (sim/engine_transfers.cpp) -----------------------------------
  void post(int r, int32_t id, int32_t slice);
  // The rank passed action `a`: it reads its messages' states no more for it.
  void pass(const Action& a) {
    for (int j = 0; j < a.count; ++j) msgs_.pass(model_.message_of(a, j));
  }
  // Whether every message of action `a` completed; if so, t and cause move to the latest
  // completion past them.
  bool completion(const Action& a, double& t, int32_t& cause) {
    for (int j = 0; j < a.count; ++j) {
      const MsgState& m = msgs_[model_.message_of(a, j)];
      if (m.end == kUnknown) return false;
      if (m.end > t) {
        t = m.end;
        cause = m.cause;
      }
    }
    return true;
  }
  inline void maybe_wake(int r);
  // A message's bytes (its step's, or one sub-step's of a batch): priced from the step when the
  // message is posted and again when it is settled, from the same table, instead of kept per
  // message (8 bytes a message).
  double price(const Message& m) {
    if (m.meta) return c_.meta_bytes;
    return prices_.payload_bytes(sub_leaf(m));
  }
  Leaf sub_leaf(const Message& m) const {
    const Step& top = step_at(model_.rank_of(m), m.step_index);
    return des::leaf_of(m.sub >= 0 ? top.sub_steps()[static_cast<size_t>(m.sub)] : top);
  }
  double posted_at(const MsgState& m) const { return slices_[static_cast<size_t>(m.slice)].start_ms; }
  inline void complete(int32_t id, double end, int32_t cause);
  inline void settle(int32_t send_id, int32_t recv_id);
  inline void transfer(int32_t send_id, int32_t recv_id, double start, double bytes);
  void account(const Channel& ch, double bytes) {
    if (timing_only_) return;
    const size_t k = static_cast<size_t>(&ch - model_.channels.data());
    link_bytes_[k] += bytes;
    link_msgs_[k]++;
  }
  void record_flows();

  // ---- background_progress false: a receiver takes a payload in only while it waits -------
  // (sim/engine_transfers.cpp)
  struct Stalled {
    int32_t send, recv;
    double start;  // when it could start were the receiver waiting
  };
  struct WaitSpan {
    double from, to;  // to: kUnknown while the rank still waits, infinite once it finished
  };
  double known_wait(int q, double t, int32_t recv, bool assume_waiting = false) const;
  bool waits_for(int q, int32_t msg) const;
  // A transfer that could start at `could` and waited for its receiver until `waits`.
  double deferred(double could, double waits) const { return waits > could ? waits + c_.protocol.deferred_start_ms : waits; }
  bool start_any_stalled();
  // Rank r starts waiting at its host's time, until `to`: kUnknown until it is woken (then
  // end_wait), a time when what it waits for is timed already, infinite once it has finished.
  // Its stalled transfers may start now.
  void begin_wait(int r, double to = kUnknown) {
    if (c_.protocol.background_progress) return;
    waits_[static_cast<size_t>(r)].push_back({host_[static_cast<size_t>(r)], to});
    retry(r);
  }
  void end_wait(int r, double to) {
    if (c_.protocol.background_progress) return;
    auto& w = waits_[static_cast<size_t>(r)];
    if (w.empty() || w.back().to != kUnknown) return;
    w.back().to = std::max(to, w.back().from);
    retry(r);
  }
  void retry(int q) {
    const size_t qi = static_cast<size_t>(q);
    if (stalled_[qi].empty() || dirty_flag_[qi]) return;
    dirty_flag_[qi] = true;
    dirty_.push_back(q);
  }
  void retry_stalled() {
    while (!dirty_.empty()) {
      const int q = dirty_.back();
      dirty_.pop_back();
      dirty_flag_[static_cast<size_t>(q)] = false;
      start_stalled(q, false);
    }
  }
  bool start_stalled(int q, bool assume_waiting);

  // A collective's instance: the k-th call of a group, as its members arrive.
  struct Instance {
    int arrived = 0;
    double start = 0, end = kUnknown;
    int32_t cause = -1;
  };

  const Schedule& s_;
  const CostModel& c_;
  const SimOptions& o_;
  CommModel model_;
  RunRecorder rec_;
  const bool timing_only_ = o_.timing_only;
  // The stage count is in proportion to the schedule (a file may declare far more stages than
  // it has steps), by KeyTable's rule: only then are prices and effects kept in dense tables.
  const bool tables_ =
      dense_fits((static_cast<size_t>(std::max(s_.stages, 0)) + 1) * kOpCount * 2, s_.slot_count());
  ActionPrices prices_{s_, c_, o_.check, tables_};
  MemoryLedger memory_{s_, c_, o_.check.dp, tables_, timing_only_, rec_};
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  uint64_t seq_ = 0;
  size_t events_ = 0;
  std::vector<double> host_, compute_free_, busy_;
  std::vector<int32_t> host_cause_, compute_last_, pc_, action_slice_;
  std::vector<uint8_t> posted_, done_, arrived_;  // bytes, not vector<bool>: read in the hot loop
  MessageStates msgs_{model_, o_.record_trace || model_.messages.size() < small_run(o_)};
  std::map<std::pair<int32_t, int32_t>, Instance> instances_;
  std::vector<uint8_t> blocked_;
  std::vector<int32_t> wake_cause_;
  SliceStore slices_{o_.record_trace, small_run(o_)};
  std::vector<std::pair<int32_t, int32_t>> pending_flows_;
  std::vector<double> link_bytes_;
  std::vector<int> link_msgs_;
  std::vector<double> dp_ms_;                // per rank: time in DP-group collectives
  std::vector<double> dp_exposed_;           // per rank: what of it its steps waited for
  // Per rank (MoE): its all-to-alls' time on the communication stream, what of it its steps
  // waited for, and the compute slowdown beside them.
  std::vector<double> a2a_ms_, a2a_exposed_, contention_ms_;
  size_t phases_ = 0;
  // With a trace: the all-to-alls on the communication stream (Lane::Comm), recorded at the end.
  std::vector<TimedSlice> comm_slices_;
  std::vector<const Link*> channel_link_;    // per channel
  std::vector<std::vector<WaitSpan>> waits_;   // per rank, background_progress false
  std::vector<std::vector<Stalled>> stalled_;  // per receiving rank
  std::vector<int> dirty_;                     // ranks with stalled transfers that started or stopped waiting
  std::vector<uint8_t> dirty_flag_;
};

}  // namespace ppsched::des
