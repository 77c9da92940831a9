// The clock of a traced iteration (ppsched-exec --trace): host steady clock on CPU, CUDA
// events on torch's current stream on GPU (the steps' kernels and NCCL calls run there, so
// the events bracket what the device did; they are read only after the iteration, off the
// timed path). Times are milliseconds since the epoch start() takes, right after a barrier.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "exec/measured_trace.hpp"

namespace ppsched::exec {

class StepClock {
 public:
  // cuda: time with CUDA events on `device` (needs a CUDA libtorch; else the host clock).
  StepClock(bool cuda, int device);
  ~StepClock();
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;

  void start();  // the epoch: call right after the barrier that opens the iteration
  size_t begin();
  // Records `iv` (its times filled in from the mark to now); returns its index for extend().
  size_t end(size_t mark, TracedInterval iv);
  // Moves the end of recorded interval `index` to now (a posted message's slice runs until
  // the wait that completed it, as in the simulator).
  void extend(size_t index);
  // Every recorded interval with its times (CUDA: waits for the last event first).
  std::vector<TracedInterval> resolve();
  bool cuda() const { return cuda_; }
  // The epoch on this host's monotonic clock, in ns (ranks on one host share that clock).
  int64_t epoch_ns() const { return std::chrono::duration_cast<std::chrono::nanoseconds>(epoch_.time_since_epoch()).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  double host_now_ms() const;

  bool cuda_;
  int device_;
  Clock::time_point epoch_{};
  std::vector<double> host_marks_;  // CPU: mark -> ms since the epoch
  void* epoch_event_ = nullptr;     // CUDA
  std::vector<void*> events_;       // CUDA: mark -> event
  struct Pending {
    TracedInterval iv;
    size_t start, end;
  };
  std::vector<Pending> pending_;
  // --model moe: the compute threads and the comm thread record at once.
  mutable std::mutex mu_;
};

}  // namespace ppsched::exec
