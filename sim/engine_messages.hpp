// The engine's message state (sim/engine.cpp): each posted send's and receive's times and
// causes while a timed run still reads them. Private to sim/: the public API is sim/engine.hpp.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lowering/comm_model.hpp"

namespace ppsched::des {

// A time not known yet (a message not completed, a collective whose group has not all arrived).
constexpr double kUnknown = -1.0;

// A message's state in the timed run. It keeps no post time: a message is posted with its
// action's slice, created then and starting then (a slice's start never moves), so the post time
// is that slice's start (Engine::posted_at) and slice >= 0 marks a posted message.
struct MsgState {
  double ready = kUnknown;  // sender: when the payload is ready to leave
  double end = kUnknown;    // when it completed (for its own rank)
  int32_t slice = -1;       // the action slice it belongs to
  int32_t cause = -1;       // slice that determined its completion (critical path)
  int32_t ready_cause = -1; // sender: the slice its payload waited for (compute or host)
  uint8_t passes = 0;       // how many of the actions that list it its rank has passed
  bool freed = false;       // nothing reads it any more (MessageStates)
};
static_assert(sizeof(MsgState) == 32, "MsgState: keep it at 32 bytes");

// The messages' states while they matter. A state is read from its post until its rank has
// passed every action that lists it (Message::readers), it has completed and, for a send, its
// receive has completed too: a receive reads its send's state when it is posted or its transfer
// starts, and nothing reads a receive's once it completed. So each rank keeps its states in a
// window over its message ids (a rank posts its messages in about the order of their ids, the
// lowering numbers them rank by rank): a ring holding the ids [lo, hi), hi moved past each
// posted id, lo past each freed state. A run holds the states in flight, a few a rank, instead
// of one per message. With a trace every state is kept (its flows read them all at the end),
// and in a small run (Engine::kSmallRun).
class MessageStates {
 public:
  // keep_all: one state per message, never freed (a trace's run, a small run).
  MessageStates(const CommModel& m, bool keep_all);

  // Message `id`'s state. One beyond its rank's window is not posted yet: it reads as such
  // (slice -1) and is not to be written.
  MsgState& operator[](int32_t id) {
    if (keep_all_) return all_[static_cast<size_t>(id)];
    Window& w = window_of(id);
    if (id >= w.hi) {
      unposted_ = MsgState{};
      return unposted_;
    }
    assert(id >= w.lo && "a freed message state is read");
    return w.ring[static_cast<size_t>(id) & w.mask];
  }

  // Message `id` is posted: its rank's window grows to hold it.
  MsgState& open(int32_t id) {
    if (keep_all_) return all_[static_cast<size_t>(id)];
    Window& w = window_of(id);
    assert(id >= w.lo && "a freed message is posted again");
    if (id >= w.hi) {
      const size_t need = static_cast<size_t>(id) + 1 - static_cast<size_t>(w.lo);
      if (need > w.ring.size()) grow(w, need);
      w.hi = id + 1;  // the slots in between are unused: new, or reset when freed
    }
    return w.ring[static_cast<size_t>(id) & w.mask];
  }

  // Message `id`'s rank passed one more action that lists it.
  void pass(int32_t id) {
    if (keep_all_) return;
    MsgState& st = (*this)[id];
    if (++st.passes == m_.messages[static_cast<size_t>(id)].readers) candidates_.push_back(id);
  }
  // Message `id` completed: it, or its send when it is a receive, may be freed.
  void completed(int32_t id) {
    if (keep_all_) return;
    candidates_.push_back(id);
    const Message& m = m_.messages[static_cast<size_t>(id)];
    if (!m.send && m.partner >= 0) candidates_.push_back(m.partner);
  }

  // Frees the candidates nothing reads any more. Called between events, where no state is
  // held by reference.
  void sweep() {
    for (const int32_t id : candidates_) {
      if (freed(id) || !unread(id)) continue;
      Window& w = window_of(id);
      w.ring[static_cast<size_t>(id) & w.mask].freed = true;
      while (w.lo < w.hi && slot(w, w.lo).freed) {
        slot(w, w.lo) = MsgState{};
        ++w.lo;
      }
    }
    candidates_.clear();
  }

  // Calls fn(state) for each posted state not freed.
  template <class Fn>
  void for_each_held(Fn&& fn) {
    for (MsgState& st : all_)
      if (st.slice >= 0) fn(st);
    for (Window& w : windows_)
      for (int32_t id = w.lo; id < w.hi; ++id) {
        MsgState& st = slot(w, id);
        if (st.slice >= 0 && !st.freed) fn(st);
      }
  }

 private:
  struct Window {
    std::vector<MsgState> ring;  // a power of two slots; id's slot: id & mask
    size_t mask = 0;
    int32_t lo = 0, hi = 0;      // the ids held: [lo, hi)
  };
  Window& window_of(int32_t id) { return windows_[static_cast<size_t>(m_.rank_of(m_.messages[static_cast<size_t>(id)]))]; }
  static MsgState& slot(Window& w, int32_t id) { return w.ring[static_cast<size_t>(id) & w.mask]; }
  bool freed(int32_t id) {
    const Window& w = window_of(id);
    return id < w.lo || (id < w.hi && w.ring[static_cast<size_t>(id) & w.mask].freed);
  }
  // Posted, completed, passed by its rank and, a send, its receive completed (or freed). A
  // message no action lists (the lowering makes none) is never posted: it holds its window's lo
  // back, which costs memory, never a stale read.
  bool unread(int32_t id) {
    const Message& m = m_.messages[static_cast<size_t>(id)];
    const MsgState& st = (*this)[id];
    if (st.slice < 0 || st.end == kUnknown || m.readers == Message::kManyReaders || st.passes != m.readers) return false;
    if (!m.send) return true;
    if (m.partner < 0) return false;
    const int32_t recv = m.partner;
    return freed(recv) || (*this)[recv].end != kUnknown;
  }
  // Makes w's ring hold at least `need` ids (twice that, a power of two), its ids in place.
  static void grow(Window& w, size_t need);

  const CommModel& m_;
  const bool keep_all_;
  std::vector<MsgState> all_;      // keep_all: one per message
  std::vector<Window> windows_;    // otherwise: per rank
  std::vector<int32_t> candidates_;
  MsgState unposted_;
};

}  // namespace ppsched::des
