// The data-parallel half of a pipeline x DP job (CheckOptions::dp, README "Pipeline x data
// parallel"), as PyTorch's _PipelineScheduleRuntime runs the FSDP steps
// (torch/distributed/pipelining/schedules.py, _step_microbatches and _assert_unsharded):
//  - with --fsdp and N > 1 each stage's parameters are sharded until an FSDP_UNSHARD gathers
//    them; a compute step waits that gather, and a stage computes only on gathered parameters
//    ("Attempted to compute on sharded stage"); gathering a stage twice ("Unsharding the same
//    stage twice"), resharding one no compute has used ("Resharding without unsharding"), a
//    gather never used ("Unused unshard operations") and a stage left gathered at the end
//    (the next step's UNSHARD of it fails) are errors;
//  - with N > 1 each stage's weight gradients are reduced over its DP group once, by an
//    FSDP_REDUCE_GRAD after its last weight-gradient backward (PyTorch's _add_reduce_grad):
//    one before a later backward leaves that backward's gradients unreduced, none leaves the
//    replicas to diverge; a trainable MPipe tower's backward (stage-0-backward mode) counts as
//    a backward of stage 0, whose gradients it adds to, and an owner-backward trainable tower
//    is an error (no DP step averages its gradients). A schedule with no FSDP steps at all
//    gets a note instead (its author may reduce outside the schedule).
// The lifecycle uses `cache_violation`, a compute on sharded parameters and a misplaced or
// missing reduction `dependency`.
#include <map>

#include "checkers/checks.hpp"
#include "checkers/report.hpp"

namespace ppsched {
namespace {

enum class Shard : uint8_t { Sharded, Gathering, Gathered };

struct StageState {
  Shard shard = Shard::Sharded;
  int gathered_at = -1;      // the UNSHARD that gathered it
  int reduced_at = -1;       // the first REDUCE_GRAD
  int last_backward = -1;    // the last weight-gradient backward (BWD or BWD_WEIGHT)
  bool sharded_compute_reported = false;
};

std::string stage_name(int st) { return "stage " + std::to_string(st); }

}  // namespace

void check_data_parallel(const PassInput& in, CheckReport& out) {
  const Schedule& s = in.schedule;
  const DataParallelOptions& dp = in.options.dp;
  auto report = [&](Violation v) { out.violations.push_back(std::move(v)); };
  if (dp.degree <= 1) {
    // FSDP steps without data parallelism: each is a collective of one rank, checked and priced
    // as moving nothing. "verified" alone would hide that the job's DP layer was not checked.
    size_t dp_steps = 0;
    for (const auto& prog : s.programs)
      for (const auto& slot : prog) dp_steps += slot && info(slot->op).collective == CollectiveScope::DataParallel;
    if (dp_steps > 0)
      out.notes.push_back("the schedule has " + std::to_string(dp_steps) +
                          " FSDP_* steps but no data parallelism (--dp 1): each is a collective of one rank, which "
                          "moves nothing; give --dp N (and --fsdp for sharded parameters) to check them as the job's");
    return;
  }
  const bool sharded = dp.fsdp;
  // A trainable MPipe tower's gradients: in stage-0-backward mode the tower's backward (on
  // rank 0) adds them to stage 0's, whose REDUCE_GRAD then averages them; in owner-backward
  // mode every rank holds them after MPIPE_GRAD_REDUCE and no DP step averages them.
  const bool tower_grads = s.mpipe && s.mpipe->tower == Tower::Trainable;
  if (tower_grads && s.mpipe->owner_backward)
    report(located(ViolationKind::Dependency, s, 0, {},
                   "--dp " + std::to_string(dp.degree) + " with an owner-backward MPipe tower: every rank holds "
                   "the tower's gradients after MPIPE_GRAD_REDUCE and no step averages them over the "
                   "data-parallel group, so the replicas diverge; generate mpipe-transpose without "
                   "--owner-backward (stage 0's FSDP_REDUCE_GRAD then averages the tower)"));
  bool any_dp_step = false;
  for (const auto& prog : s.programs)
    for (const auto& slot : prog) any_dp_step = any_dp_step || (slot && info(slot->op).collective == CollectiveScope::DataParallel);
  if (!any_dp_step) {
    out.notes.push_back("the schedule has no FSDP_* steps: with --dp " + std::to_string(dp.degree) +
                        " nothing in it reduces gradients over the DP groups" +
                        (sharded ? " or gathers the sharded parameters" : "") +
                        " (ppsched generate --fsdp-steps inserts them as PyTorch's lowering does)");
    if (!sharded) return;
  }
  const std::string mode = sharded ? "FSDP" : "DDP";
  for (int r = 0; r < s.ranks; ++r) {
    const Program& prog = s.programs[static_cast<size_t>(r)];
    std::map<int, StageState> stages;
    for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
      if (!prog[static_cast<size_t>(i)]) continue;
      const Step& top = *prog[static_cast<size_t>(i)];
      const StepTypeInfo& ti = info(top.op);
      if (ti.collective == CollectiveScope::DataParallel && top.stage >= 0) {
        StageState& st = stages[top.stage];
        const std::string label = short_label(top);
        switch (ti.collective_kind) {
          case CollectiveKind::AllGather:
            if (!sharded) break;
            if (st.shard != Shard::Sharded)
              report(located(ViolationKind::CacheViolation, s, r, {{i, -1}, {st.gathered_at, -1}},
                             label + " gathers the parameters of " + stage_name(top.stage) +
                                 ", which step " + std::to_string(st.gathered_at) +
                                 " already gathered and no FSDP_RESHARD released: PyTorch's runtime stops "
                                 "('Unsharding the same stage twice')."));
            st.shard = Shard::Gathering;
            st.gathered_at = i;
            break;
          case CollectiveKind::Release:
            if (!sharded) break;
            if (st.shard != Shard::Gathered)
              report(located(
           ViolationKind::CacheViolation, s, r, {{i, -1}},
           label + " releases the parameters of " + stage_name(top.stage) + ", " +
               (st.shard == Shard::Gathering
                    ? "whose gather at step " + std::to_string(st.gathered_at) + " no compute has waited"
                    : std::string("which are not gathered")) +
               ": PyTorch's runtime stops ('Resharding stage without unsharding')."));
            st.shard = Shard::Sharded;
            break;
          case CollectiveKind::ReduceScatter:
            if (st.reduced_at >= 0)
              report(located(ViolationKind::CacheViolation, s, r, {{i, -1}, {st.reduced_at, -1}},
                             label + " reduces the gradients of " + stage_name(top.stage) +
                                 " over its DP group a second time (first at step " +
                                 std::to_string(st.reduced_at) + "): each stage is reduced once per step."));
            else
              st.reduced_at = i;
            break;
          default: break;
        }
        continue;
      }
      const std::vector<Step> leaves =
          is_composite(top.op) ? std::vector<Step>(top.sub_steps().begin(), top.sub_steps().end()) : std::vector<Step>{top};
      for (int k = 0; k < static_cast<int>(leaves.size()); ++k) {
        const Step& leaf = leaves[static_cast<size_t>(k)];
        const int sub = is_composite(top.op) ? k : -1;
        if (tower_grads && !s.mpipe->owner_backward && info(leaf.op).compute == ComputeKind::TowerBackward) {
          StageState& st0 = stages[0];  // the tower's backward adds to stage 0's gradients
          if (st0.reduced_at >= 0)
            report(located(ViolationKind::Dependency, s, r, {{i, sub}, {st0.reduced_at, -1}},
                           short_label(leaf) + " adds the tower's gradients to stage 0's after its "
                               "FSDP_REDUCE_GRAD at step " + std::to_string(st0.reduced_at) +
                               ": they are never reduced over the DP group, so the " +
                               std::to_string(dp.degree) + " replicas diverge."));
          st0.last_backward = i;
          continue;
        }
        if (!is_compute(leaf.op) || !stage_places(leaf.op) || leaf.stage < 0) continue;
        StageState& st = stages[leaf.stage];
        if (accumulates_weight_grads(leaf.op)) {
          if (st.reduced_at >= 0)
            report(located(ViolationKind::Dependency, s, r, {{i, sub}, {st.reduced_at, -1}},
                           short_label(leaf) + " accumulates weight gradients of " + stage_name(leaf.stage) +
                               " after its FSDP_REDUCE_GRAD at step " + std::to_string(st.reduced_at) +
                               ": they are never reduced over the DP group (PyTorch reduces after the stage's "
                               "last B or W), so the " + std::to_string(dp.degree) + " replicas diverge."));
          st.last_backward = i;
        }
        if (!sharded) continue;
        if (st.shard == Shard::Gathering) st.shard = Shard::Gathered;
        if (st.shard == Shard::Sharded && !st.sharded_compute_reported) {
          st.sharded_compute_reported = true;  // once per stage: the rest follow from it
          report(located(ViolationKind::Dependency, s, r, {{i, sub}},
                         short_label(leaf) + " computes " + stage_name(leaf.stage) +
                             " on sharded parameters: under --fsdp an FSDP_UNSHARD of the stage must gather "
                             "them first (PyTorch's runtime stops: 'Attempted to compute on sharded stage')."));
        }
      }
    }
    for (const auto& [stage, st] : stages) {
      if (sharded && st.shard == Shard::Gathering)
        report(located(ViolationKind::CacheViolation, s, r, {{st.gathered_at, -1}},
                       "the gather of " + stage_name(stage) + " at step " + std::to_string(st.gathered_at) +
                           " is never used by a compute step: PyTorch's runtime stops at the end "
                           "('Unused unshard operations')."));
      else if (sharded && st.shard == Shard::Gathered)
        report(located(ViolationKind::CacheViolation, s, r, {{st.gathered_at, -1}},
                       stage_name(stage) + " is still gathered at the end (since step " +
                           std::to_string(st.gathered_at) +
                           "): its full parameters stay allocated and the next step's FSDP_UNSHARD of it "
                           "fails ('Unsharding the same stage twice'); end with an FSDP_RESHARD."));
      if (any_dp_step && st.last_backward >= 0 && st.reduced_at < 0)
        report(located(ViolationKind::Dependency, s, r, {{st.last_backward, -1}},
                       "the weight gradients of " + stage_name(stage) + " are never reduced over its DP group (" +
                           mode + ", " + std::to_string(dp.degree) +
                           " replicas): no FSDP_REDUCE_GRAD of the stage follows its last backward, so the "
                           "replicas diverge."));
    }
  }
}

}  // namespace ppsched
