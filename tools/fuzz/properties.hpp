// The fuzzing properties of ppsched, shared by the RapidCheck tests and `ppsched fuzz`.
// A case is PARAMETERS (family, P, V, M, options, mutations, a cost seed); the schedule is
// built from them deterministically, so shrinking a case always yields a valid schedule.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "schedule/generators/generator.hpp"
#include "lowering/diagnostics.hpp"
#include "schedule/mutations.hpp"

namespace ppsched::fuzz {

enum class Property : uint8_t {
  GeneratedClean,     // every generated schedule verifies clean and its timed simulation completes
  VerdictsAgree,      // replay, static happens-before check and timed simulation agree on deadlock
  MutationsReported,  // a mutation keeps the schedule valid, or is reported with an implied kind
  RoundTrips,         // JSON and CSV round trips are lossless; the simulator is deterministic
  LoweringMatchesReference,  // the lowering's per-rank communication is the reference oracle's, in every mode
  StreamsAgree,  // a family's MoE stream program, mutated (an event wait dropped, an op moved to another
                 // stream): the stream checker's races and deadlocks are brute force's
};
inline constexpr int kProperties = 6;
std::string_view to_string(Property p);
std::optional<Property> property_from_name(std::string_view name);

struct Case {
  std::string family = "1f1b";
  GenerateOptions gen;
  bool batch = false;               // coalesce P2P runs into BATCH_SEND_RECV
  bool multi_tensor = false;        // MPipe and data transfers carry two tensors each
  std::vector<Mutation> mutations;
  uint64_t cost_seed = 0;
};

struct Switches {
  bool planted_bug = false;           // TEST-ONLY: the checker runs with one rule disabled
  bool planted_lowering_bug = false;  // TEST-ONLY: the lowering puts a body meta after its payload
  bool planted_misreport = false;     // TEST-ONLY: mutations-reported reads every deadlock as a p2p_mismatch
  bool planted_deadlock_verdict = false;  // TEST-ONLY: the replay buffers rendezvous sends (misses send-send cycles)
};

struct Limits {
  int pp_max = 6;
  int micro_max = 12;
  int vpp_max = 3;
  int mutations_max = 3;
  std::string family;  // "" = any family
};

// The outcome of one property on one case, with what the case reached (the distributions
// `ppsched fuzz` prints and tests/test_fuzz.cpp asserts).
struct Verdict {
  bool discarded = false;         // the case does not apply (a refused combination, no mutation changed the schedule)
  std::optional<std::string> failure;
  int ranks = 0;                  // P of the built schedule (0: not built)
  bool deadlocks = false;         // it does not complete under rendezvous (verdicts-agree, mutations-reported)
  std::vector<MutationKind> drawn;      // the case's mutation classes
  std::vector<MutationKind> effective;  // those whose edit changed the schedule
  std::vector<std::string> reported;    // mutations-reported: the violation kinds verify() gave (empty: clean)
  // mutations-reported: the classes of the edits judged on their own (each applied alone to the
  // generated schedule and reported with a violation) against their own implied kinds.
  std::vector<MutationKind> judged_alone;
};

Verdict check(Property p, const Case& c, const Switches& sw = {});

// The violation kinds one concrete edit implies when it breaks the schedule (empty: it should
// keep the schedule valid), decided by its class and the steps it touched.
std::set<ViolationKind> implied_kinds(MutationKind k, const MutationOutcome& o);
// mutations-reported's judgement of ONE edit: "" when the kinds reported for the schedule
// with that edit alone include one of the edit's implied kinds, else why not. A report is
// never judged against the pooled kinds of several edits (2-3 edits imply 4-5 of the 6 kinds,
// so a misclassified report would pass).
std::string judge_edit(const Mutation& m, const MutationOutcome& o, const std::vector<ViolationKind>& reported);

// What a run of one property reached: cases kept and discarded, the share of multi-rank and
// of deadlocking cases, and the verdict mix, overall and per mutation class.
struct Distribution {
  struct Mix {
    size_t kept = 0, discarded = 0;
    size_t judged_alone = 0;  // mutations-reported: edits of this class judged on their own kinds
    std::map<std::string, size_t> verdicts;  // "valid", a violation kind, "deadlocks", "completes", "fails"
  };
  size_t cases = 0, discarded = 0, multi_rank = 0, deadlocks = 0;
  Mix all;
  std::map<std::string, Mix> by_mutation;  // by mutation class
  void add(Property p, const Verdict& v);
  size_t kept() const { return cases - discarded; }
  double share(size_t n) const { return kept() ? double(n) / double(kept()) : 0.0; }
  double discard_rate() const { return cases ? double(discarded) / double(cases) : 0.0; }
  std::string summary() const;  // one line: kept, discarded, multi-rank and deadlock shares
};
// Draws a case: `draw(lo, hi)` returns an integer in [lo, hi]. random_case draws from an
// mt19937_64, the RapidCheck suite from RapidCheck's generators (so that it shrinks them);
// both get the same distributions: V only from what the family accepts, mostly P >= 2,
// mutation classes among those that have a target in the schedule, weighted per property.
using Draw = std::function<int(int lo, int hi)>;
Case draw_case(Property p, const Limits& limits, const Draw& draw);
Case random_case(Property p, std::mt19937_64& rng, const Limits& limits);
// Greedy shrinking: smaller P, V, M, fewer and smaller mutations, while the property still fails.
Case shrink(Property p, Case c, const Switches& sw, int* steps = nullptr);
// The schedule a case builds (generator, batch transport, mutations applied).
Schedule build(const Case& c, std::vector<std::string>* applied = nullptr, std::vector<MutationOutcome>* outcomes = nullptr);
// One line that `ppsched fuzz --case` reads back.
std::string encode(const Case& c);
Case decode(const std::string& text);  // throws InputError

}  // namespace ppsched::fuzz
