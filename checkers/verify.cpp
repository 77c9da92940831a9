#include <algorithm>

#include "checkers/checks.hpp"
#include "model/comm_insertion.hpp"
#include "model/errors.hpp"

namespace ppsched {

CheckReport verify(const Schedule& s, const CheckOptions& options) {
  return verify(s, options, build_comm_model(s, options));
}

CheckReport verify(const Schedule& s, const CheckOptions& options, const CommModel& model) {
  CheckReport report;
  check_coverage(s, report.violations);
  check_caches(s, options, report.violations, report.stats);

  for (auto& v : model.problems) report.violations.push_back(v);
  const size_t before_static = report.violations.size();
  check_p2p_matching(s, model, report.violations, report.stats);
  check_collectives(s, model, report.violations, report.stats);
  const bool static_comm_problems =
      std::any_of(report.violations.begin(), report.violations.end(), [](const Violation& v) {
        return v.kind == ViolationKind::P2PMismatch || v.kind == ViolationKind::CollectiveMismatch;
      });
  (void)before_static;

  ReplayResult run = replay(s, model, options.comm);
  if (!run.completed) {
    // The other semantics tells the author whether the schedule leans on send buffering.
    CommMode other = options.comm == CommMode::Rendezvous ? CommMode::Eager : CommMode::Rendezvous;
    bool eager_completes = options.comm == CommMode::Rendezvous && replay(s, model, other).completed;
    for (auto& d : run.deadlocks) {
      // A stuck set without a cycle is the consequence of an unmatched message or collective
      // the static passes already located.
      if (static_comm_problems && d.message.rfind("Ranks are blocked forever", 0) == 0) continue;
      if (eager_completes)
        d.message += " With eager (buffered) sends the schedule would complete: it relies on buffering, which NCCL "
                     "gives only to small messages, so it hangs once payloads exceed the eager threshold.";
      report.violations.push_back(std::move(d));
    }
  } else if (options.comm == CommMode::Eager) {
    ReplayResult strict = replay(s, model, CommMode::Rendezvous);
    if (!strict.completed)
      report.notes.push_back(
          "relies on buffering: the schedule completes with eager sends but deadlocks under rendezvous (NCCL's "
          "behaviour for messages above its eager threshold); run with --comm rendezvous to see the cycle");
  }
  return report;
}

Schedule coalesce_verified(const Schedule& s, const std::string& family) {
  // The batch transport issues each run of transfers as one group; it only works where both
  // ends of every group mirror each other (hyper-parallel uses it with interleaved orders).
  Schedule batched = coalesce_p2p(s);
  CheckReport r = verify(batched);
  if (!r.ok())
    throw InputError({}, family + ": --batch does not fit this order (" + std::string(to_string(r.violations[0].kind)) +
                             ": " + r.violations[0].message.substr(0, 160) + "...); use the plain transport");
  return batched;
}

}  // namespace ppsched
