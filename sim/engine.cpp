// The discrete-event engine.
//
// Each rank has a host that issues its lowered actions (lowering/comm_model.hpp) in order,
// a compute stream, and communication. Compute is launched asynchronously: it starts when
// the stream is free and the host has reached it (with the cost model's compute_blocks_host,
// a CPU run, the host itself runs it and goes on only when it has finished). A send's payload
// is ready when the compute launched before it has finished. Blocking actions (phases, waits,
// collectives) hold the host until every message in them completed. A transfer takes latency
// + bytes / bandwidth of its link and starts when both ends are posted (with the cost model's
// background_progress false, a CPU run with a core per rank, once the receiver waits);
// its send completes with it (with send_handoff_ms, Gloo, that long after it
// started). Payloads up to the eager threshold (and every payload in eager mode)
// leave as soon as they are ready and the send completes without its receiver, as small
// NCCL sends do.
//
// Data parallelism (options.check.dp, README "Pipeline x data parallel"): the replicas of a
// pipeline run the same programs in lockstep, so one replica is simulated and each FSDP_*
// step runs its DP-group collective on its rank's compute stream, priced by the ring formula
// over the group's link (see dp_collective_ms); the pipeline's own links are those between
// the global ranks of replica 0.
//
// Events (host wake-ups) are ordered by (time, sequence) in a binary heap: the same inputs
// give the same outputs, and every event costs O(log n).
#include "sim/engine.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>

#include "checkers/checks.hpp"
#include "lowering/effects.hpp"
#include "model/errors.hpp"
#include "model/flat_map.hpp"
#include "results/recorder.hpp"

namespace ppsched {
namespace {

constexpr double kUnknown = -1.0;

struct Event {
  Event(double t, uint64_t s, int32_t r) : time(t), seq(s), rank(r) {}
  double time;
  uint64_t seq;
  int32_t rank;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

// The slices, in blocks of 2^16 (2 MiB of 32-byte spans) instead of one array: growing never
// copies (a vector's doubling held the old array and the new one at once, and the old one's
// pages stayed with the process), and dropping slices (Engine::collect_slices) frees whole
// blocks, which the next ones reuse. The first block grows as a vector up to a block, from the
// size a run expects: a small run takes what it needs.
template <class T>
class Blocks {
 public:
  static constexpr int kShift = 16;
  static constexpr size_t kBlock = size_t{1} << kShift;
  size_t size() const { return size_; }
  T& operator[](size_t k) { return blocks_[k >> kShift][k & (kBlock - 1)]; }
  const T& operator[](size_t k) const { return blocks_[k >> kShift][k & (kBlock - 1)]; }
  void first_block(size_t expected) {
    if (blocks_.empty()) blocks_.emplace_back().reserve(std::min(std::max<size_t>(expected, 1), kBlock));
  }
  void push_back(const T& v) {
    if (blocks_.empty() || blocks_.back().size() == kBlock) {
      blocks_.emplace_back();
      if (blocks_.size() > 1) blocks_.back().reserve(kBlock);
    }
    blocks_.back().push_back(v);
    ++size_;
  }
  // Keeps the first n (n <= size()); frees the blocks past them.
  void shrink(size_t n) {
    assert(n <= size_);
    const size_t keep = (n + kBlock - 1) >> kShift;
    blocks_.resize(std::max<size_t>(keep, blocks_.empty() ? 0 : 1));
    if (!blocks_.empty()) blocks_.back().resize(n - ((blocks_.size() - 1) << kShift));
    size_ = n;
  }

 private:
  std::vector<std::vector<T>> blocks_;
  size_t size_ = 0;
};

// A message's state in the timed run. It keeps no post time: a message is posted with its
// action's slice, created then and starting then (a slice's start never moves), so the post time
// is that slice's start (Engine::posted_at) and slice >= 0 marks a posted message.
struct MsgState {
  double ready = kUnknown;  // sender: when the payload is ready to leave
  double end = kUnknown;    // when it completed (for its own rank)
  int32_t slice = -1;       // the action slice it belongs to
  int32_t cause = -1;       // slice that determined its completion (critical path)
  int32_t ready_cause = -1; // sender: the slice its payload waited for (compute or host)
  uint8_t passes = 0;       // how many of the actions that list it its rank has passed
  bool freed = false;       // nothing reads it any more (MessageStates)
};
static_assert(sizeof(MsgState) == 32, "MsgState: keep it at 32 bytes");

// The messages' states while they matter. A state is read from its post until its rank has
// passed every action that lists it (Message::readers), it has completed and, for a send, its
// receive has completed too: a receive reads its send's state when it is posted or its transfer
// starts, and nothing reads a receive's once it completed. So each rank keeps its states in a
// window over its message ids (a rank posts its messages in about the order of their ids, the
// lowering numbers them rank by rank): a ring holding the ids [lo, hi), hi moved past each
// posted id, lo past each freed state. A run holds the states in flight, a few a rank, instead
// of one per message. With a trace every state is kept (its flows read them all at the end),
// and in a small run (Engine::kSmallRun).
class MessageStates {
 public:
  MessageStates(const CommModel& m, bool keep_all) : m_(m), keep_all_(keep_all) {
    if (keep_all) {
      all_.resize(m.messages.size());
      return;
    }
    windows_.resize(static_cast<size_t>(m.ranks));
    for (size_t id = m.messages.size(); id-- > 0;) {  // each window starts at its rank's first id
      Window& w = windows_[static_cast<size_t>(m.rank_of(m.messages[id]))];
      w.lo = w.hi = static_cast<int32_t>(id);
    }
  }

  // Message `id`'s state. One beyond its rank's window is not posted yet: it reads as such
  // (slice -1) and is not to be written.
  MsgState& operator[](int32_t id) {
    if (keep_all_) return all_[static_cast<size_t>(id)];
    Window& w = window_of(id);
    if (id >= w.hi) {
      unposted_ = MsgState{};
      return unposted_;
    }
    assert(id >= w.lo && "a freed message state is read");
    return w.ring[static_cast<size_t>(id) & w.mask];
  }

  // Message `id` is posted: its rank's window grows to hold it.
  MsgState& open(int32_t id) {
    if (keep_all_) return all_[static_cast<size_t>(id)];
    Window& w = window_of(id);
    assert(id >= w.lo && "a freed message is posted again");
    if (id >= w.hi) {
      const size_t need = static_cast<size_t>(id) + 1 - static_cast<size_t>(w.lo);
      if (need > w.ring.size()) grow(w, need);
      w.hi = id + 1;  // the slots in between are unused: new, or reset when freed
    }
    return w.ring[static_cast<size_t>(id) & w.mask];
  }

  // Message `id`'s rank passed one more action that lists it.
  void pass(int32_t id) {
    if (keep_all_) return;
    MsgState& st = (*this)[id];
    if (++st.passes == m_.messages[static_cast<size_t>(id)].readers) candidates_.push_back(id);
  }
  // Message `id` completed: it, or its send when it is a receive, may be freed.
  void completed(int32_t id) {
    if (keep_all_) return;
    candidates_.push_back(id);
    const Message& m = m_.messages[static_cast<size_t>(id)];
    if (!m.send && m.partner >= 0) candidates_.push_back(m.partner);
  }

  // Frees the candidates nothing reads any more. Called between events, where no state is
  // held by reference.
  void sweep() {
    for (const int32_t id : candidates_) {
      if (freed(id) || !unread(id)) continue;
      Window& w = window_of(id);
      w.ring[static_cast<size_t>(id) & w.mask].freed = true;
      while (w.lo < w.hi && slot(w, w.lo).freed) {
        slot(w, w.lo) = MsgState{};
        ++w.lo;
      }
    }
    candidates_.clear();
  }

  // Calls fn(state) for each posted state not freed.
  template <class Fn>
  void for_each_held(Fn&& fn) {
    for (MsgState& st : all_)
      if (st.slice >= 0) fn(st);
    for (Window& w : windows_)
      for (int32_t id = w.lo; id < w.hi; ++id) {
        MsgState& st = slot(w, id);
        if (st.slice >= 0 && !st.freed) fn(st);
      }
  }

 private:
  struct Window {
    std::vector<MsgState> ring;  // a power of two slots; id's slot: id & mask
    size_t mask = 0;
    int32_t lo = 0, hi = 0;      // the ids held: [lo, hi)
  };
  Window& window_of(int32_t id) { return windows_[static_cast<size_t>(m_.rank_of(m_.messages[static_cast<size_t>(id)]))]; }
  static MsgState& slot(Window& w, int32_t id) { return w.ring[static_cast<size_t>(id) & w.mask]; }
  bool freed(int32_t id) {
    const Window& w = window_of(id);
    return id < w.lo || (id < w.hi && w.ring[static_cast<size_t>(id) & w.mask].freed);
  }
  // Posted, completed, passed by its rank and, a send, its receive completed (or freed). A
  // message no action lists (the lowering makes none) is never posted: it holds its window's lo
  // back, which costs memory, never a stale read.
  bool unread(int32_t id) {
    const Message& m = m_.messages[static_cast<size_t>(id)];
    const MsgState& st = (*this)[id];
    if (st.slice < 0 || st.end == kUnknown || m.readers == Message::kManyReaders || st.passes != m.readers) return false;
    if (!m.send) return true;
    if (m.partner < 0) return false;
    const int32_t recv = m.partner;
    return freed(recv) || (*this)[recv].end != kUnknown;
  }
  static void grow(Window& w, size_t need) {
    size_t cap = 16;
    while (cap < 2 * need) cap *= 2;
    std::vector<MsgState> ring(cap);
    for (int32_t id = w.lo; id < w.hi; ++id) ring[static_cast<size_t>(id) & (cap - 1)] = slot(w, id);
    w.ring = std::move(ring);
    w.mask = cap - 1;
  }

  const CommModel& m_;
  const bool keep_all_;
  std::vector<MsgState> all_;      // keep_all: one per message
  std::vector<Window> windows_;    // otherwise: per rank
  std::vector<int32_t> candidates_;
  MsgState unposted_;
};

// A simulated run's provenance: the schedule's shape and the runtime mode it was priced in.
RunProvenance provenance(const Schedule& s, const SimOptions& o) {
  RunProvenance p = provenance_of(s, RunSource::Simulated);
  p.mode = o.check;
  return p;
}

class Engine {
 public:
  Engine(const Schedule& s, const CostModel& c, const SimOptions& o)
      : s_(s), c_(c), o_(o), model_(build_comm_model(s, o.check)), rec_(provenance(s, o), s.ranks, o.record_trace) {
    const size_t R = static_cast<size_t>(s.ranks);
    host_.assign(R, 0.0);
    host_cause_.assign(R, -1);
    compute_free_.assign(R, 0.0);
    compute_last_.assign(R, -1);
    busy_.assign(R, 0.0);
    pc_.assign(R, 0);
    posted_.assign(R, false);
    action_slice_.assign(R, -1);
    done_.assign(R, false);
    blocked_.assign(R, false);
    wake_cause_.assign(R, -1);
    arrived_.assign(R, false);
    mem_now_.assign(R, 0);
    act_now_.assign(R, 0);
    gathered_now_.assign(R, 0);
    workspace_now_.assign(R, 0);
    act_peaks_.resize(R);
    resident_ = memory_.resident_by_rank(s.ranks, s.stages, [&](int st) { return s.rank_of(st); }, o.check.dp);
    pending_produce_.assign(R, Delta{});
    released_step_.assign(R, -1);
    peaks_.resize(R);
    // Per channel, not per rank pair: memory follows the pairs that talk, not ranks^2.
    link_bytes_.assign(model_.channels.size(), 0.0);
    link_msgs_.assign(model_.channels.size(), 0);
    const size_t stages = static_cast<size_t>(std::max(s.stages, 0));
    // The tables are sized by the stage count: only when that is in proportion to the
    // schedule (a file may declare far more stages than it has steps), by KeyTable's rule.
    const bool tables = dense_fits((stages + 1) * kOpCount * 2, s.slot_count());
    if (tables) effects_table_.assign(stages * kOpCount * 2, Delta{-1, 0});
    if (tables && !c.varies_by_micro()) {
      compute_table_.assign((stages + 1) * kOpCount, -1.0);
      payload_table_.assign((stages + 1) * kOpCount, -1.0);
    }
    channel_link_.resize(model_.channels.size());
    for (size_t k = 0; k < model_.channels.size(); ++k)
      channel_link_[k] = &c_.link(global(model_.channels[k].src), global(model_.channels[k].dst));
    dp_ms_.assign(R, 0.0);
    dp_exposed_.assign(R, 0.0);
    if (gathers_) gathered_.resize(R);
    if (!c.protocol.background_progress) {
      waits_.resize(R);
      stalled_.resize(R);
      dirty_flag_.assign(R, false);
    }
  }

  RunRecord run() {
    RunRecord& res = rec_.header();
    if (o_.run_checks) res.check = verify(s_, o_.check, model_);
    res.checked = o_.run_checks;
    // After the checks: their temporaries are freed by now, and the slices reuse that memory.
    size_t actions = 0;
    for (const auto& a : model_.actions) actions += a.size();
    slices_.first_block(o_.record_trace ? actions : std::min(actions, slice_room()));
    if (o_.record_trace) slice_bytes_.reserve(actions);
    for (int r = 0; r < s_.ranks; ++r) push(0.0, r);
    do {
      while (!queue_.empty()) {
        Event e = queue_.top();
        queue_.pop();
        ++events_;
        if (done_[static_cast<size_t>(e.rank)]) continue;
        host_[static_cast<size_t>(e.rank)] = std::max(host_[static_cast<size_t>(e.rank)], e.time);
        advance(e.rank);
        retry_stalled();
        msgs_.sweep();
        if (!o_.record_trace && slices_.size() >= collect_at_) collect_slices();
      }
      // Every rank waits or has finished, and transfers are still stalled on receivers that
      // wait for something else: nothing timed can wake those any more, so they wait still.
    } while (start_any_stalled());
    res.completed = std::all_of(done_.begin(), done_.end(), [](bool d) { return d; });
    return finish();
  }

 private:
  void push(double t, int r) { queue_.emplace(t, seq_++, r); }  // built in place

  const Step& step_at(int r, int index) const { return *s_.programs[static_cast<size_t>(r)][static_cast<size_t>(index)]; }

  int32_t add_slice(int r, int index, Lane lane, double start, double end, double bytes, bool meta, int32_t cause) {
    slices_.push_back(Span{start, end, r, index, cause, lane, meta});
    if (o_.record_trace) slice_bytes_.push_back(bytes);
    const int32_t k = static_cast<int32_t>(slices_.size()) - 1;
    note_end(k, end);
    return k;
  }
  void set_end(int32_t k, double end) {
    slices_[static_cast<size_t>(k)].end_ms = end;
    note_end(k, end);
  }
  // A run keeps every message state while it has fewer messages than this, and drops slices
  // only once it has this many: below, the bookkeeping costs more time than the memory is worth
  // (a search's DES evaluations are that small).
  static constexpr size_t kSmallRun = size_t{1} << 16;
  static size_t small_run(const SimOptions& o) { return o.testing_small_run ? o.testing_small_run : kSmallRun; }

  // ---- slices without a trace: only what the critical path may still need ----------------
  // At the end only the critical path reads old slices: the chain of causes back from the
  // slice that ends last. A slice that no rank's state, no message in flight and no kept
  // slice's cause refers to can be on no such chain any more. So a run without a trace, each
  // time its slices reach 1.5 times what it kept (a collection's work stays in proportion to the
  // slices made since the last), keeps what those roots reach along causes, in order (an index
  // order stays the creation order, which ties and the path's walk read), renumbers every
  // reference, and drops the rest: it holds the chains still open instead of every slice.
  template <class Fn>
  void for_each_root(Fn&& fn) {
    for (auto* v : {&host_cause_, &compute_last_, &wake_cause_, &action_slice_})
      for (int32_t& k : *v) fn(k);
    fn(last_slice_);
    msgs_.for_each_held([&](MsgState& st) {
      fn(st.slice);
      fn(st.cause);
      fn(st.ready_cause);
    });
    for (auto& [key, inst] : instances_) fn(inst.cause);
  }
  void collect_slices() {
    constexpr int32_t kDropped = -1, kKept = -2;
    std::vector<int32_t> renumber(slices_.size(), kDropped);
    for_each_root([&](int32_t k) {
      while (k >= 0 && renumber[static_cast<size_t>(k)] == kDropped) {
        renumber[static_cast<size_t>(k)] = kKept;
        k = slices_[static_cast<size_t>(k)].cause;
      }
    });
    int32_t kept = 0;
    for (int32_t& n : renumber)
      if (n == kKept) n = kept++;
    for (size_t k = 0; k < slices_.size(); ++k) {
      const int32_t to = renumber[k];
      if (to < 0) continue;
      Span sl = slices_[k];
      if (sl.cause >= 0) sl.cause = renumber[static_cast<size_t>(sl.cause)];
      slices_[static_cast<size_t>(to)] = sl;
    }
    slices_.shrink(static_cast<size_t>(kept));
    for_each_root([&](int32_t& k) {
      if (k >= 0) k = renumber[static_cast<size_t>(k)];
    });
    collect_at_ = std::max(small_run(o_), slices_.size() + slices_.size() / 2);
  }
  // The slices a run without a trace expects before its first collection: up to it, and what
  // the events before it add past it (collections come only between events).
  size_t slice_room() const { return collect_at_ + collect_at_ / 4; }

  // The slice that ends last (the lowest index among equals), kept as the run goes: the
  // critical path starts there, and finish() need not read every slice again. Ends only grow.
  void note_end(int32_t k, double end) {
    if (last_slice_ < 0 || end > last_end_ || (end == last_end_ && k < last_slice_)) {
      last_slice_ = k;
      last_end_ = end;
    }
  }

  // ---- memory: the cache effects of the step table, applied in simulated time -----------
  // Consumes apply when a step starts, produces when it ends. The checks (same replay) prove
  // every consume meets its produce, so byte deltas suffice: no live set is kept here.
  struct Delta {
    int64_t consumed = 0, produced = 0;  // consumed < 0: not known yet (effects_table_)
    int64_t act_consumed = 0, act_produced = 0;  // of which kept activations
    Delta& operator+=(const Delta& o) {
      consumed += o.consumed;
      produced += o.produced;
      act_consumed += o.act_consumed;
      act_produced += o.act_produced;
      return *this;
    }
  };
  // What prices and memory read of a leaf step (an action carries its step's).
  struct Leaf {
    Op op;
    int32_t stage, micro;
  };
  static Leaf leaf_of(const Step& st) { return {st.op, st.stage, st.micro}; }
  // An action's: its op, and its step's stage and micro (the top step's, as the lowering gives
  // an action the top step's op).
  Leaf leaf_of(int r, const Action& a) const {
    const Step& st = step_at(r, a.step_index);
    return {a.op, st.stage, st.micro};
  }

  // What a step's applicable effects release when it starts and add when it ends.
  Delta effects_of(int r, const Step& st) {
    if (!is_composite(st.op)) return leaf_effects(r, leaf_of(st));
    Delta d;
    for (const auto& sub : st.sub_steps()) d += leaf_effects(r, leaf_of(sub));
    return d;
  }
  // The effects of action `a`'s step; the step itself is read only when it is a composite.
  Delta action_effects(int r, const Action& a) {
    return a.composite() ? effects_of(r, step_at(r, a.step_index)) : leaf_effects(r, leaf_of(r, a));
  }
  // The resolver's answer depends on (rank, op, stage, whether the micro's MPipe owner is
  // rank 0). For a step on the rank that owns its stage (every staged step of a valid
  // schedule) the rank is implied, so the answer is kept in a dense (stage, op, owner) table
  // the timed loop reads directly; anything else asks the resolver.
  Delta leaf_effects(int r, const Leaf& st) {
    const bool dense = !effects_table_.empty() && st.stage >= 0 && st.stage < s_.stages && s_.rank_of(st.stage) == r;
    Delta* slot = nullptr;
    if (dense) {
      const bool owner_not_0 = s_.mpipe && st.micro >= 0 && s_.owner_of(st.micro) != 0;
      slot = &effects_table_[(static_cast<size_t>(st.stage) * kOpCount + static_cast<size_t>(st.op)) * 2 + owner_not_0];
      if (slot->consumed >= 0) return *slot;
    }
    // The resolver reads only these three fields of a step.
    const auto& res = resolver_.of(r, make_step(st.op, st.micro, st.stage));
    const Delta d{res.consumed_bytes, res.produced_bytes, res.consumed_activation, res.produced_activation};
    if (slot) *slot = d;
    return d;
  }
  // Live bytes change by `delta`, of which `activations` kept activations. A rank also holds
  // its resident bytes (weights, gradients, optimizer state) for the whole run: the samples and
  // the reported peak add them.
  void apply(int r, int64_t delta, int64_t activations, double t) {
    if (timing_only_) return;
    const size_t ri = static_cast<size_t>(r);
    mem_now_[ri] += delta;
    act_now_[ri] += activations;
    note_memory(r, t);
  }
  void release(int r, const Delta& d, double t) { apply(r, -d.consumed, -d.act_consumed, t); }
  void deliver(int r, const Delta& d, double t) { apply(r, d.produced, d.act_produced, t); }

  void note_memory(int r, double t) {
    const size_t ri = static_cast<size_t>(r);
    auto& p = peaks_[ri];
    const int64_t now = mem_now_[ri];
    if (now > p.bytes) {
      p.bytes = now;
      p.time = t;
      p.step = current_step_;
      p.activations = act_now_[ri];
      p.gathered = gathered_now_[ri];
      p.workspace = workspace_now_[ri];
    }
    auto& a = act_peaks_[ri];
    if (act_now_[ri] > a.bytes) {
      a.bytes = act_now_[ri];
      a.time = t;
      a.step = current_step_;
    }
    rec_.memory({r, t, resident_[ri].total() + now, act_now_[ri]});
  }

  // The workspace a compute action's backward holds while it runs (0 for anything else): the
  // largest of its backward sub-steps'.
  int64_t workspace_of(int r, const Action& a) const {
    if (memory_.workspace_bytes.empty()) return 0;
    const auto one = [&](Op op, int stage) -> int64_t {
      return is_backward_input_side(op) && stage >= 0 ? memory_.workspace(stage) : 0;
    };
    if (!a.composite()) return one(a.op, step_at(r, a.step_index).stage);
    int64_t w = 0;
    for (const auto& sub : step_at(r, a.step_index).sub_steps()) w = std::max(w, one(sub.op, sub.stage));
    return w;
  }

  // ---- data parallelism ---------------------------------------------------------------------
  // The global rank of pipeline rank r in replica 0: the rank the pipeline's links are read at
  // (r itself under the default ("dp", "pp") mesh, and whenever there is one replica).
  int global(int r) const { return static_cast<int>(o_.check.dp.global_rank(r, 0, s_.ranks)); }

  // Pipeline rank r's DP group is {global_rank(r, k) : k < N}, ascending in k in either mesh
  // order; ranks_per_node consecutive global ranks share a node, so the ring stays inside one
  // node exactly when its first and last member do. Any hop across nodes runs the whole ring
  // at the inter-node link.
  bool dp_ring_inter_node(int r) const {
    const DataParallelOptions& dp = o_.check.dp;
    if (dp.degree <= 1) return false;
    const int64_t per_node = std::max(c_.links.ranks_per_node, 1);
    return dp.global_rank(r, 0, s_.ranks) / per_node != dp.global_rank(r, dp.degree - 1, s_.ranks) / per_node;
  }

  // The DP-group collective of an FSDP_* step (0 for any other step, and for one replica):
  // B = the stage's bytes.params, n = the DP degree, over the ring's link (ring_ms). Without
  // a pipeline, from a model's FSDP2 units, the forwards and backwards move the parameters
  // unit by unit instead (fsdp2_pass) and the FSDP_* steps move nothing.
  double dp_collective_ms(const Leaf& st) const {
    const StepTypeInfo& i = info(st.op);
    if (i.collective != CollectiveScope::DataParallel || st.stage < 0 || st.stage >= s_.stages || fsdp2_units_) return 0.0;
    return ring_ms(o_.check.dp.effective(i.collective_kind), c_.payload_bytes(st.op, st.stage, st.micro), s_.rank_of(st.stage));
  }

  // A collective of `kind` moving B bytes over the DP group of rank r (n = the DP degree), over
  // the ring's link:
  //   all-reduce (REDUCE_GRAD without --fsdp)  2(n-1)/n B/bw + 2(n-1) lat (tree: 2 ceil(log2 n)
  //                                            rounds of B/bw + lat, as NCCL's tree all-reduce)
  //   reduce-scatter (REDUCE_GRAD, --fsdp) and all-gather (UNSHARD, --fsdp)
  //                                            (n-1)/n B/bw + (n-1) lat (NCCL runs both as rings)
  //   UNSHARD and RESHARD without --fsdp, RESHARD with it: nothing to move.
  double ring_ms(CollectiveKind kind, double B, int r) const {
    if (kind == CollectiveKind::None || kind == CollectiveKind::Release) return 0.0;
    const Link& l = dp_ring_inter_node(r) ? c_.links.inter_node : c_.links.intra_node;
    const double inv_bw = l.bandwidth_GBps && *l.bandwidth_GBps > 0 ? 1e3 / (*l.bandwidth_GBps * 1e9) : 0.0;
    const double n = static_cast<double>(o_.check.dp.degree);
    if (kind == CollectiveKind::AllReduce) {
      if (c_.collectives == CollectiveAlgorithm::Tree) return 2.0 * std::ceil(std::log2(n)) * (B * inv_bw + l.latency_ms);
      return 2.0 * (n - 1) / n * B * inv_bw + 2.0 * (n - 1) * l.latency_ms;
    }
    return (n - 1) / n * B * inv_bw + (n - 1) * l.latency_ms;
  }

  // FSDP2 without a pipeline (fsdp2_units_): what a forward, a backward or a half of a split
  // one runs on the communication lane beside its compute (sim/fsdp2_timing.hpp); for any
  // other step, nothing.
  // Walked once per (compute kind, priced time): a pass costs O(layers).
  Fsdp2Pass fsdp2_pass(const Leaf& st) const {
    if (!fsdp2_units_ || st.stage != 0) return {};
    const ComputeKind kind = info(st.op).compute;
    if (kind != ComputeKind::Forward && kind != ComputeKind::Backward && kind != ComputeKind::BackwardInput &&
        kind != ComputeKind::BackwardWeight)
      return {};
    const double ms = c_.compute_ms(st.op, st.stage, st.micro);
    const auto key = std::make_pair(static_cast<uint8_t>(kind), ms);
    if (const auto it = fsdp2_passes_.find(key); it != fsdp2_passes_.end()) return it->second;
    const int r = s_.rank_of(0);
    const auto gather = [&](int64_t b) { return ring_ms(CollectiveKind::AllGather, static_cast<double>(b), r); };
    const auto reduce = [&](int64_t b) { return ring_ms(CollectiveKind::ReduceScatter, static_cast<double>(b), r); };
    const auto& units = c_.fsdp_units;
    const auto& layers = c_.fsdp_layers;
    const Fsdp2Pass pass =
        kind == ComputeKind::Forward ? fsdp2_forward(units, layers, ms, gather)
        : kind == ComputeKind::Backward ? fsdp2_backward(units, layers, ms, Fsdp2BackwardPart::Whole, gather, reduce)
        : kind == ComputeKind::BackwardInput ? fsdp2_backward(units, layers, ms, Fsdp2BackwardPart::Input, gather, reduce)
                                             : fsdp2_backward(units, layers, ms, Fsdp2BackwardPart::Weight, gather, reduce);
    return fsdp2_passes_.emplace(key, pass).first->second;
  }

  // A step's time in DP-group collectives, and what they add to its duration: an FSDP_* step
  // waits for its whole collective; a forward or backward under FSDP2 without a pipeline for
  // the part its compute does not hide.
  double dp_busy_ms(const Leaf& st) const { return dp_collective_ms(st) + fsdp2_pass(st).collective_ms; }
  double dp_exposed_ms(const Leaf& st) const { return dp_collective_ms(st) + fsdp2_pass(st).exposed_ms(); }

  // --fsdp over N > 1 replicas: an FSDP_UNSHARD's gathered parameters (the (N-1)/N of the
  // stage's bytes.params the rank does not hold; of a one-stage schedule from a network, the
  // FSDP2 peak of two wrapped units, MemoryModel::gathered) are live from its end to the start
  // of the stage's FSDP_RESHARD, as the checks count them (checkers/caches.cpp).
  void gather(int r, const Leaf& st, Delta& mem) {
    const StepTypeInfo& i = info(st.op);
    if (i.collective != CollectiveScope::DataParallel || st.stage < 0) return;
    auto& held = gathered_[static_cast<size_t>(r)];
    const int64_t bytes = memory_.gathered(st.stage, o_.check.dp);
    if (i.collective_kind == CollectiveKind::AllGather && held.insert(st.stage).second) {
      mem.produced += bytes;
      gathered_now_[static_cast<size_t>(r)] += bytes;
    }
    if (i.collective_kind == CollectiveKind::Release && held.erase(st.stage)) {
      mem.consumed += bytes;
      gathered_now_[static_cast<size_t>(r)] -= bytes;
    }
  }

  // ---- compute ------------------------------------------------------------------------------
  double duration(const Step& st) {
    if (is_overlap(st.op)) {
      double a = st.sub_steps().size() > 0 ? duration(st.sub_steps()[0]) : 0.0;
      double b = st.sub_steps().size() > 1 ? duration(st.sub_steps()[1]) : 0.0;
      // Both run together: the shorter one is hidden by `overlap_efficiency` (1 = fully).
      return std::max(a, b) + (1.0 - c_.overlap_efficiency) * std::min(a, b);
    }
    return duration(leaf_of(st));
  }
  // A DP collective step costs compute.FSDP (a fixed overhead) plus its collective; a forward
  // or backward under FSDP2 without a pipeline its compute plus the collectives' time it does
  // not hide.
  double duration(const Leaf& st) {
    if (double* slot = price_slot(compute_table_, st)) {
      if (*slot < 0) *slot = c_.compute_ms(st.op, st.stage, st.micro) + dp_exposed_ms(st);
      return *slot;
    }
    return c_.compute_ms(st.op, st.stage, st.micro) + dp_exposed_ms(st);
  }

  // A leaf step's compute time or payload bytes depends on (op, stage) only, unless the cost
  // model has per-micro rows: then there is no table and the model is asked each time.
  double* price_slot(std::vector<double>& table, const Leaf& st) {
    if (table.empty() || st.stage < -1 || st.stage >= s_.stages) return nullptr;
    return &table[static_cast<size_t>(st.stage + 1) * kOpCount + static_cast<size_t>(st.op)];
  }

  // The compute of action `a`'s step; the step itself is read only when it is a composite.
  void launch_compute(int r, const Action& a) {
    const size_t ri = static_cast<size_t>(r);
    const int index = a.step_index;
    const double d = a.composite() ? duration(step_at(r, index)) : duration(leaf_of(r, a));
    double start = std::max(host_[ri], compute_free_[ri]);
    int32_t cause = compute_free_[ri] >= host_[ri] ? compute_last_[ri] : host_cause_[ri];
    double end = start + d;
    current_step_ = index;
    Delta mem = timing_only_ ? Delta{} : action_effects(r, a);
    if (gathers_ && !a.composite() && !timing_only_) gather(r, leaf_of(r, a), mem);
    // A recomputing backward holds what it recomputes while it runs, on top of its inputs.
    const int64_t workspace = timing_only_ ? 0 : workspace_of(r, a);
    if (workspace > 0) {
      workspace_now_[ri] = workspace;
      apply(r, workspace, workspace, start);
    }
    release(r, mem, start);
    int32_t sl = add_slice(r, index, Lane::Compute, start, end, 0, false, cause);
    if (workspace > 0) {
      workspace_now_[ri] = 0;
      apply(r, -workspace, -workspace, end);
    }
    deliver(r, mem, end);
    compute_free_[ri] = end;
    compute_last_[ri] = sl;
    if (c_.protocol.compute_blocks_host) {
      host_[ri] = end;
      host_cause_[ri] = sl;
    }
    busy_[ri] += d;
    if (o_.check.dp.degree > 1 && !a.composite()) {
      dp_ms_[ri] += dp_busy_ms(leaf_of(r, a));
      dp_exposed_[ri] += dp_exposed_ms(leaf_of(r, a));
    }
  }

  // ---- communication -------------------------------------------------------------------------
  // A message's bytes (its step's, or one sub-step's of a batch): priced from the step when the
  // message is posted and again when it is settled, from the same table, instead of kept per
  // message (8 bytes a message).
  double price(const Message& m) {
    if (m.meta) return c_.meta_bytes;
    const Leaf leaf = sub_leaf(m);
    if (double* slot = price_slot(payload_table_, leaf)) {
      if (*slot < 0) *slot = c_.payload_bytes(leaf.op, leaf.stage, leaf.micro);
      return *slot;
    }
    return c_.payload_bytes(leaf.op, leaf.stage, leaf.micro);
  }

  Leaf sub_leaf(const Message& m) const {
    const Step& top = step_at(model_.rank_of(m), m.step_index);
    return leaf_of(m.sub >= 0 ? top.sub_steps()[static_cast<size_t>(m.sub)] : top);
  }

  bool eager(double bytes) const {
    return o_.check.comm == CommMode::Eager || bytes <= c_.protocol.eager_threshold_bytes;
  }

  double posted_at(const MsgState& m) const { return slices_[static_cast<size_t>(m.slice)].start_ms; }

  void complete(int32_t id, double end, int32_t cause) {
    MsgState& ms = msgs_[id];
    ms.end = end;
    ms.cause = cause;
    msgs_.completed(id);
    maybe_wake(model_.rank_of(model_.messages[static_cast<size_t>(id)]));
  }

  // Both ends (or an eager sender) known: decide the transfer's times. The critical path
  // runs producer -> send slice -> consumer, so a completion's cause is the send slice when
  // the payload was what everybody waited for, else the receiver's own slice.
  void settle(int32_t send_id, int32_t recv_id) {
    const Message& ms = model_.messages[static_cast<size_t>(send_id)];
    MsgState& s = msgs_[send_id];
    const Channel& ch = model_.channels[static_cast<size_t>(ms.channel)];
    const Link& link = *channel_link_[static_cast<size_t>(ms.channel)];
    const double bytes = price(ms);
    const bool is_eager = eager(bytes);
    if (s.end == kUnknown && is_eager) {
      // Leaves when ready, completes without its receiver.
      double end = s.ready + link.transfer_ms(bytes);
      if (s.slice >= 0) slices_[static_cast<size_t>(s.slice)].cause = s.ready_cause;
      complete(send_id, end, s.slice);
      account(ch, bytes);
    }
    if (recv_id < 0) return;
    MsgState& rv = msgs_[recv_id];
    if (rv.end != kUnknown || rv.slice < 0 || s.slice < 0) return;
    const double rv_post = posted_at(rv);
    if (is_eager) {
      complete(recv_id, std::max(rv_post, s.end), s.end >= rv_post ? s.slice : rv.slice);
      return;
    }
    double start = std::max(s.ready, rv_post);
    if (!c_.protocol.background_progress) {
      const int q = model_.rank_of(model_.messages[static_cast<size_t>(recv_id)]);
      const double t = known_wait(q, start, recv_id);
      if (t == kUnknown) {
        stalled_[static_cast<size_t>(q)].push_back({send_id, recv_id, start});
        return;
      }
      start = deferred(start, t);
    }
    transfer(send_id, recv_id, start, bytes);
  }

  // A rendezvous transfer of `bytes` (the send's price) leaves at `start`: both complete a
  // transfer time later.
  void transfer(int32_t send_id, int32_t recv_id, double start, double bytes) {
    const Message& ms = model_.messages[static_cast<size_t>(send_id)];
    MsgState& s = msgs_[send_id];
    MsgState& rv = msgs_[recv_id];
    int32_t cause = rv.slice;
    if (s.ready >= posted_at(rv)) {
      if (s.slice >= 0) slices_[static_cast<size_t>(s.slice)].cause = s.ready_cause;
      cause = s.slice;
    }
    rv.ready = start;  // a receive's `ready`: when its transfer left (for the trace's flow)
    const Link& link = *channel_link_[static_cast<size_t>(ms.channel)];
    const double end = start + link.transfer_ms(bytes);
    account(model_.channels[static_cast<size_t>(ms.channel)], bytes);
    // send_handoff_ms (Gloo): the sender goes on once the transport took the payload.
    complete(send_id, c_.protocol.send_handoff_ms ? std::min(start + *c_.protocol.send_handoff_ms, end) : end, cause);
    complete(recv_id, end, cause);
  }

  // ---- background_progress false: a receiver takes a payload in only while it waits -------
  // A CPU run with a core per rank (Gloo): a send's payload goes out when the sender posts it,
  // and the receiving rank's transport thread reads it in on a free core, which it finds only
  // while the receiver's host waits (or once it has finished): it does not get one while the
  // rank computes, nor while it posts. So a rendezvous transfer that could start at t starts
  // at the receiver's first waiting moment from t on. Each rank keeps the spans in which it
  // waited. Ranks run ahead of each other: when the receiver's record does not reach t yet,
  // the transfer is stalled under the receiver and tried again when it starts or stops
  // waiting.
  struct Stalled {
    int32_t send, recv;
    double start;  // when it could start were the receiver waiting
  };
  struct WaitSpan {
    double from, to;  // to: kUnknown while the rank still waits, infinite once it finished
  };

  // The first moment >= t at which rank q is known to wait for receive `recv`, or kUnknown
  // when its record does not tell yet. A rank that has waited since before t and is not woken
  // yet still waits at t when it waits for `recv` itself (it cannot be woken before that
  // arrives); otherwise only `assume_waiting` says so (see run()).
  double known_wait(int q, double t, int32_t recv, bool assume_waiting = false) const {
    const auto& w = waits_[static_cast<size_t>(q)];
    auto it = std::partition_point(w.begin(), w.end(), [t](const WaitSpan& x) { return x.to != kUnknown && x.to <= t; });
    if (it == w.end()) return kUnknown;
    if (it->to != kUnknown || t <= it->from) return std::max(it->from, t);
    return assume_waiting || waits_for(q, recv) ? t : kUnknown;
  }
  bool waits_for(int q, int32_t msg) const {
    const size_t qi = static_cast<size_t>(q);
    if (!blocked_[qi] || pc_[qi] >= static_cast<int>(model_.actions[qi].size())) return false;
    const Action& a = model_.actions[qi][static_cast<size_t>(pc_[qi])];
    if (a.kind != ActionKind::Phase && a.kind != ActionKind::Wait) return false;
    for (int j = 0; j < a.count; ++j)
      if (model_.message_of(a, j) == msg) return true;
    return false;
  }
  // A transfer that could start at `could` and waited for its receiver until `waits`.
  double deferred(double could, double waits) const {
    return waits > could ? waits + c_.protocol.deferred_start_ms : waits;
  }
  bool start_any_stalled() {
    bool started = false;
    for (int q = 0; q < static_cast<int>(stalled_.size()); ++q) started = start_stalled(q, true) || started;
    return started;
  }
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
  // Starts rank q's stalled transfers whose start is known now; true when one started.
  bool start_stalled(int q, bool assume_waiting) {
    auto& list = stalled_[static_cast<size_t>(q)];
    bool started = false;
    for (size_t k = 0; k < list.size();) {
      const Stalled x = list[k];
      const double t = known_wait(q, x.start, x.recv, assume_waiting);
      if (t == kUnknown) {
        ++k;
        continue;
      }
      list[k] = list.back();
      list.pop_back();
      transfer(x.send, x.recv, deferred(x.start, t), price(model_.messages[static_cast<size_t>(x.send)]));  // may wake a rank, which retries its own
      started = true;
    }
    return started;
  }

  void account(const Channel& ch, double bytes) {
    if (timing_only_) return;
    const size_t k = static_cast<size_t>(&ch - model_.channels.data());
    link_bytes_[k] += bytes;
    link_msgs_[k]++;
  }

  void post(int r, int32_t id, int32_t slice) {
    const size_t ri = static_cast<size_t>(r);
    const Message& m = model_.messages[static_cast<size_t>(id)];
    MsgState& st = msgs_.open(id);
    assert(slice >= 0 && slices_[static_cast<size_t>(slice)].start_ms == host_[ri]);
    st.slice = slice;  // created now, starting at host_[ri]: the message's post time
    const int32_t partner = m.partner;
    if (m.send) {
      st.ready = std::max(host_[ri], compute_free_[ri]);
      st.ready_cause = compute_free_[ri] > host_[ri] ? compute_last_[ri] : host_cause_[ri];
      settle(id, partner);
      if (o_.record_trace && partner >= 0) pending_flows_.push_back({id, partner});
    } else {
      if (partner >= 0 && msgs_[partner].slice >= 0) settle(partner, id);
    }
  }

  // The rank passed action `a`: it reads its messages' states no more for it.
  void pass(const Action& a) {
    for (int j = 0; j < a.count; ++j) msgs_.pass(model_.message_of(a, j));
  }

  // A blocked rank whose messages all completed resumes at the latest completion.
  void maybe_wake(int r) {
    const size_t ri = static_cast<size_t>(r);
    if (!blocked_[ri]) return;
    const auto& acts = model_.actions[ri];
    const Action& a = acts[static_cast<size_t>(pc_[ri])];
    if (a.kind != ActionKind::Phase && a.kind != ActionKind::Wait) return;
    double t = host_[ri];
    int32_t cause = host_cause_[ri];
    for (int j = 0; j < a.count; ++j) {
      const MsgState& m = msgs_[model_.message_of(a, j)];
      if (m.end == kUnknown) return;
      if (m.end > t) {
        t = m.end;
        cause = m.cause;
      }
    }
    blocked_[ri] = false;
    wake_cause_[ri] = cause;
    end_wait(r, t);
    push(t, r);
  }

  // ---- the host ---------------------------------------------------------------------------
  void advance(int r) {
    const size_t ri = static_cast<size_t>(r);
    const auto& acts = model_.actions[ri];
    if (wake_cause_[ri] >= 0) {
      host_cause_[ri] = wake_cause_[ri];
      wake_cause_[ri] = -1;
    }
    while (true) {
      if (pc_[ri] >= static_cast<int>(acts.size())) {
        done_[ri] = true;
        begin_wait(r, std::numeric_limits<double>::infinity());
        return;
      }
      const Action& a = acts[static_cast<size_t>(pc_[ri])];
      current_step_ = a.step_index;
      switch (a.kind) {
        case ActionKind::Local:
          launch_compute(r, a);
          break;
        case ActionKind::Post:
        case ActionKind::Phase:
        case ActionKind::Wait: {
          if (a.kind != ActionKind::Wait && !posted_[ri]) {
            posted_[ri] = true;
            bool sends = false;
            double bytes = 0;
            bool meta = a.count > 0;
            for (int j = 0; j < a.count; ++j) {
              const int32_t id = model_.message_of(a, j);
              const Message& m = model_.messages[static_cast<size_t>(id)];
              sends = sends || m.send;
              meta = meta && m.meta;
              if (o_.record_trace) bytes += price(m);  // the slice's bytes, kept only in a trace
            }
            action_slice_[ri] = add_slice(r, a.step_index, sends ? Lane::Send : Lane::Recv, host_[ri], host_[ri],
                                          bytes, meta, host_cause_[ri]);
            if (!meta && !timing_only_ && released_step_[ri] != a.step_index) {
              // Once per step: a multi-tensor transfer posts one payload action per tensor.
              released_step_[ri] = a.step_index;
              const Delta d = action_effects(r, a);
              release(r, d, host_[ri]);  // a send releases what it pops
              pending_produce_[ri] = d;  // a receive delivers its buffer when it completes
            }
            for (int j = 0; j < a.count; ++j)
              post(r, model_.message_of(a, j), action_slice_[ri]);
          }
          if (a.kind == ActionKind::Post) {
            // A posted receive's buffer exists from its post on (PyTorch allocates it just
            // before the irecv), as the checks' cache walk counts it; nothing later delivers it.
            deliver(r, pending_produce_[ri], host_[ri]);
            pending_produce_[ri] = Delta{};
            pass(a);
            posted_[ri] = false;
            break;
          }
          double t = host_[ri];
          int32_t cause = host_cause_[ri];
          bool all = true;
          for (int j = 0; j < a.count; ++j) {
            const MsgState& m = msgs_[model_.message_of(a, j)];
            if (m.end == kUnknown) {
              all = false;
              break;
            }
            if (m.end > t) {
              t = m.end;
              cause = m.cause;
            }
          }
          if (!all) {
            blocked_[ri] = true;
            begin_wait(r);
            return;
          }
          if (t > host_[ri]) {
            // Resume at the completion through the event queue, in time order.
            begin_wait(r, t);
            host_[ri] = t;
            host_cause_[ri] = cause;
          }
          if (a.kind == ActionKind::Phase && action_slice_[ri] >= 0) {
            set_end(action_slice_[ri], host_[ri]);
            bool meta_only = slices_[static_cast<size_t>(action_slice_[ri])].meta;
            if (!meta_only && last_action_of_step(r)) {
              deliver(r, pending_produce_[ri], host_[ri]);  // a receive delivers its buffer
              pending_produce_[ri] = Delta{};
              if (info(a.op).compute != ComputeKind::None && is_p2p(a.op)) launch_compute(r, a);
            }
          } else if (a.kind == ActionKind::Wait) {
            for (int j = 0; j < a.count; ++j) {
              const MsgState& m = msgs_[model_.message_of(a, j)];
              if (m.slice >= 0) set_end(m.slice, std::max(slices_[static_cast<size_t>(m.slice)].end_ms, m.end));
            }
          }
          pass(a);
          posted_[ri] = false;
          action_slice_[ri] = -1;
          break;
        }
        case ActionKind::Collective: {
          const CollectiveCall& call = model_.collective_calls[static_cast<size_t>(a.collective)];
          const auto& members = model_.groups[static_cast<size_t>(call.group)].members;
          auto key = std::make_pair(call.group, call.position);
          auto& inst = instances_[key];
          if (!arrived_[ri]) {
            arrived_[ri] = true;
            double ready = std::max(host_[ri], compute_free_[ri]);
            if (ready >= inst.start) {
              inst.start = ready;
              inst.cause = ready > host_[ri] ? compute_last_[ri] : host_cause_[ri];
            }
            inst.arrived++;
            if (inst.arrived == static_cast<int>(members.size())) {
              const int32_t stage = step_at(r, a.step_index).stage;
              inst.end = inst.start + collective_ms(a.op, stage, members);
              for (int q : members) {
                add_slice(q, collective_step(q, call), Lane::Collective, inst.start, inst.end,
                          collective_bytes(a.op, stage), false, inst.cause);
                wake_cause_[static_cast<size_t>(q)] = static_cast<int32_t>(slices_.size()) - 1;
                if (q != r) {
                  end_wait(q, inst.end);
                  push(inst.end, q);
                }
              }
              begin_wait(r, inst.end);
              host_[ri] = inst.end;
              host_cause_[ri] = wake_cause_[ri];
              wake_cause_[ri] = -1;
            } else {
              begin_wait(r);
              return;  // wait for the group
            }
          }
          if (inst.end == kUnknown) return;
          host_[ri] = std::max(host_[ri], inst.end);
          arrived_[ri] = false;
          break;
        }
      }
      ++pc_[ri];
    }
  }

  int collective_step(int q, const CollectiveCall& call) const {
    for (int32_t c : model_.calls_by_rank[static_cast<size_t>(q)]) {
      const auto& other = model_.collective_calls[static_cast<size_t>(c)];
      if (other.group == call.group && other.position == call.position) return other.step_index;
    }
    return -1;
  }

  bool last_action_of_step(int r) const {
    const auto& acts = model_.actions[static_cast<size_t>(r)];
    size_t next = static_cast<size_t>(pc_[static_cast<size_t>(r)]) + 1;
    return next >= acts.size() || acts[next].step_index != acts[next - 1].step_index;
  }

  double collective_bytes(Op op, int stage) const {
    switch (info(op).collective_bytes) {
      case CollectiveBytes::TiedParams: return c_.tied_param_bytes;
      case CollectiveBytes::TowerParams: return c_.tower_param_bytes;
      // A replica sync adds up the stage's gradients, as many bytes as its parameters.
      case CollectiveBytes::StageGrads: return stage >= 0 ? c_.param_bytes.at(stage, 0) : 0.0;
      case CollectiveBytes::None: break;
    }
    return 0;
  }

  // Ring formulas over the group's slowest link: all-reduce 2(n-1)/n * B/bw + 2(n-1) * lat;
  // broadcast (pipelined ring) B/bw + (n-1) * lat. Tree: log2(n) rounds of B/bw + lat.
  double collective_ms(Op op, int stage, const std::vector<int32_t>& members) const {
    const size_t n = members.size();
    if (n <= 1) return 0.0;
    double lat = 0, inv_bw = 0;
    for (size_t i = 0; i < n; ++i) {
      const Link& l = c_.link(global(members[i]), global(members[(i + 1) % n]));
      lat = std::max(lat, l.latency_ms);
      if (l.bandwidth_GBps && *l.bandwidth_GBps > 0) inv_bw = std::max(inv_bw, 1e3 / (*l.bandwidth_GBps * 1e9));
    }
    const double B = collective_bytes(op, stage);
    const bool reduce = info(op).collective_kind == CollectiveKind::AllReduce;
    const double dn = static_cast<double>(n);
    if (c_.collectives == CollectiveAlgorithm::Tree) {
      double rounds = std::ceil(std::log2(dn)) * (reduce ? 2.0 : 1.0);
      return rounds * (B * inv_bw + lat);
    }
    if (reduce) return 2.0 * (dn - 1) / dn * B * inv_bw + 2.0 * (dn - 1) * lat;
    return B * inv_bw + (dn - 1) * lat;
  }

  // ---- results --------------------------------------------------------------------------------
  RunRecord finish() {
    RunRecord& res = rec_.header();
    res.steps = res.check.stats.steps;  // counted once, by the checks (the cache walk)
    res.events = events_;
    double makespan = last_slice_ >= 0 ? std::max(0.0, last_end_) : 0.0;
    for (int r = 0; r < s_.ranks; ++r) makespan = std::max(makespan, host_[static_cast<size_t>(r)]);
    if (timing_only_) return rec_.finish(makespan);
    for (int r = 0; r < s_.ranks; ++r) {
      const size_t ri = static_cast<size_t>(r);
      RankSummary rs;
      rs.rank = r;
      rs.busy_ms = busy_[ri];
      const Peak& pk = peaks_[ri];
      rs.peak_memory_bytes = resident_[ri].total() + pk.bytes;
      rs.peak_memory_time_ms = pk.time;
      rs.peak_memory_step = pk.step;
      rs.memory.weights_bytes = resident_[ri].weights;
      rs.memory.grads_bytes = resident_[ri].grads;
      rs.memory.optimizer_bytes = resident_[ri].optimizer;
      rs.memory.activations_peak_bytes = act_peaks_[ri].bytes;
      rs.memory.activations_peak_time_ms = act_peaks_[ri].time;
      rs.memory.at_peak_activations_bytes = pk.activations - pk.workspace;
      rs.memory.at_peak_gathered_bytes = pk.gathered;
      rs.memory.at_peak_workspace_bytes = pk.workspace;
      rs.memory.at_peak_buffers_bytes = pk.bytes - pk.activations - pk.gathered;
      rs.end_ms = std::max(host_[ri], compute_free_[ri]);
      rs.dp_collective_ms = dp_ms_[ri];
      rs.dp_exposed_ms = dp_exposed_[ri];
      rs.dp_ring_inter_node = dp_ring_inter_node(r);
      rec_.rank(rs);
    }
    res.dp_degree = o_.check.dp.degree;
    // Critical path: from the slice that ends last, follow the causes back.
    const int32_t last = last_slice_;
    // Counted first and held at its size: it is built while everything else is still held.
    size_t steps = 0;
    for (int32_t k = last; k >= 0 && steps <= slices_.size(); k = slices_[static_cast<size_t>(k)].cause) {
      ++steps;
      if (slices_[static_cast<size_t>(k)].cause >= k) break;
    }
    std::vector<CriticalStep> path;
    path.reserve(steps);
    for (int32_t k = last; k >= 0 && path.size() <= slices_.size(); k = slices_[static_cast<size_t>(k)].cause) {
      const Span& sl = slices_[static_cast<size_t>(k)];
      path.push_back({sl.rank, sl.step_index, sl.lane, sl.start_ms, sl.end_ms, sl.meta, -1});
      if (sl.cause >= k) break;  // causes always point to earlier slices
    }
    std::reverse(path.begin(), path.end());
    // A slice can begin before its cause ends (a send posted before its payload is ready);
    // on the path it counts from when its cause let it go.
    for (size_t k = 1; k < path.size(); ++k) path[k].start_ms = std::max(path[k].start_ms, path[k - 1].end_ms);
    rec_.critical_path(std::move(path));
    for (size_t k = 0; k < model_.channels.size(); ++k)
      if (link_msgs_[k]) rec_.link(model_.channels[k].src, model_.channels[k].dst, link_bytes_[k], link_msgs_[k]);
    if (o_.record_trace) {
      rec_.reserve_slices(slices_.size());
      for (size_t k = 0; k < slices_.size(); ++k) {
        const Span& sp = slices_[k];
        TimedSlice sl;
        sl.rank = sp.rank;
        sl.step_index = sp.step_index;
        sl.sub = -1;  // a slice is a whole step's (a batch's sub-steps share it)
        sl.lane = sp.lane;
        sl.start_ms = sp.start_ms;
        sl.end_ms = sp.end_ms;
        sl.bytes = slice_bytes_[k];
        sl.meta = sp.meta;
        rec_.slice(sl);
      }
      for (auto& [sid, rid] : pending_flows_) {
        const MsgState& a = msgs_[sid];
        const MsgState& b = msgs_[rid];
        if (a.slice < 0 || b.slice < 0) continue;
        // As settle() and transfer() timed it: an eager payload leaves when ready and arrives
        // when its send completes; a rendezvous one leaves when its transfer starts (the
        // receive's `ready`) and arrives when the receive completes.
        double leave = std::numeric_limits<double>::quiet_NaN(), arrive = leave;
        if (a.end != kUnknown) {
          const bool is_eager = eager(price(model_.messages[static_cast<size_t>(sid)]));
          leave = is_eager ? a.ready : b.ready;
          arrive = is_eager ? a.end : b.end;
        }
        rec_.flow(a.slice, b.slice, leave, arrive);
      }
    }
    // The checks replayed the same lowering (their deadlock pass): a timed run that stops is
    // explained there, either by a deadlock or by the unmatched message or collective the
    // static passes located. Timing's eager protocol cannot stop where that replay completes.
    if (!res.completed && res.checked && res.check.completes)
      throw std::logic_error("simulate: the timed run of '" + s_.name +
                             "' stopped although the replay of its lowering completes (an engine bug)");
    return rec_.finish(makespan);
  }

  struct Peak {
    int64_t bytes = 0;
    double time = 0;
    int step = -1;
    int64_t activations = 0, gathered = 0, workspace = 0;  // what the live bytes held then
  };
  struct Instance {
    int arrived = 0;
    double start = 0, end = kUnknown;
    int32_t cause = -1;
  };

  const Schedule& s_;
  const CostModel& c_;
  const SimOptions& o_;
  CommModel model_;
  MemoryModel memory_ = c_.memory_model(s_.stages);
  EffectResolver resolver_{s_, memory_};
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
  // A slice while the run goes on: TimedSlice less its bytes, which are kept apart and only
  // when tracing (32 bytes a slice instead of 48: a 10^7-step run holds ~10^7 of them).
  // Its cause is kept here too (the slice that let it start: the critical path follows causes
  // back), so a slice costs 32 bytes in all; no slice is a sub-step's (a batch's sub-steps share
  // their step's slice), so it holds no sub-step index.
  struct Span {
    double start_ms, end_ms;
    int32_t rank, step_index, cause;
    Lane lane;
    bool meta;
  };
  static_assert(sizeof(Span) == 32, "Span: keep it at 32 bytes");
  Blocks<Span> slices_;
  size_t collect_at_ = small_run(o_);  // without a trace: drop slices when there are this many
  std::vector<double> slice_bytes_;  // per slice, when tracing
  std::vector<std::pair<int32_t, int32_t>> pending_flows_;
  RunRecorder rec_;
  std::vector<int64_t> mem_now_;        // per rank: live bytes (activations, buffers, gathered, workspace)
  std::vector<int64_t> act_now_;        // ... of which kept activations (the workspace included)
  std::vector<int64_t> gathered_now_, workspace_now_;
  std::vector<ResidentBytes> resident_; // per rank: held for the whole run
  std::vector<Peak> act_peaks_;         // per rank: the peak of the activations alone
  std::vector<Delta> pending_produce_;    // per rank: what the P2P step being run adds when it completes
  std::vector<int32_t> released_step_;    // per rank: the P2P step whose consumes were applied
  std::vector<Peak> peaks_;
  std::vector<double> link_bytes_;
  std::vector<int> link_msgs_;
  std::vector<double> dp_ms_;                // per rank: time in DP-group collectives
  std::vector<double> dp_exposed_;           // per rank: what of it its steps waited for
  const bool gathers_ = o_.check.dp.fsdp && o_.check.dp.degree > 1;
  // FSDP2 without a pipeline, from a model's units: its forwards and backwards gather and
  // reduce-scatter unit by unit (fsdp2_pass).
  const bool fsdp2_units_ = fsdp2_per_unit(s_, c_, o_.check.dp);
  mutable std::map<std::pair<uint8_t, double>, Fsdp2Pass> fsdp2_passes_;  // fsdp2_pass's walks
  const bool timing_only_ = o_.timing_only;
  std::vector<std::set<int>> gathered_;      // per rank, --fsdp: the stages gathered now
  std::vector<const Link*> channel_link_;    // per channel
  // Filled on first use; -1 (consumed -1): not known yet. Empty when prices vary by micro.
  std::vector<double> compute_table_, payload_table_;  // [(stage + 1) * kOpCount + op]
  std::vector<Delta> effects_table_;                   // [(stage * kOpCount + op) * 2 + owner bit]
  std::vector<std::vector<WaitSpan>> waits_;  // per rank, background_progress false
  std::vector<std::vector<Stalled>> stalled_;  // per receiving rank
  std::vector<int> dirty_;                      // ranks with stalled transfers that started or stopped waiting
  std::vector<uint8_t> dirty_flag_;
  int current_step_ = -1;
  int32_t last_slice_ = -1;  // see note_end
  double last_end_ = 0;
};

}  // namespace

RunRecord simulate(const Schedule& s, const CostModel& costs, const SimOptions& options) {
  if (const std::string why = data_parallel_problem(options.check.dp, s.ranks); !why.empty())
    throw InputError({}, why);
  if (options.timing_only && (options.run_checks || options.record_trace)) {
    SimOptions timing = options;
    timing.run_checks = timing.record_trace = false;
    return Engine(s, costs, timing).run();
  }
  return Engine(s, costs, options).run();
}

}  // namespace ppsched
