#include "tools/fuzz/properties.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "checkers/checks.hpp"
#include "checkers/oracles.hpp"
#include "lowering/stream_program.hpp"
#include "schedule/text_format.hpp"
#include "tools/fuzz/comm_oracle.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/pytorch_csv.hpp"
#include "schedule/formats/schedule_json.hpp"
#include "sim/engine.hpp"
#include "traces/chrome_trace.hpp"

namespace ppsched::fuzz {
namespace {

// What a step is to the checks: a transfer (P2P or batch), a pipeline collective, a step with
// cache effects (compute, local, composite compute), or inert (data-parallel collectives,
// which no pipeline rank waits on and no cache tracks).
enum class Role { Transfer, Collective, Compute, Inert };
Role role(const Step& st) {
  const auto& i = info(st.op);
  if (is_p2p(st.op) || i.composite == CompositeKind::Batch) return Role::Transfer;
  if (i.kind == StepKind::Collective) return i.collective == CollectiveScope::DataParallel ? Role::Inert : Role::Collective;
  if (i.kind == StepKind::Compute || i.kind == StepKind::Composite) return Role::Compute;
  return i.effects.empty() ? Role::Inert : Role::Compute;
}

// The violation kinds one concrete edit implies when it breaks the schedule: what the steps it
// touched were decides (a dropped send: an unmatched message or a deadlock; a dropped forward:
// a missing FWD or a cache entry never produced; ...).
std::set<ViolationKind> implied(MutationKind k, const MutationOutcome& o) {
  using V = ViolationKind;
  auto by_role = [](Role r) -> std::set<ViolationKind> {
    switch (r) {
      case Role::Transfer: return {V::P2PMismatch, V::Deadlock};
      case Role::Collective: return {V::CollectiveMismatch, V::Deadlock};
      case Role::Compute: return {V::Dependency, V::CacheViolation};
      case Role::Inert: return {};
    }
    return {};
  };
  switch (k) {
    case MutationKind::RecvAfterConsumer: return {V::Dependency};
    case MutationKind::RecvBeforeSend: return {V::Deadlock};
    case MutationKind::ReverseTransferBlock: return {V::P2PMismatch, V::Deadlock};
    case MutationKind::SplitBatch: return {V::P2PMismatch};
    case MutationKind::RemoveCollective: return {V::CollectiveMismatch, V::Deadlock};
    case MutationKind::ChangePayloadShape: return {V::P2PMismatch};
    case MutationKind::ChangeMicro: {
      // A transfer now names another micro-batch: the channel disagrees, or the consumer of
      // the old micro misses its input; a compute step: coverage and caches.
      if (o.touched.empty()) return {};
      auto out = by_role(role(o.touched[0]));
      if (role(o.touched[0]) == Role::Transfer) return {V::P2PMismatch, V::Dependency, V::CacheViolation};
      return out;
    }
    case MutationKind::DropStep:
    case MutationKind::DuplicateStep:
      return o.touched.empty() ? std::set<ViolationKind>{} : by_role(role(o.touched[0]));
    case MutationKind::SwapAdjacent: {
      // Two steps changed order. With a compute step involved, one may now run before its
      // input or a send before its producer; between two communication steps, the ranks'
      // posting order changed: a drifted channel, a collective order, or a wait-for cycle.
      if (o.touched.size() != 2) return {};
      Role a = role(o.touched[0]), b = role(o.touched[1]);
      if (a == Role::Inert || b == Role::Inert) return {};
      if (a == Role::Compute || b == Role::Compute) return {V::Dependency, V::CacheViolation};
      return {V::Deadlock, V::P2PMismatch, V::CollectiveMismatch};
    }
  }
  return {};
}

// A random but reproducible cost model: per-stage times, latency and bandwidth. Payloads all
// rendezvous (eager threshold below zero) so timing can be held against the strict verdict.
CostModel random_costs(uint64_t seed, int stages) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> t(0.1, 5.0), lat(0.0, 0.5), bw(1.0, 500.0);
  CostModel c;
  c.source = "fuzz seed " + std::to_string(seed);
  c.fwd.given = c.bwd.given = c.bwd_input.given = c.bwd_weight.given = true;
  for (int s = 0; s < stages; ++s) {
    double f = t(rng), b = t(rng);
    c.fwd.rows.push_back({f});
    c.bwd.rows.push_back({b});
    c.bwd_input.rows.push_back({b / 2});
    c.bwd_weight.rows.push_back({b / 2});
  }
  c.tower_fwd = StageValue::scalar(t(rng));
  c.tower_bwd = StageValue::scalar(t(rng));
  c.data_load = StageValue::scalar(t(rng) / 10);
  c.activation_bytes = StageValue::scalar(std::floor(t(rng) * (1 << 20)));
  c.gradient_bytes = c.activation_bytes;
  c.features_bytes = c.data_bytes = c.tower_input_bytes = c.feature_grad_bytes = 1 << 20;
  c.tower_param_bytes = 1 << 24;
  c.links.intra_node.latency_ms = c.links.inter_node.latency_ms = lat(rng);
  c.links.intra_node.bandwidth_GBps = c.links.inter_node.bandwidth_GBps = bw(rng);
  c.protocol.eager_threshold_bytes = -1;
  c.overlap_efficiency = std::uniform_real_distribution<double>(0, 1)(rng);
  return c;
}

std::string kinds(const CheckReport& r) {
  std::string out;
  for (const auto& v : r.violations) out += (out.empty() ? "" : ", ") + std::string(to_string(v.kind));
  return out.empty() ? "none" : out;
}

bool has_batches(const Schedule& s) {
  for (const auto& p : s.programs)
    for (const auto& slot : p)
      if (slot && is_batch(slot->op)) return true;
  return false;
}

}  // namespace

std::string_view to_string(Property p) {
  switch (p) {
    case Property::GeneratedClean: return "generated-clean";
    case Property::VerdictsAgree: return "verdicts-agree";
    case Property::MutationsReported: return "mutations-reported";
    case Property::RoundTrips: return "round-trips";
    case Property::LoweringMatchesReference: return "lowering-matches-reference";
    case Property::StreamsAgree: return "streams-agree";
  }
  return "?";
}

std::set<ViolationKind> implied_kinds(MutationKind k, const MutationOutcome& o) { return implied(k, o); }

std::string judge_edit(const Mutation& m, const MutationOutcome& o, const std::vector<ViolationKind>& reported) {
  const std::set<ViolationKind> want = implied(m.kind, o);
  std::string got, wanted;
  for (ViolationKind k : reported) {
    if (want.count(k)) return "";
    const std::string name(to_string(k));
    if (got.find(name) == std::string::npos) got += (got.empty() ? "" : ", ") + name;
  }
  for (ViolationKind k : want) wanted += (wanted.empty() ? "" : ", ") + std::string(to_string(k));
  return "mutation " + std::string(to_string(m.kind)) + " (" + o.description + ") alone was reported only as " +
         (got.empty() ? "none" : got) + ", none of the kinds it implies (" +
         (wanted.empty() ? "none: it should keep the schedule valid" : wanted) + ")";
}

std::optional<Property> property_from_name(std::string_view name) {
  for (int k = 0; k < kProperties; ++k)
    if (to_string(static_cast<Property>(k)) == name) return static_cast<Property>(k);
  return std::nullopt;
}

namespace {

Schedule base_schedule(const Case& c) {
  Schedule s = generate(c.family, c.gen);
  if (c.batch) s = coalesce_verified(s, c.family);  // as `ppsched generate --batch`
  if (c.multi_tensor) {
    // Every MPipe and data transfer carries two tensors, on both ends (a meta and a payload each).
    auto annotate = [](Step& st) {
      if (is_p2p(st.op) && info(st.op).meta == Meta::EveryStep) st.edit_tensors() = {{{2, 8}, "bf16"}, {{2}, "f32"}};
    };
    for (auto& prog : s.programs)
      for (auto& slot : prog) {
        if (!slot) continue;
        annotate(*slot);
        for (auto& sub : slot->sub_steps_mut()) annotate(sub);
      }
  }
  return s;
}

}  // namespace

Schedule build(const Case& c, std::vector<std::string>* applied, std::vector<MutationOutcome>* outcomes) {
  Schedule s = base_schedule(c);
  for (const auto& m : c.mutations) {
    MutationOutcome o = apply_mutation(s, m);
    if (o.applied && applied) applied->push_back(std::string(to_string(m.kind)) + ": " + o.description);
    if (outcomes) outcomes->push_back(std::move(o));
  }
  return s;
}

namespace {

// What a property judges: the case, its switches and check options, the schedule it builds
// (the mutated one) and the generated one before the mutations, with what each edit did.
struct Judged {
  const Case& c;
  const Switches& sw;
  const CheckOptions& o;
  const Schedule& s;
  const Schedule& base;
  const std::vector<std::string>& applied;
  const std::vector<MutationOutcome>& outcomes;
};

// A generated schedule verifies, and its timed simulation completes.
std::string generated_clean(const Judged& j, Verdict&) {
  const Schedule& s = j.s;
  const CheckOptions& o = j.o;
  CheckReport r = verify(s, o);
  if (!r.ok()) return "a generated schedule has violations: " + kinds(r) + "; first: " + r.violations[0].message;
  SimOptions so;
  so.check = o;
  so.record_trace = false;
  RunRecord sim = simulate(s, default_cost_model(s.stages), so);
  if (!sim.completed) return "the timed simulation of a generated schedule did not complete";
  return "";
}

// The reference oracle derives the communication without the lowering: its run and its
// matching must give the verdicts of the replay, the happens-before graph, the matcher and the
// timed simulation.
std::string verdicts_agree(const Judged& j, Verdict& v) {
  const Schedule& s = j.s;
  const CheckOptions& o = j.o;
  const Case& c = j.c;
  // The reference oracle derives the communication without the lowering: its run and its
  // matching must give the verdicts of the replay and of the matcher.
  const oracle::RankComm reference = oracle::reference_comm(s, o);
  {
    CommModel model = build_comm_model(s, o);
    CheckReport matched;
    check_p2p_matching(PassInput{s, model, o}, matched);
    std::vector<Violation>& p2p = matched.violations;
    for (const auto& pr : model.problems)
      if (pr.kind == ViolationKind::P2PMismatch) p2p.push_back(pr);
    std::string why = oracle::matching(s, reference);
    if (why.empty() != p2p.empty())
      return p2p.empty() ? "the matcher accepts every channel, but the reference oracle finds: " + why
                              : "the matcher reports " + p2p[0].message + " but the reference oracle matches every channel";
  }
  for (CommMode mode : {CommMode::Rendezvous, CommMode::Eager}) {
    CheckOptions mo = o;
    mo.comm = mode;
    CommModel model = build_comm_model(s, mo);
    bool replayed = replay(s, model, mode).completed;
    bool graph = static_deadlock_free(model, mode);
    if (mode == CommMode::Rendezvous) v.deadlocks = !replayed;
    if (replayed != graph)
      return std::string("under ") + (mode == CommMode::Eager ? "eager" : "rendezvous") + " the replay says " +
                  (replayed ? "completes" : "deadlocks") + " but the happens-before graph says " +
                  (graph ? "completes" : "deadlocks");
    bool referenced = oracle::completes(s, reference, mode);
    if (replayed != referenced)
      return std::string("under ") + (mode == CommMode::Eager ? "eager" : "rendezvous") + " the replay says " +
                  (replayed ? "completes" : "deadlocks") + " but the reference oracle's run " +
                  (referenced ? "completes" : "deadlocks");
    if (mode == CommMode::Rendezvous) {
      SimOptions so;
      so.check = mo;
      so.record_trace = false;
      RunRecord sim = simulate(s, random_costs(c.cost_seed, s.stages), so);
      if (sim.completed != replayed)
        return std::string("timing changed the verdict: the replay ") + (replayed ? "completes" : "deadlocks") +
                    ", the timed simulation " + (sim.completed ? "completes" : "stops");
    }
  }
  return "";
}

// A mutated schedule is reported by a kind its edits imply, or, when verified, the independent
// oracles and the simulation agree; then each edit is judged alone.
std::string mutations_reported(const Judged& j, Verdict& v) {
  const Schedule& s = j.s;
  const CheckOptions& o = j.o;
  const Case& c = j.c;
  const Switches& sw = j.sw;
  const Schedule& base = j.base;
  const std::vector<std::string>& applied = j.applied;
  const std::vector<MutationOutcome>& outcomes = j.outcomes;
  if (v.effective.empty()) {
    v.discarded = true;  // no mutation changed the schedule: nothing to judge
    return "";
  }
  auto report_of = [&](const Schedule& x) {
    CheckReport r = verify(x, o);
    if (sw.planted_misreport)
      for (auto& viol : r.violations)
        if (viol.kind == ViolationKind::Deadlock) viol.kind = ViolationKind::P2PMismatch;
    return r;
  };
  // Claimed valid: the independent oracles and the simulation must agree ("" when they do).
  auto disagreement = [&](const Schedule& x) -> std::string {
    std::string why = oracle::check_compute_coverage(x);
    if (why.empty()) why = oracle::check_send_recv_placement(x);
    if (why.empty() && !has_batches(x)) why = oracle::rendezvous_replay(x);
    if (why.empty()) {
      const oracle::RankComm reference = oracle::reference_comm(x, o);
      why = oracle::matching(x, reference);
      if (why.empty() && !oracle::completes(x, reference, CommMode::Rendezvous))
        why = "its communication does not complete under rendezvous";
    }
    if (!why.empty()) return "the reference oracle finds: " + why;
    SimOptions so;
    so.check = o;
    so.record_trace = false;
    if (!simulate(x, default_cost_model(x.stages), so).completed) return "its simulation does not complete";
    return "";
  };
  CheckReport r = report_of(s);
  for (const auto& viol : r.violations) {
    std::string k(to_string(viol.kind));
    if (std::find(v.reported.begin(), v.reported.end(), k) == v.reported.end()) v.reported.push_back(k);
    if (viol.kind == ViolationKind::Deadlock) v.deadlocks = true;
  }
  if (r.ok()) {
    const std::string why = disagreement(s);
    if (!why.empty()) return "the checks verified the mutated schedule, but " + why;
  } else {
    // The edits together: some reported kind is one that one of them implies (their
    // interplay: a transfer dropped on both ends, an edit masking another).
    std::set<ViolationKind> want;
    for (size_t k = 0; k < outcomes.size(); ++k) {
      if (!outcomes[k].applied) continue;
      auto kinds = implied(c.mutations[k].kind, outcomes[k]);
      want.insert(kinds.begin(), kinds.end());
      // A transfer dropped (or duplicated) on both ends keeps its channel matched: what is
      // left is the caches of the steps around it (an output never sent, an input never
      // received).
      const MutationKind mk = c.mutations[k].kind;
      if ((mk == MutationKind::DropStep || mk == MutationKind::DuplicateStep) && !outcomes[k].touched.empty() &&
          is_p2p(outcomes[k].touched[0].op)) {
        const Step& x = outcomes[k].touched[0];
        for (size_t j = 0; j < outcomes.size(); ++j)
          if (j != k && outcomes[j].applied && c.mutations[j].kind == mk)
            for (const Step& y : outcomes[j].touched)
              if (y.op == info(x.op).partner && y.micro == x.micro) want.insert({ViolationKind::Dependency, ViolationKind::CacheViolation});
      }
      // A collective removed from every member of its group leaves nobody waiting: what is
      // left is what it was for (a replicated stage's gradients never synchronised, a
      // dependency). Found by this property once remove-collective was drawn more often; the
      // other member's part may also go by a drop-step (chimera: RSs7 removed on rank 0, its
      // partner RSs3 dropped on rank 3).
      if (mk == MutationKind::RemoveCollective && !outcomes[k].touched.empty()) {
        const Step& x = outcomes[k].touched[0];
        for (size_t j = 0; j < outcomes.size(); ++j)
          if (j != k && outcomes[j].applied &&
              (c.mutations[j].kind == mk || c.mutations[j].kind == MutationKind::DropStep))
            for (const Step& y : outcomes[j].touched)
              if (y.op == x.op) want.insert(ViolationKind::Dependency);
      }
    }
    // Edits that touch the same step (a receive moved after its consumer, then swapped back
    // above it elsewhere) have a net effect neither implies: the report is not attributable,
    // and each edit is judged alone below.
    bool interplay = false;
    for (size_t k = 0; k < outcomes.size() && !interplay; ++k)
      for (size_t j = 0; j < k && !interplay; ++j)
        if (outcomes[k].applied && outcomes[j].applied)
          for (const Step& x : outcomes[k].touched)
            for (const Step& y : outcomes[j].touched)
              interplay = interplay || (x.op == y.op && x.micro == y.micro && x.stage == y.stage);
    bool matched = interplay;
    for (const auto& viol : r.violations) matched = matched || want.count(viol.kind) > 0;
    if (!matched) {
      std::string muts, wanted;
      for (const auto& a : applied) muts += (muts.empty() ? "" : "; ") + a;
      for (auto k : want) wanted += (wanted.empty() ? "" : ", ") + std::string(to_string(k));
      return "mutations (" + muts + ") were reported only as " + kinds(r) + ", none of the kinds their edits imply (" +
                  (wanted.empty() ? "none: the edits should keep the schedule valid" : wanted) + ")";
    }
  }
  // Each edit on its own: applied alone to the generated schedule, judged by its own
  // implied kinds (the pooled kinds above would let a misclassified report pass).
  for (size_t k = 0; k < outcomes.size(); ++k) {
    if (!outcomes[k].applied) continue;
    Schedule alone = base;
    const MutationOutcome once = apply_mutation(alone, c.mutations[k]);
    if (!once.applied) continue;
    const CheckReport ra = c.mutations.size() == 1 ? r : report_of(alone);
    if (ra.ok()) {
      if (c.mutations.size() == 1) continue;  // judged above
      const std::string why = disagreement(alone);
      if (!why.empty())
        return "the checks verified the schedule with " + std::string(to_string(c.mutations[k].kind)) + " (" +
                    once.description + ") alone, but " + why;
      continue;
    }
    std::vector<ViolationKind> got;
    for (const auto& viol : ra.violations) got.push_back(viol.kind);
    const std::string why = judge_edit(c.mutations[k], once, got);
    if (!why.empty()) return why;
    v.judged_alone.push_back(c.mutations[k].kind);
  }
  return "";
}

// Every runtime mode: the lowering's per-rank posts, waits, groups and metas are the
// reference's, and so are the deadlock verdicts under both semantics.
std::string lowering_matches_reference(const Judged& j, Verdict& v) {
  const Schedule& s = j.s;
  const CheckOptions& o = j.o;
  // Every runtime mode: the lowering's per-rank posts, waits, groups and metas are the
  // reference's, and so are the deadlock verdicts under both semantics.
  for (int mode = 0; mode < 8; ++mode) {
    CheckOptions mo = o;
    mo.overlap_p2p = mode & 1;
    mo.dyn_shape = mode & 2;
    mo.mpipe_batched_recv = mode & 4;
    if (mo.mpipe_batched_recv && !s.mpipe) continue;  // the same lowering as without
    std::string name = std::string(mo.overlap_p2p ? " overlap_p2p" : "") + (mo.dyn_shape ? " dyn_shape" : "") +
                       (mo.mpipe_batched_recv ? " mpipe_batched_recv" : "");
    name = name.empty() ? "the default mode" : name.substr(1);
    const CommModel model = build_comm_model(s, mo);
    const oracle::RankComm reference = oracle::reference_comm(s, mo);
    std::string diff = oracle::first_difference(s, reference, oracle::lowered_comm(s, model));
    if (diff.empty()) diff = oracle::posting_order(s, model);
    if (!diff.empty()) return "under " + name + " the lowering differs from the reference: " + diff;
    for (CommMode comm : {CommMode::Rendezvous, CommMode::Eager}) {
      bool replayed = replay(s, model, comm).completed;
      if (mode == 0 && comm == CommMode::Rendezvous) v.deadlocks = !replayed;
      if (replayed != oracle::completes(s, reference, comm))
        return "under " + name + (comm == CommMode::Eager ? ", eager" : ", rendezvous") + " the replay " +
                    (replayed ? "completes" : "deadlocks") + " but the reference run does not";
    }
  }
  return "";
}

// The stream program of the generated schedule on MoE stages (1 or 2 MoE layers a stage, EP 2),
// one step's window a rank (brute force visits every state: 20 ops at most), mutated by 1 to 3
// stream edits drawn from the case's seed: an event wait dropped, an op moved to another stream
// (an existing one or a new one). The checker's races inside a rank must be brute force's
// (every reachable state), and a program it passes must complete in random runs.
std::string streams_agree(const Judged& j, Verdict& v) {
  const Schedule& s = j.base;
  std::mt19937_64 rng(j.c.cost_seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, std::max(lo, hi))(rng); };
  MoeStage stage;
  const int layers = pick(1, 2);
  for (int k = 0; k < layers; ++k) stage.layers.push_back({{0.2f, 0.2f, 0.2f, 0.2f}, {0.2f, 0.2f, 0.2f, 0.2f}, 1e6});
  stage.after = {0.1f, 0.1f, 0.1f, 0.1f};
  StreamLowering l;
  l.ep = 2;
  l.stages.assign(static_cast<size_t>(s.stages), stage);
  StreamProgram p = lower_streams(s, l);
  // The window: per pipeline rank, one step's ops (a merged step where the rank has one), the
  // same step on its EP replicas (r + k P) so that they call the same all-to-alls.
  for (int r = 0; r < s.ranks; ++r) {
    const StreamRank& first = p.ranks[static_cast<size_t>(r)];
    std::vector<int> steps;
    int step = -1;
    for (const auto& o : first.ops) {
      if ((steps.empty() || steps.back() != o.step) && o.kind == StreamOpKind::Collective) steps.push_back(o.step);
      if (o.sub >= 0) step = o.step;  // the last merged step
    }
    if (step < 0 && !steps.empty()) step = steps[static_cast<size_t>(pick(0, static_cast<int>(steps.size()) - 1))];
    for (int k = 0; k < l.ep; ++k) {
      StreamRank& rank = p.ranks[static_cast<size_t>(r + k * s.ranks)];
      std::vector<StreamOp> kept;
      for (const auto& o : rank.ops)
        if (o.step == step) kept.push_back(o);
      rank.ops = std::move(kept);
    }
  }
  const int edits = pick(1, 3);
  for (int e = 0; e < edits; ++e) {
    const int r = pick(0, static_cast<int>(p.ranks.size()) - 1);
    StreamRank& rank = p.ranks[static_cast<size_t>(r)];
    if (rank.ops.empty()) continue;
    // Three edits in four on an all-to-all (the ops whose order the checker judges).
    std::vector<int> comm_ops;
    for (size_t k = 0; k < rank.ops.size(); ++k)
      if (rank.ops[k].kind == StreamOpKind::Collective) comm_ops.push_back(static_cast<int>(k));
    const int i = !comm_ops.empty() && pick(0, 3) != 0 ? comm_ops[static_cast<size_t>(pick(0, static_cast<int>(comm_ops.size()) - 1))]
                                                        : pick(0, static_cast<int>(rank.ops.size()) - 1);
    if (pick(0, 1) == 0 && !rank.ops[static_cast<size_t>(i)].waits.empty())
      drop_wait(p, r, i, pick(0, static_cast<int>(rank.ops[static_cast<size_t>(i)].waits.size()) - 1));
    else
      move_to_stream(p, r, i, pick(-1, static_cast<int>(rank.streams.size()) - 1));
  }
  for (const auto& rank : p.ranks)
    if (rank.ops.size() > 20) return "";  // past what brute force visits (not reached with 2 layers)
  v.ranks = static_cast<int>(p.ranks.size());
  const CheckReport r = verify_streams(p);
  std::set<std::string> races;
  for (const auto& viol : r.violations) {
    v.reported.push_back(std::string(to_string(viol.kind)));
    if (viol.kind != ViolationKind::CollectiveOrderRace || viol.ops.size() != 2 || viol.ops[0].rank != viol.ops[1].rank) continue;
    const StreamOp& o = p.ranks[static_cast<size_t>(viol.ops[0].rank)].ops[static_cast<size_t>(viol.ops[0].op)];
    for (int rank : viol.ranks) races.insert("rank " + std::to_string(rank) + ": communicator " + p.comms[static_cast<size_t>(o.comm)].name);
  }
  const auto brute = oracle::stream_races(p);
  if (std::vector<std::string>(races.begin(), races.end()) != brute) {
    std::string a, b;
    for (const auto& x : races) a += (a.empty() ? "" : "; ") + x;
    for (const auto& x : brute) b += (b.empty() ? "" : "; ") + x;
    return "the stream checker finds races on [" + a + "], brute force on [" + b + "]";
  }
  v.deadlocks = !r.completes;
  if (r.ok())
    for (unsigned seed = 0; seed < 3; ++seed)
      if (!oracle::stream_run_completes(p, seed)) return "the stream checker passes a program that a random run does not complete";
  return "";
}

// The JSON and CSV writers read back equal; two simulations of one input trace the same.
std::string round_trips(const Judged& j, Verdict&) {
  const Schedule& s = j.s;
  const Case& c = j.c;
  Schedule back = read_schedule_json(write_schedule_json(s), "roundtrip.json");
  if (!(back == s)) return "JSON round trip changed the schedule";
  if (!s.mpipe && s.pipes == 1) {  // PyTorch CSV holds neither the MPipe layer nor replicated stages
    Schedule csv = read_pytorch_csv(write_pytorch_csv(s, CsvKind::ComputeComms), "roundtrip.csv");
    csv.name = s.name;
    // A CSV carries no placement kind: where the loop and V maps coincide (one rank, or
    // one stage per rank) only the stage-to-rank map can survive. Idle slots are not
    // written (PyTorch's compute_comms loader refuses blank cells): every step must come
    // back, in order.
    auto steps_only = [](std::vector<Program> programs) {
      for (Program& p : programs) p.erase(std::remove(p.begin(), p.end(), Slot{}), p.end());
      return programs;
    };
    if (!(csv.programs == steps_only(s.programs)) || csv.placement.stage_to_rank != s.placement.stage_to_rank)
      return "CSV round trip changed the programs or the placement";
  }
  CostModel costs = random_costs(c.cost_seed, s.stages);
  RunRecord a = simulate(s, costs), b = simulate(s, costs);
  if (chrome_trace_json(s, a) != chrome_trace_json(s, b)) return "two simulations of the same input wrote different traces";
  return "";
}

}  // namespace

Verdict check(Property p, const Case& c, const Switches& sw) {
  Verdict v;
  Schedule s, base;
  std::vector<std::string> applied;
  std::vector<MutationOutcome> outcomes;
  for (const auto& m : c.mutations) v.drawn.push_back(m.kind);
  try {
    base = base_schedule(c);
    s = build(c, &applied, &outcomes);
  } catch (const InputError&) {
    v.discarded = true;  // a combination the family refuses
    return v;
  }
  v.ranks = s.ranks;
  for (size_t k = 0; k < outcomes.size(); ++k)
    if (outcomes[k].applied) v.effective.push_back(c.mutations[k].kind);
  // Edits that undid each other (a swap and its reverse) changed nothing in the end.
  if (!c.mutations.empty() && s == base) v.effective.clear();
  CheckOptions o;
  o.testing_disable_recv_rule = sw.planted_bug;
  o.testing_meta_after_payload = sw.planted_lowering_bug;
  o.testing_replay_buffers_sends = sw.planted_deadlock_verdict;
  const Judged j{c, sw, o, s, base, applied, outcomes};
  std::string why;
  switch (p) {
    case Property::GeneratedClean: why = generated_clean(j, v); break;
    case Property::VerdictsAgree: why = verdicts_agree(j, v); break;
    case Property::MutationsReported: why = mutations_reported(j, v); break;
    case Property::LoweringMatchesReference: why = lowering_matches_reference(j, v); break;
    case Property::RoundTrips: why = round_trips(j, v); break;
    case Property::StreamsAgree: why = streams_agree(j, v); break;
  }
  if (!why.empty()) v.failure = why;
  return v;
}

namespace {

// How often each mutation class is drawn, among those that have a target in the schedule.
// mutations-reported leans on the classes that seldom have a target; verdicts-agree leans on the edits that can make ranks wait for each other (hoisted
// receives, dropped transfers, reversed blocks, removed collectives), so that a good share of
// its cases deadlock and the deadlock verdicts are compared on both answers.
int weight(Property p, MutationKind k) {
  if (p == Property::MutationsReported) {
    // The classes with few targets (a run of transfers to one peer, a batch, a collective: only
    // some families have them) are drawn more where they fit, so that every class gets enough
    // cases judged on its own kinds (tests/test_fuzz.cpp asserts a minimum per class).
    switch (k) {
      case MutationKind::ReverseTransferBlock:
      case MutationKind::SplitBatch:
      case MutationKind::RemoveCollective: return 4;
      default: return 1;
    }
  }
  if (p != Property::VerdictsAgree) return 1;
  switch (k) {
    case MutationKind::RecvBeforeSend: return 5;
    case MutationKind::DropStep: return 3;
    case MutationKind::ReverseTransferBlock: return 2;
    case MutationKind::RemoveCollective: return 2;
    default: return 1;
  }
}

}  // namespace

Case draw_case(Property p, const Limits& limits, const Draw& draw) {
  Case c;
  const auto& all = generators();
  const GeneratorInfo* g = limits.family.empty() ? &all[static_cast<size_t>(draw(0, static_cast<int>(all.size()) - 1))]
                                                 : find_generator(limits.family);
  // streams-agree: mostly the families that merge a forward and a backward in one step (their
  // two chains share the comm stream: where an edit can race), one in four any family.
  const bool overlap_family = p == Property::StreamsAgree && limits.family.empty() && draw(0, 3) != 0;
  if (overlap_family) {
    static const char* const merged[] = {"dualpipev", "dualpipe", "combined-1f1b", "interleaved-1f1b"};
    g = find_generator(merged[draw(0, 3)]);
  }
  if (!g) g = &all[0];
  c.family = std::string(g->name);
  // Mostly P >= 2: a single rank has no communication to check.
  c.gen.pp = limits.pp_max < 2 || draw(0, 15) == 0 ? 1 : draw(2, limits.pp_max);
  c.gen.vpp = draw(g->vpp_min, g->vpp_max ? g->vpp_max : std::max(g->vpp_min, limits.vpp_max));
  const int micro_min = std::max(1, g->micro_per_rank_min * c.gen.pp);
  c.gen.micro = draw(micro_min, std::max(micro_min, limits.micro_max));
  // The bidirectional families take an even P; Chimera M a multiple of P, DualPipe M even.
  if (c.family == "chimera" || c.family == "dualpipe") {
    c.gen.pp += c.gen.pp % 2;
    c.gen.micro = std::max(c.gen.micro, 2 * c.gen.pp);
    c.gen.micro += c.family == "chimera" ? (c.gen.pp - c.gen.micro % c.gen.pp) % c.gen.pp : c.gen.micro % 2;
  }
  // combined-1f1b: Megatron's groups of G = P micro-batches need M a multiple of P; one rank has
  // no virtual stages.
  if (c.family == "combined-1f1b") {
    c.gen.micro += (c.gen.pp - c.gen.micro % c.gen.pp) % c.gen.pp;
    if (c.gen.pp == 1) c.gen.vpp = 1;
  }
  if (c.family == "interleaved-1f1b" && overlap_family) {
    c.gen.overlap_b_f = true;
    c.gen.dxdw_split = draw(0, 1) == 1;
    c.gen.vpp = std::max(c.gen.vpp, 2);
  } else if (c.family == "interleaved-1f1b") {
    int variant = draw(0, 3);
    c.gen.less_memory = variant == 1;
    c.gen.overlap_b_f = variant >= 2;
    c.gen.dxdw_split = variant == 3;
  }
  if (c.family == "mpipe-transpose") {
    c.multi_tensor = draw(0, 2) == 0;
    c.gen.less_memory = draw(0, 3) == 0;
    c.gen.overflow = draw(0, 1) ? Overflow::Min : Overflow::Full;
    c.gen.tower = static_cast<Tower>(draw(0, 2));
    c.gen.owner_backward = c.gen.tower == Tower::Trainable && draw(0, 1);
  }
  c.batch = p != Property::StreamsAgree && draw(0, 3) == 0;
  c.cost_seed = static_cast<uint64_t>(draw(0, 1 << 30));
  Schedule s;
  try {
    s = base_schedule(c);
  } catch (const InputError&) {
    // The batch transport fits only orders whose groups mirror each other (never gpipe's,
    // dualpipev's or MPipe's): such a case uses the plain one.
    if (!c.batch) return c;  // refused: the case is discarded
    c.batch = false;
    try {
      s = base_schedule(c);
    } catch (const InputError&) {
      return c;
    }
  }
  if (p == Property::VerdictsAgree || p == Property::MutationsReported || p == Property::LoweringMatchesReference) {
    const int n = draw(p == Property::VerdictsAgree ? 0 : 1, std::max(1, limits.mutations_max));
    for (int k = 0; k < n; ++k) {
      Mutation m{MutationKind::SwapAdjacent, draw(0, 63), draw(0, 4095), draw(0, 63)};
      // The classes this mutation changes the schedule with, weighted.
      std::vector<std::pair<MutationKind, int>> fits;
      int total = 0;
      for (int kind = 0; kind < kMutationKinds; ++kind) {
        m.kind = static_cast<MutationKind>(kind);
        Schedule trial = s;
        if (!apply_mutation(trial, m).applied) continue;
        total += weight(p, m.kind);
        fits.emplace_back(m.kind, total);
      }
      if (fits.empty()) break;
      const int x = draw(0, total - 1);
      m.kind = std::find_if(fits.begin(), fits.end(), [&](const auto& f) { return x < f.second; })->first;
      apply_mutation(s, m);
      c.mutations.push_back(m);
    }
  }
  return c;
}

Case random_case(Property p, std::mt19937_64& rng, const Limits& limits) {
  return draw_case(p, limits, [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, std::max(lo, hi))(rng); });
}

void Distribution::add(Property p, const Verdict& v) {
  cases++;
  std::vector<std::string> labels;
  if (v.discarded) {
    discarded++;
    all.discarded++;
    for (auto k : v.drawn) by_mutation[std::string(to_string(k))].discarded++;
    return;
  }
  if (v.ranks >= 2) multi_rank++;
  if (v.deadlocks) deadlocks++;
  if (v.failure) labels.push_back("fails");
  else if (p == Property::MutationsReported || p == Property::StreamsAgree)
    labels = v.reported.empty() ? std::vector<std::string>{"valid"} : v.reported;
  else if (p == Property::VerdictsAgree || p == Property::LoweringMatchesReference) labels.push_back(v.deadlocks ? "deadlocks" : "completes");
  else labels.push_back("holds");
  auto count = [&](Mix& m) {
    m.kept++;
    for (const auto& l : labels) m.verdicts[l]++;
  };
  count(all);
  std::set<MutationKind> seen(v.effective.begin(), v.effective.end());
  for (auto k : seen) count(by_mutation[std::string(to_string(k))]);
  for (auto k : v.judged_alone) by_mutation[std::string(to_string(k))].judged_alone++;
}

std::string Distribution::summary() const {
  return format_text("%zu cases, %zu kept, %.1f%% discarded, %.1f%% of kept multi-rank, %.1f%% deadlock", cases, kept(),
                     100 * discard_rate(), 100 * share(multi_rank), 100 * share(deadlocks));
}

Case shrink(Property p, Case c, const Switches& sw, int* steps) {
  auto fails = [&](const Case& x) {
    Verdict v = check(p, x, sw);
    return !v.discarded && v.failure.has_value();
  };
  int n = 0;
  bool progress = true;
  while (progress) {
    progress = false;
    std::vector<Case> candidates;
    auto with = [&](auto&& edit) {
      Case x = c;
      edit(x);
      candidates.push_back(std::move(x));
    };
    for (size_t k = 0; k < c.mutations.size(); ++k) with([&](Case& x) { x.mutations.erase(x.mutations.begin() + static_cast<long>(k)); });
    if (c.gen.pp > 1) with([](Case& x) { x.gen.pp--; });
    if (c.gen.pp > 2) with([](Case& x) { x.gen.pp -= 2; });  // families that take an even P only
    if (c.gen.micro > 1) with([](Case& x) { x.gen.micro--; });
    if (c.gen.micro > 2) with([](Case& x) { x.gen.micro /= 2; });
    if (c.gen.vpp > 1) with([](Case& x) { x.gen.vpp--; });
    if (c.batch) with([](Case& x) { x.batch = false; });
    if (c.multi_tensor) with([](Case& x) { x.multi_tensor = false; });
    if (c.gen.owner_backward) with([](Case& x) { x.gen.owner_backward = false; });
    if (c.gen.dxdw_split || c.gen.overlap_b_f || c.gen.less_memory)
      with([](Case& x) { x.gen.dxdw_split = x.gen.overlap_b_f = x.gen.less_memory = false; });
    for (size_t k = 0; k < c.mutations.size(); ++k) {
      if (c.mutations[k].position > 0) with([&](Case& x) { x.mutations[k].position /= 2; });
      if (c.mutations[k].position > 0) with([&](Case& x) { x.mutations[k].position--; });
      if (c.mutations[k].rank > 0) with([&](Case& x) { x.mutations[k].rank--; });
      if (c.mutations[k].arg > 0) with([&](Case& x) { x.mutations[k].arg = 0; });
    }
    for (auto& x : candidates) {
      if (fails(x)) {
        c = std::move(x);
        progress = true;
        ++n;
        break;
      }
    }
  }
  if (steps) *steps = n;
  return c;
}

std::string encode(const Case& c) {
  std::ostringstream out;
  out << "family=" << c.family << " pp=" << c.gen.pp << " vpp=" << c.gen.vpp << " micro=" << c.gen.micro;
  if (c.gen.less_memory) out << " less-memory";
  if (c.gen.overlap_b_f) out << " overlap-b-f";
  if (c.gen.dxdw_split) out << " dxdw-split";
  if (c.family == "mpipe-transpose")
    out << " overflow=" << to_string(c.gen.overflow) << " tower=" << to_string(c.gen.tower) << (c.gen.owner_backward ? " owner-backward" : "");
  if (c.batch) out << " batch";
  if (c.multi_tensor) out << " multi-tensor";
  out << " cost-seed=" << c.cost_seed;
  for (const auto& m : c.mutations) out << " mutate=" << to_string(m.kind) << ":" << m.rank << ":" << m.position << ":" << m.arg;
  return out.str();
}

Case decode(const std::string& text) {
  Case c;
  std::istringstream in(text);
  std::string tok;
  auto bad = [&](const std::string& why) { throw InputError({}, "--case: " + why + " in '" + tok + "'"); };
  while (in >> tok) {
    auto eq = tok.find('=');
    std::string key = tok.substr(0, eq), val = eq == std::string::npos ? "" : tok.substr(eq + 1);
    try {
      if (key == "family") c.family = val;
      else if (key == "pp") c.gen.pp = std::stoi(val);
      else if (key == "vpp") c.gen.vpp = std::stoi(val);
      else if (key == "micro") c.gen.micro = std::stoi(val);
      else if (key == "less-memory") c.gen.less_memory = true;
      else if (key == "overlap-b-f") c.gen.overlap_b_f = true;
      else if (key == "dxdw-split") c.gen.dxdw_split = true;
      else if (key == "overflow") c.gen.overflow = val == "min" ? Overflow::Min : Overflow::Full;
      else if (key == "tower") c.gen.tower = val == "frozen" ? Tower::Frozen : val == "none" ? Tower::None : Tower::Trainable;
      else if (key == "owner-backward") c.gen.owner_backward = true;
      else if (key == "batch") c.batch = true;
      else if (key == "multi-tensor") c.multi_tensor = true;
      else if (key == "cost-seed") c.cost_seed = std::stoull(val);
      else if (key == "mutate") {
        std::istringstream parts(val);
        std::string name, r, pos, arg;
        std::getline(parts, name, ':');
        std::getline(parts, r, ':');
        std::getline(parts, pos, ':');
        std::getline(parts, arg, ':');
        int kind = -1;
        for (int k = 0; k < kMutationKinds; ++k)
          if (to_string(static_cast<MutationKind>(k)) == name) kind = k;
        if (kind < 0) bad("unknown mutation '" + name + "'");
        c.mutations.push_back({static_cast<MutationKind>(kind), std::stoi(r), std::stoi(pos), std::stoi(arg)});
      } else {
        bad("unknown key '" + key + "'");
      }
    } catch (const std::invalid_argument&) {
      bad("expected a number");
    } catch (const std::out_of_range&) {
      bad("number out of range");
    }
  }
  return c;
}

}  // namespace ppsched::fuzz
