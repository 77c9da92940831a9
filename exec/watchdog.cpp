#include "exec/watchdog.hpp"

#include "exec/moe_streams.hpp"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "exec/error_file.hpp"

namespace ppsched::exec {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }
std::string hb_key(int r) { return "hb/" + std::to_string(r); }
const char* kErrorKey = "error";
const char* kErrorClaim = "error_claim";

std::atomic<bool> g_printed{false};

}  // namespace

bool Watchdog::claim_final() { return !g_printed.exchange(true); }

Watchdog::Watchdog(compat::StorePtr store, int rank, int world_size, const Schedule& schedule, Progress& progress,
                   std::chrono::milliseconds heartbeat_timeout, std::function<void()> abort_transport, DeviceMesh mesh)
    : store_(std::move(store)), rank_(rank), world_(world_size), schedule_(schedule), progress_(progress),
      heartbeat_timeout_(heartbeat_timeout), abort_transport_(std::move(abort_transport)),
      seen_(static_cast<size_t>(world_size)) {
  mesh_ = mesh.pp * mesh.dp == world_size ? mesh : DeviceMesh{world_size, 1, MeshOrder::DpPp};
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::start() {
  // Publish a first heartbeat before the thread runs, so peers never read a missing key.
  store_->set(hb_key(rank_), bytes("0 -1 -1 0 -1 -1"));
  auto now = Clock::now();
  for (auto& s : seen_) s.changed = now;
  thread_ = std::thread([this] { loop(); });
}

void Watchdog::stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
  try {
    // "finished": this rank stops beating on purpose.
    store_->set(hb_key(rank_), bytes("-1 -1 -1 1 -1 -1"));
  } catch (...) {
  }
}

std::string Watchdog::describe_progress(int iteration, int step, int rank, int collective) const {
  if (iteration < 0) return "before its first step";
  if (step < 0) return "iteration " + std::to_string(iteration) + " (between steps)";
  std::string out = "iteration " + std::to_string(iteration) + ", step " + std::to_string(step);
  const auto& prog = schedule_.programs[static_cast<size_t>(mesh_.pipeline_rank(rank))];
  if (step >= 0 && step < static_cast<int>(prog.size()) && prog[static_cast<size_t>(step)])
    out += " (" + short_label(*prog[static_cast<size_t>(step)]) + ")";
  if (collective >= 0)
    out += std::string(" in all-to-all ") + a2a_name(static_cast<A2aKind>(collective % 4)) + " of micro-batch " +
           std::to_string(collective / 4 - 1) + " on its expert-parallel group";
  return out;
}

std::string Watchdog::last_seen(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Seen& s = seen_[static_cast<size_t>(rank)];
  return describe_progress(s.iteration, s.step, rank);
}

int Watchdog::dead_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dead_;
}

std::optional<std::string> Watchdog::fault() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fault_;
}

void Watchdog::poll() const {
  if (auto f = fault()) throw PeerFailure(*f);
}

void Watchdog::publish(const std::string& report) {
  std::lock_guard<std::mutex> lock(mu_);
  if (published_) return;
  published_ = true;
  try {
    // The first rank to claim the error slot writes the run's report; later ones keep theirs.
    if (store_->add(kErrorClaim, 1) == 1) store_->set(kErrorKey, bytes(report));
  } catch (...) {
    // The store is gone (rank 0 died): nothing to publish to.
  }
}

void Watchdog::declare(const std::string& report, bool publish_it) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fault_) return;
    fault_ = report;
  }
  if (publish_it) publish(report);
  abort_transport_();
}

std::string Watchdog::wait_chain(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return follow_chain(peer).text;
}

Watchdog::ChainEnd Watchdog::follow_chain(int peer) const {
  // Follow who waits for whom through the last heartbeats: a rank blocked in a transport call
  // waits for that call's peer (in every mode: a blocking P2P step, or the Wait of a posted
  // receive before its consumer); the chain ends at a rank that is not (computing, frozen
  // before or inside a step, or in a collective), which is the one to look at. mu_ held.
  std::vector<bool> visited(static_cast<size_t>(world_), false);
  visited[static_cast<size_t>(rank_)] = true;
  std::string via;
  std::vector<int> chain;
  int r = peer;
  for (;;) {
    const Seen& s = seen_[static_cast<size_t>(r)];
    const int next = s.waiting_on;  // a global rank, as published
    visited[static_cast<size_t>(r)] = true;
    chain.push_back(r);
    if (next >= 0 && next < world_ && visited[static_cast<size_t>(next)]) {
      // Everyone on the chain waits in a P2P step: the programs deadlock (a schedule run with
      // --no-verify, or a peer posting something else than the comm model says).
      return {-1, std::move(chain),
              "the waits form a cycle: rank " + std::to_string(rank_) + " -> " + (via.empty() ? "" : via + " -> ") +
                  "rank " + std::to_string(r) + " -> rank " + std::to_string(next) + " (rank " + std::to_string(r) +
                  " was last seen at " + describe_progress(s.iteration, s.step, r, s.collective) + ")"};
    }
    if (next < 0 || next >= world_) {
      std::string at = "rank " + std::to_string(r) + " was last seen at " + describe_progress(s.iteration, s.step, r, s.collective);
      return {r, std::move(chain), via.empty() ? at : "waiting on " + via + "; the wait chain ends where " + at};
    }
    via += (via.empty() ? "rank " : " -> rank ") + std::to_string(r);
    r = next;
  }
}

std::string Watchdog::settle_failure(const StepFailure& own) {
  std::string mine = own.what();
  if (own.comm) {
    // A communication failure is usually the echo of another rank's failure: wait for its
    // report or for the heartbeat verdict.
    // But when every rank on the chain of waits from the peer beat twice since this wait failed
    // (the first change seen may be a beat from before a death), they are all alive, the end
    // frozen in a step or slow: no heartbeat verdict will come for them, and a rank that really
    // failed publishes its report at once. So past 1.5 s, that ends the wait.
    const auto failed_at = Clock::now();
    const auto deadline = failed_at + heartbeat_timeout_ + std::chrono::seconds(2);
    const bool follow = own.peer >= 0 && own.peer < world_;
    std::vector<long> beats_then;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const Seen& s : seen_) beats_then.push_back(s.beats_seen);
    }
    while (Clock::now() < deadline) {
      if (auto f = fault()) return *f + "; this rank stopped at " + describe_progress(own.iteration, own.index, rank_);
      if (follow && Clock::now() - failed_at >= std::chrono::milliseconds(1500)) {
        std::lock_guard<std::mutex> lock(mu_);
        const ChainEnd end = follow_chain(own.peer);
        const bool alive = std::all_of(end.chain.begin(), end.chain.end(), [&](int q) {
          return seen_[static_cast<size_t>(q)].beats_seen - beats_then[static_cast<size_t>(q)] >= 2;
        });
        if (end.rank >= 0 && alive) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } else if (auto f = fault()) {
    return *f + "; this rank stopped at " + describe_progress(own.iteration, own.index, rank_);
  }
  // Nobody reported: a peer alive but stuck (the wait timed out). Name the end of the chain.
  if (own.comm && own.peer >= 0 && own.peer < world_) mine += " [" + wait_chain(own.peer) + "]";
  publish(mine);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fault_) fault_ = mine;
  }
  return mine;
}

void Watchdog::loop() {
  long counter = 0;
  auto last_scan = Clock::now();
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (stop_) break;
    try {
      std::ostringstream hb;
      hb << ++counter << ' ' << progress_.iteration.load() << ' ' << progress_.step.load() << " 0 "
         << progress_.waiting_on.load() << ' ' << progress_.collective.load();
      store_->set(hb_key(rank_), bytes(hb.str()));
      if (!fault() && store_->check({kErrorKey})) {
        std::string report = text(store_->get(kErrorKey));
        declare(report, false);
      }
      if (fault()) break;
      if (Clock::now() - last_scan < std::chrono::milliseconds(500)) continue;
      last_scan = Clock::now();
      for (int r = 0; r < world_; ++r) {
        if (r == rank_) continue;
        if (!store_->check({hb_key(r)})) continue;  // not started yet: the rendezvous has its own timeout
        std::istringstream in(text(store_->get(hb_key(r))));
        long c = 0;
        int it = -1, st = -1, finished = 0, waiting = -1, collective = -1;
        in >> c >> it >> st >> finished >> waiting;
        if (!(in >> collective)) collective = -1;  // a failed extraction writes 0
        std::unique_lock<std::mutex> lock(mu_);
        Seen& s = seen_[static_cast<size_t>(r)];
        if (finished) {
          s.finished = true;
          continue;
        }
        if (c != s.counter) {
          s.counter = c;
          ++s.beats_seen;
          s.iteration = it;
          s.step = st;
          s.waiting_on = waiting;
          s.collective = collective;
          s.changed = Clock::now();
        } else if (!s.finished && Clock::now() - s.changed > heartbeat_timeout_) {
          std::string report = "rank " + std::to_string(r) + " died or froze (no heartbeat for " +
                               std::to_string(heartbeat_timeout_.count() / 1000.0).substr(0, 4) + " s); it was last at " +
                               describe_progress(s.iteration, s.step, r);
          ++dead_;
          lock.unlock();
          declare(report, true);
          break;
        }
      }
    } catch (const std::exception& e) {
      if (stop_) break;
      // The store is hosted by rank 0: when it stops answering, rank 0 is gone.
      std::string report = rank_ == 0 ? std::string("the rendezvous store failed: ") + message_of(e)
                                      : "rank 0 (host of the rendezvous store) is gone; it was last at " + last_seen(0);
      declare(report, false);
      break;
    }
  }
  if (!fault() || stop_) return;
  // The main thread has a grace period to notice (poll() between steps, or its blocked wait
  // aborted) and exit with its own message; past that (a wait that cannot be aborted, a rank
  // frozen in a step), end the process here.
  for (int k = 0; k < 60 && !stop_; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (stop_) return;
  std::string report = *fault();
  // This thread ends the process (the main thread may be stuck in a collective): the one
  // place the library prints, so that the launcher's log says why the rank stopped.
  if (claim_final()) {
    const std::string line = "stopping: " + report + "; this rank was at " +
                             describe_progress(progress_.iteration.load(), progress_.step.load(), rank_);
    std::fprintf(stderr, "error: %s\n", line.c_str());
    std::fflush(stderr);
    note_error_line("error: " + line);  // for the launcher's error file (exec/error_file.hpp)
  }
  try {
    store_->add("left", 1);  // rank 0 lingers until every rank has left or the grace ran out
  } catch (...) {
  }
  report_failure_to_launcher(1);
  std::_Exit(1);
}

}  // namespace ppsched::exec
