// Failure detection across ranks, through the rendezvous store (its own client connection).
//
// A background thread, every 100 ms:
//  - publishes this rank's heartbeat: a counter and its current (iteration, step);
//  - looks for the run's error report (the first rank that fails writes one: which rank, which
//    iteration, step index and step, and why);
//  - every 500 ms reads the other ranks' heartbeats; a rank whose counter has not moved for
//    the heartbeat timeout is declared dead (SIGKILL, OOM, a crash), with its last step;
//  - a store that stops answering means rank 0, which hosts it, is gone.
// On any of these it records the fault (the main thread's poll() throws PeerFailure between
// steps), aborts the transport so blocked waits return, and if the main thread still has not
// ended the process after a grace period, prints the report and exits non-zero itself. So no
// rank hangs on a peer that will never answer: the bound is the heartbeat timeout, or the
// transport timeout for a peer that is alive but stuck.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exec/runtime.hpp"
#include "exec/torch_compat.hpp"

namespace ppsched::exec {

class Watchdog {
 public:
  Watchdog(compat::StorePtr store, int rank, int world_size, const Schedule& schedule, Progress& progress,
           std::chrono::milliseconds heartbeat_timeout, std::function<void()> abort_transport, DeviceMesh mesh = {});
  ~Watchdog();

  void start();
  void stop();  // joins the thread; the rank is marked finished, so no one declares it dead

  // Main thread, between steps: throws PeerFailure when another rank failed.
  void poll() const;
  std::optional<std::string> fault() const;

  // The main thread failed. For a communication failure, waits (at most the heartbeat
  // timeout and a bit) for the report of the rank that caused it; otherwise, or when none
  // comes, publishes `own` as the run's report. Returns the text to print.
  std::string settle_failure(const StepFailure& own);
  // Publishes a report that is not about a step (parity gather, comm-model mismatch).
  void publish(const std::string& report);

  // "rank 1 was last seen at iteration 0, step 4 (F1s1)", following the P2P waits from
  // `peer` through the last heartbeats to the rank that is not waiting on another.
  std::string wait_chain(int peer) const;

  // "iteration 0, step 7 (F3s1)" for the last heartbeat seen from `rank`.
  std::string last_seen(int rank) const;

  // Ranks declared dead (heartbeat) or gone (the store host): rank 0 does not wait for them
  // to leave.
  int dead_count() const;

  // "iteration 0, step 7 (F3s1)" for `rank` (global) at (iteration, step).
  // `collective`: Progress::collective as the rank published it (-1: none).
  std::string describe_progress(int iteration, int step, int rank, int collective = -1) const;

  // Claims the process's one final error line: true for the first caller only.
  static bool claim_final();

 private:
  void loop();
  void declare(const std::string& report, bool publish_it);
  // Where the chain of P2P waits from `peer` ends: that rank (-1 for a cycle), the ranks on
  // the chain (peer first), and wait_chain's words for it. mu_ must be held.
  struct ChainEnd {
    int rank;
    std::vector<int> chain;
    std::string text;
  };
  ChainEnd follow_chain(int peer) const;

  compat::StorePtr store_;
  int rank_, world_;
  const Schedule& schedule_;
  DeviceMesh mesh_;  // ranks here are global; a rank runs the program of its pipeline rank
  Progress& progress_;
  std::chrono::milliseconds heartbeat_timeout_;
  std::function<void()> abort_transport_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::optional<std::string> fault_;
  bool published_ = false;
  struct Seen {
    long counter = -1;
    int iteration = -1, step = -1;
    int waiting_on = -1;  // the peer its transport call is blocked on (Progress::waiting_on)
    int collective = -1;  // the expert all-to-all it is in (Progress::collective)
    bool finished = false;
    long beats_seen = 0;  // how many times a scan saw its counter move
    std::chrono::steady_clock::time_point changed;
  };
  std::vector<Seen> seen_;
  int dead_ = 0;
};

}  // namespace ppsched::exec
