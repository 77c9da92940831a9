// The FSDP steps PyTorch's lowering adds to every rank's compute order
// (torch/distributed/pipelining/schedules.py, _PipelineScheduleRuntime._prepare_schedule_with_comms:
// _add_unshard_reshard, then _add_reduce_grad, then the sends and receives):
//  - before each compute action, the stages among the next max_active_stages distinct stages
//    the rank computes (counting from this action, whole actions at a time) that are not
//    gathered get an UNSHARD, in that order, after a RESHARD of every gathered stage outside
//    them (ascending); after the last action every stage still gathered is resharded;
//  - REDUCE_GRAD of a stage right after the action that completes its micro_batches-th
//    backward (full BWD or BWD_WEIGHT, the ones that accumulate weight gradients).
// MPipe Transpose (not PyTorch's): the tower runs the first units of stage 0 on the rank that
// holds stage 0, so its steps there count as stage 0 compute, and stage 0's REDUCE_GRAD follows
// the later of its last backward and the tower's last backward.
// Here the P2P steps are already in place, so the steps PyTorch puts between two compute
// actions go after the first one and the sends that hand its output over (PyTorch appends a
// send right after its producer): a REDUCE_GRAD never delays the hand-over of its stage's
// last gradient, and an UNSHARD comes before the receives of its stage's next input.
#include <algorithm>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <tuple>

#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched {
namespace {

// The stage whose parameters a compute leaf uses, or -1. An MPipe tower step (not PyTorch's)
// runs the first units of stage 0 on the rank that holds stage 0: there it is stage 0 compute,
// and its backward adds to stage 0's gradients.
bool is_tower(const Step& leaf) {
  const ComputeKind k = info(leaf.op).compute;
  return k == ComputeKind::TowerForward || k == ComputeKind::TowerBackward;
}
int params_stage(const Step& leaf, bool holds_stage0) {
  if (!is_compute(leaf.op)) return -1;
  if (is_tower(leaf)) return holds_stage0 ? 0 : -1;
  return stage_places(leaf.op) && leaf.stage >= 0 ? leaf.stage : -1;
}

// The stage compute of a slot: its leaves that compute a stage (an OVERLAP composite has two).
std::vector<const Step*> stage_compute(const Step& st, bool holds_stage0) {
  std::vector<const Step*> out;
  const auto take = [&](const Step& leaf) {
    if (params_stage(leaf, holds_stage0) >= 0) out.push_back(&leaf);
  };
  if (is_overlap(st.op)) {
    for (const auto& sub : st.sub_steps()) take(sub);
  } else {
    take(st);
  }
  return out;
}

// Whether `st` (a send, or a batch holding one) hands over the output of one of `leaves`.
bool hands_over(const Step& st, const std::vector<const Step*>& leaves) {
  const auto one = [&](const Step& s) {
    for (const Step* leaf : leaves)
      if (info(leaf->op).hands_over && s.op == *info(leaf->op).hands_over && s.micro == leaf->micro &&
          s.stage == leaf->stage)
        return true;
    return false;
  };
  if (is_batch(st.op)) {
    for (const auto& sub : st.sub_steps())
      if (one(sub)) return true;
    return false;
  }
  return one(st);
}

// The slot after which the steps due after the action at `slot` go: its last hand-over send
// before the next action (at `next`), else the action itself.
size_t hand_over_end(const Program& prog, size_t slot, size_t next, bool holds_stage0) {
  const std::vector<const Step*> leaves = stage_compute(*prog[slot], holds_stage0);
  size_t end = slot;
  for (size_t j = slot + 1; j < next && j < prog.size(); ++j)
    if (prog[j] && hands_over(*prog[j], leaves)) end = j;
  return end;
}

bool accumulates_weight_grads(Op op) {
  const ComputeKind k = info(op).compute;
  return k == ComputeKind::Backward || k == ComputeKind::BackwardWeight || k == ComputeKind::TowerBackward;
}

// The FSDP step of the table's data-parallel collectives that does `kind` (gather, release,
// reduce): read from the table, so the pass names no op it does not emit by kind.
Op dp_step(CollectiveKind kind) {
  for (const auto& i : step_table())
    if (i.collective == CollectiveScope::DataParallel && i.collective_kind == kind) return i.op;
  throw std::logic_error("the step table has no data-parallel collective of this kind");
}

}  // namespace

Schedule add_fsdp_steps(const Schedule& in, int max_active_stages) {
  if (max_active_stages <= 0) throw InputError({}, "max_active_stages must be positive");
  const Op unshard = dp_step(CollectiveKind::AllGather), reshard = dp_step(CollectiveKind::Release),
           reduce = dp_step(CollectiveKind::ReduceScatter);
  Schedule out = in;
  for (size_t r = 0; r < in.programs.size(); ++r) {
    const Program& prog = in.programs[r];
    const bool holds_stage0 = in.stages > 0 && in.rank_of(0) == static_cast<int>(r);
    struct Act {
      size_t slot;
      std::vector<int> stages;  // leaf stages in order (duplicates kept)
    };
    std::vector<Act> acts;
    for (size_t i = 0; i < prog.size(); ++i) {
      if (!prog[i]) continue;
      if (info(prog[i]->op).collective == CollectiveScope::DataParallel) {
        Location where;
        where.rank = static_cast<int>(r);
        where.index = static_cast<int>(i);
        throw InputError(where, "the schedule already has FSDP steps (" + short_label(*prog[i]) +
                                    "): they are inserted once, into a schedule without them");
      }
      Act a{i, {}};
      for (const Step* leaf : stage_compute(*prog[i], holds_stage0)) a.stages.push_back(params_stage(*leaf, holds_stage0));
      if (!a.stages.empty()) acts.push_back(std::move(a));
    }
    // The gradient-producing leaves of each stage on this rank: micro_batches for PyTorch's
    // schedules (its _add_reduce_grad counts to n_microbatches), more for stage 0 when the
    // MPipe tower's backwards add to it.
    // The per-stage tables hold this rank's stages only (indexed through `local`): a table
    // per rank sized by the stage count would be ranks x stages.
    std::vector<int> local;
    for (const Act& a : acts)
      for (int st : a.stages)
        if (st < in.stages) local.push_back(st);
    std::sort(local.begin(), local.end());
    local.erase(std::unique(local.begin(), local.end()), local.end());
    const auto idx = [&](int st) { return static_cast<size_t>(std::lower_bound(local.begin(), local.end(), st) - local.begin()); };
    std::vector<int> producers(local.size(), 0);
    for (const Act& a : acts)
      for (const Step* leaf : stage_compute(*prog[a.slot], holds_stage0))
        if (accumulates_weight_grads(leaf->op)) {
          const int st = params_stage(*leaf, holds_stage0);
          if (st < in.stages) ++producers[idx(st)];
        }
    const size_t n = acts.size();
    // next[a]: PyTorch's next_stage_indices(max_active_stages, actions[a:]). Walking backwards,
    // each stage's next occurrence is kept in a set ordered by (action, leaf); the answer takes
    // whole actions from its front until it holds max_active_stages stages. O(n log V).
    std::vector<std::vector<int>> next(n);
    {
      std::set<std::tuple<size_t, size_t, int>> order;  // (action, leaf, stage)
      std::vector<std::tuple<size_t, size_t, int>> at(local.size(), std::make_tuple(SIZE_MAX, size_t{0}, -1));
      for (size_t a = n; a-- > 0;) {
        for (size_t k = acts[a].stages.size(); k-- > 0;) {
          const int st = acts[a].stages[k];
          if (st >= in.stages) continue;
          auto& slot = at[idx(st)];
          if (std::get<0>(slot) != SIZE_MAX) order.erase(slot);
          slot = std::make_tuple(a, k, st);
          order.insert(slot);
        }
        std::vector<int>& ans = next[a];
        size_t group = SIZE_MAX;
        for (const auto& [act, leaf, st] : order) {
          (void)leaf;
          if (act != group && static_cast<int>(ans.size()) >= max_active_stages) break;
          group = act;
          ans.push_back(st);
        }
      }
    }
    std::vector<std::vector<Step>> before(n), after(n);
    std::set<int> active;  // ascending, as PyTorch's set of small ints iterates
    std::vector<int> backwards(local.size(), 0);
    for (size_t a = 0; a < n; ++a) {
      const auto& want = next[a];
      const auto wanted = [&](int st) { return std::find(want.begin(), want.end(), st) != want.end(); };
      for (auto it = active.begin(); it != active.end();) {
        if (wanted(*it)) {
          ++it;
          continue;
        }
        before[a].push_back(make_step(reshard, kNone, *it));
        it = active.erase(it);
      }
      for (int st : want)
        if (active.insert(st).second) before[a].push_back(make_step(unshard, kNone, st));
      for (const Step* leaf : stage_compute(*prog[acts[a].slot], holds_stage0)) {
        const int st = params_stage(*leaf, holds_stage0);
        if (accumulates_weight_grads(leaf->op) && st < in.stages &&
            ++backwards[idx(st)] == producers[idx(st)])
          after[a].push_back(make_step(reduce, kNone, st));
      }
    }
    if (n > 0)
      for (int st : active) after[n - 1].push_back(make_step(reshard, kNone, st));
    // Rebuild the program: the steps due between actions a-1 and a (after[a-1], then
    // before[a]) go after a-1's hand-over sends (ppsched's P2P insertion may put a receive
    // between an action and its send), before[0] at the start.
    Program rebuilt;
    rebuilt.reserve(prog.size() + 3 * n);
    for (auto& st : n > 0 ? before[0] : std::vector<Step>{}) rebuilt.emplace_back(std::move(st));
    size_t a = 0, due = n > 0 ? hand_over_end(prog, acts[0].slot, n > 1 ? acts[1].slot : prog.size(), holds_stage0) : SIZE_MAX;
    for (size_t i = 0; i < prog.size(); ++i) {
      rebuilt.push_back(prog[i]);
      if (i != due) continue;
      for (auto& st : after[a]) rebuilt.emplace_back(std::move(st));
      ++a;
      if (a < n) {
        for (auto& st : before[a]) rebuilt.emplace_back(std::move(st));
        due = hand_over_end(prog, acts[a].slot, a + 1 < n ? acts[a + 1].slot : prog.size(), holds_stage0);
      }
    }
    out.programs[r] = std::move(rebuilt);
  }
  return out;
}

}  // namespace ppsched
