// Structural validation shared by every reader and by generator output: fields each step
// type takes (from the step table), ranges of micro / stage / peer / group, composite
// shapes, program count, placement size. Throws the first InputError, located.
// Semantic problems (ordering, matching, caches) are the checkers' business, not this.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "schedule/schedule.hpp"

namespace ppsched {

// The most ranks, stages or micro-batches a schedule may declare. Far above any real
// pipeline, and low enough that a mistyped count in a file is reported instead of sizing
// gigabytes of per-stage tables. Readers check it before they allocate anything by a count.
inline constexpr int32_t kMaxCount = 1 << 20;

// The most stages and ranks a schedule may declare: 2^15, as a Step holds its stage and its
// peer rank in 16 bits (schedule/schedule.hpp: 16 bytes a step). Micro-batches go to kMaxCount.
// A generator takes at most 2^14 ranks (--pp), as DualPipe and Chimera build two stages a rank.
inline constexpr int32_t kMaxStages = 1 << 15;
inline constexpr int32_t kMaxRanks = 1 << 15;
inline constexpr int32_t kMaxGeneratedRanks = kMaxStages / 2;
static_assert(kMaxStages - 1 <= std::numeric_limits<decltype(Step::stage)>::max(), "Step::stage holds a stage");
static_assert(kMaxRanks - 1 <= std::numeric_limits<decltype(Step::peer)>::max(), "Step::peer holds a rank");

// The most stage x micro-batch pairs a generator builds (about six steps each: ~12 million
// steps, a few GB): checked before anything is generated.
inline constexpr int64_t kMaxGeneratedPairs = int64_t{1} << 21;

// The most slots (steps and idle slots, over all ranks) a schedule may hold, read, inserted or
// generated: 2^24. Checking and simulating hold about 48-60 bytes a step (docs/performance.md),
// so the largest schedule needs about a GB; a larger one is refused before any check or
// simulation runs, instead of exhausting the machine (the generators' pair limit stays below).
inline constexpr int64_t kMaxSlots = int64_t{1} << 24;

// The most sub-steps a composite and tensors a P2P step may list: 2^14. The lowering packs a
// message's sub-step and tensor positions (below 2^14) into 15 and 14 bits
// (lowering/comm_model.hpp); a real batch holds a handful (the executor runs at most 63).
inline constexpr int32_t kMaxListed = 1 << 14;

// The largest byte figure a file or flag may give (a message, an activation, a capacity):
// 1 TiB. Sums over a whole schedule (at most ~2^24 steps) then stay far below 2^63.
inline constexpr double kMaxBytes = 1099511627776.0;

// The longest time a file or flag may give: 10^9 ms (11.6 days) per step or link; a
// makespan summed over any schedule stays finite.
inline constexpr double kMaxTimeMs = 1e9;

// The slowest and fastest finite link bandwidth a file may give, in GB/s (null = infinite).
inline constexpr double kMinBandwidthGBps = 1e-6, kMaxBandwidthGBps = 1e9;

// Also checks that Schedule::data_steps agrees with the programs (mark_data_steps).
void validate_structure(const Schedule& s, const std::string& file = "");

// After validate_structure, for readers: the IR keeps no tag that only restates where a step
// runs. Drops the rank in the micro field of a Field::RankTag step (hyper-parallel's
// MPIPE_PARAM_BROADCAST), so the schedule is in the canonical form the generators write.
void drop_rank_tags(Schedule& s);

}  // namespace ppsched
