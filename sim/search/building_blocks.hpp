// Search starts from the building-block framework of Qi, Wan, Amar and Lin, "Pipeline
// Parallelism with Controllable Memory" (NeurIPS'24, §3 and Appendix A), as the authors' own
// search runs it (sail-sg/zero-bubble-pipeline-parallelism, megatron/core/pipeline_parallel/
// zerobubble/scheduler/v_auto_schedule.py, `schedule`; building_blocks.cpp restates its rules).
//
// V placement, two stages per rank. Rank r's block puts its six passes (F, f: the forwards of
// its first and second stage; B, b: the input backwards of its second and first stage; W, w:
// their weight passes) at distinct positions of a 6-slot period. Rank 0's block has F at 0 and
// f, B, b anywhere else; rank r+1's block moves F and B by a uniform offset d (1..5) and f and
// b by -1 (d0 for the first `len0` ranks, d1 <= d0 after); each W (w) takes the first free
// position after its B (b). The block's lifespan fixes the peak memory. The schedule is then:
// the blocks repeated, micro 0 chained through the V, squeezed, warm-up and cool-down
// reorganised by the paper's rules, idle slots filled greedily without raising the peak.
// Every block gives one schedule (or none); its peak and bubble are the reference's measures.
#pragma once

#include <vector>

#include "sim/search/problem.hpp"
#include "sim/search/tune.hpp"

namespace ppsched::search {

struct BlockSchedule {
  int peak = 0;               // live chunk activations, the highest rank's (F, f +1; W, w -1)
  int bubble = 0;             // the highest rank's idle slots after its first (unit slots)
  std::vector<std::string> grid;  // per rank, one char per unit slot: F f B b W w or ' '
  Order order;                // per rank, the grid's passes in slot order (V placement tasks)
};

// Every schedule the reference's enumeration builds for P ranks (P >= 2) and M micro-batches,
// under its default cap of 2P live chunk activations, in its order. Deterministic; cached for
// the last (P, M) asked.
std::vector<BlockSchedule> controllable_memory_schedules(int P, int M);

// The best `keep` of those that run under the problem's caps (by makespan, then span), for a
// split problem on V placement with two stages per rank and P >= 2; none otherwise.
std::vector<Found> building_block_seeds(const Problem& p, size_t keep = 8);

// Our own last step, on the evaluator's timing: sweep the idle gaps of the ranks in time order
// and fill each with the first movable later task of the rank (the next task of each kind and
// stage, nearest first) when the order still runs under the caps and the makespan does not
// grow. Returns the start unchanged when nothing moves.
Found fill_gaps(const Problem& p, const Found& start);

}  // namespace ppsched::search
