// Replicated stages (Schedule::pipes > 1; Chimera's down and up pipelines, DeepSeek's
// bidirectional DualPipe): each copy of a model stage accumulates the weight gradients of its
// own micro-batches, and the copies add them up with a REPLICA_GRAD_SYNC (Chimera's sync_grad,
// an all-reduce over the ranks holding the copies). Per rank and copy:
//  - a sync before one of the copy's weight-gradient backwards (BWD or BWD_WEIGHT) leaves that
//    backward's gradients out of the sum, so the copies diverge;
//  - no sync at all leaves the copies to diverge (every copy that computed anything needs one);
//  - a second sync adds the other copies' gradients twice.
// That the copies' syncs meet (same ranks, same model stage at the same position: two model
// stages whose copies share ranks sync in one communicator) is the collective pass's job
// (CollectiveCall::subject). All findings are `dependency`, a second sync
// `cache_violation`, as for FSDP_REDUCE_GRAD (checkers/data_parallel.cpp).
#include <map>

#include "checkers/checks.hpp"
#include "checkers/report.hpp"

namespace ppsched {
namespace {

struct CopyState {
  int synced_at = -1;       // the first REPLICA_GRAD_SYNC of the copy
  int last_backward = -1;   // the last weight-gradient backward
};

std::string copy_name(const Schedule& s, int stage) {
  return "stage " + std::to_string(stage) + " (copy " + std::to_string(s.pipe_of_stage(stage)) + " of model stage " +
         std::to_string(s.model_stage_of(stage)) + ")";
}

}  // namespace

void check_replicas(const PassInput& in, CheckReport& out) {
  const Schedule& s = in.schedule;
  bool any_sync = false;
  for (const auto& prog : s.programs)
    for (const auto& slot : prog) any_sync = any_sync || (slot && info(slot->op).collective == CollectiveScope::Replicas);
  if (s.pipes <= 1 && !any_sync) return;
  for (int r = 0; r < s.ranks; ++r) {
    const Program& prog = s.programs[static_cast<size_t>(r)];
    std::map<int, CopyState> copies;
    for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
      if (!prog[static_cast<size_t>(i)]) continue;
      const Step& top = *prog[static_cast<size_t>(i)];
      if (info(top.op).collective == CollectiveScope::Replicas) {
        if (top.stage < 0 || top.stage >= s.stages) continue;  // the lowering located it
        CopyState& c = copies[top.stage];
        if (c.synced_at >= 0)
          out.violations.push_back(located(ViolationKind::CacheViolation, s, r, {{i, -1}, {c.synced_at, -1}},
                                           short_label(top) + " synchronises the gradients of " +
                                               copy_name(s, top.stage) + " a second time (first at step " +
                                               std::to_string(c.synced_at) +
                                               "): the other copies' gradients would be added twice."));
        else
          c.synced_at = i;
        continue;
      }
      const bool composite = is_composite(top.op);
      const int n = composite ? static_cast<int>(top.sub_steps().size()) : 1;
      for (int k = 0; k < n; ++k) {
        const Step& leaf = composite ? top.sub_steps()[static_cast<size_t>(k)] : top;
        if (!accumulates_weight_grads(leaf.op) || leaf.stage < 0 || leaf.stage >= s.stages) continue;
        CopyState& c = copies[leaf.stage];
        if (c.synced_at >= 0)
          out.violations.push_back(
              located(ViolationKind::Dependency, s, r, {{i, composite ? k : -1}, {c.synced_at, -1}},
                      short_label(leaf) + " accumulates weight gradients of " + copy_name(s, leaf.stage) +
                          " after its REPLICA_GRAD_SYNC at step " + std::to_string(c.synced_at) +
                          ": the other copies never receive them, so the copies diverge (a copy's sync "
                          "must follow its last weight-gradient step)."));
        c.last_backward = i;
      }
    }
    if (s.pipes <= 1) continue;
    for (const auto& [stage, c] : copies)
      if (c.last_backward >= 0 && c.synced_at < 0)
        out.violations.push_back(
            located(ViolationKind::Dependency, s, r, {{c.last_backward, -1}},
                    "the weight gradients of " + copy_name(s, stage) +
                        " are never synchronised with its other copies: no REPLICA_GRAD_SYNC of the "
                        "stage follows its last backward, so the copies diverge."));
  }
}

}  // namespace ppsched
