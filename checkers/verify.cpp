#include <algorithm>

#include "checkers/checks.hpp"
#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"

namespace ppsched {

// What the lowering itself could not lower (a P2P step without a peer, a bad group).
void check_lowering_problems(const PassInput& in, CheckReport& out) {
  out.violations.insert(out.violations.end(), in.lowering.problems.begin(), in.lowering.problems.end());
}

// Runs after the static passes: it reads what they found.
void check_deadlock(const PassInput& in, CheckReport& out) {
  const CommMode mode = in.options.comm;
  const bool static_comm_problems = std::any_of(out.violations.begin(), out.violations.end(), [](const Violation& v) {
    return v.kind == ViolationKind::P2PMismatch || v.kind == ViolationKind::CollectiveMismatch;
  });
  ReplayResult run = replay(in.schedule, in.lowering, mode);
  out.completes = run.completed;
  if (!run.completed) {
    // The other semantics tells the author whether the schedule leans on send buffering.
    const bool eager_completes = mode == CommMode::Rendezvous && replay(in.schedule, in.lowering, CommMode::Eager).completed;
    // ... and whether the hang comes from NCCL's stream order: the same lowering, each posted
    // operation on its own (as on Gloo).
    bool independent_completes = false;
    if (in.lowering.stream_ordered()) {
      CommModel independent = in.lowering;
      independent.stream_actions.clear();
      independent.stream_entry.clear();
      independent_completes = replay(in.schedule, independent, mode).completed;
    }
    for (auto& d : run.deadlocks) {
      // A stuck set without a cycle is the consequence of an unmatched message or collective
      // the static passes already located.
      if (static_comm_problems && d.cause == DeadlockCause::WaitsOnFinished) continue;
      d.completes_with_eager = eager_completes;
      if (eager_completes)
        d.message += " With eager (buffered) sends the schedule would complete: it relies on buffering, which NCCL "
                     "gives only to small messages, so it hangs once payloads exceed the eager threshold.";
      if (independent_completes)
        d.message += " With each posted operation progressing on its own (Gloo, --p2p-backend gloo) it would complete: "
                     "the cycle runs through operations queued behind others on one NCCL stream. Post each receive before "
                     "the sends whose receives its peer queued behind it, or issue the two as one batch_isend_irecv "
                     "group, which NCCL progresses together.";
      out.violations.push_back(std::move(d));
    }
  } else if (mode == CommMode::Eager) {
    if (!replay(in.schedule, in.lowering, CommMode::Rendezvous).completed)
      out.notes.push_back(
          "relies on buffering: the schedule completes with eager sends but deadlocks under rendezvous (NCCL's "
          "behaviour for messages above its eager threshold); run with --comm rendezvous to see the cycle");
  }
}

const std::vector<Pass>& verification_passes() {
  // In the order their findings are reported; the deadlock pass reads what the others found.
  static const std::vector<Pass> passes = {
      {"coverage", check_coverage},
      {"caches", check_caches},
      {"lowering", check_lowering_problems},
      {"p2p_matching", check_p2p_matching},
      {"collectives", check_collectives},
      {"data_parallel", check_data_parallel},
      {"replicas", check_replicas},
      {"deadlock", check_deadlock},
  };
  return passes;
}

CheckReport verify(const Schedule& s, const CheckOptions& options) {
  return verify(s, options, build_comm_model(s, options));
}

std::string p2p_semantics(const CheckOptions& o, const CommModel& m) {
  std::string out = o.comm == CommMode::Eager
                        ? "eager sends (a send completes once posted)"
                        : "rendezvous sends (a send completes when its receive runs, as NCCL's do above its eager "
                          "threshold)";
  if (!m.posts_without_waiting()) return out + "; every P2P operation waited where it is posted";
  if (o.overlap_p2p)
    out += "; receives posted at their step and waited by their consumer, sends drained at the end (PyTorch's runtime)";
  if (o.mpipe_batched_recv) out += "; MPipe's first feature receive posts every outstanding one";
  return out + (o.backend == P2PBackend::Nccl
                    ? "; a rank's posted operations run in posting order on its NCCL stream (--p2p-backend nccl)"
                    : "; each posted operation progresses on its own (--p2p-backend gloo)");
}

CheckReport verify(const Schedule& s, const CheckOptions& options, const CommModel& model) {
  const PassInput in{s, model, options};
  CheckReport report;
  report.semantics = p2p_semantics(options, model);
  for (const Pass& p : verification_passes()) p.run(in, report);
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

CheckOptions boundary_posting() {
  CheckOptions o;
  o.overlap_p2p = true;
  o.backend = P2PBackend::Gloo;
  return o;
}

Schedule boundary_verified(const Schedule& s, const std::string& family) {
  if (!has_overlap_b_f(s))
    throw InputError({}, family + ": --p2p-transport boundary moves the P2P steps after each OVERLAP_B_F, and this "
                                  "schedule has none (interleaved-1f1b makes them with --overlap-b-f)");
  Schedule moved = attach_boundary_p2p(s);
  CheckReport r = verify(moved, boundary_posting());
  if (!r.ok())
    throw InputError({}, family + ": --p2p-transport boundary does not fit this order (checked with --overlap-p2p --p2p-backend gloo: " +
                             std::string(to_string(r.violations[0].kind)) + ": " + r.violations[0].message.substr(0, 160) +
                             "...); use the plain transport");
  return moved;
}

}  // namespace ppsched
