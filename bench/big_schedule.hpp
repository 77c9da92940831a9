// The benchmarks' largest everyday schedule: interleaved 1F1B, P=32 V=4 M=1024 (782,336 steps),
// generated once per program.
#pragma once

#include "schedule/generators/generator.hpp"

namespace ppsched::bench {

inline const Schedule& big_schedule() {
  static const Schedule s = [] {
    GenerateOptions g;
    g.pp = 32;
    g.vpp = 4;
    g.micro = 1024;
    return generate("interleaved-1f1b", g);
  }();
  return s;
}

}  // namespace ppsched::bench
