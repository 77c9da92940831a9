// The search's random streams: each job seeds its own generator with mix() of the run's seed
// and the job's place in the fixed job list, so what it draws does not depend on the thread
// that runs it or on when (tune's determinism for a seed, sim/search/tune.hpp).
#pragma once

#include <cstdint>

namespace ppsched::search {

inline uint64_t mix(uint64_t x) {  // splitmix64: independent streams from (seed, job)
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace ppsched::search
