// `ppsched check --suggest`: the smallest edit that makes a broken schedule verify.
//
// An edit is a list of moves, each taking one step out of its rank's program and putting it
// back elsewhere in the same program (nothing is added or removed, so a missing or extra step
// has no fix here). Smallest means fewest moves first, then the least total distance (slots
// travelled). The search is best-first over the steps the violations name (the located steps
// of each deadlock, mismatch and dependency) and their neighbours on the same rank, each
// candidate checked by verify(); a second move is searched from the violations that remain
// after the first. It gives up at `max_moves` moves or when its time budget is spent.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkers/checks.hpp"
#include "schedule/schedule.hpp"

namespace ppsched::search {

struct Move {
  int rank = -1;
  int from = -1;  // index in the program before this move
  int to = -1;    // index of the step in the program after this move
};

struct Repair {
  bool already_ok = false;
  bool found = false;
  std::vector<Move> moves;  // applied in order
  Schedule fixed;           // the schedule after the moves (when found)
  size_t candidates = 0;    // schedules verified
  double seconds = 0;
  bool out_of_time = false;
  std::string why_not;      // when not found: the reason in words
};

// How much slower this build runs the search than an uninstrumented one: AddressSanitizer
// (with UBSan, tools/test-sanitized) makes the suite 2-3x slower, ThreadSanitizer 5-15x. The
// default time budget is scaled by it, so that a sanitized build gives up on no case that the
// plain build repairs in time. (The tests bound the search by candidates verified instead.)
#if defined(__has_feature)
#define PPSCHED_REPAIR_HAS_FEATURE(x) __has_feature(x)
#else
#define PPSCHED_REPAIR_HAS_FEATURE(x) 0
#endif
#if PPSCHED_REPAIR_HAS_FEATURE(thread_sanitizer) || defined(__SANITIZE_THREAD__)
inline constexpr double kBuildSlowdown = 15.0;
#elif PPSCHED_REPAIR_HAS_FEATURE(address_sanitizer) || PPSCHED_REPAIR_HAS_FEATURE(memory_sanitizer) || \
    defined(__SANITIZE_ADDRESS__)
inline constexpr double kBuildSlowdown = 3.0;
#else
inline constexpr double kBuildSlowdown = 1.0;
#endif
#undef PPSCHED_REPAIR_HAS_FEATURE

struct RepairOptions {
  int max_moves = 2;
  double seconds = 1.0 * kBuildSlowdown;  // 1 s on a plain build, scaled under the sanitizers
};

Repair suggest_repair(const Schedule& s, const CheckOptions& check, const RepairOptions& options = {});

// The schedule with `m` applied.
Schedule apply_move(const Schedule& s, const Move& m);

// Before/after lines of the ranks a repair touches, around each moved step.
std::string repair_excerpt(const Schedule& before, const Repair& r, int context = 3);

}  // namespace ppsched::search
