// How the communication runtime moves a message and shares the host with compute: NCCL on GPUs,
// Gloo on CPUs. Part of the platform: the same schedule on the same links completes at other
// times under another protocol. A cost file's "protocol" section and a model file's read into
// it (platform/platform_file.hpp); `ppsched calibrate` measures it from a run.
#pragma once

#include <optional>

namespace ppsched {

struct Protocol {
  double eager_threshold_bytes = 4.0 * 1024 * 1024;  // NCCL's per-peer buffer
  // false (GPUs): the host launches a compute and goes on posting communication while the
  // stream runs it. true (CPUs, e.g. a Gloo run): the host runs the compute itself, so it
  // posts nothing until the compute has finished.
  bool compute_blocks_host = false;
  // true (GPUs): a posted transfer moves on its own (NCCL's kernels) once both ends are
  // posted. false (a CPU run with one core per rank, e.g. Gloo): the sender's payload goes out
  // when posted, but the receiver's transport thread reads it in only on a free core, which it
  // gets while the receiving rank waits, so a transfer starts at the receiver's first waiting
  // moment.
  bool background_progress = true;
  // background_progress false: what a transfer that waited for its receiver to wait takes on
  // top of its transfer time (the sender, computing, gets its transport thread a core).
  double deferred_start_ms = 0;
  // Unset (NCCL): a rendezvous send completes when its payload has arrived. Set (Gloo): it
  // completes once the transport took the payload, this long after the transfer started (at
  // most at the arrival); the receiver still gets it a transfer time after the start.
  std::optional<double> send_handoff_ms;
};

}  // namespace ppsched
