// Schedule generators: `ppsched generate NAME --pp P [--vpp V] --micro M [options]`.
// Each family lives in its own file under schedule/generators/ and registers here.
#pragma once

#include <string>
#include <optional>
#include <string_view>
#include <vector>

#include "schedule/schedule.hpp"

namespace ppsched {

struct GenerateOptions {
  int pp = 0;       // pipeline ranks P
  int vpp = 1;      // virtual stages per rank V (stages = P * V)
  int micro = 0;    // micro-batches M
  // interleaved-1f1b (and the MPipe body)
  bool less_memory = false;  // shallow warmup (V-1)*R0 + (P-1-i)
  bool overlap_b_f = false;  // steady pairs become OVERLAP_B_F
  bool dxdw_split = false;   // [B|F] -> [Bi|F] ... Bw (needs overlap_b_f)
  // Megatron-LM's microbatch_group_size_per_vp_stage (interleaved-1f1b only): each chunk runs
  // G consecutive micro-batches before the next chunk's; 0 = hyper-parallel's / PyTorch's rounds.
  int group_size = 0;
  // hyper-parallel's body data steps (DATA_LOAD / DATA_SEND / DATA_RECV riding the forward
  // chain, data_steps.cpp); unset = the family's default (on for mpipe-transpose, as
  // hyper-parallel emits them, off for the others).
  std::optional<bool> data_steps;
  // mpipe-transpose
  Overflow overflow = Overflow::Full;
  Tower tower = Tower::Trainable;
  bool owner_backward = false;
};

struct GeneratorInfo {
  std::string_view name;
  std::string_view summary;      // one line for `ppsched generate --list` and the README
  std::string_view constraints;  // what parameters it accepts, in words
  Schedule (*build)(const GenerateOptions&);
  // The virtual stages per rank it accepts (vpp_max 0: any) and the fewest micro-batches per
  // rank (dualpipev: 2), so that callers (the fuzzer) draw only what the family accepts.
  int vpp_min = 1, vpp_max = 0;
  int micro_per_rank_min = 0;
  bool takes_group_size = false;  // --group-size (Megatron's micro-batch groups)
  // Places hyper-parallel's data steps itself (its reference lays them out); the others get
  // them from add_data_steps when --data-steps is given.
  bool places_data_steps = false;
  // Takes --less-memory, --overlap-b-f, --dxdw-split (the interleaved body's variants).
  bool takes_interleave_options = false;
  // Takes --overflow, --tower, --owner-backward (the MPipe tower).
  bool takes_mpipe_options = false;
};

// Every family, in the order `ppsched generate --list` prints them.
const std::vector<GeneratorInfo>& generators();
const GeneratorInfo* find_generator(std::string_view name);

// Builds a schedule; throws InputError (no location, a clear message) for unknown families
// and invalid parameter combinations.
Schedule generate(std::string_view name, const GenerateOptions& options);

// Family entry points (one file each).
Schedule generate_gpipe(const GenerateOptions&);
Schedule generate_1f1b(const GenerateOptions&);
Schedule generate_interleaved_1f1b(const GenerateOptions&);
Schedule generate_looped_bfs(const GenerateOptions&);
Schedule generate_zb_h1(const GenerateOptions&);
Schedule generate_zbv(const GenerateOptions&);
Schedule generate_zbv_greedy(const GenerateOptions&);
Schedule generate_v_half(const GenerateOptions&);
Schedule generate_v_min(const GenerateOptions&);
Schedule generate_dualpipev(const GenerateOptions&);
Schedule generate_dualpipe(const GenerateOptions&);
Schedule generate_chimera(const GenerateOptions&);
Schedule generate_mpipe_transpose(const GenerateOptions&);
Schedule generate_interleaved_zb(const GenerateOptions&);
Schedule generate_combined_1f1b(const GenerateOptions&);

// PyTorch's per-rank compute order of ScheduleInterleaved1F1B (zero_bubble false: FWD, BWD) or
// ScheduleInterleavedZeroBubble (true: FWD, BWD_INPUT, BWD_WEIGHT), idle slots left out
// (interleaved_zb.cpp restates the rules). M must be a multiple of max(1, M / P).
std::vector<std::vector<Step>> pytorch_interleaved_order(int P, int V, int M, bool zero_bubble);

// PyTorch's FSDP lowering of a generated (or imported) schedule, for a pipeline x data
// parallel job: FSDP_UNSHARD before a stage's compute (prefetching up to max_active_stages
// stages, 3 as in PyTorch), FSDP_RESHARD when a stage leaves that window and after the last
// action, FSDP_REDUCE_GRAD right after a stage's last weight-gradient backward
// (schedule/generators/fsdp_steps.cpp). Throws InputError when the schedule already has FSDP steps.
Schedule add_fsdp_steps(const Schedule& s, int max_active_stages = 3);

// hyper-parallel's body data steps added to a schedule that has its P2P steps (any family):
// DATA_SEND right before each FWD_SEND, DATA_RECV right before each FWD_RECV, a DATA_LOAD right
// before each forward (schedule/generators/data_steps.cpp). Sets Schedule::data_steps.
Schedule add_data_steps(Schedule s);

// Shared helper for family code: refuse with a clear message (throws InputError).
[[noreturn]] void refuse(std::string_view family, const std::string& why);
// The header of a schedule with one stage per rank (stage r on rank r) and no programs yet.
Schedule one_stage_per_rank(std::string name, int ranks, int micro_batches);

}  // namespace ppsched
