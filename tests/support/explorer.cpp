#include "tests/support/explorer.hpp"

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace ppsched::testing {
namespace {

// A state: per rank (pc, posted/arrived flag), per channel (sends posted, recvs posted), per
// collective instance the arrivals. Encoded as a vector of ints for hashing.
struct State {
  std::vector<int32_t> pc;
  std::vector<uint8_t> flag;  // Phase posted / Collective arrived
  std::vector<int32_t> sends, recvs;
  std::vector<int32_t> arrivals;  // per collective call id: 1 when its rank arrived

  std::string key() const {
    std::string k;
    auto put = [&](int32_t v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); };
    for (auto v : pc) put(v);
    for (auto v : flag) k.push_back(static_cast<char>(v));
    for (auto v : sends) put(v);
    for (auto v : recvs) put(v);
    for (auto v : arrivals) put(v);
    return k;
  }
};

class Explorer {
 public:
  // Positions on the channels, not Message::partner: its own view of FIFO order.
  Explorer(const CommModel& m, CommMode mode, size_t limit)
      : m_(m), mode_(mode), limit_(limit), position_(fifo_positions(m)) {}

  Exploration run() {
    State s;
    s.pc.assign(static_cast<size_t>(m_.ranks), 0);
    s.flag.assign(static_cast<size_t>(m_.ranks), 0);
    s.sends.assign(m_.channels.size(), 0);
    s.recvs.assign(m_.channels.size(), 0);
    s.arrivals.assign(m_.collective_calls.size(), 0);
    std::vector<State> stack{s};
    seen_.insert(s.key());
    while (!stack.empty()) {
      State cur = std::move(stack.back());
      stack.pop_back();
      result_.states++;
      if (result_.states > limit_) {
        result_.exhausted = false;
        break;
      }
      bool finished = true, moved = false;
      for (int r = 0; r < m_.ranks; ++r) {
        if (cur.pc[static_cast<size_t>(r)] < static_cast<int>(m_.actions[static_cast<size_t>(r)].size())) finished = false;
        State next = cur;
        if (step(next, r)) {
          moved = true;
          auto k = next.key();
          if (seen_.insert(k).second) stack.push_back(std::move(next));
        }
      }
      if (finished) result_.some_path_completes = true;
      else if (!moved) result_.some_state_stuck = true;
    }
    return result_;
  }

 private:
  bool complete(const State& s, int32_t id) const {
    const Message& msg = m_.messages[static_cast<size_t>(id)];
    const int32_t k = position_[static_cast<size_t>(id)];
    if (msg.send) return mode_ == CommMode::Eager || s.recvs[static_cast<size_t>(msg.channel)] > k;
    return s.sends[static_cast<size_t>(msg.channel)] > k;
  }
  void post(State& s, int32_t id) const {
    const Message& msg = m_.messages[static_cast<size_t>(id)];
    auto& v = msg.send ? s.sends : s.recvs;
    v[static_cast<size_t>(msg.channel)] = std::max(v[static_cast<size_t>(msg.channel)], position_[static_cast<size_t>(id)] + 1);
  }

  // One atomic move of rank r, if it can move. Returns false when blocked or finished.
  bool step(State& s, int r) const {
    const size_t ri = static_cast<size_t>(r);
    const auto& acts = m_.actions[ri];
    if (s.pc[ri] >= static_cast<int>(acts.size())) return false;
    const Action& a = acts[static_cast<size_t>(s.pc[ri])];
    switch (a.kind) {
      case ActionKind::Local:
        s.pc[ri]++;
        return true;
      case ActionKind::Post:
        for (int j = 0; j < a.count; ++j) post(s, m_.message_of(a, j));
        s.pc[ri]++;
        return true;
      case ActionKind::Phase:
        if (!s.flag[ri]) {
          for (int j = 0; j < a.count; ++j) post(s, m_.message_of(a, j));
          s.flag[ri] = 1;
          return true;
        }
        [[fallthrough]];
      case ActionKind::Wait:
        for (int j = 0; j < a.count; ++j)
          if (!complete(s, m_.message_of(a, j))) return false;
        s.flag[ri] = 0;
        s.pc[ri]++;
        return true;
      case ActionKind::Collective: {
        const CollectiveCall& call = m_.collective_calls[static_cast<size_t>(a.collective)];
        if (!s.flag[ri]) {
          s.flag[ri] = 1;
          s.arrivals[static_cast<size_t>(a.collective)] = 1;
          return true;
        }
        // Complete when every member arrived at the same (group, position).
        for (int q : m_.groups[static_cast<size_t>(call.group)].members) {
          bool there = false;
          for (size_t c = 0; c < m_.collective_calls.size(); ++c) {
            const auto& other = m_.collective_calls[c];
            if (other.rank == q && other.group == call.group && other.position == call.position) there = s.arrivals[c] != 0;
          }
          if (!there) return false;
        }
        // Leaving: the instance stays marked arrived for the members still to leave.
        s.flag[ri] = 0;
        s.pc[ri]++;
        return true;
      }
    }
    return false;
  }

  const CommModel& m_;
  CommMode mode_;
  size_t limit_;
  std::vector<int32_t> position_;  // per message
  std::unordered_set<std::string> seen_;
  Exploration result_;
};

}  // namespace

Exploration explore(const CommModel& m, CommMode mode, size_t state_limit) { return Explorer(m, mode, state_limit).run(); }

}  // namespace ppsched::testing
