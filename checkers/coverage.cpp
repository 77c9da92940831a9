// Coverage and ownership: the static half of `dependency`.
#include <array>
#include <map>

#include "checkers/checks.hpp"
#include "schedule/flat_map.hpp"

namespace ppsched {
namespace {

// Which of the four counted compute kinds a step is (FWD, BWD, BWD_INPUT, BWD_WEIGHT), -1 for none.
int coverage_slot(Op op) {
  switch (info(op).compute) {
    case ComputeKind::Forward: return 0;
    case ComputeKind::Backward: return 1;
    case ComputeKind::BackwardInput: return 2;
    case ComputeKind::BackwardWeight: return 3;
    default: return -1;
  }
}

std::string list_micros(const std::vector<int>& micros) {
  std::string out;
  for (size_t i = 0; i < micros.size() && i < 12; ++i) out += (i ? ", " : "") + std::to_string(micros[i]);
  if (micros.size() > 12) out += ", ... (" + std::to_string(micros.size()) + " in all)";
  return out;
}

// The rank that must run a step, or kNone when any rank may: the rank of its stage for body
// steps, the MPipe owner rule for MPipe steps (whose stage field is only a tag, so
// hyper-parallel's stage 0 on the MPIPE_GRAD_* steps and on its older prefix is no placement).
int required_rank(const Schedule& s, const Step& st) {
  switch (info(st.op).runs_on) {
    case RunsOn::StageRank:
      return st.stage >= 0 && st.stage < s.stages ? s.rank_of(st.stage) : kNone;
    case RunsOn::Owner:
      return s.mpipe && st.micro >= 0 && st.micro < s.micro_batches ? s.owner_of(st.micro) : kNone;
    case RunsOn::Rank0:
      return s.mpipe ? 0 : kNone;
    case RunsOn::EveryRank:
      return kNone;
  }
  return kNone;
}

std::string misplaced_message(const Schedule& s, const Step& st, int r, int want) {
  const std::string head = short_label(st) + " runs on rank " + std::to_string(r) + ", but ";
  if (info(st.op).runs_on == RunsOn::StageRank)
    return head + "stage " + std::to_string(st.stage) + " is placed on rank " + std::to_string(want) +
           " (placement " + std::string(to_string(s.placement.kind)) +
           "): only the rank that holds a stage can run its steps.";
  if (info(st.op).runs_on == RunsOn::Rank0)
    return head + std::string(op_name(st.op)) + " runs on rank 0 (the MPipe owner rule; its stage field is only a tag).";
  return head + "micro-batch " + std::to_string(st.micro) + " is owned by rank " + std::to_string(want) +
         " (MPipe overflow " + std::string(to_string(s.mpipe->overflow)) + "), and " + std::string(op_name(st.op)) +
         " runs on the owner (the MPipe owner rule; its stage field is only a tag).";
}

// The common case, fast: every leaf on the rank of its stage and every (stage, micro) with
// exactly one FWD and one full backward. One byte per kind and key (saturating), no places.
bool coverage_clean(const Schedule& s) {
  const size_t M = static_cast<size_t>(s.micro_batches);
  // Every (stage, micro) needs a FWD: more keys than steps cannot be clean (and a file that
  // declares huge counts must not cost memory in proportion to them).
  if (static_cast<uint64_t>(std::max(s.stages, 0)) * M > s.slot_count()) return false;
  std::vector<std::array<uint8_t, 4>> n(static_cast<size_t>(s.stages) * M, std::array<uint8_t, 4>{0, 0, 0, 0});
  bool misplaced = false;
  auto visit = [&](const Step& st, int r) {
    const int want = required_rank(s, st);
    if (want != kNone && want != r) misplaced = true;
    int k = coverage_slot(st.op);
    if (k < 0 || st.stage < 0 || st.stage >= s.stages || st.micro < 0 || st.micro >= s.micro_batches) return;
    uint8_t& c = n[static_cast<size_t>(st.stage) * M + static_cast<size_t>(st.micro)][static_cast<size_t>(k)];
    if (c < 3) ++c;
  };
  for (int r = 0; r < s.ranks; ++r)
    for (const Slot& slot : s.programs[static_cast<size_t>(r)]) {
      if (!slot) continue;
      if (is_composite(slot->op)) {
        for (const Step& sub : slot->sub_steps()) visit(sub, r);
      } else {
        visit(*slot, r);
      }
    }
  if (misplaced) return false;
  for (size_t key = 0; key < n.size(); ++key) {
    const auto& c = n[key];
    const int fwd = c[0], full = c[1], dx = c[2], dw = c[3];
    // Replicated stages: a micro-batch runs through its own copy of the pipeline only.
    if (!s.runs_through(static_cast<int>(key / M), static_cast<int>(key % M))) {
      if (fwd + full + dx + dw != 0) return false;
      continue;
    }
    if (fwd != 1 || full + dx != 1 || dx != dw) return false;
  }
  return true;
}

}  // namespace

void check_coverage(const PassInput& in, CheckReport& out) {
  const Schedule& s = in.schedule;
  if (coverage_clean(s)) return;
  // Something is wrong: the full pass below locates and explains it.
  const size_t M = static_cast<size_t>(s.micro_batches);
  // per (stage, micro): counts of F, B, I, W and the first two places of each
  struct Place {
    int32_t rank = -1, index = -1, sub = -1;
  };
  struct Count {
    int32_t n[4] = {0, 0, 0, 0};
    Place where[4][2];  // the first two places of each kind, for the report
  };
  KeyTable<Count> counts(static_cast<uint64_t>(std::max(s.stages, 0)) * M, s.slot_count(), Count{});
  for (int r = 0; r < s.ranks; ++r) {
    const Program& prog = s.programs[static_cast<size_t>(r)];
    for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
      if (!prog[static_cast<size_t>(i)]) continue;
      const Step& top = *prog[static_cast<size_t>(i)];
      auto visit = [&](const Step& st, int sub) {
        const int want = required_rank(s, st);
        if (want != kNone && want != r) {
          Violation v;
          v.kind = ViolationKind::Dependency;
          v.ranks = {r, want};
          v.steps = {step_ref(s, r, i, sub)};
          v.message = misplaced_message(s, st, r, want);
          out.violations.push_back(std::move(v));
          return;
        }
        int k = coverage_slot(st.op);
        if (k < 0 || st.stage < 0 || st.stage >= s.stages || st.micro < 0 || st.micro >= s.micro_batches) return;
        Count& c = counts.at(static_cast<uint64_t>(st.stage) * M + static_cast<uint64_t>(st.micro));
        if (c.n[k] < 2) c.where[k][c.n[k]] = {r, i, sub};
        c.n[k]++;
      };
      if (is_composite(top.op)) {
        for (int k = 0; k < static_cast<int>(top.sub_steps().size()); ++k) visit(top.sub_steps()[static_cast<size_t>(k)], k);
      } else {
        visit(top, -1);
      }
    }
  }
  // A schedule with far fewer steps than the (stage, micro) pairs it declares (stages = micro
  // = 2^20 and one step) misses most pairs; walking them all (2^40) would take time in
  // proportion to the declared counts, not to the input. Past 2^24 pairs beyond what the
  // steps could cover, one summary names the first missing pair instead.
  const uint64_t pairs = static_cast<uint64_t>(std::max(s.stages, 0)) * M;
  if (pairs > 16 * static_cast<uint64_t>(s.slot_count()) + (uint64_t{1} << 24)) {
    uint64_t first = 0;
    while (first < pairs && counts.get(first).n[0] > 0) ++first;
    const int st = static_cast<int>(first / M), mi = static_cast<int>(first % M);
    Violation v;
    v.kind = ViolationKind::Dependency;
    v.ranks = {s.rank_of(st)};
    v.message = "The schedule declares " + std::to_string(s.stages) + " stages x " + std::to_string(M) +
                " micro-batches = " + std::to_string(pairs) + " (stage, micro) pairs but holds only " +
                std::to_string(s.slot_count()) + " slots, so most pairs have no FWD and no backward (the first: stage " +
                std::to_string(st) + ", micro-batch " + std::to_string(mi) +
                "): every (stage, micro) needs exactly one FWD and one full backward (BWD, or BWD_INPUT then "
                "BWD_WEIGHT).";
    out.violations.push_back(std::move(v));
    return;
  }
  // Group the findings per stage and problem so a big schedule gives a short report.
  for (int st = 0; st < s.stages; ++st) {
    std::map<std::string, std::vector<int>> problems;
    std::map<std::string, std::vector<StepRef>> places;
    for (int mi = 0; mi < s.micro_batches; ++mi) {
      const Count c = counts.get(static_cast<uint64_t>(st) * M + static_cast<uint64_t>(mi));
      auto note = [&](const std::string& what, std::initializer_list<int> kinds) {
        problems[what].push_back(mi);
        for (int k : kinds)
          for (int j = 0; j < std::min(c.n[k], 2); ++j)
            if (places[what].size() < 6) {
              const Place& p = c.where[k][j];
              places[what].push_back(step_ref(s, p.rank, p.index, p.sub));
            }
      };
      if (!s.runs_through(st, mi)) {
        if (c.n[0] + c.n[1] + c.n[2] + c.n[3] > 0)
          note("steps of a micro-batch of pipe " + std::to_string(s.pipe_of_micro(mi)) +
                   " (micro_pipe), which never runs through this copy (pipe " + std::to_string(s.pipe_of_stage(st)) + ")",
               {0, 1, 2, 3});
        continue;
      }
      if (c.n[0] == 0) note("no FWD", {});
      if (c.n[0] > 1) note("more than one FWD", {0});
      int full = c.n[1], dx = c.n[2], dw = c.n[3];
      if (full + dx == 0) note("no backward (neither BWD nor BWD_INPUT)", {});
      else if (full + dx > 1) note("more than one backward", {1, 2});
      if (dx != dw && full + dx <= 1) note(dx > dw ? "a BWD_INPUT without its BWD_WEIGHT" : "a BWD_WEIGHT without a BWD_INPUT", {2, 3});
      if (full > 0 && dw > 0 && dx == 0) note("both a BWD and a BWD_WEIGHT", {1, 3});
    }
    for (auto& [what, micros] : problems) {
      Violation v;
      v.kind = ViolationKind::Dependency;
      v.ranks = {s.rank_of(st)};
      v.steps = places[what];
      v.message = "Stage " + std::to_string(st) + " (rank " + std::to_string(s.rank_of(st)) + ") has " + what +
                  " for micro-batch" + (micros.size() > 1 ? "es " : " ") + list_micros(micros) +
                  ": every (stage, micro) needs exactly one FWD and one full backward (BWD, or BWD_INPUT then "
                  "BWD_WEIGHT).";
      out.violations.push_back(std::move(v));
    }
  }
}

}  // namespace ppsched
