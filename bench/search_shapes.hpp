// The pipeline shapes tune and the partition search evaluate (issue 26 item 4): P 4, 8, 16;
// M = P, 2P, 4P; V 1 and 2: 18 shapes, registered as a benchmark's first three arguments
// (P, M, V), each with every value of a fourth when one is given (threads, a mode).
#pragma once

#include <benchmark/benchmark.h>

#include <initializer_list>
#include <vector>

namespace ppsched::bench {

inline void search_shapes(benchmark::internal::Benchmark* b, std::initializer_list<int> fourth = {}) {
  for (int pp : {4, 8, 16})
    for (int k : {1, 2, 4})
      for (int vpp : {1, 2}) {
        if (fourth.size() == 0) b->Args({pp, k * pp, vpp});
        for (int x : fourth) b->Args({pp, k * pp, vpp, x});
      }
}

}  // namespace ppsched::bench
