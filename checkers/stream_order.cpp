// The multi-stream checker (issue 39): a program whose ranks run several streams, ordered by
// events (lowering/stream_program.hpp), is safe when
//  1. on every rank, the collectives of each communicator, the sends to each peer and the
//     receives from each peer are totally ordered by happens-before (stream order and events):
//     otherwise the rank may issue two of them in either order and its peers cannot know which
//     (`collective_order_race`, with the event or stream that leaves them unordered);
//  2. every member calls the same collectives of a communicator in the same order, and the
//     k-th send on a rank pair has the k-th receive's name (`collective_order_race` when the
//     same calls come in another order, `collective_mismatch` / `p2p_mismatch` otherwise);
//  3. the rendezvous graph has no cycle (`deadlock`; `collective_order_race` when the cycle is
//     made of collectives alone: the ranks issue collectives of different communicators in
//     conflicting orders, as NVIDIA/Megatron-LM#5749's all-to-all and reduce-scatter).
//
// Why one pass decides every interleaving: an operation's enabling conditions only grow (its
// stream's previous operation completed, each of its waits satisfied by some record, all members
// started a rendezvous), so the set of operations that can complete is the same whatever the
// order (the least fixed point, computed below by a worklist), and two operations are ordered in
// every run exactly when the second cannot complete while the first is held back (decided by
// the vector clocks of 1; the `after` scan says why for a reported race). Once 1 and 2 hold,
// each rendezvous' members are fixed, so 3 is that fixed point.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "checkers/checks.hpp"
#include "lowering/stream_program.hpp"

namespace ppsched {

namespace {

// The records a wait may be satisfied by: a run of the event's records in listing order (one,
// the latest before the wait, under CUDA's binding; every one before it under `any`). A view
// into RankIndex::recorded: memory in proportion to the waits, however many records they see.
struct Span {
  const int* first = nullptr;
  int count = 0;
  const int* begin() const { return first; }
  const int* end() const { return first + count; }
  bool empty() const { return count == 0; }
  int front() const { return *first; }
};

struct RankIndex {
  std::vector<int> pred;  // previous op on the same stream, -1
  std::vector<int> pos;   // 1-based position on its stream
  std::vector<std::vector<int>> recorded;  // per event: the ops that record it, in listing order
  // Per op, per wait: the records that may satisfy it.
  std::vector<std::vector<Span>> eligible;
};

RankIndex index_rank(const StreamRank& r, bool any_record) {
  RankIndex x;
  const size_t n = r.ops.size();
  x.pred.assign(n, -1);
  x.pos.assign(n, 0);
  x.eligible.resize(n);
  x.recorded.resize(r.events.size());
  std::vector<int> last(r.streams.size(), -1), count(r.streams.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    const StreamOp& o = r.ops[i];
    x.pred[i] = last[static_cast<size_t>(o.stream)];
    last[static_cast<size_t>(o.stream)] = static_cast<int>(i);
    x.pos[i] = ++count[static_cast<size_t>(o.stream)];
    for (int e : o.records) x.recorded[static_cast<size_t>(e)].push_back(static_cast<int>(i));
  }
  // (A second pass: the spans point into `recorded`, complete now.)
  for (size_t i = 0; i < n; ++i)
    for (int e : r.ops[i].waits) {
      const auto& recs = x.recorded[static_cast<size_t>(e)];
      const int before = static_cast<int>(std::lower_bound(recs.begin(), recs.end(), static_cast<int>(i)) - recs.begin());
      Span sp;
      if (before > 0) sp = any_record ? Span{recs.data(), before} : Span{recs.data() + before - 1, 1};
      x.eligible[i].push_back(sp);
    }
  return x;
}

// after[x] for x in [a, b]: whether op x completes only after op a in every run of the rank
// (a held back, x cannot complete). The listing is a topological order (a stream's order is
// the listing's, a wait binds only to records listed before it), so only ops after a can be.
std::vector<char> after_scan(const RankIndex& x, int a, int b) {
  std::vector<char> after(static_cast<size_t>(b - a + 1), 0);
  after[0] = 1;
  auto is_after = [&](int j) { return j >= a && after[static_cast<size_t>(j - a)]; };
  for (int i = a + 1; i <= b; ++i) {
    bool v = x.pred[static_cast<size_t>(i)] >= 0 && is_after(x.pred[static_cast<size_t>(i)]);
    const auto& el = x.eligible[static_cast<size_t>(i)];
    for (size_t k = 0; !v && k < el.size(); ++k)
      v = !el[k].empty() && std::all_of(el[k].begin(), el[k].end(), is_after);
    after[static_cast<size_t>(i - a)] = v;
  }
  return after;
}

StreamOpRef op_ref(const StreamProgram& p, int rank, int op) {
  const StreamRank& r = p.ranks[static_cast<size_t>(rank)];
  const StreamOp& o = r.ops[static_cast<size_t>(op)];
  return {rank, op, o.name, r.streams[static_cast<size_t>(o.stream)]};
}

// Why op b is not ordered after op a on rank r: a shared event whose wait another record can
// satisfy, or no event at all from a's stream to b's before b.
std::string why_unordered(const StreamProgram& p, int rank, const RankIndex& x, int a, int b) {
  const StreamRank& r = p.ranks[static_cast<size_t>(rank)];
  const auto after = after_scan(x, a, b);
  auto is_after = [&](int j) { return j >= a && after[static_cast<size_t>(j - a)]; };
  auto stream = [&](int i) { return r.streams[static_cast<size_t>(r.ops[static_cast<size_t>(i)].stream)]; };
  for (int cur = b; cur > a; cur = x.pred[static_cast<size_t>(cur)]) {
    const StreamOp& o = r.ops[static_cast<size_t>(cur)];
    const auto& el = x.eligible[static_cast<size_t>(cur)];
    for (size_t k = 0; k < el.size(); ++k) {
      const auto& recs = el[k];
      const bool some_after = std::any_of(recs.begin(), recs.end(), is_after);
      auto early = std::find_if(recs.begin(), recs.end(), [&](int j) { return !is_after(j); });
      if (some_after && early != recs.end())
        return "op " + std::to_string(cur) + " (" + o.name + ", stream " + stream(cur) + ") waits on event " +
               r.events[static_cast<size_t>(o.waits[k])] + ", which op " + std::to_string(*early) + " (" +
               r.ops[static_cast<size_t>(*early)].name + ", stream " + stream(*early) + ") records without being ordered after op " +
               std::to_string(a) + ", and another op records after it: the wait is satisfied by whichever record comes "
               "first (one event shared as a baton)";
    }
    if (x.pred[static_cast<size_t>(cur)] < 0) break;
  }
  return "nothing orders stream " + stream(b) + " after op " + std::to_string(a) + " on stream " + stream(a) +
         ": no event recorded at or after op " + std::to_string(a) + " is waited on by stream " + stream(b) +
         " before op " + std::to_string(b);
}

// An ordering domain of a rank: the collectives of one communicator, the sends to one peer or
// the receives from one peer.
struct Domain {
  int kind;  // 0 collective (id = comm), 1 send (id = peer), 2 recv (id = peer)
  int id;
  bool operator<(const Domain& o) const { return std::tie(kind, id) < std::tie(o.kind, o.id); }
};
Domain domain_of(const StreamOp& o) {
  switch (o.kind) {
    case StreamOpKind::Collective: return {0, o.comm};
    case StreamOpKind::Send: return {1, o.peer};
    case StreamOpKind::Recv: return {2, o.peer};
    default: return {-1, -1};
  }
}
std::string domain_name(const StreamProgram& p, int rank, const Domain& d) {
  if (d.kind == 0) return "communicator " + p.comms[static_cast<size_t>(d.id)].name;
  if (d.kind == 1) return "the sends from rank " + std::to_string(rank) + " to rank " + std::to_string(d.id);
  return "the receives of rank " + std::to_string(rank) + " from rank " + std::to_string(d.id);
}

}  // namespace

CheckReport verify_streams(const StreamProgram& p) {
  CheckReport out;
  out.semantics = std::string("streams run their operations in listing order; an event wait binds to ") +
                  (p.any_record ? "any record of the event listed before it (event_binding any)"
                                : "the latest record of the event listed before it (CUDA)") +
                  "; collectives and P2P are blocking rendezvous (NCCL), P2P matched FIFO per rank pair";
  const int R = static_cast<int>(p.ranks.size());
  std::vector<RankIndex> idx;
  idx.reserve(static_cast<size_t>(R));
  for (const auto& r : p.ranks) idx.push_back(index_rank(r, p.any_record));
  for (const auto& r : p.ranks) out.stats.steps += r.ops.size();

  // Per rank and domain, its ops in listing order.
  std::vector<std::map<Domain, std::vector<int>>> seq(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    const auto& ops = p.ranks[static_cast<size_t>(r)].ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      Domain d = domain_of(ops[i]);
      if (d.kind >= 0) seq[static_cast<size_t>(r)][d].push_back(static_cast<int>(i));
    }
  }

  // 1. Races inside a rank: consecutive ops of a domain unordered. Decided in one pass per rank
  // with vector clocks over its streams: an op's clock holds, per stream, the last op on it that
  // completes before the op in every run (a stream's ops before one are before it, so the set
  // is a prefix of each stream). A stream predecessor or a wait bound to one record adds that
  // record's clock (max); a wait that any of several records may satisfy adds only what all of
  // them have (the componentwise min of their clocks). Then a is before b iff a's position on
  // its stream is at most b's clock there. Time and memory: streams x (ops + waited records).
  // One report per domain and pair of names, the ranks with the same race listed together;
  // after kMaxExplained reports the rest are counted (an explanation scans the ops between).
  constexpr size_t kMaxExplained = 32;
  size_t unexplained = 0;
  std::map<std::tuple<int, int, std::string, std::string>, size_t> reported;
  for (int r = 0; r < R; ++r) {
    const StreamRank& rank = p.ranks[static_cast<size_t>(r)];
    const RankIndex& x = idx[static_cast<size_t>(r)];
    const size_t S = rank.streams.size(), n = rank.ops.size();
    // Clocks: per stream, its last op's (inclusive); per waited event, its records' (the last
    // one's, or the min over all so far under `any`).
    std::vector<int32_t> stream_clock(S * S, 0);
    std::vector<char> waited(rank.events.size(), 0);
    for (const auto& o : rank.ops)
      for (int e : o.waits) waited[static_cast<size_t>(e)] = 1;
    std::vector<std::vector<int32_t>> event_clock(rank.events.size());
    std::vector<int32_t> vc(S);
    std::map<Domain, int> last_of;
    std::set<Domain> raced;
    for (size_t i = 0; i < n; ++i) {
      const StreamOp& o = rank.ops[i];
      const size_t st = static_cast<size_t>(o.stream);
      std::copy(stream_clock.begin() + static_cast<std::ptrdiff_t>(st * S),
                stream_clock.begin() + static_cast<std::ptrdiff_t>((st + 1) * S), vc.begin());
      for (size_t k = 0; k < o.waits.size(); ++k) {
        if (x.eligible[i][k].empty()) continue;  // nothing recorded before it: no wait
        const auto& ec = event_clock[static_cast<size_t>(o.waits[k])];
        for (size_t q = 0; q < S; ++q) vc[q] = std::max(vc[q], ec[q]);
      }
      // The domain check, before the op's own position joins its clock.
      const Domain d = domain_of(o);
      if (d.kind >= 0) {
        auto it = last_of.find(d);
        if (it != last_of.end() && !raced.count(d)) {
          const int a = it->second, b = static_cast<int>(i);
          const StreamOp& oa = rank.ops[static_cast<size_t>(a)];
          if (oa.stream != o.stream && x.pos[static_cast<size_t>(a)] > vc[static_cast<size_t>(oa.stream)]) {
            raced.insert(d);
            const std::string& na = oa.name;
            const std::string& nb = o.name;
            auto key = std::make_tuple(d.kind, d.kind == 0 ? d.id : -1, na, nb);
            if (auto rep = reported.find(key); rep != reported.end() && d.kind == 0) {
              out.violations[rep->second].ranks.push_back(r);
            } else if (out.violations.size() >= kMaxExplained) {
              ++unexplained;
            } else {
              Violation v;
              v.kind = ViolationKind::CollectiveOrderRace;
              v.ranks = {r};
              v.ops = {op_ref(p, r, a), op_ref(p, r, b)};
              v.message = p.describe(r, a) + " and op " + std::to_string(b) + " (" + nb + ", stream " +
                          rank.streams[st] + ") of " + domain_name(p, r, d) + " may be issued in either order: " +
                          why_unordered(p, r, x, a, b) +
                          ". Every rank must issue the calls of a communicator in one order fixed by happens-before.";
              std::string peer = "its peer";
              if (d.kind == 0) {
                for (int m : p.comms[static_cast<size_t>(d.id)].ranks)
                  if (m != r) {
                    peer = "rank " + std::to_string(m);
                    break;
                  }
              } else {
                peer = "rank " + std::to_string(d.id);
              }
              v.interleaving = "rank " + std::to_string(r) + " issues " + nb + " first while " + peer + " issues " + na +
                               " first: each waits in its call for the other (or the two calls exchange each other's buffers)";
              reported.emplace(key, out.violations.size());
              out.violations.push_back(std::move(v));
            }
          }
        }
        last_of[d] = static_cast<int>(i);
      }
      vc[st] = x.pos[i];
      std::copy(vc.begin(), vc.end(), stream_clock.begin() + static_cast<std::ptrdiff_t>(st * S));
      for (int e : o.records) {
        if (!waited[static_cast<size_t>(e)]) continue;
        auto& ec = event_clock[static_cast<size_t>(e)];
        if (ec.empty() || !p.any_record) {
          ec.assign(vc.begin(), vc.end());
        } else {
          for (size_t q = 0; q < S; ++q) ec[q] = std::min(ec[q], vc[q]);
        }
      }
    }
  }
  if (unexplained > 0)
    out.notes.push_back(std::to_string(unexplained) + " more collective_order_race(s) on other communicators, not listed");

  // 2. Members agree: per communicator, the same names in the same order; per channel, the
  // k-th send and the k-th receive.
  for (size_t c = 0; c < p.comms.size(); ++c) {
    const auto& members = p.comms[c].ranks;
    if (members.empty()) continue;
    auto names = [&](int r) {
      std::vector<std::string> out_names;
      auto it = seq[static_cast<size_t>(r)].find(Domain{0, static_cast<int>(c)});
      if (it != seq[static_cast<size_t>(r)].end())
        for (int i : it->second) out_names.push_back(p.ranks[static_cast<size_t>(r)].ops[static_cast<size_t>(i)].name);
      return out_names;
    };
    const int r0 = members[0];
    const auto ref = names(r0);
    out.stats.collectives += ref.size();
    for (size_t m = 1; m < members.size(); ++m) {
      const int r = members[m];
      const auto mine = names(r);
      if (mine == ref) continue;
      size_t k = 0;
      while (k < ref.size() && k < mine.size() && ref[k] == mine[k]) ++k;
      auto sorted_a = ref, sorted_b = mine;
      std::sort(sorted_a.begin(), sorted_a.end());
      std::sort(sorted_b.begin(), sorted_b.end());
      Violation v;
      v.ranks = {r0, r};
      const std::string pos = "call #" + std::to_string(k + 1) + " on communicator " + p.comms[c].name;
      auto at = [&](int rank, const std::vector<std::string>& n) {
        return k < n.size() ? "rank " + std::to_string(rank) + " calls " + n[k] : "rank " + std::to_string(rank) + " has no such call";
      };
      if (sorted_a == sorted_b) {
        v.kind = ViolationKind::CollectiveOrderRace;
        v.message = "At " + pos + ", " + at(r0, ref) + " and " + at(r, mine) +
                    ": the two ranks issue the same collectives in different orders.";
        v.interleaving = "rank " + std::to_string(r0) + " waits in " + ref[k] + " while rank " + std::to_string(r) +
                         " waits in " + mine[k] + " (or the two calls combine unrelated buffers)";
      } else {
        v.kind = ViolationKind::CollectiveMismatch;
        v.message = "At " + pos + ", " + at(r0, ref) + " and " + at(r, mine) +
                    ". Every member of a communicator must call the same collectives in the same order.";
      }
      auto ref_op = [&](int rank) {
        auto it = seq[static_cast<size_t>(rank)].find(Domain{0, static_cast<int>(c)});
        if (it != seq[static_cast<size_t>(rank)].end() && k < it->second.size())
          v.ops.push_back(op_ref(p, rank, it->second[k]));
      };
      ref_op(r0);
      ref_op(r);
      out.violations.push_back(std::move(v));
      break;
    }
  }
  for (int src = 0; src < R; ++src)
    for (const auto& [d, sends] : seq[static_cast<size_t>(src)]) {
      if (d.kind != 1) continue;
      const int dst = d.id;
      auto it = seq[static_cast<size_t>(dst)].find(Domain{2, src});
      const std::vector<int> none;
      const auto& recvs = it == seq[static_cast<size_t>(dst)].end() ? none : it->second;
      out.stats.messages += sends.size();
      for (size_t k = 0; k < std::max(sends.size(), recvs.size()); ++k) {
        const std::string* ns = k < sends.size() ? &p.ranks[static_cast<size_t>(src)].ops[static_cast<size_t>(sends[k])].name : nullptr;
        const std::string* nr = k < recvs.size() ? &p.ranks[static_cast<size_t>(dst)].ops[static_cast<size_t>(recvs[k])].name : nullptr;
        if (ns && nr && *ns == *nr) continue;
        Violation v;
        v.kind = ViolationKind::P2PMismatch;
        v.ranks = {src, dst};
        if (ns) v.ops.push_back(op_ref(p, src, sends[k]));
        if (nr) v.ops.push_back(op_ref(p, dst, recvs[k]));
        v.message = "Send #" + std::to_string(k + 1) + " from rank " + std::to_string(src) + " to rank " + std::to_string(dst) +
                    (ns ? " is " + *ns : " does not exist") + ", receive #" + std::to_string(k + 1) + " is " +
                    (nr ? *nr : "missing") + ": sends and receives of a rank pair match in FIFO order.";
        out.violations.push_back(std::move(v));
        break;
      }
    }
  // Receives with no sender at all.
  for (int dst = 0; dst < R; ++dst)
    for (const auto& [d, recvs] : seq[static_cast<size_t>(dst)])
      if (d.kind == 2 && !seq[static_cast<size_t>(d.id)].count(Domain{1, dst})) {
        Violation v;
        v.kind = ViolationKind::P2PMismatch;
        v.ranks = {d.id, dst};
        v.ops.push_back(op_ref(p, dst, recvs[0]));
        v.message = p.describe(dst, recvs[0]) + " receives from rank " + std::to_string(d.id) + ", which sends it nothing.";
        out.violations.push_back(std::move(v));
      }
  if (!out.violations.empty()) {
    out.completes = false;
    return out;  // the rendezvous are not well defined: the deadlock pass needs them matched
  }

  // 3. The rendezvous fixed point.
  // Instances: per communicator, the k-th call of each member; per channel, the k-th send and
  // receive. inst_of[rank][op] = instance id.
  std::vector<std::vector<int>> inst_of(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) inst_of[static_cast<size_t>(r)].assign(p.ranks[static_cast<size_t>(r)].ops.size(), -1);
  std::vector<int> inst_size;
  for (size_t c = 0; c < p.comms.size(); ++c) {
    const auto& members = p.comms[c].ranks;
    auto it0 = seq[static_cast<size_t>(members[0])].find(Domain{0, static_cast<int>(c)});
    const size_t calls = it0 == seq[static_cast<size_t>(members[0])].end() ? 0 : it0->second.size();
    for (size_t k = 0; k < calls; ++k) {
      const int id = static_cast<int>(inst_size.size());
      inst_size.push_back(static_cast<int>(members.size()));
      for (int m : members) inst_of[static_cast<size_t>(m)][static_cast<size_t>(seq[static_cast<size_t>(m)][Domain{0, static_cast<int>(c)}][k])] = id;
    }
  }
  for (int src = 0; src < R; ++src)
    for (const auto& [d, sends] : seq[static_cast<size_t>(src)]) {
      if (d.kind != 1) continue;
      const auto& recvs = seq[static_cast<size_t>(d.id)][Domain{2, src}];
      for (size_t k = 0; k < sends.size(); ++k) {
        const int id = static_cast<int>(inst_size.size());
        inst_size.push_back(2);
        inst_of[static_cast<size_t>(src)][static_cast<size_t>(sends[k])] = id;
        inst_of[static_cast<size_t>(d.id)][static_cast<size_t>(recvs[k])] = id;
      }
    }
  std::vector<std::vector<std::pair<int, int>>> inst_members(inst_size.size());
  for (int r = 0; r < R; ++r)
    for (size_t i = 0; i < inst_of[static_cast<size_t>(r)].size(); ++i)
      if (inst_of[static_cast<size_t>(r)][i] >= 0) inst_members[static_cast<size_t>(inst_of[static_cast<size_t>(r)][i])].push_back({r, static_cast<int>(i)});

  // Worklist: need[op] = unmet conditions (stream predecessor, each wait with a record).
  std::vector<std::vector<int>> need(static_cast<size_t>(R)), next_on_stream(static_cast<size_t>(R));
  std::vector<std::vector<char>> started(static_cast<size_t>(R)), done(static_cast<size_t>(R));
  // Per rank and event, the waits on it (op, wait index) in listing order: a record of op j
  // satisfies those after j that bind to it (CUDA: up to the event's next record; `any`: every
  // later one not yet satisfied, i.e. up to the earliest record completed so far). Each wait is
  // satisfied once: time and memory in proportion to the waits.
  std::vector<std::vector<std::vector<std::pair<int, int>>>> waiters(static_cast<size_t>(R));
  std::vector<std::vector<int>> satisfied_above(static_cast<size_t>(R));  // `any`: waits past it are satisfied
  std::vector<std::vector<std::vector<char>>> satisfied(static_cast<size_t>(R));
  std::vector<std::pair<int, int>> ready;
  for (int r = 0; r < R; ++r) {
    const StreamRank& rank = p.ranks[static_cast<size_t>(r)];
    const size_t n = rank.ops.size();
    const RankIndex& x = idx[static_cast<size_t>(r)];
    need[static_cast<size_t>(r)].assign(n, 0);
    next_on_stream[static_cast<size_t>(r)].assign(n, -1);
    started[static_cast<size_t>(r)].assign(n, 0);
    done[static_cast<size_t>(r)].assign(n, 0);
    waiters[static_cast<size_t>(r)].resize(rank.events.size());
    satisfied_above[static_cast<size_t>(r)].assign(rank.events.size(), std::numeric_limits<int>::max());
    satisfied[static_cast<size_t>(r)].resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (x.pred[i] >= 0) {
        need[static_cast<size_t>(r)][i]++;
        next_on_stream[static_cast<size_t>(r)][static_cast<size_t>(x.pred[i])] = static_cast<int>(i);
      }
      satisfied[static_cast<size_t>(r)][i].assign(x.eligible[i].size(), 0);
      for (size_t k = 0; k < x.eligible[i].size(); ++k) {
        if (x.eligible[i][k].empty()) continue;
        need[static_cast<size_t>(r)][i]++;
        waiters[static_cast<size_t>(r)][static_cast<size_t>(rank.ops[i].waits[k])].push_back({static_cast<int>(i), static_cast<int>(k)});
      }
      if (need[static_cast<size_t>(r)][i] == 0) ready.push_back({r, static_cast<int>(i)});
    }
  }
  // Op i of rank r completed: the waits its records satisfy.
  auto satisfy_waits = [&](int r, int i, std::vector<std::pair<int, int>>& ready_out) {
    const StreamRank& rank = p.ranks[static_cast<size_t>(r)];
    const RankIndex& x = idx[static_cast<size_t>(r)];
    for (int e : rank.ops[static_cast<size_t>(i)].records) {
      const auto& ws = waiters[static_cast<size_t>(r)][static_cast<size_t>(e)];
      if (ws.empty()) continue;
      int upto;
      if (p.any_record) {
        int& above = satisfied_above[static_cast<size_t>(r)][static_cast<size_t>(e)];
        if (i >= above) continue;
        upto = above;
        above = i;
      } else {
        const auto& recs = x.recorded[static_cast<size_t>(e)];
        auto nx = std::upper_bound(recs.begin(), recs.end(), i);
        upto = nx == recs.end() ? std::numeric_limits<int>::max() : *nx;
      }
      auto w = std::upper_bound(ws.begin(), ws.end(), std::make_pair(i, std::numeric_limits<int>::max()));
      for (; w != ws.end() && w->first <= upto; ++w) {
        char& sat = satisfied[static_cast<size_t>(r)][static_cast<size_t>(w->first)][static_cast<size_t>(w->second)];
        if (sat) continue;
        sat = 1;
        if (--need[static_cast<size_t>(r)][static_cast<size_t>(w->first)] == 0) ready_out.push_back({r, w->first});
      }
    }
  };
  std::vector<int> arrived(inst_size.size(), 0);
  std::vector<std::pair<int, int>> completed;
  while (!ready.empty() || !completed.empty()) {
    if (!completed.empty()) {
      auto [r, i] = completed.back();
      completed.pop_back();
      auto& nd = need[static_cast<size_t>(r)];
      int nx = next_on_stream[static_cast<size_t>(r)][static_cast<size_t>(i)];
      if (nx >= 0 && --nd[static_cast<size_t>(nx)] == 0) ready.push_back({r, nx});
      satisfy_waits(r, i, ready);
      continue;
    }
    auto [r, i] = ready.back();
    ready.pop_back();
    started[static_cast<size_t>(r)][static_cast<size_t>(i)] = 1;
    const int inst = inst_of[static_cast<size_t>(r)][static_cast<size_t>(i)];
    if (inst < 0) {
      done[static_cast<size_t>(r)][static_cast<size_t>(i)] = 1;
      completed.push_back({r, i});
    } else if (++arrived[static_cast<size_t>(inst)] == inst_size[static_cast<size_t>(inst)]) {
      for (auto [mr, mi] : inst_members[static_cast<size_t>(inst)]) {
        done[static_cast<size_t>(mr)][static_cast<size_t>(mi)] = 1;
        completed.push_back({mr, mi});
      }
    }
  }
  // A stuck op: follow what holds it back to a rendezvous it started and waits in.
  auto blocked_in = [&](int r, int i) {
    const RankIndex& x = idx[static_cast<size_t>(r)];
    while (!started[static_cast<size_t>(r)][static_cast<size_t>(i)]) {
      int pr = x.pred[static_cast<size_t>(i)];
      if (pr >= 0 && !done[static_cast<size_t>(r)][static_cast<size_t>(pr)]) {
        i = pr;
        continue;
      }
      int next = -1;
      for (size_t k = 0; k < x.eligible[static_cast<size_t>(i)].size() && next < 0; ++k)
        if (!satisfied[static_cast<size_t>(r)][static_cast<size_t>(i)][k] && !x.eligible[static_cast<size_t>(i)][k].empty())
          next = x.eligible[static_cast<size_t>(i)][k].front();
      if (next < 0) break;
      i = next;
    }
    return i;
  };
  for (int r = 0; r < R; ++r)
    for (size_t i = 0; i < done[static_cast<size_t>(r)].size(); ++i) {
      if (done[static_cast<size_t>(r)][i] || !started[static_cast<size_t>(r)][i]) continue;
      // A cycle through this stuck rendezvous.
      std::vector<std::pair<int, int>> path;
      std::pair<int, int> cur{r, static_cast<int>(i)};
      while (std::find(path.begin(), path.end(), cur) == path.end()) {
        path.push_back(cur);
        const int inst = inst_of[static_cast<size_t>(cur.first)][static_cast<size_t>(cur.second)];
        std::pair<int, int> waits_for{-1, -1};
        for (auto [mr, mi] : inst_members[static_cast<size_t>(inst)])
          if (!started[static_cast<size_t>(mr)][static_cast<size_t>(mi)]) {
            waits_for = {mr, blocked_in(mr, mi)};
            break;
          }
        if (waits_for.first < 0) break;
        cur = waits_for;
      }
      auto loop = std::find(path.begin(), path.end(), cur);
      std::vector<std::pair<int, int>> cycle(loop, path.end());
      if (cycle.empty()) cycle = path;
      Violation v;
      bool collectives_only = true;
      std::string chain;
      for (size_t k = 0; k < cycle.size(); ++k) {
        auto [cr, ci] = cycle[k];
        const int nr = cycle[(k + 1) % cycle.size()].first;
        v.ranks.push_back(cr);
        v.ops.push_back(op_ref(p, cr, ci));
        collectives_only = collectives_only && p.ranks[static_cast<size_t>(cr)].ops[static_cast<size_t>(ci)].kind == StreamOpKind::Collective;
        chain += (k ? "; " : "") + p.describe(cr, ci) + " waits for rank " + std::to_string(nr);
      }
      if (collectives_only && cycle.size() > 1) {
        v.kind = ViolationKind::CollectiveOrderRace;
        v.message = "The ranks issue collectives of different communicators in conflicting orders, and each waits in one "
                    "the other has not reached: " + chain + ". Every rank must issue the collectives it shares in one order.";
      } else {
        v.kind = ViolationKind::Deadlock;
        v.cause = DeadlockCause::WaitForCycle;
        v.message = "Deadlock: " + chain + ".";
      }
      v.interleaving = chain;
      out.violations.push_back(std::move(v));
      out.completes = false;
      return out;
    }
  for (int r = 0; r < R; ++r)
    for (size_t i = 0; i < done[static_cast<size_t>(r)].size(); ++i)
      if (!done[static_cast<size_t>(r)][i]) {
        out.completes = false;
        Violation v;
        v.kind = ViolationKind::Deadlock;
        v.ranks = {r};
        v.ops = {op_ref(p, r, static_cast<int>(i))};
        v.message = p.describe(r, static_cast<int>(i)) + " never runs.";
        out.violations.push_back(std::move(v));
        return out;
      }
  return out;
}

}  // namespace ppsched
