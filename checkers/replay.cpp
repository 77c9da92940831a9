// The replay: runs the lowered programs under blocking semantics and, when no rank can move,
// reports the wait-for cycle. Without wildcard receives one replay decides deadlock freedom
// for every timing (Siegel & Avrunin: synchronous executions suffice for wildcard-free
// programs; simulators_and_verification.md §2.2): every matching is forced by FIFO order, so
// the order in which ready ranks move cannot change which state is finally reached.
#include <algorithm>
#include <functional>

#include "checkers/checks.hpp"

namespace ppsched {
namespace {

class Replay {
 public:
  Replay(const Schedule& s, const CommModel& m, CommMode mode) : s_(s), m_(m), mode_(mode) {
    const size_t R = static_cast<size_t>(s.ranks);
    pc_.assign(R, 0);
    posted_.assign(R, false);
    arrived_.assign(R, false);
    done_.assign(R, false);
    posted_message_.assign(m.messages.size(), 0);
    src_waits_.assign(m.channels.size(), false);
    dst_waits_.assign(m.channels.size(), false);
    arrivals_.resize(m.groups.size());
    if (m.stream_ordered()) head_.assign(R, 0);
  }

  ReplayResult run() {
    std::vector<int> work;
    for (int r = s_.ranks - 1; r >= 0; --r) work.push_back(r);
    while (!work.empty()) {
      int r = work.back();
      work.pop_back();
      advance(r, work);
    }
    ReplayResult res;
    res.completed = std::all_of(done_.begin(), done_.end(), [](bool d) { return d; });
    res.stuck_rank_action.assign(static_cast<size_t>(s_.ranks), -1);
    for (int r = 0; r < s_.ranks; ++r)
      if (!done_[static_cast<size_t>(r)]) res.stuck_rank_action[static_cast<size_t>(r)] = pc_[static_cast<size_t>(r)];
    if (!res.completed) explain(res);
    return res;
  }

 private:
  // Posted by its rank and, under NCCL's stream order, reached by its rank's stream: every
  // entry before its own has completed (CommModel::stream_entry).
  bool active(int32_t id) const {
    if (!posted_message_[static_cast<size_t>(id)]) return false;
    if (!m_.stream_ordered()) return true;
    const Message& msg = m_.messages[static_cast<size_t>(id)];
    return m_.stream_entry[static_cast<size_t>(id)] <= head_[static_cast<size_t>(m_.rank_of(msg))];
  }

  bool complete(int32_t id) const {
    const Message& msg = m_.messages[static_cast<size_t>(id)];
    if (msg.send && (mode_ == CommMode::Eager || m_.testing_replay_buffers_sends))
      return !m_.stream_ordered() || active(id);
    if (m_.stream_ordered() && !active(id)) return false;
    return msg.partner >= 0 && active(msg.partner);
  }

  // The messages of entry e of rank r's stream.
  const Action& entry_action(size_t r, int32_t e) const {
    return m_.actions[r][static_cast<size_t>(m_.stream_actions[r][static_cast<size_t>(e)])];
  }

  // Under NCCL's stream order: whatever a message becoming active or complete may unblock is
  // re-examined: both ranks' streams (settle_streams) and both ranks' programs (work).
  void touch(int32_t id, std::vector<int>& work) {
    const Message& msg = m_.messages[static_cast<size_t>(id)];
    const int r = m_.rank_of(msg);
    stream_todo_.push_back(r);
    work.push_back(r);
    if (msg.partner >= 0) {
      const int q = m_.rank_of(m_.messages[static_cast<size_t>(msg.partner)]);
      stream_todo_.push_back(q);
      work.push_back(q);
    }
  }

  // Moves each touched rank's stream past the entries whose every message completed; the
  // next entry's messages start then.
  void settle_streams(std::vector<int>& work) {
    while (!stream_todo_.empty()) {
      const size_t r = static_cast<size_t>(stream_todo_.back());
      stream_todo_.pop_back();
      const auto entries = static_cast<int32_t>(m_.stream_actions[r].size());
      while (head_[r] < entries) {
        const Action& a = entry_action(r, head_[r]);
        bool all = true;
        for (int j = 0; j < a.count && all; ++j) all = complete(m_.message_of(a, j));
        if (!all) break;
        ++head_[r];
        for (int j = 0; j < a.count; ++j) touch(m_.message_of(a, j), work);
        if (head_[r] < entries) {
          const Action& next = entry_action(r, head_[r]);
          for (int j = 0; j < next.count; ++j) touch(m_.message_of(next, j), work);
        }
      }
    }
  }

  void post(int32_t id, std::vector<int>& work) {
    const Message& msg = m_.messages[static_cast<size_t>(id)];
    const size_t c = static_cast<size_t>(msg.channel);
    const Channel& ch = m_.channels[c];
    posted_message_[static_cast<size_t>(id)] = 1;
    if (m_.stream_ordered()) {
      touch(id, work);
      settle_streams(work);
      return;
    }
    if (msg.send) {
      if (dst_waits_[c]) {
        dst_waits_[c] = false;
        work.push_back(ch.dst);
      }
    } else {
      if (src_waits_[c]) {
        src_waits_[c] = false;
        work.push_back(ch.src);
      }
    }
  }

  // Runs rank r until it blocks or finishes.
  void advance(int r, std::vector<int>& work) {
    const size_t ri = static_cast<size_t>(r);
    const auto& acts = m_.actions[ri];
    while (!done_[ri]) {
      if (pc_[ri] >= static_cast<int>(acts.size())) {
        done_[ri] = true;
        return;
      }
      const Action& a = acts[static_cast<size_t>(pc_[ri])];
      switch (a.kind) {
        case ActionKind::Local:
          break;
        case ActionKind::Post:
          for (int j = 0; j < a.count; ++j) post(m_.message_of(a, j), work);
          break;
        case ActionKind::Phase:
        case ActionKind::Wait: {
          if (a.kind == ActionKind::Phase && !posted_[ri]) {
            posted_[ri] = true;
            for (int j = 0; j < a.count; ++j) post(m_.message_of(a, j), work);
          }
          bool all = true;
          for (int j = 0; j < a.count; ++j) {
            int32_t id = m_.message_of(a, j);
            if (complete(id)) continue;
            all = false;
            const Message& msg = m_.messages[static_cast<size_t>(id)];
            (msg.send ? src_waits_ : dst_waits_)[static_cast<size_t>(msg.channel)] = true;
          }
          if (!all) return;  // blocked; a post on one of those channels wakes us
          posted_[ri] = false;
          break;
        }
        case ActionKind::Collective: {
          const CollectiveCall& call = m_.collective_calls[static_cast<size_t>(a.collective)];
          auto& arr = arrivals_[static_cast<size_t>(call.group)];
          if (static_cast<int>(arr.size()) <= call.position) arr.resize(static_cast<size_t>(call.position) + 1, 0);
          if (!arrived_[ri]) {
            arrived_[ri] = true;
            int& n = arr[static_cast<size_t>(call.position)];
            ++n;
            const auto& members = m_.groups[static_cast<size_t>(call.group)].members;
            if (n == static_cast<int>(members.size()))
              for (int q : members)
                if (q != r) work.push_back(q);
          }
          if (arr[static_cast<size_t>(call.position)] <
              static_cast<int>(m_.groups[static_cast<size_t>(call.group)].members.size()))
            return;  // wait for the rest of the group
          arrived_[ri] = false;
          break;
        }
      }
      ++pc_[ri];
    }
  }

  // What a stuck rank waits for: (rank, explanation) pairs.
  std::vector<std::pair<int, std::string>> waits_of(int r) const {
    std::vector<std::pair<int, std::string>> out;
    const Action& a = m_.actions[static_cast<size_t>(r)][static_cast<size_t>(pc_[static_cast<size_t>(r)])];
    if (a.kind == ActionKind::Collective) {
      const CollectiveCall& call = m_.collective_calls[static_cast<size_t>(a.collective)];
      for (int q : m_.groups[static_cast<size_t>(call.group)].members) {
        if (q == r) continue;
        const auto& calls = m_.calls_by_rank[static_cast<size_t>(q)];
        bool reached = false;
        for (int32_t c : calls) {
          const auto& other = m_.collective_calls[static_cast<size_t>(c)];
          if (other.group == call.group && other.position == call.position) {
            reached = done_[static_cast<size_t>(q)] || pc_of_call(q, c);
          }
        }
        if (!reached)
          out.emplace_back(q, "rank " + std::to_string(q) + " to reach " + std::string(op_name(call.op)) + " (collective #" +
                                  std::to_string(call.position + 1) + " of " +
                                  m_.groups[static_cast<size_t>(call.group)].label + ")");
      }
      return out;
    }
    for (int j = 0; j < a.count; ++j) {
      int32_t id = m_.message_of(a, j);
      if (complete(id)) continue;
      if (m_.stream_ordered() && !active(id)) {
        stream_waits(r, id, out);
        continue;
      }
      out.push_back(partner_wait(id, ""));
    }
    return out;
  }

  // What message `id` (started) waits for: its partner's rank to post it or, under NCCL's
  // stream order, to start it.
  std::pair<int, std::string> partner_wait(int32_t id, const std::string& because) const {
    const Message& msg = m_.messages[static_cast<size_t>(id)];
    const Channel& ch = m_.channels[static_cast<size_t>(msg.channel)];
    const int q = msg.send ? ch.dst : ch.src;
    const std::string other = msg.send ? "receive" : "send";
    std::string what = "rank " + std::to_string(q) + " to post the " + other + " that matches " + describe_message(s_, m_, msg);
    if (msg.partner >= 0 && posted_message_[static_cast<size_t>(msg.partner)] && !active(msg.partner)) {
      const Message& p = m_.messages[static_cast<size_t>(msg.partner)];
      what = "rank " + std::to_string(q) + " to start the " + other + " that matches " + describe_message(s_, m_, msg) +
             " (" + describe_message(s_, m_, p) + ", posted, but queued on rank " + std::to_string(q) +
             "'s NCCL stream behind " + describe_message(s_, m_, held_by(q)) + ")";
    }
    return {q, what + because};
  }

  // The first message of rank r's current stream entry that has not completed: what holds the
  // operations posted after it.
  const Message& held_by(int r) const {
    const Action& a = entry_action(static_cast<size_t>(r), head_[static_cast<size_t>(r)]);
    for (int j = 0; j < a.count; ++j)
      if (!complete(m_.message_of(a, j))) return m_.messages[static_cast<size_t>(m_.message_of(a, j))];
    return m_.messages[static_cast<size_t>(m_.message_of(a, 0))];
  }

  // Message `id` of rank r is posted but not started: r's stream is held by its current entry,
  // whose unfinished messages wait for their partners.
  void stream_waits(int r, int32_t id, std::vector<std::pair<int, std::string>>& out) const {
    const Action& a = entry_action(static_cast<size_t>(r), head_[static_cast<size_t>(r)]);
    const std::string queued = ", which holds " + describe_message(s_, m_, m_.messages[static_cast<size_t>(id)]) +
                               " queued behind it on rank " + std::to_string(r) + "'s NCCL stream";
    for (int j = 0; j < a.count; ++j) {
      const int32_t held = m_.message_of(a, j);
      if (complete(held)) continue;
      out.push_back(partner_wait(held, queued));
    }
  }

  bool pc_of_call(int q, int32_t call_id) const {
    // Whether rank q is currently at (or past) the collective call `call_id`.
    const auto& acts = m_.actions[static_cast<size_t>(q)];
    int pc = pc_[static_cast<size_t>(q)];
    for (int k = 0; k < static_cast<int>(acts.size()); ++k)
      if (acts[static_cast<size_t>(k)].kind == ActionKind::Collective && acts[static_cast<size_t>(k)].collective == call_id)
        return pc >= k;
    return false;
  }

  std::string where(int r) const {
    const Action& a = m_.actions[static_cast<size_t>(r)][static_cast<size_t>(pc_[static_cast<size_t>(r)])];
    const Slot& slot = s_.programs[static_cast<size_t>(r)][static_cast<size_t>(a.step_index)];
    return "rank " + std::to_string(r) + " at step " + std::to_string(a.step_index) + " (" +
           (slot ? short_label(*slot) : std::string(".")) + ")";
  }

  void explain(ReplayResult& res) const {
    const int R = s_.ranks;
    std::vector<std::vector<std::pair<int, std::string>>> waits(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r)
      if (!done_[static_cast<size_t>(r)]) waits[static_cast<size_t>(r)] = waits_of(r);
    // Tarjan's SCC over stuck ranks (edges to finished ranks are dropped).
    std::vector<int> index(static_cast<size_t>(R), -1), low(static_cast<size_t>(R), 0), comp(static_cast<size_t>(R), -1);
    std::vector<bool> on(static_cast<size_t>(R), false);
    std::vector<int> stack;
    int counter = 0, ncomp = 0;
    std::function<void(int)> dfs = [&](int v) {
      index[static_cast<size_t>(v)] = low[static_cast<size_t>(v)] = counter++;
      stack.push_back(v);
      on[static_cast<size_t>(v)] = true;
      for (auto& [w, _] : waits[static_cast<size_t>(v)]) {
        if (done_[static_cast<size_t>(w)]) continue;
        if (index[static_cast<size_t>(w)] < 0) {
          dfs(w);
          low[static_cast<size_t>(v)] = std::min(low[static_cast<size_t>(v)], low[static_cast<size_t>(w)]);
        } else if (on[static_cast<size_t>(w)]) {
          low[static_cast<size_t>(v)] = std::min(low[static_cast<size_t>(v)], index[static_cast<size_t>(w)]);
        }
      }
      if (low[static_cast<size_t>(v)] == index[static_cast<size_t>(v)]) {
        int w;
        do {
          w = stack.back();
          stack.pop_back();
          on[static_cast<size_t>(w)] = false;
          comp[static_cast<size_t>(w)] = ncomp;
        } while (w != v);
        ++ncomp;
      }
    };
    for (int r = 0; r < R; ++r)
      if (!done_[static_cast<size_t>(r)] && index[static_cast<size_t>(r)] < 0) dfs(r);
    std::vector<int> size(static_cast<size_t>(ncomp), 0);
    for (int r = 0; r < R; ++r)
      if (comp[static_cast<size_t>(r)] >= 0) size[static_cast<size_t>(comp[static_cast<size_t>(r)])]++;
    std::vector<bool> reported(static_cast<size_t>(ncomp), false);
    for (int r = 0; r < R; ++r) {
      int c = comp[static_cast<size_t>(r)];
      if (c < 0 || size[static_cast<size_t>(c)] < 2 || reported[static_cast<size_t>(c)]) continue;
      reported[static_cast<size_t>(c)] = true;
      // Walk one cycle inside the component.
      std::vector<int> cycle;
      std::vector<std::string> because;
      std::vector<int> seen(static_cast<size_t>(R), -1);
      int v = r;
      while (seen[static_cast<size_t>(v)] < 0) {
        seen[static_cast<size_t>(v)] = static_cast<int>(cycle.size());
        cycle.push_back(v);
        for (auto& [w, why] : waits[static_cast<size_t>(v)]) {
          if (comp[static_cast<size_t>(w)] == c) {
            because.push_back(why);
            v = w;
            break;
          }
        }
      }
      int start = seen[static_cast<size_t>(v)];
      Violation out;
      out.kind = ViolationKind::Deadlock;
      out.cause = DeadlockCause::WaitForCycle;
      std::string text = "No rank can make progress: wait-for cycle ";
      for (size_t k = static_cast<size_t>(start); k < cycle.size(); ++k) {
        int q = cycle[k];
        out.ranks.push_back(q);
        const Action& a = m_.actions[static_cast<size_t>(q)][static_cast<size_t>(pc_[static_cast<size_t>(q)])];
        out.steps.push_back(step_ref(s_, q, a.step_index));
        text += (k > static_cast<size_t>(start) ? "; " : "") + where(q) + " waits for " + because[k];
      }
      text += ". Under blocking (rendezvous) P2P each rank in the cycle waits for the next one, which never posts "
              "what it needs.";
      if (m_.stream_ordered())
        text += " NCCL runs a rank's P2P operations in the order they were posted, on its communicator's stream: an "
                "operation starts only after every earlier one completed (--p2p-backend nccl).";
      out.message = text;
      res.deadlocks.push_back(std::move(out));
    }
    if (res.deadlocks.empty()) {
      // Stuck without a cycle: the chain ends at ranks that finished (unmatched operations).
      Violation out;
      out.kind = ViolationKind::Deadlock;
      out.cause = DeadlockCause::WaitsOnFinished;
      std::string text = "Ranks are blocked forever waiting on ranks that have finished their programs: ";
      bool first = true;
      for (int q = 0; q < R; ++q) {
        if (done_[static_cast<size_t>(q)]) continue;
        out.ranks.push_back(q);
        const Action& a = m_.actions[static_cast<size_t>(q)][static_cast<size_t>(pc_[static_cast<size_t>(q)])];
        out.steps.push_back(step_ref(s_, q, a.step_index));
        text += (first ? "" : "; ") + where(q) + " waits for ";
        auto w = waits[static_cast<size_t>(q)];
        for (size_t k = 0; k < w.size(); ++k) text += (k ? " and " : "") + w[k].second;
        first = false;
      }
      out.message = text + ".";
      res.deadlocks.push_back(std::move(out));
    }
  }

  const Schedule& s_;
  const CommModel& m_;
  CommMode mode_;
  std::vector<int> pc_;
  std::vector<uint8_t> posted_, arrived_, done_;  // bytes, not vector<bool>: read in the hot loop
  std::vector<uint8_t> posted_message_;  // per message: its rank posted it
  std::vector<uint8_t> src_waits_, dst_waits_;
  std::vector<std::vector<int>> arrivals_;
  // NCCL's stream order (CommModel::stream_ordered): per rank, the first stream entry not yet
  // completed; the ranks whose streams may move.
  std::vector<int32_t> head_;
  std::vector<int> stream_todo_;
};

}  // namespace

ReplayResult replay(const Schedule& s, const CommModel& m, CommMode mode) { return Replay(s, m, mode).run(); }

}  // namespace ppsched
