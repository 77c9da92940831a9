// The fuzzing properties (tools/fuzz/properties.hpp) as RapidCheck properties: RapidCheck
// generates the PARAMETERS of a case and shrinks them, so a counterexample is always a valid,
// minimal schedule. RC_PARAMS raises the budget (default here: 300 cases per property).
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include "model/generators/generator.hpp"
#include "tools/fuzz/properties.hpp"

using namespace ppsched;
using namespace ppsched::fuzz;

namespace {

rc::Gen<Case> gen_case(bool with_mutations) {
  return rc::gen::exec([with_mutations] {
    Case c;
    const auto& all = generators();
    // RapidCheck scales ranges with its size parameter; the family pick uses the full range.
    c.family = std::string(all[static_cast<size_t>(*rc::gen::resize(100, rc::gen::inRange<int>(0, static_cast<int>(all.size()))))].name);
    c.gen.pp = *rc::gen::inRange(1, 6);
    c.gen.vpp = (c.family == "zbv" || c.family == "zbv-greedy" || c.family == "dualpipev") ? 2 : *rc::gen::inRange(1, 4);
    c.gen.micro = *rc::gen::inRange(1, 13);
    if (c.family == "dualpipev") c.gen.micro = std::max(c.gen.micro, 2 * c.gen.pp);
    const int variant = *rc::gen::inRange(0, 4);
    c.gen.less_memory = variant == 1;
    c.gen.overlap_b_f = variant >= 2;
    c.gen.dxdw_split = variant == 3;
    c.gen.overflow = *rc::gen::arbitrary<bool>() ? Overflow::Min : Overflow::Full;
    c.gen.tower = static_cast<Tower>(*rc::gen::inRange(0, 3));
    c.gen.owner_backward = c.gen.tower == Tower::Trainable && *rc::gen::arbitrary<bool>();
    c.batch = *rc::gen::inRange(0, 4) == 0;
    c.cost_seed = *rc::gen::arbitrary<uint32_t>();
    if (with_mutations) {
      const int n = *rc::gen::inRange(1, 4);
      for (int k = 0; k < n; ++k)
        c.mutations.push_back({static_cast<MutationKind>(*rc::gen::resize(100, rc::gen::inRange(0, kMutationKinds))), *rc::gen::inRange(0, 8),
                               *rc::gen::inRange(0, 4096), *rc::gen::inRange(0, 64)});
    }
    return c;
  });
}

void holds(Property p, const Case& c) {
  Verdict v = check(p, c);
  RC_PRE(!v.discarded);
  RC_TAG(c.family);
  if (v.failure) RC_FAIL(*v.failure + "\n  case: " + encode(c));
}

}  // namespace

TEST_CASE("property: every generated schedule verifies clean and its simulation completes", "[fuzz]") {
  rc::prop("generated-clean", [] { holds(Property::GeneratedClean, *gen_case(false)); });
}

TEST_CASE("property: replay, happens-before graph and timed simulation agree on deadlock", "[fuzz]") {
  rc::prop("verdicts-agree", [] { holds(Property::VerdictsAgree, *gen_case(true)); });
}

TEST_CASE("property: every mutation keeps the schedule valid or is reported with an implied kind", "[fuzz]") {
  rc::prop("mutations-reported", [] { holds(Property::MutationsReported, *gen_case(true)); });
}

TEST_CASE("property: file round trips are lossless and the simulator is deterministic", "[fuzz]") {
  rc::prop("round-trips", [] { holds(Property::RoundTrips, *gen_case(false)); });
}

TEST_CASE("a planted checker bug is found and shrunk to a minimal schedule", "[fuzz]") {
  // The checker runs with the "compute before its receive" rule switched off.
  Switches planted;
  planted.planted_bug = true;
  // The seed picks the first failing case. Adding a family (zbv-greedy) changed the stream:
  // from 12345's new first case (gpipe, a swap at position 1502) the shrinker stops at P=2,
  // M=4, since a smaller schedule moves the position onto other steps; from 54321's it
  // reaches the minimum.
  std::mt19937_64 rng(54321);
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
  CHECK(build(small).step_count() <= 12);
  CHECK(!check(Property::MutationsReported, small).failure);  // no bug without the switch
}

TEST_CASE("encoded cases read back", "[fuzz]") {
  std::mt19937_64 rng(7);
  for (int k = 0; k < 200; ++k) {
    Case c = random_case(Property::MutationsReported, rng, Limits{});
    CHECK(encode(decode(encode(c))) == encode(c));
  }
}
