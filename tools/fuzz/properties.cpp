#include "tools/fuzz/properties.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "checkers/checks.hpp"
#include "checkers/oracles.hpp"
#include "model/errors.hpp"
#include "model/formats/pytorch_csv.hpp"
#include "model/formats/schedule_json.hpp"
#include "sim/engine.hpp"
#include "traces/chrome_trace.hpp"

namespace ppsched::fuzz {
namespace {

const std::vector<std::string>& families() {
  static const std::vector<std::string> f = [] {
    std::vector<std::string> out;
    for (const auto& g : generators()) out.emplace_back(g.name);
    return out;
  }();
  return f;
}

// The violation kinds a mutation class implies when it breaks the schedule.
std::set<ViolationKind> implied(MutationKind k) {
  using V = ViolationKind;
  switch (k) {
    case MutationKind::RecvAfterConsumer: return {V::Dependency};
    case MutationKind::RecvBeforeSend: return {V::Deadlock};
    case MutationKind::ReverseTransferBlock: return {V::P2PMismatch, V::Deadlock};
    case MutationKind::SplitBatch: return {V::P2PMismatch};
    case MutationKind::RemoveCollective: return {V::CollectiveMismatch, V::Deadlock};
    case MutationKind::ChangePayloadShape: return {V::P2PMismatch};
    case MutationKind::ChangeMicro: return {V::P2PMismatch, V::Dependency, V::CacheViolation, V::Deadlock};
    case MutationKind::SwapAdjacent:
    case MutationKind::DropStep:
    case MutationKind::DuplicateStep:
      return {V::Deadlock, V::P2PMismatch, V::Dependency, V::CacheViolation, V::CollectiveMismatch};
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
  c.intra_node.latency_ms = c.inter_node.latency_ms = lat(rng);
  c.intra_node.bandwidth_GBps = c.inter_node.bandwidth_GBps = bw(rng);
  c.eager_threshold_bytes = -1;
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
  }
  return "?";
}

std::optional<Property> property_from_name(std::string_view name) {
  for (int k = 0; k < kProperties; ++k)
    if (to_string(static_cast<Property>(k)) == name) return static_cast<Property>(k);
  return std::nullopt;
}

Schedule build(const Case& c, std::vector<std::string>* applied) {
  Schedule s = generate(c.family, c.gen);
  if (c.batch) s = coalesce_verified(s, c.family);  // as `ppsched generate --batch`
  for (const auto& m : c.mutations) {
    MutationOutcome o = apply_mutation(s, m);
    if (o.applied && applied) applied->push_back(std::string(to_string(m.kind)) + ": " + o.description);
  }
  return s;
}

Verdict check(Property p, const Case& c, const Switches& sw) {
  Verdict v;
  Schedule s;
  std::vector<std::string> applied;
  try {
    s = build(c, &applied);
  } catch (const InputError&) {
    v.discarded = true;  // a combination the family refuses
    return v;
  }
  CheckOptions o;
  o.testing_disable_recv_rule = sw.planted_bug;
  auto fail = [&](const std::string& why) {
    v.failure = why;
    return v;
  };
  switch (p) {
    case Property::GeneratedClean: {
      CheckReport r = verify(s, o);
      if (!r.ok()) return fail("a generated schedule has violations: " + kinds(r) + "; first: " + r.violations[0].message);
      SimOptions so;
      so.check = o;
      so.record_trace = false;
      SimResult sim = simulate(s, default_cost_model(s.stages), so);
      if (!sim.completed) return fail("the timed simulation of a generated schedule did not complete");
      return v;
    }
    case Property::VerdictsAgree: {
      for (CommMode mode : {CommMode::Rendezvous, CommMode::Eager}) {
        CheckOptions mo = o;
        mo.comm = mode;
        CommModel model = build_comm_model(s, mo);
        bool replayed = replay(s, model, mode).completed;
        bool graph = static_deadlock_free(model, mode);
        if (replayed != graph)
          return fail(std::string("under ") + (mode == CommMode::Eager ? "eager" : "rendezvous") + " the replay says " +
                      (replayed ? "completes" : "deadlocks") + " but the happens-before graph says " +
                      (graph ? "completes" : "deadlocks"));
        if (mode == CommMode::Rendezvous) {
          SimOptions so;
          so.check = mo;
          so.record_trace = false;
          SimResult sim = simulate(s, random_costs(c.cost_seed, s.stages), so);
          if (sim.completed != replayed)
            return fail(std::string("timing changed the verdict: the replay ") + (replayed ? "completes" : "deadlocks") +
                        ", the timed simulation " + (sim.completed ? "completes" : "stops"));
        }
      }
      return v;
    }
    case Property::MutationsReported: {
      if (applied.empty()) {
        v.discarded = true;
        return v;
      }
      CheckReport r = verify(s, o);
      if (r.ok()) {
        // Claimed valid: the independent oracles and the simulation must agree.
        std::string why = oracle::check_compute_coverage(s);
        if (why.empty()) why = oracle::check_send_recv_placement(s);
        if (why.empty() && !has_batches(s)) why = oracle::rendezvous_replay(s);
        if (!why.empty()) return fail("the checks verified the mutated schedule, but the reference oracle finds: " + why);
        SimOptions so;
        so.check = o;
        so.record_trace = false;
        if (!simulate(s, default_cost_model(s.stages), so).completed)
          return fail("the checks verified the mutated schedule, but its simulation does not complete");
        return v;
      }
      std::set<ViolationKind> want;
      for (const auto& m : c.mutations) {
        auto k = implied(m.kind);
        want.insert(k.begin(), k.end());
      }
      for (const auto& viol : r.violations)
        if (want.count(viol.kind)) return v;
      std::string muts;
      for (const auto& a : applied) muts += (muts.empty() ? "" : "; ") + a;
      return fail("mutations (" + muts + ") were reported only as " + kinds(r) + ", none of the kinds they imply");
    }
    case Property::RoundTrips: {
      Schedule back = read_schedule_json(write_schedule_json(s), "roundtrip.json");
      if (!(back == s)) return fail("JSON round trip changed the schedule");
      if (!s.mpipe) {
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
          return fail("CSV round trip changed the programs or the placement");
      }
      CostModel costs = random_costs(c.cost_seed, s.stages);
      SimResult a = simulate(s, costs), b = simulate(s, costs);
      if (chrome_trace_json(s, a) != chrome_trace_json(s, b)) return fail("two simulations of the same input wrote different traces");
      return v;
    }
  }
  return v;
}

Case random_case(Property p, std::mt19937_64& rng, const Limits& limits) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, std::max(lo, hi))(rng); };
  Case c;
  c.family = limits.family.empty() ? families()[static_cast<size_t>(uni(0, static_cast<int>(families().size()) - 1))] : limits.family;
  c.gen.pp = uni(1, limits.pp_max);
  c.gen.vpp = (c.family == "zbv" || c.family == "zbv-greedy" || c.family == "dualpipev") ? 2 : (c.family == "gpipe" || c.family == "1f1b" || c.family == "zb-h1") ? 1 : uni(1, limits.vpp_max);
  c.gen.micro = c.family == "dualpipev" ? uni(2 * c.gen.pp, std::max(2 * c.gen.pp, limits.micro_max)) : uni(1, limits.micro_max);
  if (c.family == "interleaved-1f1b") {
    int variant = uni(0, 3);
    c.gen.less_memory = variant == 1;
    c.gen.overlap_b_f = variant >= 2;
    c.gen.dxdw_split = variant == 3;
  }
  if (c.family == "mpipe-transpose") {
    c.gen.overflow = uni(0, 1) ? Overflow::Min : Overflow::Full;
    c.gen.tower = static_cast<Tower>(uni(0, 2));
    c.gen.owner_backward = c.gen.tower == Tower::Trainable && uni(0, 1);
  }
  c.batch = uni(0, 3) == 0;
  c.cost_seed = rng();
  if (p == Property::VerdictsAgree || p == Property::MutationsReported) {
    int n = uni(p == Property::MutationsReported ? 1 : 0, limits.mutations_max);
    for (int k = 0; k < n; ++k)
      c.mutations.push_back({static_cast<MutationKind>(uni(0, kMutationKinds - 1)), uni(0, 64), uni(0, 4096), uni(0, 64)});
  }
  return c;
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
    if (c.gen.micro > 1) with([](Case& x) { x.gen.micro--; });
    if (c.gen.micro > 2) with([](Case& x) { x.gen.micro /= 2; });
    if (c.gen.vpp > 1) with([](Case& x) { x.gen.vpp--; });
    if (c.batch) with([](Case& x) { x.batch = false; });
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
