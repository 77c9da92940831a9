// A second, independent deadlock decision: no replay, no state. Build the happens-before
// graph of the lowered programs (an action completes after the previous action of its rank
// and after every message it waits for; a message is matched after both of its ends were
// posted; a collective completes after every member arrived) and topologically sort it. The
// programs complete iff every action is reached; a cycle or a message without a partner
// leaves actions unreached. The fuzzing properties hold this against the replay.
#include <algorithm>

#include "checkers/checks.hpp"

namespace ppsched {

bool static_deadlock_free(const CommModel& m, CommMode mode) {
  // Node ids: actions of every rank, then one node per matched message pair, then one per
  // collective instance.
  std::vector<size_t> first_action(static_cast<size_t>(m.ranks) + 1, 0);
  for (int r = 0; r < m.ranks; ++r) first_action[static_cast<size_t>(r) + 1] = first_action[static_cast<size_t>(r)] + m.actions[static_cast<size_t>(r)].size();
  const size_t n_actions = first_action.back();
  // A pair's node is numbered by its send's message id (the receives' numbers stay unused).
  const size_t pair_base = n_actions, n_pairs = m.messages.size();
  // Collective instances: (group, position) -> id.
  std::vector<std::vector<int64_t>> instance(m.groups.size());
  size_t n_inst = 0;
  for (const auto& call : m.collective_calls) {
    auto& v = instance[static_cast<size_t>(call.group)];
    if (static_cast<size_t>(call.position) >= v.size()) v.resize(static_cast<size_t>(call.position) + 1, -1);
    if (v[static_cast<size_t>(call.position)] < 0) v[static_cast<size_t>(call.position)] = static_cast<int64_t>(n_inst++);
  }
  const size_t inst_base = pair_base + n_pairs, n = inst_base + n_inst;
  constexpr size_t kNever = static_cast<size_t>(-1);  // a predecessor that never happens

  std::vector<std::pair<size_t, size_t>> edges;  // (from, to); from == kNever: blocked forever
  edges.reserve(n * 2);
  auto pair_of = [&](int32_t id) -> size_t {
    const Message& msg = m.messages[static_cast<size_t>(id)];
    if (msg.partner < 0) return kNever;
    return pair_base + static_cast<size_t>(msg.send ? id : msg.partner);
  };
  std::vector<size_t> member_count(n_inst, 0), arrived(n_inst, 0);
  for (int r = 0; r < m.ranks; ++r) {
    const auto& acts = m.actions[static_cast<size_t>(r)];
    for (size_t i = 0; i < acts.size(); ++i) {
      const size_t self = first_action[static_cast<size_t>(r)] + i;
      const size_t prev = i > 0 ? self - 1 : kNever;
      if (i > 0) edges.emplace_back(prev, self);
      const Action& a = acts[i];
      // Posting happens once the previous action completed: the pair waits for that.
      if (a.kind == ActionKind::Phase || a.kind == ActionKind::Post) {
        for (int j = 0; j < a.count; ++j) {
          size_t p = pair_of(m.message_of(a, j));
          if (p != kNever && i > 0) edges.emplace_back(prev, p);
        }
      }
      if (a.kind == ActionKind::Phase || a.kind == ActionKind::Wait) {
        for (int j = 0; j < a.count; ++j) {
          int32_t id = m.message_of(a, j);
          if (m.messages[static_cast<size_t>(id)].send && mode == CommMode::Eager) continue;  // buffered
          edges.emplace_back(pair_of(id), self);
        }
      }
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
