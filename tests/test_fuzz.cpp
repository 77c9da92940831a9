// The fuzzing properties (tools/fuzz/properties.hpp) as RapidCheck properties: RapidCheck
// generates the PARAMETERS of a case and shrinks them, so a counterexample is always a valid,
// minimal schedule. RC_PARAMS raises the budget (default: 300 cases per property, tests/catch_main.cpp).
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <iostream>
#include <optional>
#include <random>
#include <set>

#include "schedule/generators/generator.hpp"
#include "checkers/checks.hpp"
#include "tools/fuzz/comm_oracle.hpp"
#include "tools/fuzz/properties.hpp"
#include "tests/support/weakened.hpp"

using namespace ppsched;
using namespace ppsched::fuzz;

namespace {

// The case is drawn by the same code as `ppsched fuzz` (draw_case), from RapidCheck's
// generators, so that RapidCheck shrinks every choice. resize(100): the full range from the
// first case on (RapidCheck's size would otherwise keep the early cases at P = 1).
rc::Gen<Case> gen_case(Property p) {
  return rc::gen::exec([p] {
    return draw_case(p, Limits{}, [](int lo, int hi) { return *rc::gen::resize(100, rc::gen::inRange(lo, hi + 1)); });
  });
}

// Runs one property under RapidCheck and checks that its cases reach what it is meant to
// test: under 10 % discarded, at least 85 % of the kept cases with P >= 2, (for the deadlock
// verdicts) at least 30 % deadlocking, and (mutations-reported) at least `min_per_class` kept
// cases and edits judged on their own kinds for every mutation class. Prints the distribution
// with the run.
void run_property(Property p, double min_deadlock_share = 0, size_t min_per_class = 0) {
  Distribution d;
  const bool ok = rc::check(std::string(to_string(p)), [&] {
    const Case c = *gen_case(p);
    const Verdict v = check(p, c);
    d.add(p, v);
    RC_PRE(!v.discarded);
    RC_TAG(c.family);
    if (v.failure) RC_FAIL(*v.failure + "\n  case: " + encode(c));
  });
  REQUIRE(ok);
  std::cout << to_string(p) << ": " << d.summary() << "\n";
  for (const auto& [name, mix] : d.by_mutation) {
    std::cout << "    " << name << ": kept " << mix.kept << ", discarded " << mix.discarded << ", judged alone "
              << mix.judged_alone << ";";
    for (const auto& [verdict, n] : mix.verdicts) std::cout << " " << verdict << " " << n;
    std::cout << "\n";
  }
  INFO(to_string(p) << ": " << d.summary());
  if (d.kept() < 100) {  // a budget lowered through RC_PARAMS: too few cases for shares
    PPSCHED_WEAKENED(to_string(p) << ": " << d.kept() << " kept cases (RC_PARAMS=" << (std::getenv("RC_PARAMS") ? std::getenv("RC_PARAMS") : "")
                                  << "): the discard, multi-rank and deadlock shares are not checked below 100");
    return;
  }
  CHECK(d.discard_rate() < 0.10);
  CHECK(d.share(d.multi_rank) >= 0.85);
  CHECK(d.share(d.deadlocks) >= min_deadlock_share);
  if (min_per_class == 0) return;
  // Scaled to the budget: min_per_class at the default 300 cases, more under a larger RC_PARAMS.
  // Over 20,000 cases (ppsched fuzz --seed 1) the rarest classes got 7 % of the kept cases
  // (reverse-transfer-block, split-batch: ~21 in 300) and 5 edits judged alone in 300 are
  // more than 4 standard deviations below that.
  const size_t floor = min_per_class * d.kept() / 300;
  for (int k = 0; k < kMutationKinds; ++k) {
    const std::string name(to_string(static_cast<MutationKind>(k)));
    const auto it = d.by_mutation.find(name);
    INFO("mutation class " << name);
    REQUIRE(it != d.by_mutation.end());
    CHECK(it->second.kept >= floor);
    CHECK(it->second.judged_alone >= floor);
  }
}

}  // namespace

TEST_CASE("property: every generated schedule verifies clean and its simulation completes", "[fuzz]") {
  run_property(Property::GeneratedClean);
}

TEST_CASE("property: replay, happens-before graph, reference oracle and timed simulation agree on deadlock", "[fuzz]") {
  run_property(Property::VerdictsAgree, 0.30);
}

TEST_CASE("property: every mutation keeps the schedule valid or is reported with a kind its edit implies", "[fuzz]") {
  run_property(Property::MutationsReported, 0, 5);
}

TEST_CASE("property: file round trips are lossless and the simulator is deterministic", "[fuzz]") {
  run_property(Property::RoundTrips);
}

TEST_CASE("property: the lowering's per-rank communication is the reference oracle's in every runtime mode", "[fuzz]") {
  run_property(Property::LoweringMatchesReference);
}

TEST_CASE("a planted lowering bug (a body meta after its payload) is found by the reference oracle and shrunk", "[fuzz]") {
  // The switch moves the FWD meta after its payload on both ends: every channel still
  // matches and nothing deadlocks, so the passes that start from the lowering cannot see it.
  Switches planted;
  planted.planted_lowering_bug = true;
  std::mt19937_64 rng(2024);
  std::optional<Case> found;
  size_t tried = 0;
  for (; tried < 2000 && !found; ++tried) {
    Case c = random_case(Property::LoweringMatchesReference, rng, Limits{});
    Verdict v = check(Property::LoweringMatchesReference, c, planted);
    if (!v.discarded && v.failure) found = c;
  }
  REQUIRE(found);
  CHECK(!check(Property::LoweringMatchesReference, *found).failure);  // the healthy lowering matches
  int steps = 0;
  Case small = shrink(Property::LoweringMatchesReference, *found, planted, &steps);
  INFO("found after " << tried << " cases: " << encode(*found) << "\nshrunk in " << steps << " steps to: " << encode(small));
  Verdict v = check(Property::LoweringMatchesReference, small, planted);
  REQUIRE(v.failure);
  CHECK_THAT(*v.failure, Catch::Contains("send meta to 1") || Catch::Contains("recv meta from 0"));
  // Minimal: two ranks, the fewest micro-batches the drawn family accepts (one, or 2P for
  // dualpipev), no mutation.
  const GeneratorInfo* family = find_generator(small.family);
  REQUIRE(family);
  CHECK(small.gen.pp == 2);
  CHECK(small.gen.micro == std::max(1, family->micro_per_rank_min * small.gen.pp));
  CHECK(small.mutations.empty());
  CHECK(!check(Property::LoweringMatchesReference, small).failure);
  // Blind spots the oracle closes: with the bug, the checks still verify the schedule and
  // the replay, the happens-before graph and the simulation still agree.
  CHECK(!check(Property::GeneratedClean, small, planted).failure);
  CHECK(!check(Property::VerdictsAgree, small, planted).failure);
}

TEST_CASE("a planted checker bug is found and shrunk to a minimal schedule", "[fuzz]") {
  // The checker runs with the "compute before its receive" rule switched off.
  Switches planted;
  planted.planted_bug = true;
  // The seed picks the first failing case. Adding a family (zbv-greedy) changed the stream:
  // from 12345's new first case (gpipe, a swap at position 1502) the shrinker stops at P=2,
  // M=4, since a smaller schedule moves the position onto other steps. Weighting the rare
  // mutation classes changed it again: from 54321's the first case is chimera, whose M must
  // be a multiple of P (the shrinker stops at M=6); from 1's it reaches the minimum.
  std::mt19937_64 rng(1);
  Limits limits;
  std::optional<Case> found;
  size_t tried = 0;
  for (; tried < 20000 && !found; ++tried) {
    Case c = random_case(Property::MutationsReported, rng, limits);
    Verdict v = check(Property::MutationsReported, c, planted);
    if (!v.discarded && v.failure) {
      found = c;
      // The healthy checker reports the same case correctly.
      CHECK(!check(Property::MutationsReported, c).failure);
    }
  }
  REQUIRE(found);
  int steps = 0;
  Case small = shrink(Property::MutationsReported, *found, planted, &steps);
  INFO("found after " << tried << " cases: " << encode(*found) << "\nshrunk in " << steps << " steps to: " << encode(small));
  Verdict v = check(Property::MutationsReported, small, planted);
  REQUIRE(v.failure);
  CHECK_THAT(*v.failure, Catch::Contains("before its"));
  // Minimal: two ranks, one micro-batch, the one mutation that matters.
  CHECK(small.gen.pp == 2);
  CHECK(small.gen.micro == 1);
  REQUIRE(small.mutations.size() == 1);
  CHECK(small.mutations[0].kind == MutationKind::RecvAfterConsumer);
  // ... at the family's fewest virtual stages, the mutation only moving a step.
  CHECK(small.gen.vpp == find_generator(small.family)->vpp_min);
  CHECK(build(small).step_count() == generate(small.family, small.gen).step_count());
  CHECK(!check(Property::MutationsReported, small).failure);  // no bug without the switch
}

TEST_CASE("multi-tensor MPipe transfers are lowered as meta-payload pairs, in channel order, in every mode", "[fuzz]") {
  // Found by lowering-matches-reference: a single step posted all its tensors' metas, then
  // all payloads, while the channel positions (and the reference, hyper_parallel.md §3.3)
  // take them as pairs; the replay and the matcher, which read positions, could not see it.
  Case c = decode("family=mpipe-transpose pp=2 vpp=1 micro=2 overflow=full tower=none multi-tensor");
  const Schedule s = build(c);
  for (int mode = 0; mode < 8; ++mode) {
    CheckOptions o;
    o.overlap_p2p = mode & 1;
    o.dyn_shape = mode & 2;
    o.mpipe_batched_recv = mode & 4;
    INFO("mode " << mode);
    const CommModel m = build_comm_model(s, o);
    CHECK(oracle::posting_order(s, m) == "");
    CHECK(oracle::first_difference(s, oracle::reference_comm(s, o), oracle::lowered_comm(s, m)) == "");
    CHECK(verify(s, o).ok());
  }
  CHECK(!check(Property::LoweringMatchesReference, c).failure);
  CHECK(!check(Property::VerdictsAgree, c).failure);
}

TEST_CASE("encoded cases read back", "[fuzz]") {
  std::mt19937_64 rng(7);
  for (int k = 0; k < 200; ++k) {
    Case c = random_case(Property::MutationsReported, rng, Limits{});
    CHECK(encode(decode(encode(c))) == encode(c));
  }
}

TEST_CASE("mutations-reported judges each edit by its own kinds: a misclassified report fails it even where "
          "another edit of the case implies the reported kind", "[fuzz]") {
  // One edit, judged directly: a receive hoisted above the send before it is a deadlock.
  GenerateOptions g;
  g.pp = 2;
  g.micro = 2;
  Schedule s = generate("1f1b", g);
  std::optional<MutationOutcome> hoisted;
  Mutation m{MutationKind::RecvBeforeSend, 0, 0, 0};
  for (int at = 0; at < 16 && !hoisted; ++at) {
    Mutation t{MutationKind::RecvBeforeSend, at % 2, at / 2, 0};
    Schedule x = s;
    MutationOutcome o = apply_mutation(x, t);
    if (o.applied && !verify(x).completes) hoisted = o, s = x, m = t;
  }
  REQUIRE(hoisted);
  std::vector<ViolationKind> got;
  for (const auto& v : verify(s).violations) got.push_back(v.kind);
  CHECK(judge_edit(m, *hoisted, got) == "");
  CHECK_THAT(judge_edit(m, *hoisted, {ViolationKind::P2PMismatch}),
             Catch::Contains("alone was reported only as p2p_mismatch, none of the kinds it implies (deadlock)"));
  // Pooled with a reversed transfer block (p2p_mismatch or deadlock), the same misreport would pass.
  CHECK(implied_kinds(MutationKind::ReverseTransferBlock, MutationOutcome{}).count(ViolationKind::P2PMismatch) == 1);

  // The planted misreport switch (every deadlock read as a p2p_mismatch) on random cases: caught,
  // and caught on a case whose edits together imply p2p_mismatch (the pooled judgement passes it).
  Switches planted;
  planted.planted_misreport = true;
  std::mt19937_64 rng(31337);
  size_t tried = 0, caught = 0, pooled_blind = 0;
  for (; tried < 4000 && pooled_blind == 0; ++tried) {
    const Case c = random_case(Property::MutationsReported, rng, Limits{});
    const Verdict v = check(Property::MutationsReported, c, planted);
    if (v.discarded || !v.failure) continue;
    ++caught;
    CHECK_FALSE(check(Property::MutationsReported, c).failure);  // the healthy report passes
    std::vector<MutationOutcome> outcomes;
    const Schedule x = build(c, nullptr, &outcomes);
    std::set<ViolationKind> pooled;
    for (size_t k = 0; k < outcomes.size(); ++k)
      if (outcomes[k].applied) {
        const auto kinds = implied_kinds(c.mutations[k].kind, outcomes[k]);
        pooled.insert(kinds.begin(), kinds.end());
      }
    bool passes_pooled = false;
    for (const auto& viol : verify(x).violations)
      passes_pooled = passes_pooled || pooled.count(viol.kind == ViolationKind::Deadlock ? ViolationKind::P2PMismatch : viol.kind);
    if (passes_pooled) {
      ++pooled_blind;
      INFO(encode(c) << ": " << *v.failure);
      CHECK_THAT(*v.failure, Catch::Contains("alone was reported only as"));
    }
  }
  INFO("tried " << tried << ", caught " << caught);
  CHECK(caught > 0);
  CHECK(pooled_blind > 0);
}

TEST_CASE("property: a family's MoE stream program, mutated, gets brute force's races and deadlock verdict", "[fuzz]") {
  // Stream edits: an event wait dropped, an op moved to another stream. At least a fifth of the
  // kept cases end with a violation (most edits that matter move an all-to-all off the comm
  // stream or drop the wait that orders it).
  run_property(Property::StreamsAgree, 0.20);
}
