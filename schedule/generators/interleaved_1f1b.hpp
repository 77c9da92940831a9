// The interleaved 1F1B body, shared by interleaved-1f1b and mpipe-transpose (reference
// hyper_parallel.md §2.3: MPipe Transpose is a subclass of Interleaved and builds its body
// with the same code, §2.5).
#pragma once

#include "schedule/schedule.hpp"

namespace ppsched::interleaved {

struct BodyOptions {
  bool less_memory = false;  // shallow warmup (V-1)*R0 + (P-1-i)
  bool overlap_b_f = false;  // steady pairs become OVERLAP_B_F composites
  // Megatron-LM's micro-batch groups (microbatch_group_size_per_vp_stage): rounds of G
  // micro-batches, the last one holding the rest; 0 = hyper-parallel's rounds.
  int group_size = 0;
  bool data_steps = false;   // hyper-parallel's body data steps (add_data_steps)
};

// The per-rank compute lists with their idle slots (list index = logical time column),
// loop placement, P*V stages, no P2P steps yet (reference §2.3 steps 1-5).
Schedule compute_order(int ranks, int vpp, int micro, const BodyOptions& options);

// compute_order followed by the column scan (insert_p2p, Alignment::AsGiven; §2.3 step 6)
// and, with data_steps, hyper-parallel's data steps (its add_send_recv emits them in the scan).
Schedule body(int ranks, int vpp, int micro, const BodyOptions& options);

}  // namespace ppsched::interleaved
