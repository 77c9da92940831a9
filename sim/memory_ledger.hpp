// The engine's memory ledger (sim/engine.cpp): each rank's live bytes as the cache effects of the
// step table apply in simulated time, their peaks and the memory samples of a trace. Private to
// sim/: the public API is sim/engine.hpp.
//
// Consumes apply when a step starts, produces when it ends. The checks (same replay) prove
// every consume meets its produce, so byte deltas suffice: no live set is kept here.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "lowering/comm_model.hpp"
#include "lowering/effects.hpp"
#include "lowering/options.hpp"
#include "schedule/schedule.hpp"
#include "results/recorder.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine_prices.hpp"

namespace ppsched::des {

// What a step's applicable effects release when it starts and add when it ends.
struct Delta {
  int64_t consumed = 0, produced = 0;  // consumed < 0: not known yet (MemoryLedger's table)
  int64_t act_consumed = 0, act_produced = 0;  // of which kept activations
  Delta& operator+=(const Delta& o) {
    consumed += o.consumed;
    produced += o.produced;
    act_consumed += o.act_consumed;
    act_produced += o.act_produced;
    return *this;
  }
};

class MemoryLedger {
 public:
  // tables: the stage count is in proportion to the schedule, so a (stage, op) table of the
  // effects may be kept. timing_only: no accounting at all (apply does nothing).
  MemoryLedger(const Schedule& s, const CostModel& c, const DataParallelOptions& dp, bool tables, bool timing_only,
               RunRecorder& rec);

  // The step the next changes belong to (a peak names it).
  void at_step(int index) { current_step_ = index; }

  // ---- effects --------------------------------------------------------------------------------
  // The effects of action `a`'s step; the step itself is read only when it is a composite.
  Delta action_effects(int r, const Action& a) {
    return a.composite() ? effects_of(r, step_at(s_, r, a.step_index)) : leaf_effects(r, leaf_of(s_, r, a));
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
    const Delta d = resolve(r, st);
    if (slot) *slot = d;
    return d;
  }

  // ---- live bytes -----------------------------------------------------------------------------
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

  // The workspace a compute action's backward holds while it runs (0 for anything else): the
  // largest of its backward sub-steps'. A recomputing backward holds what it recomputes while
  // it runs, on top of its inputs: from its start (hold_workspace) to its end (free_workspace).
  int64_t workspace_of(int r, const Action& a) const {
    if (memory_.workspace_bytes.empty()) return 0;
    return largest_workspace(r, a);
  }
  void hold_workspace(int r, int64_t bytes, double t) {
    workspace_now_[static_cast<size_t>(r)] = bytes;
    apply(r, bytes, bytes, t);
  }
  void free_workspace(int r, int64_t bytes, double t) {
    workspace_now_[static_cast<size_t>(r)] = 0;
    apply(r, -bytes, -bytes, t);
  }

  // --fsdp over N > 1 replicas: an FSDP_* step's gathered parameters (gather).
  bool gathers() const { return gathers_; }
  void gather(int r, const Leaf& st, Delta& mem);

  // ---- P2P steps ------------------------------------------------------------------------------
  // Rank r posts a payload action of its P2P step: once per step (a multi-tensor transfer
  // posts one payload action per tensor), a send releases what it pops, and what a receive
  // delivers is held until delivered_posted.
  void release_posted(int r, const Action& a, double t) {
    const size_t ri = static_cast<size_t>(r);
    if (released_step_[ri] == a.step_index) return;
    released_step_[ri] = a.step_index;
    const Delta d = action_effects(r, a);
    release(r, d, t);
    pending_produce_[ri] = d;
  }
  void deliver_posted(int r, double t) {
    const size_t ri = static_cast<size_t>(r);
    deliver(r, pending_produce_[ri], t);
    pending_produce_[ri] = Delta{};
  }

  // ---- results ----------------------------------------------------------------------------
  // Rank r's peak memory and its parts, into its summary.
  void summarize(int r, RankSummary& rs) const;

 private:
  struct Peak {
    int64_t bytes = 0;
    double time = 0;
    int step = -1;
    int64_t activations = 0, gathered = 0, workspace = 0;  // what the live bytes held then
  };

  // What a step's applicable effects release when it starts and add when it ends.
  Delta effects_of(int r, const Step& st);
  // The resolver's answer for leaf `st` on rank r.
  Delta resolve(int r, const Leaf& st);
  int64_t largest_workspace(int r, const Action& a) const;
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

  const Schedule& s_;
  const DataParallelOptions& dp_;
  RunRecorder& rec_;
  const bool timing_only_;
  const bool gathers_;  // --fsdp over N > 1 replicas
  MemoryModel memory_;
  EffectResolver resolver_{s_, memory_};
  int current_step_ = -1;
  std::vector<int64_t> mem_now_;        // per rank: live bytes (activations, buffers, gathered, workspace)
  std::vector<int64_t> act_now_;        // ... of which kept activations (the workspace included)
  std::vector<int64_t> gathered_now_, workspace_now_;
  std::vector<ResidentBytes> resident_; // per rank: held for the whole run
  std::vector<Peak> peaks_;
  std::vector<Peak> act_peaks_;         // per rank: the peak of the activations alone
  std::vector<Delta> pending_produce_;  // per rank: what the P2P step being run adds when it completes
  std::vector<int32_t> released_step_;  // per rank: the P2P step whose consumes were applied
  std::vector<std::set<int>> gathered_; // per rank, --fsdp: the stages gathered now
  std::vector<Delta> effects_table_;    // [(stage * kOpCount + op) * 2 + owner bit]; consumed -1: not known yet
};

}  // namespace ppsched::des
