// The fuzzing properties of ppsched, shared by the RapidCheck tests and `ppsched fuzz`.
// A case is PARAMETERS (family, P, V, M, options, mutations, a cost seed); the schedule is
// built from them deterministically, so shrinking a case always yields a valid schedule.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "model/generators/generator.hpp"
#include "model/mutations.hpp"

namespace ppsched::fuzz {

enum class Property : uint8_t {
  GeneratedClean,     // every generated schedule verifies clean and its timed simulation completes
  VerdictsAgree,      // replay, static happens-before check and timed simulation agree on deadlock
  MutationsReported,  // a mutation keeps the schedule valid, or is reported with an implied kind
  RoundTrips,         // JSON and CSV round trips are lossless; the simulator is deterministic
};
inline constexpr int kProperties = 4;
std::string_view to_string(Property p);
std::optional<Property> property_from_name(std::string_view name);

struct Case {
  std::string family = "1f1b";
  GenerateOptions gen;
  bool batch = false;               // coalesce P2P runs into BATCH_SEND_RECV
  std::vector<Mutation> mutations;
  uint64_t cost_seed = 0;
};

struct Switches {
  bool planted_bug = false;  // TEST-ONLY: the checker runs with one rule disabled
};

struct Limits {
  int pp_max = 6;
  int micro_max = 12;
  int vpp_max = 3;
  int mutations_max = 3;
  std::string family;  // "" = any family
};

// The outcome of one property on one case.
struct Verdict {
  bool discarded = false;         // the case does not apply (a refused combination, no mutation applied)
  std::optional<std::string> failure;
};

Verdict check(Property p, const Case& c, const Switches& sw = {});
Case random_case(Property p, std::mt19937_64& rng, const Limits& limits);
// Greedy shrinking: smaller P, V, M, fewer and smaller mutations, while the property still fails.
Case shrink(Property p, Case c, const Switches& sw, int* steps = nullptr);
// The schedule a case builds (generator, batch transport, mutations applied).
Schedule build(const Case& c, std::vector<std::string>* applied = nullptr);
// One line that `ppsched fuzz --case` reads back.
std::string encode(const Case& c);
Case decode(const std::string& text);  // throws InputError

}  // namespace ppsched::fuzz
