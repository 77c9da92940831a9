// Test-side names for the reference oracles (checkers/oracles.hpp).
#pragma once

#include "checkers/oracles.hpp"

namespace ppsched::testing {
using oracle::check_compute_coverage;
using oracle::check_send_recv_placement;
using oracle::joined;
using oracle::labels;
using oracle::rendezvous_replay;
}  // namespace ppsched::testing
