// --model moe with --ep > 1: the multi-stream program the run follows (lowering/stream_program.hpp).
// The built-in MoE model's blocks are MoE layers, each with a dispatch and a combine all-to-all
// over the pipeline rank's expert-parallel group; lower_streams puts them on a comm stream in
// Megatron-Core's combined-1F1B order, which ppsched-exec verifies (checkers/stream_order.cpp)
// before anything connects and the link's comm thread then follows (exec/expert_link.hpp).
// Torch-free.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "exec/config.hpp"
#include "exec/model_layout.hpp"
#include "lowering/stream_program.hpp"
#include "schedule/schedule.hpp"

namespace ppsched::exec {

// The four expert all-to-alls of an MoE layer, named as the step table's phases name them
// (StepTypeInfo::moe_phases).
enum class A2aKind : int { DispatchFwd = 0, CombineFwd = 1, DispatchBwd = 2, CombineBwd = 3 };
const char* a2a_name(A2aKind k);  // "dispatch_fwd", "combine_fwd", "dispatch_bwd", "combine_bwd"

// The program of the run: every schedule stage's MoE layers (its blocks), `ep` members per
// pipeline rank. `ready_order` (--moe-a2a-order ready): an overlapped step's second chain issues
// its all-to-alls on a stream of its own, as a runtime that launches whichever all-to-all became
// ready first does; the checker finds the resulting collective_order_race.
StreamProgram moe_stream_program(const Schedule& s, const ModelConfig& m, const ModelLayout& l, bool ready_order);

// Pipeline rank r's all-to-alls per step, in the program's order: (sub-step, kind).
using StepAllToAlls = std::map<int, std::vector<std::pair<int, A2aKind>>>;
StepAllToAlls moe_all_to_alls(const StreamProgram& p, int rank);

}  // namespace ppsched::exec
