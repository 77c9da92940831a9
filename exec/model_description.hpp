// A built-in model (exec/models.cpp) as a ppsched-model file (workload/model_file.hpp): one
// explicit layer per unit, named as the executor names them in its traces (otherData.layers:
// "embedding", "block0", ..., "head"), with its parameters, FLOPs per micro-batch and fp32
// activation bytes. `ppsched calibrate TRACE --model FILE` then fits per-layer rates to a
// traced run and predicts other schedules, micro-batch counts and layouts of the same model.
// Torch-free: the figures are closed-form in the model's sizes.
#pragma once

#include <string>
#include <vector>

#include "exec/config.hpp"
#include "workload/workload.hpp"

namespace ppsched::exec {

// The built-in model's layers, unit by unit (gpt: the embedding, `layers` decoder blocks, the
// head; mlp: `layers` blocks), as the network layer the planner reads: names, kinds (which say
// where a layout may put each), parameters, forward FLOPs per micro-batch, fp32 bytes.
std::vector<Layer> builtin_layers(const ModelConfig& m, int layers);

// The built-in model as a model description (a listed network, fp32, SGD): what the executor
// lays out over its stages (workload/layout.hpp workload_layout, the planner's choice) and what
// `--model-out` writes.
Workload builtin_workload(const ModelConfig& m, int layers);

// The model file's text (workload/model_file.hpp write_model). Stage modules (--stage-module)
// have no closed form: InputError.
std::string describe_model(const ModelConfig& m, int layers);

}  // namespace ppsched::exec
