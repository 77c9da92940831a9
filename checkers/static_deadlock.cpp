// A second, independent deadlock decision: no replay, no state. Build the happens-before
// graph of the lowered programs (an action completes after the previous action of its rank
// and after every message it waits for; a message starts once posted and, under NCCL's stream
// order, once the stream entry before it completed, and completes once both of its ends
// started; a collective completes after every member arrived) and topologically sort it. The
// programs complete iff every action is reached; a cycle or a message without a partner
// leaves actions unreached. The fuzzing properties hold this against the replay.
#include <algorithm>

#include "checkers/checks.hpp"

namespace ppsched {

bool static_deadlock_free(const CommModel& m, CommMode mode) {
  // Node ids: actions of every rank, then two per message (started, completed), then one per
  // collective instance, then (NCCL's stream order) one per stream entry but the last of a rank.
  std::vector<size_t> first_action(static_cast<size_t>(m.ranks) + 1, 0);
  for (int r = 0; r < m.ranks; ++r) first_action[static_cast<size_t>(r) + 1] = first_action[static_cast<size_t>(r)] + m.actions[static_cast<size_t>(r)].size();
  const size_t n_actions = first_action.back();
  // A message starts once its rank posted it and, under NCCL's stream order, once every message
  // of the stream entry before its own completed; it completes once it and its partner started
  // (an eager send: once it started).
  const size_t n_messages = m.messages.size(), started_base = n_actions, completed_base = n_actions + n_messages;
  // Collective instances: (group, position) -> id.
  std::vector<std::vector<int64_t>> instance(m.groups.size());
  size_t n_inst = 0;
  for (const auto& call : m.collective_calls) {
    auto& v = instance[static_cast<size_t>(call.group)];
    if (static_cast<size_t>(call.position) >= v.size()) v.resize(static_cast<size_t>(call.position) + 1, -1);
    if (v[static_cast<size_t>(call.position)] < 0) v[static_cast<size_t>(call.position)] = static_cast<int64_t>(n_inst++);
  }
  const size_t inst_base = completed_base + n_messages;
  constexpr size_t kNever = static_cast<size_t>(-1);  // a predecessor that never happens

  std::vector<std::pair<size_t, size_t>> edges;  // (from, to); from == kNever: blocked forever
  edges.reserve((inst_base + n_inst) * 2);
  for (size_t id = 0; id < n_messages; ++id) {
    const Message& msg = m.messages[id];
    edges.emplace_back(started_base + id, completed_base + id);
    if (msg.send && mode == CommMode::Eager) continue;  // buffered
    edges.emplace_back(msg.partner < 0 ? kNever : started_base + static_cast<size_t>(msg.partner), completed_base + id);
  }
  // Under NCCL's stream order, one node per stream entry: completed once its messages did; the
  // next entry's messages start after it.
  size_t entry_node = inst_base + n_inst;
  if (m.stream_ordered()) {
    for (int r = 0; r < m.ranks; ++r) {
      const auto& acts = m.actions[static_cast<size_t>(r)];
      const auto& entries = m.stream_actions[static_cast<size_t>(r)];
      for (size_t e = 0; e + 1 < entries.size(); ++e, ++entry_node) {
        const Action& before = acts[static_cast<size_t>(entries[e])];
        const Action& after = acts[static_cast<size_t>(entries[e + 1])];
        for (int i = 0; i < before.count; ++i)
          edges.emplace_back(completed_base + static_cast<size_t>(m.message_of(before, i)), entry_node);
        for (int j = 0; j < after.count; ++j)
          edges.emplace_back(entry_node, started_base + static_cast<size_t>(m.message_of(after, j)));
      }
    }
  }
  const size_t n = entry_node;
  std::vector<size_t> arrived(n_inst, 0);
  for (int r = 0; r < m.ranks; ++r) {
    const auto& acts = m.actions[static_cast<size_t>(r)];
    for (size_t i = 0; i < acts.size(); ++i) {
      const size_t self = first_action[static_cast<size_t>(r)] + i;
      const size_t prev = i > 0 ? self - 1 : kNever;
      if (i > 0) edges.emplace_back(prev, self);
      const Action& a = acts[i];
      // Posting happens once the previous action completed: the message starts after that.
      if ((a.kind == ActionKind::Phase || a.kind == ActionKind::Post) && i > 0)
        for (int j = 0; j < a.count; ++j) edges.emplace_back(prev, started_base + static_cast<size_t>(m.message_of(a, j)));
      if (a.kind == ActionKind::Phase || a.kind == ActionKind::Wait)
        for (int j = 0; j < a.count; ++j) edges.emplace_back(completed_base + static_cast<size_t>(m.message_of(a, j)), self);
      if (a.kind == ActionKind::Collective) {
        const auto& call = m.collective_calls[static_cast<size_t>(a.collective)];
        size_t inst = inst_base + static_cast<size_t>(instance[static_cast<size_t>(call.group)][static_cast<size_t>(call.position)]);
        if (i > 0) edges.emplace_back(prev, inst);
        arrived[inst - inst_base]++;
        edges.emplace_back(inst, self);
      }
    }
  }
  // A collective instance needs every member of its group to arrive.
  for (size_t g = 0; g < m.groups.size(); ++g)
    for (int64_t id : instance[g])
      if (id >= 0 && arrived[static_cast<size_t>(id)] < m.groups[g].members.size())
        edges.emplace_back(kNever, inst_base + static_cast<size_t>(id));

  // Kahn's algorithm over a CSR adjacency.
  std::vector<size_t> indeg(n, 0), start(n + 1, 0);
  for (auto& [from, to] : edges) {
    indeg[to]++;
    if (from != kNever) start[from + 1]++;
  }
  for (size_t v = 0; v < n; ++v) start[v + 1] += start[v];
  std::vector<size_t> succ(start[n]), fill(start.begin(), start.end() - 1);
  for (auto& [from, to] : edges)
    if (from != kNever) succ[fill[from]++] = to;
  std::vector<size_t> queue;
  for (size_t v = 0; v < n; ++v)
    if (indeg[v] == 0) queue.push_back(v);
  size_t reached_actions = 0;
  while (!queue.empty()) {
    size_t v = queue.back();
    queue.pop_back();
    if (v < n_actions) ++reached_actions;
    for (size_t e = start[v]; e < start[v + 1]; ++e)
      if (--indeg[succ[e]] == 0) queue.push_back(succ[e]);
  }
  return reached_actions == n_actions;
}

}  // namespace ppsched
