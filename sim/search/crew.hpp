// The one thread crew of `ppsched tune` (sim/search/tune.hpp): the search's long jobs and the
// DES hill climb's short rounds both run on it.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ppsched::search {

// The one thread crew of tune: the caller and threads - 1 helpers. run(n, job) calls job(k,
// worker) for k in [0, n), worker in [0, threads), and returns when every call has; each job
// writes only its own result. It serves both kinds of work: a few long jobs (the list scheduler's
// parameters, the local searches: seconds each) and many short rounds (a DES hill climb's runs of
// ~0.1 ms, shorter than a thread takes to start or to wake from a condition variable here). So
// between rounds a helper spins (about a millisecond) before it sleeps, and the caller, its own
// share done, spins as long for the helpers' last calls, then sleeps until the last one ends.
class Crew {
 public:
  explicit Crew(int threads) {
    for (int w = 1; w < threads; ++w) helpers_.emplace_back([this, w] { serve(w); });
  }
  ~Crew() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (auto& h : helpers_) h.join();
  }
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;

  template <class F>
  void run(size_t n, F&& job) {
    if (helpers_.empty() || n <= 1) {  // the caller alone: no helper to wait for
      for (size_t k = 0; k < n; ++k) job(k, 0);
      return;
    }
    const std::function<void(size_t, int)> f = std::forward<F>(job);
    job_ = &f;  // read by the helpers after they see the new round (release below)
    n_ = n;
    next_.store(0);
    busy_.store(helpers_.size());
    round_.fetch_add(1, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (sleepers_ > 0) wake_.notify_all();
    }
    for (size_t k; (k = next_.fetch_add(1)) < n;) f(k, 0);
    // Short rounds end within the spin; a long job (or a preempted helper) is waited for asleep.
    for (int spin = 0; spin < 2000 && busy_.load(std::memory_order_acquire) > 0; ++spin) relax();
    if (busy_.load(std::memory_order_acquire) > 0) {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [&] { return busy_.load(std::memory_order_acquire) == 0; });
    }
  }

 private:
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
  void serve(int w) {
    uint64_t seen = 0;
    while (true) {
      for (int spin = 0; round_.load(std::memory_order_acquire) == seen && !stop_.load(); ++spin) {
        if (spin < 2000) {
          relax();
          continue;
        }
        if (spin < 4000) {
          std::this_thread::yield();
          continue;
        }
        std::unique_lock<std::mutex> lock(mu_);
        ++sleepers_;
        wake_.wait(lock, [&] { return round_.load() != seen || stop_.load(); });
        --sleepers_;
      }
      if (stop_.load()) return;
      seen = round_.load(std::memory_order_acquire);
      const auto* job = job_;
      const size_t n = n_;
      for (size_t k; (k = next_.fetch_add(1)) < n;) (*job)(k, w);
      if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // The last helper of the round: the caller may be asleep (it checks busy_ under mu_).
        { std::lock_guard<std::mutex> lock(mu_); }
        done_.notify_one();
      }
    }
  }
  std::mutex mu_;
  std::condition_variable wake_, done_;
  int sleepers_ = 0;  // under mu_
  const std::function<void(size_t, int)>* job_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0}, busy_{0};
  std::atomic<uint64_t> round_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> helpers_;
};

// The threads a request asks for: `requested`, or every core when it is 0.
inline int thread_count(int requested) {
  if (requested > 0) return requested;
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

}  // namespace ppsched::search
