// The manifest of a --stage-module directory (stages.json), read without libtorch so a
// missing or malformed directory is refused by every rank before anything else happens.
//
//   {"format": "ppsched-stage-modules", "version": 1, "stages": 4,
//    "input":  {"shape": [2, 16], "dtype": "float32"},
//    "target": {"shape": [2], "dtype": "int64", "high": 10}}
//
// `input` is what stage 0's forward takes, `target` what the last stage's forward takes as its
// second argument; dim 0 of both is the micro-batch size. Floating tensors are drawn from a
// standard normal, integer ones uniformly from [0, high) ("high" is required for them).
// stage0.pt ... stage<N-1>.pt must exist next to it, and nothing called stage<N>.pt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ppsched::exec {

struct DataSpec {
  std::vector<int64_t> shape;
  std::string dtype;   // float32 | float64 | int64 | int32
  int64_t high = 0;    // integer dtypes: values in [0, high)
  bool is_integer() const { return dtype == "int64" || dtype == "int32"; }
  int64_t numel() const;
};

struct StageModules {
  std::string dir;
  int stages = 0;
  DataSpec input;
  DataSpec target;
  std::string module_path(int stage) const;  // DIR/stage<k>.pt
};

// Throws InputError naming the file and the field at fault.
StageModules read_stage_modules(const std::string& dir);

}  // namespace ppsched::exec
