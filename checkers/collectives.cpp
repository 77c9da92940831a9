// Collective order: every member of a group must call the group's collectives in the same
// order (MPI's rule; NCCL issue #239), and every member must reach each of them.
#include "checkers/checks.hpp"

namespace ppsched {

void check_collectives(const PassInput& in, CheckReport& out) {
  const Schedule& s = in.schedule;
  const CommModel& m = in.lowering;
  // calls[group][rank] = call ids in order
  std::vector<std::vector<std::vector<int32_t>>> calls(m.groups.size(),
                                                       std::vector<std::vector<int32_t>>(static_cast<size_t>(s.ranks)));
  for (size_t c = 0; c < m.collective_calls.size(); ++c) {
    const auto& call = m.collective_calls[c];
    calls[static_cast<size_t>(call.group)][static_cast<size_t>(call.rank)].push_back(static_cast<int32_t>(c));
  }
  // "REPLICA_GRAD_SYNC of model stage 3", or the op's name.
  auto what = [](const CollectiveCall& c) {
    std::string out(op_name(c.op));
    if (c.subject >= 0) out += " of model stage " + std::to_string(c.subject);
    return out;
  };
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const auto& group = m.groups[g];
    size_t longest = 0;
    for (int r : group.members) longest = std::max(longest, calls[g][static_cast<size_t>(r)].size());
    out.stats.collectives += longest;
    for (size_t k = 0; k < longest; ++k) {
      // Reference call: the first member that has a k-th call.
      const CollectiveCall* ref = nullptr;
      std::vector<int> missing, differing;
      for (int r : group.members) {
        const auto& seq = calls[g][static_cast<size_t>(r)];
        if (k >= seq.size()) {
          missing.push_back(r);
          continue;
        }
        const auto& call = m.collective_calls[static_cast<size_t>(seq[k])];
        if (!ref) ref = &call;
        else if (call.op != ref->op || call.subject != ref->subject) differing.push_back(r);
      }
      if (missing.empty() && differing.empty()) continue;
      Violation v;
      v.kind = ViolationKind::CollectiveMismatch;
      std::string pos = "collective #" + std::to_string(k + 1) + " of the group " + group.label;
      for (int r : group.members) {
        const auto& seq = calls[g][static_cast<size_t>(r)];
        v.ranks.push_back(r);
        if (k < seq.size()) v.steps.push_back(step_ref(s, r, m.collective_calls[static_cast<size_t>(seq[k])].step_index));
      }
      v.message = "At " + pos + ", rank " + std::to_string(ref->rank) + " calls " + what(*ref) +
                  " (step " + std::to_string(ref->step_index) + ")";
      for (int r : differing) {
        const auto& call = m.collective_calls[static_cast<size_t>(calls[g][static_cast<size_t>(r)][k])];
        v.message += ", rank " + std::to_string(r) + " calls " + what(call) + " (step " +
                     std::to_string(call.step_index) + ")";
      }
      if (!missing.empty()) {
        v.message += "; rank" + std::string(missing.size() > 1 ? "s" : "");
        for (size_t i = 0; i < missing.size(); ++i) v.message += (i ? ", " : " ") + std::to_string(missing[i]);
        v.message += std::string(missing.size() > 1 ? " never reach" : " never reaches") + " it";
      }
      v.message += ". Every member of a group must call the same collectives in the same order, or the ones that "
                   "arrived wait forever (or combine unrelated buffers).";
      out.violations.push_back(std::move(v));
      break;  // later positions of this group are shifted; one report per group
    }
  }
}

}  // namespace ppsched
