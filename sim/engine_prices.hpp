// What an action costs in the engine (sim/engine.cpp): a step's compute time, a message's
// payload bytes, and the collectives' times (the pipeline's, and the data-parallel group's of
// FSDP_* steps and of FSDP2's per-unit passes), read from the cost model and kept in tables
// the timed loop reads directly. Private to sim/: the public API is sim/engine.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "lowering/comm_model.hpp"
#include "lowering/options.hpp"
#include "schedule/schedule.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine_streams.hpp"
#include "sim/fsdp2_timing.hpp"

namespace ppsched::des {

// Rank r's step at `index` in its program.
inline const Step& step_at(const Schedule& s, int r, int index) {
  return *s.programs[static_cast<size_t>(r)][static_cast<size_t>(index)];
}

// What prices and memory read of a leaf step (an action carries its step's).
struct Leaf {
  Op op;
  int32_t stage, micro;
};
inline Leaf leaf_of(const Step& st) { return {st.op, st.stage, st.micro}; }
// An action's: its op, and its step's stage and micro (the top step's, as the lowering gives
// an action the top step's op).
inline Leaf leaf_of(const Schedule& s, int r, const Action& a) {
  const Step& st = step_at(s, r, a.step_index);
  return {a.op, st.stage, st.micro};
}

class ActionPrices {
 public:
  // tables: the stage count is in proportion to the schedule, so (stage, op) tables may be
  // kept (they are not when the cost model has per-micro rows).
  ActionPrices(const Schedule& s, const CostModel& c, const CheckOptions& check, bool tables);

  // ---- compute ------------------------------------------------------------------------------
  // A step's time on the compute stream: an OVERLAP step's two sub-steps run together.
  double duration(const Step& st);
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

  // ---- MoE phases on two streams (sim/engine_streams.hpp) ----------------------------------------
  // The phases of compute step `st` on rank r, on their streams, when its stage (or a sub-step's)
  // has MoE layers; nullptr otherwise (the step is priced by duration()). Kept per (sub-)step
  // ops and stages (and micro-batches, when the prices vary by micro): valid for the run.
  const StreamTimeline* streams(const Step& st, int r);
  // One all-to-all of `bytes` (what a rank sends) over the expert-parallel group of pipeline
  // rank r: NCCL's all-to-all, every pair at once (a grouped send and receive to each of the
  // ep - 1 peers, bytes / (ep - 1) each); the peers in r's node over the intra-node link, the
  // others over the inter-node link, both at once: the longer of the two, plus the links' latency.
  double a2a_ms(double bytes, int r) const;
  bool has_moe() const { return !c_.moe.stages.empty(); }

  // ---- P2P --------------------------------------------------------------------------------------
  // A leaf step's payload bytes.
  double payload_bytes(const Leaf& leaf) {
    if (double* slot = price_slot(payload_table_, leaf)) {
      if (*slot < 0) *slot = c_.payload_bytes(leaf.op, leaf.stage, leaf.micro);
      return *slot;
    }
    return c_.payload_bytes(leaf.op, leaf.stage, leaf.micro);
  }
  // A payload of `bytes` leaves as soon as it is ready and its send completes without its
  // receiver (else both ends meet first).
  bool eager(double bytes) const { return check_.comm == CommMode::Eager || bytes <= c_.protocol.eager_threshold_bytes; }

  // ---- pipeline collectives -------------------------------------------------------------------
  double collective_bytes(Op op, int stage) const;
  double collective_ms(Op op, int stage, const std::vector<int32_t>& members) const;

  // ---- data parallelism -----------------------------------------------------------------------
  // The global rank of pipeline rank r in replica 0: the rank the pipeline's links are read at
  // (r itself under the default ("dp", "pp") mesh, and whenever there is one replica).
  int global(int r) const { return check_.dp.mesh(s_.ranks).global_rank(0, r); }
  bool dp_ring_inter_node(int r) const;
  // A step's time in DP-group collectives, and what they add to its duration: an FSDP_* step
  // waits for its whole collective; a forward or backward under FSDP2 without a pipeline for
  // the part its compute does not hide.
  double dp_busy_ms(const Leaf& st) const { return dp_collective_ms(st) + fsdp2_pass(st).collective_ms; }
  double dp_exposed_ms(const Leaf& st) const { return dp_collective_ms(st) + fsdp2_pass(st).exposed_ms(); }

 private:
  // A leaf step's compute time or payload bytes depends on (op, stage) only, unless the cost
  // model has per-micro rows: then there is no table and the model is asked each time.
  double* price_slot(std::vector<double>& table, const Leaf& st) {
    if (table.empty() || st.stage < -1 || st.stage >= s_.stages) return nullptr;
    return &table[static_cast<size_t>(st.stage + 1) * kOpCount + static_cast<size_t>(st.op)];
  }
  double dp_collective_ms(const Leaf& st) const;
  double ring_ms(CollectiveKind kind, double B, int r) const;
  Fsdp2Pass fsdp2_pass(const Leaf& st) const;

  const Schedule& s_;
  const CostModel& c_;
  const CheckOptions& check_;
  // FSDP2 without a pipeline, from a model's units: its forwards and backwards gather and
  // reduce-scatter unit by unit (fsdp2_pass).
  const bool fsdp2_units_;
  const bool by_micro_;  // the cost model's prices vary by micro-batch (CostModel::varies_by_micro)
  mutable std::map<std::pair<uint8_t, double>, Fsdp2Pass> fsdp2_passes_;  // fsdp2_pass's walks
  // streams(): the timelines by (ops, stages, micros) of the step and its sub-steps.
  std::map<std::array<int32_t, 7>, StreamTimeline> timelines_;
  std::vector<PhaseItem> phase_scratch_;
  // Filled on first use; -1: not known yet. Empty when prices vary by micro.
  std::vector<double> compute_table_, payload_table_;  // [(stage + 1) * kOpCount + op]
};

}  // namespace ppsched::des
