#include <algorithm>
#include <cstdlib>
#include <string>
#include <stdexcept>

#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"
#include "schedule/validate.hpp"

namespace ppsched {

const std::vector<GeneratorInfo>& generators() {
  static const std::vector<GeneratorInfo> all = {
      {"gpipe", "all forwards, then all backwards (V=1)", "P >= 1, M >= 1", generate_gpipe, 1, 1, 0, false, true},
      {"1f1b", "one-forward-one-backward with P-r warmup forwards (V=1)", "P >= 1, M >= 1",
       generate_1f1b, 1, 1, 0, false, true},
      {"interleaved-1f1b",
       "interleaved 1F1B over V virtual stages per rank (loop placement); "
       "--less-memory, --overlap-b-f, --dxdw-split, --group-size G (Megatron-LM's micro-batch groups)",
       "P >= 1, V >= 1, M >= 1; --group-size: V >= 2, P <= G <= M, M % G = 0 or >= P", generate_interleaved_1f1b,
       1, 0, 0, true, true, true},
      {"looped-bfs", "all forwards of each local stage, then backwards in reverse (loop placement)",
       "P >= 1, V >= 1, M >= 1", generate_looped_bfs},
      {"interleaved-zb",
       "PyTorch's ScheduleInterleavedZeroBubble (ZB1P over V virtual stages per rank, loop placement): "
       "split backward, W from backward op r on",
       "P >= 1, V >= 1, M >= 1 a multiple of max(1, M / P)", generate_interleaved_zb},
      {"zb-h1", "zero bubble H1: split backward, weight gradients delayed into the bubbles (V=1)",
       "P >= 1, M >= 1", generate_zb_h1, 1, 1},
      {"zbv", "zero bubble V (the published ZB-V, PyTorch's ScheduleZBVZeroBubble order): V placement, two stages per rank",
       "P >= 1, V = 2, M >= 1", generate_zbv, 2, 2},
      {"dualpipev", "DualPipeV: V placement, two stages per rank, OVERLAP_F_B in the steady state",
       "P >= 1, V = 2, M >= 2P", generate_dualpipev, 2, 2, 2},
      {"dualpipe",
       "DeepSeek's bidirectional DualPipe: two copies of the pipeline in opposite directions on the same ranks "
       "(replicated stages), OVERLAP_F_B in the steady state, the copies' gradients synced at the end",
       "P >= 2 even, V = 1, M >= 2P even", generate_dualpipe, 1, 1, 2},
      {"chimera",
       "Chimera (SC'21): a down and an up pipeline on the same ranks (replicated stages), units of P/2 "
       "micro-batches, each copy's gradient sync in the first idle slot after its last backward",
       "P >= 2 even, V = 1, M a multiple of P", generate_chimera, 1, 1, 1},
      {"mpipe-transpose",
       "interleaved-1F1B body with the MPipe Transpose tower layer; --overflow full|min, "
       "--tower trainable|frozen|none, --owner-backward",
       "P >= 1, V >= 1, M >= 1", generate_mpipe_transpose, 1, 0, 0, false, true, true, true},
      {"zbv-greedy",
       "ZB-V placement built by ppsched's greedy list scheduler under a 2P memory cap (not the published order)",
       "P >= 1, V = 2, M >= 1", generate_zbv_greedy, 2, 2},
      {"v-half",
       "V-Half (Qi et al., NeurIPS'24, controllable memory): V placement, split backward, about half of 1F1B's "
       "activation memory; sail-sg zbv_greedy.py's order",
       "P >= 1, V = 2, M >= 1", generate_v_half, 2, 2},
      {"v-min",
       "V-Min (Qi et al., NeurIPS'24, controllable memory): V placement, split backward, about a third of 1F1B's "
       "activation memory; sail-sg zbv_greedy.py's order",
       "P >= 1, V = 2, M >= 1", generate_v_min, 2, 2},
      {"combined-1f1b",
       "Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): interleaved 1F1B with one more warm-up "
       "forward, each steady step an OVERLAP_F_B merging a forward and a backward so that one's expert all-to-alls "
       "hide behind the other's compute; --group-size G",
       "P = 1 and V = 1, or P >= 2 and V >= 2; P <= G <= M (G defaults to P), M % G = 0 or >= P",
       generate_combined_1f1b, 2, 0, 1, true},
  };
  return all;
}

const GeneratorInfo* find_generator(std::string_view name) {
  const auto& all = generators();
  auto it = std::find_if(all.begin(), all.end(), [&](const GeneratorInfo& g) { return g.name == name; });
  return it == all.end() ? nullptr : &*it;
}

Schedule one_stage_per_rank(std::string name, int ranks, int micro_batches) {
  Schedule s;
  s.name = std::move(name);
  s.ranks = ranks;
  s.stages = ranks;
  s.micro_batches = micro_batches;
  s.placement = Placement::loop(ranks, ranks);
  return s;
}

void refuse(std::string_view family, const std::string& why) {
  throw InputError({}, std::string(family) + ": " + why);
}

Schedule generate(std::string_view name, const GenerateOptions& options) {
  const GeneratorInfo* g = find_generator(name);
  if (!g) {
    std::string known;
    for (const auto& x : generators()) known += (known.empty() ? "" : ", ") + std::string(x.name);
    throw InputError({}, "unknown schedule family '" + clip(name) + "' (known: " + known + ")");
  }
  if (options.pp < 1) refuse(name, "--pp must be >= 1 (got " + std::to_string(options.pp) + ")");
  if (options.vpp < 1) refuse(name, "--vpp must be >= 1 (got " + std::to_string(options.vpp) + ")");
  if (options.micro < 1) refuse(name, "--micro must be >= 1 (got " + std::to_string(options.micro) + ")");
  // Before anything is built: the counts and the size they imply (README "Limits").
  if (options.pp > kMaxGeneratedRanks)
    refuse(name, "--pp " + std::to_string(options.pp) + " is over the limit of " + std::to_string(kMaxGeneratedRanks) +
                     " ranks (a family may build two stages a rank, and a schedule holds at most " +
                     std::to_string(kMaxStages) + " stages)");
  if (options.vpp > kMaxStages)
    refuse(name, "--vpp " + std::to_string(options.vpp) + " is over the limit of " + std::to_string(kMaxStages) + " stages");
  if (options.micro > kMaxCount)
    refuse(name, "--micro " + std::to_string(options.micro) + " is over the limit of " + std::to_string(kMaxCount));
  const int64_t stages = int64_t{options.pp} * options.vpp;
  if (stages > kMaxStages)
    refuse(name, "--pp x --vpp = " + std::to_string(stages) + " stages is over the limit of " + std::to_string(kMaxStages));
  const int64_t pairs = stages * options.micro;
  // TEST-ONLY: PPSCHED_TESTING_PLANTED_NO_PAIR_LIMIT=1 removes this one limit check, so that
  // the hostile corpus can show it fails when a limit is gone (meson test hostile_planted_limit).
  static const bool planted_no_pair_limit = [] {
    const char* v = std::getenv("PPSCHED_TESTING_PLANTED_NO_PAIR_LIMIT");
    return v && std::string(v) == "1";
  }();
  if (pairs > kMaxGeneratedPairs && !planted_no_pair_limit)
    refuse(name, "stages x micro-batches = " + std::to_string(pairs) + " is over the limit of " +
                     std::to_string(kMaxGeneratedPairs) + " (about 12 million steps)");
  // A flag that does not apply is refused, never ignored.
  auto takers = [](bool GeneratorInfo::*column) {
    std::string names;
    for (const auto& x : generators())
      if (x.*column) names += (names.empty() ? "" : ", ") + std::string(x.name);
    return names;
  };
  if (options.group_size != 0 && !g->takes_group_size)
    refuse(name, "--group-size is Megatron-LM's microbatch_group_size_per_vp_stage; it applies to " +
                     takers(&GeneratorInfo::takes_group_size));
  for (const auto& [given, flag] : {std::pair<bool, const char*>{options.less_memory, "--less-memory"},
                                    {options.overlap_b_f, "--overlap-b-f"},
                                    {options.dxdw_split, "--dxdw-split"}})
    if (given && !g->takes_interleave_options)
      refuse(name, std::string(flag) + " does not apply (it applies to " + takers(&GeneratorInfo::takes_interleave_options) + ")");
  for (const auto& [given, flag] : {std::pair<bool, const char*>{options.overflow != Overflow::Full, "--overflow"},
                                    {options.tower != Tower::Trainable, "--tower"},
                                    {options.owner_backward, "--owner-backward"}})
    if (given && !g->takes_mpipe_options)
      refuse(name, std::string(flag) + " does not apply (it applies to " + takers(&GeneratorInfo::takes_mpipe_options) + ")");
  Schedule s = g->build(options);
  if (options.data_steps.value_or(false) && !g->places_data_steps) s = add_data_steps(std::move(s));
  mark_data_steps(s);
  // Every family honours --data-steps / --no-data-steps (a DATA_LOAD at stage 0 at least;
  // MPipe moves its loads into the prefix, so at P = 1 its body has none).
  if (options.data_steps && *options.data_steps != s.data_steps && !s.mpipe)
    throw std::logic_error(std::string(name) + " ignored --" + (*options.data_steps ? "" : "no-") + "data-steps");
  return s;
}

}  // namespace ppsched
