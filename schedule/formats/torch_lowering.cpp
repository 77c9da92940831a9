// PyTorch's compute_only -> compute_comms lowering (torch_lowering.hpp has the rules).
//
// The passes are restated so that their cost stays in proportion to the schedule: PyTorch's
// `next_stage_indices` rescans the rest of the rank's list at every action and `_add_send_recv`
// revisits every rank in every sweep; here a frontier of each stage's next occurrence gives the
// next distinct stages, and a sweep visits only the ranks that may be ready. Both produce the
// same lists (the comments say why).
#include "schedule/formats/torch_lowering.hpp"

#include <algorithm>
#include <iterator>
#include <set>
#include <tuple>

#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"
#include "schedule/validate.hpp"

namespace ppsched {
namespace {

// The leaves of a compute action: the action itself, or an OVERLAP_F_B's sub-actions.
const Step* leaves_begin(const Step& a) { return a.sub_steps().empty() ? &a : &*a.sub_steps().begin(); }
const Step* leaves_end(const Step& a) { return a.sub_steps().empty() ? &a + 1 : &*a.sub_steps().begin() + a.sub_steps().size(); }

// PyTorch's F, B, I, W: the body's compute kinds (the MPipe tower's have no PyTorch action).
bool pytorch_compute(Op op) {
  const ComputeKind k = info(op).compute;
  return is_compute(op) && (k == ComputeKind::Forward || k == ComputeKind::Backward ||
                            k == ComputeKind::BackwardInput || k == ComputeKind::BackwardWeight);
}
// PyTorch's OVERLAP_F_B (a forward first); ppsched's OVERLAP_B_F has no PyTorch action.
bool pytorch_overlap(Op op) { return info(op).composite == CompositeKind::Overlap && info(op).forward_first; }
// The rank's compute actions in program order; what PyTorch re-derives is dropped, what its
// compute-only format cannot hold is refused.
std::vector<Step> compute_order(const Schedule& s, int r) {
  std::vector<Step> out;
  const Program& prog = s.programs[static_cast<size_t>(r)];
  for (size_t i = 0; i < prog.size(); ++i) {
    if (!prog[i]) continue;
    const Step& st = *prog[i];
    if (is_p2p(st.op) || is_batch(st.op) || info(st.op).collective == CollectiveScope::DataParallel) continue;
    bool ok = pytorch_compute(st.op);
    if (pytorch_overlap(st.op)) {
      ok = !st.sub_steps().empty();
      for (const Step& sub : st.sub_steps()) ok = ok && pytorch_compute(sub.op);
    }
    if (!ok) {
      Location loc;
      loc.rank = r;
      loc.index = static_cast<int>(i);
      throw InputError(loc, short_label(st) +
                                " has no place in PyTorch's compute-only schedule (F, I, W, B and "
                                "OVERLAP_F_B of them), so PyTorch's lowering cannot be applied");
    }
    out.push_back(st);
  }
  return out;
}

// Passes 1 and 2, _add_unshard_reshard and _add_reduce_grad, are add_fsdp_steps
// (schedule/generators/fsdp_steps.cpp), the one statement of PyTorch's FSDP rules that
// `generate --fsdp-steps` uses too: run on the compute order alone, it gives PyTorch's lists.

// The (op, stage, micro) keys of the actions done: an open-addressing set (a node per key would
// cost more memory than the schedule itself).
class KeySet {
 public:
  void reserve(size_t n) {
    size_t size = 16;
    while (size < 2 * n) size *= 2;
    if (size > slots_.size()) rehash(size);
  }
  void insert(uint64_t k) {
    if (2 * (used_ + 1) > slots_.size()) rehash(std::max<size_t>(16, 2 * slots_.size()));
    size_t i = slot(k);
    while (slots_[i] != kEmpty && slots_[i] != k) i = (i + 1) & (slots_.size() - 1);
    if (slots_[i] == kEmpty) ++used_;
    slots_[i] = k;
  }
  bool contains(uint64_t k) const {
    if (slots_.empty()) return false;
    for (size_t i = slot(k); slots_[i] != kEmpty; i = (i + 1) & (slots_.size() - 1))
      if (slots_[i] == k) return true;
    return false;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // no key has all bits set (op < 2^8 at bit 48)
  size_t slot(uint64_t k) const {
    k ^= k >> 33;  // splitmix64's finalizer
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k) & (slots_.size() - 1);
  }
  void rehash(size_t size) {
    std::vector<uint64_t> old = std::move(slots_);
    slots_.assign(size, kEmpty);
    used_ = 0;
    for (uint64_t k : old)
      if (k != kEmpty) insert(k);
  }
  std::vector<uint64_t> slots_;
  size_t used_ = 0;
};

// Pass 3, _add_send_recv.
class SendRecv {
 public:
  SendRecv(const Schedule& s, std::vector<std::vector<Step>> lists) : s_(s), lists_(std::move(lists)) {
    size_t leaves = 0;
    for (const auto& list : lists_) leaves += list.size();
    done_.reserve(2 * leaves);  // its computes and, at most as many, receives
  }

  std::vector<Program> run() {
    const int P = s_.ranks;
    std::vector<Program> out(static_cast<size_t>(P));
    next_.assign(static_cast<size_t>(P), 0);
    out_ = &out;
    // PyTorch visits every rank in every sweep; a rank whose next action was not ready stays
    // unready until a receive is added to its list, so only ranks that progressed or got a
    // receive are visited again. A receive added to a rank later in the sweep order makes it
    // visited in this sweep, one earlier in the next: exactly where PyTorch would find it ready.
    for (int r = 0; r < P; ++r)
      if (!lists_[static_cast<size_t>(r)].empty()) candidates_.insert(r);
    while (true) {
      bool progress = false;
      for (auto it = candidates_.begin(); it != candidates_.end();) {
        const int r = *it;
        const Step& a = lists_[static_cast<size_t>(r)][next_[static_cast<size_t>(r)]];
        bool ready = true;
        for (const Step* l = leaves_begin(a); l != leaves_end(a); ++l) ready = ready && is_ready(*l);
        if (!ready) {
          it = candidates_.erase(it);
          continue;
        }
        schedule(r, lists_[static_cast<size_t>(r)][next_[static_cast<size_t>(r)]]);
        progress = true;
        if (++next_[static_cast<size_t>(r)] == lists_[static_cast<size_t>(r)].size())
          it = candidates_.erase(it);
        else
          ++it;
      }
      if (!progress) break;
    }
    for (int r = 0; r < P; ++r) {
      const auto& list = lists_[static_cast<size_t>(r)];
      if (next_[static_cast<size_t>(r)] == list.size()) continue;
      Location loc;
      loc.rank = r;
      throw InputError(loc, "PyTorch's _add_send_recv cannot place the sends and receives (\"Malformed compute "
                            "schedule, can't schedule sends/recvs\"): rank " +
                                std::to_string(r) + " waits forever before " +
                                short_label(list[next_[static_cast<size_t>(r)]]));
    }
    return out;
  }

 private:
  static uint64_t key(Op op, int stage, int micro) {
    // stage and micro are below 2^21 (kMaxCount), op below 2^8.
    return (uint64_t{static_cast<uint8_t>(op)} << 48) | (static_cast<uint64_t>(stage) << 24) | static_cast<uint64_t>(micro);
  }
  bool done(Op op, int stage, int micro) const { return done_.contains(key(op, stage, micro)); }
  bool in_range(int stage) const { return stage >= 0 && stage < s_.stages; }

  // _ready_to_schedule: the input a FWD, BWD or BWD_INPUT waits for arrived, or the stage
  // feeding it is on this rank and ran (PyTorch looks in this rank's actions only).
  bool is_ready(const Step& a) const {
    const auto& recv = info(a.op).input_recv;
    if (!recv) return true;
    const int feeder = a.stage + info(*recv).partner_stage_delta;
    if (!in_range(feeder)) return true;
    if (done(*recv, a.stage, a.micro)) return true;
    if (s_.rank_of(feeder) != s_.rank_of(a.stage)) return false;
    // The feeder's step that hands its output over to this input (FWD for a FWD; BWD or
    // BWD_INPUT for a backward): the table's hands_over column, as P2P insertion reads it.
    for (int k = 0; k < kOpCount; ++k) {
      const Op producer = static_cast<Op>(k);
      if (info(producer).hands_over == info(*recv).partner && done(producer, feeder, a.micro)) return true;
    }
    return false;
  }

  // Moves the action out of its list (it is done with there) into the rank's program.
  void schedule(int r, Step& a) {
    auto& out = *out_;
    leaves_.clear();
    for (const Step* l = leaves_begin(a); l != leaves_end(a); ++l) leaves_.push_back({l->op, l->stage, l->micro});
    out[static_cast<size_t>(r)].push_back(std::move(a));
    for (const Leaf& l : leaves_) {
      if (l.stage < 0 || l.micro < 0) continue;  // FSDP steps: nothing waits for them
      done_.insert(key(l.op, l.stage, l.micro));
      const auto& send = info(l.op).hands_over;
      if (!send) continue;
      const int to_stage = l.stage + info(*send).partner_stage_delta;
      if (!in_range(to_stage) || s_.rank_of(to_stage) == r) continue;
      out[static_cast<size_t>(r)].push_back(make_step(*send, l.micro, l.stage));
      const Op recv = info(*send).partner;
      const int to = s_.rank_of(to_stage);
      out[static_cast<size_t>(to)].push_back(make_step(recv, l.micro, to_stage));
      done_.insert(key(recv, to_stage, l.micro));
      // Its next action may have waited for this receive.
      if (next_[static_cast<size_t>(to)] < lists_[static_cast<size_t>(to)].size()) candidates_.insert(to);
    }
  }

  const Schedule& s_;
  std::vector<std::vector<Step>> lists_;
  std::vector<size_t> next_;
  std::vector<Program>* out_ = nullptr;
  std::set<int> candidates_;
  KeySet done_;
  struct Leaf {
    Op op;
    int stage, micro;
  };
  std::vector<Leaf> leaves_;
};

}  // namespace

Schedule lower_like_pytorch(const Schedule& s) {
  if (s.mpipe)
    throw InputError({}, "the MPipe layer has no place in PyTorch's pipelining schedules, so PyTorch's lowering "
                         "cannot be applied");
  if (s.pipes > 1)
    throw InputError({}, "replicated stages (" + std::to_string(s.pipes) +
                             " copies of the pipeline) have no place in PyTorch's pipelining schedules, so PyTorch's "
                             "lowering cannot be applied");
  Schedule compute = s;
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<Step> order = compute_order(s, r);
    Program& prog = compute.programs[static_cast<size_t>(r)];
    prog.clear();
    prog.reserve(order.size());
    for (auto& st : order) prog.emplace_back(std::move(st));
  }
  compute = add_fsdp_steps(compute);
  std::vector<std::vector<Step>> lists;
  lists.reserve(static_cast<size_t>(s.ranks));
  for (auto& prog : compute.programs) {
    std::vector<Step> list;
    list.reserve(prog.size());
    for (auto& slot : prog)
      if (slot) list.push_back(std::move(*slot));
    lists.push_back(std::move(list));
    prog.clear();
    prog.shrink_to_fit();
  }
  Schedule out;
  out.name = s.name;
  out.ranks = s.ranks;
  out.stages = s.stages;
  out.micro_batches = s.micro_batches;
  out.placement = s.placement;
  out.programs = SendRecv(s, std::move(lists)).run();
  mark_data_steps(out);
  validate_structure(out, "<" + s.name + " lowered as PyTorch does>");
  return out;
}

}  // namespace ppsched
