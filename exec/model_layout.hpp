// How a built-in model is cut into virtual stages and an MPipe tower, as plain numbers.
//
// A model is a list of units, each built from its own seed so any rank can build exactly the
// units it holds and get the same values as the single-process reference:
//   gpt: unit 0 = token + position embedding, units 1..L = pre-norm decoder blocks,
//        unit L+1 = final norm + LM head (+ cross-entropy);
//   mlp: units 0..L-1 = Linear + GELU blocks (the last stage adds an MSE loss);
//   stage modules (--stage-module): unit s = the TorchScript module of stage s, named "stage<s>".
// The units are split over the stages by the planner's rules (workload/layout.hpp), so that a
// run holds what `ppsched simulate` and `calibrate` price: torchtitan's even split (the
// embedding and the head count as one layer each, the first stages take the remainder), or
// --layout (blocks per stage, or Megatron's layout string); the embedding goes to stage 0 and
// the head to the last stage; every stage holds at least one unit. The MPipe tower is the
// first T units of stage 0, which then keeps the rest (at least one unit).
#pragma once

#include <string>
#include <vector>

#include "exec/config.hpp"

namespace ppsched::exec {

struct ModelLayout {
  int stages = 0;
  int units = 0;                               // all units of the model, tower included
  std::vector<std::vector<int>> stage_units;   // per stage, ascending, tower units removed
  std::vector<int> tower_units;                // the first T units of stage 0
  int embedding_unit = -1;                     // gpt: 0
  int head_unit = -1;                          // gpt: L + 1
};

// The blocks a built-in model gets without --layers or --layout: 4, or one per virtual stage
// when the schedule has more, plus what an MPipe tower of T units needs so that stage 0 keeps
// one under the even split.
int default_layers(ModelKind kind, int stages, int tower_layers);

// m.layers = 0 takes default_layers(). Throws InputError when the model cannot be cut this way (fewer blocks than stages, a tower
// that would leave stage 0 empty).
ModelLayout make_layout(const ModelConfig& m, int stages, int tower_layers);

std::string unit_name(const ModelConfig& m, const ModelLayout& l, int unit);

}  // namespace ppsched::exec
