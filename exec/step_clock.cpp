#include "exec/step_clock.hpp"

#include "exec/torch_compat.hpp"

namespace ppsched::exec {

StepClock::StepClock(bool cuda, int device) : cuda_(cuda && compat::cuda_timing_available()), device_(device) {}

StepClock::~StepClock() {
  for (void* e : events_) compat::cuda_event_destroy(e);
  if (epoch_event_) compat::cuda_event_destroy(epoch_event_);
}

double StepClock::host_now_ms() const {
  return std::chrono::duration<double, std::milli>(Clock::now() - epoch_).count();
}

void StepClock::start() {
  epoch_ = Clock::now();
  if (cuda_) epoch_event_ = compat::cuda_event_record(device_);
}

size_t StepClock::begin() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cuda_) {
    events_.push_back(compat::cuda_event_record(device_));
    return events_.size() - 1;
  }
  host_marks_.push_back(host_now_ms());
  return host_marks_.size() - 1;
}

size_t StepClock::end(size_t mark, TracedInterval iv) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cuda_) {
    events_.push_back(compat::cuda_event_record(device_));
    pending_.push_back({iv, mark, events_.size() - 1});
    return pending_.size() - 1;
  }
  iv.start_ms = host_marks_[mark];
  iv.end_ms = host_now_ms();
  pending_.push_back({iv, 0, 0});
  return pending_.size() - 1;
}

void StepClock::extend(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  Pending& p = pending_.at(index);
  if (cuda_) {
    events_.push_back(compat::cuda_event_record(device_));
    p.end = events_.size() - 1;
    return;
  }
  p.iv.end_ms = host_now_ms();
}

std::vector<TracedInterval> StepClock::resolve() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TracedInterval> out;
  out.reserve(pending_.size());
  for (auto& p : pending_) {
    if (cuda_) {
      p.iv.start_ms = compat::cuda_event_elapsed_ms(epoch_event_, events_[p.start]);
      p.iv.end_ms = compat::cuda_event_elapsed_ms(epoch_event_, events_[p.end]);
    }
    out.push_back(p.iv);
  }
  return out;
}

}  // namespace ppsched::exec
