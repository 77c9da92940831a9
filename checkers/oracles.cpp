#include "checkers/oracles.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

#include "lowering/stream_program.hpp"

namespace ppsched::oracle {


std::vector<std::string> labels(const Program& p, bool keep_idle) {
  std::vector<std::string> out;
  for (const auto& slot : p) {
    if (slot) out.push_back(short_label(*slot));
    else if (keep_idle) out.push_back(".");
  }
  return out;
}

std::string joined(const Program& p, bool keep_idle) {
  std::string out;
  for (const auto& l : labels(p, keep_idle)) out += (out.empty() ? "" : " ") + l;
  return out;
}

std::string check_compute_coverage(const Schedule& s) {
  // counts[stage][micro] = {F, B, I, W}
  std::vector<std::vector<std::array<int, 4>>> n(static_cast<size_t>(s.stages),
      std::vector<std::array<int, 4>>(static_cast<size_t>(s.micro_batches), {0, 0, 0, 0}));
  for (int r = 0; r < s.ranks; ++r) {
    for (size_t i = 0; i < s.programs[static_cast<size_t>(r)].size(); ++i) {
      const auto& slot = s.programs[static_cast<size_t>(r)][i];
      if (!slot) continue;
      std::string err;
      std::vector<Step> leaves;
      if (is_composite(slot->op)) leaves = slot->sub_steps(); else leaves = {*slot};
      for (const Step& st : leaves) {
        int k = st.op == Op::FWD ? 0 : st.op == Op::BWD ? 1 : st.op == Op::BWD_INPUT ? 2 : st.op == Op::BWD_WEIGHT ? 3 : -1;
        if (k < 0) continue;
        if (st.stage < 0 || st.stage >= s.stages || st.micro < 0 || st.micro >= s.micro_batches)
          return "rank " + std::to_string(r) + " step " + std::to_string(i) + ": out of range " + short_label(st);
        if (s.rank_of(st.stage) != r)
          return "rank " + std::to_string(r) + " step " + std::to_string(i) + ": " + short_label(st) +
                 " on a rank that does not own the stage";
        n[static_cast<size_t>(st.stage)][static_cast<size_t>(st.micro)][static_cast<size_t>(k)]++;
      }
    }
  }
  for (int st = 0; st < s.stages; ++st)
    for (int m = 0; m < s.micro_batches; ++m) {
      auto c = n[static_cast<size_t>(st)][static_cast<size_t>(m)];
      std::string where = "stage " + std::to_string(st) + " micro " + std::to_string(m);
      if (!s.runs_through(st, m)) {
        if (c[0] + c[1] + c[2] + c[3] != 0) return where + ": steps of a micro-batch of another pipe";
        continue;
      }
      if (c[0] != 1) return where + ": " + std::to_string(c[0]) + " FWD";
      bool full = c[1] == 1 && c[2] == 0 && c[3] == 0;
      bool split = c[1] == 0 && c[2] == 1 && c[3] == 1;
      if (!full && !split)
        return where + ": backward counts B=" + std::to_string(c[1]) + " I=" + std::to_string(c[2]) +
               " W=" + std::to_string(c[3]);
    }
  return "";
}

std::string check_send_recv_placement(const Schedule& s) {
  for (int r = 0; r < s.ranks; ++r) {
    std::map<std::tuple<int, int, int>, bool> seen;  // (kind, stage, micro) -> present so far
    // kind 0: FWD done, 1: backward-input done, 2: FWD_RECV done, 3: BWD_RECV done
    const auto& prog = s.programs[static_cast<size_t>(r)];
    for (size_t i = 0; i < prog.size(); ++i) {
      if (!prog[i]) continue;
      std::vector<Step> leaves;
      if (is_composite(prog[i]->op)) leaves = prog[i]->sub_steps(); else leaves = {*prog[i]};
      // A composite's sub-steps all need their inputs before it starts.
      for (const Step& st : leaves) {
        std::string here = "rank " + std::to_string(r) + " step " + std::to_string(i) + " (" + short_label(st) + ")";
        auto has = [&](int k, int stage) { return seen.count({k, stage, st.micro}) > 0; };
        switch (st.op) {
          case Op::FWD_SEND:
            if (!has(0, st.stage)) return here + ": send before its FWD";
            break;
          case Op::BWD_SEND:
            if (!has(1, st.stage)) return here + ": send before its backward";
            break;
          case Op::FWD:
            if (s.chain_neighbour(st.stage, -1) >= 0 && s.rank_of(st.stage - 1) != r && !has(2, st.stage))
              return here + ": FWD before its FWD_RECV";
            break;
          case Op::BWD:
          case Op::BWD_INPUT:
            if (s.chain_neighbour(st.stage, +1) >= 0 && s.rank_of(st.stage + 1) != r && !has(3, st.stage))
              return here + ": backward before its BWD_RECV";
            break;
          default:
            break;
        }
      }
      for (const Step& st : leaves) {
        if (st.op == Op::FWD) seen[{0, st.stage, st.micro}] = true;
        if (st.op == Op::BWD || st.op == Op::BWD_INPUT) seen[{1, st.stage, st.micro}] = true;
        if (st.op == Op::FWD_RECV) seen[{2, st.stage, st.micro}] = true;
        if (st.op == Op::BWD_RECV) seen[{3, st.stage, st.micro}] = true;
      }
    }
  }
  return "";
}

std::string rendezvous_replay(const Schedule& s) {
  const int R = s.ranks;
  std::vector<size_t> head(static_cast<size_t>(R), 0);
  auto skip_idle = [&](int r) {
    const auto& p = s.programs[static_cast<size_t>(r)];
    while (head[static_cast<size_t>(r)] < p.size() && !p[head[static_cast<size_t>(r)]]) ++head[static_cast<size_t>(r)];
  };
  auto at = [&](int r) -> const Step* {
    skip_idle(r);
    const auto& p = s.programs[static_cast<size_t>(r)];
    return head[static_cast<size_t>(r)] < p.size() ? &*p[head[static_cast<size_t>(r)]] : nullptr;
  };
  // The P2P leaves a head offers (a single P2P step, or every sub-step of a batch).
  auto offers = [&](const Step* st) {
    std::vector<Step> v;
    if (!st) return v;
    if (st->op == Op::BATCH_SEND_RECV) return std::vector<Step>(st->sub_steps().begin(), st->sub_steps().end());
    if (is_p2p(st->op)) v.push_back(*st);
    return v;
  };
  auto matches = [&](int r, const Step& a, int q, const Step& b) {
    if (peer_of(s, r, a) != q || peer_of(s, q, b) != r) return false;
    if (info(a.op).partner != b.op || a.micro != b.micro) return false;
    if (!stage_places(a.op)) return true;  // MPipe: the stage is a tag, the owner rule routes
    int want = a.stage < 0 ? a.stage : a.stage + info(a.op).partner_stage_delta;
    return b.stage == want || (a.stage < 0 && b.stage < 0);
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      const Step* st = at(r);
      if (!st) continue;
      const auto& i = info(st->op);
      if (i.kind == StepKind::Collective) {
        if (i.collective == CollectiveScope::DataParallel) { ++head[static_cast<size_t>(r)]; progress = true; continue; }
        std::vector<int> group;
        if (i.collective == CollectiveScope::AllPipelineRanks) for (int q = 0; q < R; ++q) group.push_back(q);
        else if (i.collective == CollectiveScope::Replicas) { const auto g = s.replica_ranks(st->stage); group.assign(g.begin(), g.end()); }
        else group.assign(st->group().begin(), st->group().end());
        // Replica syncs match only the copies of the same model stage (a mismatch stays stuck).
        auto same = [&](const Step* h) {
          return h && h->op == st->op &&
                 (i.collective != CollectiveScope::Replicas || s.model_stage_of(h->stage) == s.model_stage_of(st->stage));
        };
        bool all = std::all_of(group.begin(), group.end(), [&](int q) { return same(at(q)); });
        if (all) { for (int q : group) ++head[static_cast<size_t>(q)]; progress = true; }
        continue;
      }
      auto mine = offers(st);
      if (mine.empty()) { ++head[static_cast<size_t>(r)]; progress = true; continue; }
      // Match every leaf of this head against peers' heads; the peers' heads must be fully
      // matched by this head's leaves too (batch against batch, or single against single).
      std::map<int, std::vector<Step>> by_peer;
      for (const Step& l : mine) by_peer[peer_of(s, r, l)].push_back(l);
      bool ok = true;
      for (auto& [q, leaves] : by_peer) {
        if (q < 0 || q >= R || q == r) { ok = false; break; }
        auto theirs = offers(at(q));
        std::vector<Step> towards_me;
        for (const Step& t : theirs) if (peer_of(s, q, t) == r) towards_me.push_back(t);
        if (towards_me.size() != leaves.size() || towards_me.size() != theirs.size()) { ok = false; break; }
        // per-peer FIFO inside a group: k-th sends/recvs match in order
        std::vector<Step> a_s, a_r, b_s, b_r;
        for (const Step& l : leaves) (is_send(l.op) ? a_s : a_r).push_back(l);
        for (const Step& l : towards_me) (is_send(l.op) ? b_s : b_r).push_back(l);
        if (a_s.size() != b_r.size() || a_r.size() != b_s.size()) { ok = false; break; }
        for (size_t k = 0; k < a_s.size() && ok; ++k) ok = matches(r, a_s[k], q, b_r[k]);
        for (size_t k = 0; k < a_r.size() && ok; ++k) ok = matches(r, a_r[k], q, b_s[k]);
        if (!ok) break;
      }
      if (ok && by_peer.size() == 1) {
        for (auto& [q, _] : by_peer) ++head[static_cast<size_t>(q)];
        ++head[static_cast<size_t>(r)];
        progress = true;
      } else if (ok) {
        // A batch with several peers: each peer's head must be exactly its part.
        for (auto& [q, _] : by_peer) ++head[static_cast<size_t>(q)];
        ++head[static_cast<size_t>(r)];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < R; ++r) {
    const Step* st = at(r);
    if (st) stuck += " rank " + std::to_string(r) + "@" + std::to_string(head[static_cast<size_t>(r)]) + " " + short_label(*st) + ";";
  }
  return stuck.empty() ? "" : "stuck:" + stuck;
}

namespace {

// Whether rank r's op i may start given the set of its completed ops (`done`, a predicate).
template <class Done>
bool stream_op_enabled(const StreamRank& rank, size_t i, bool any_record, Done done) {
  const StreamOp& o = rank.ops[i];
  for (size_t j = i; j-- > 0;)
    if (rank.ops[j].stream == o.stream) {
      if (!done(j)) return false;
      break;
    }
  for (int e : o.waits) {
    bool any = false, satisfied = false;
    for (size_t j = i; j-- > 0;)
      if (std::find(rank.ops[j].records.begin(), rank.ops[j].records.end(), e) != rank.ops[j].records.end()) {
        any = true;
        satisfied = satisfied || done(j);
        if (!any_record) break;  // CUDA: the latest record only
      }
    if (any && !satisfied) return false;
  }
  return true;
}

std::string stream_domain(const StreamProgram& p, int r, const StreamOp& o) {
  std::string head = "rank " + std::to_string(r) + ": ";
  switch (o.kind) {
    case StreamOpKind::Collective: return head + "communicator " + p.comms[static_cast<size_t>(o.comm)].name;
    case StreamOpKind::Send: return head + "sends to " + std::to_string(o.peer);
    case StreamOpKind::Recv: return head + "receives from " + std::to_string(o.peer);
    default: return "";
  }
}

}  // namespace

std::vector<std::string> stream_races(const StreamProgram& p) {
  std::set<std::string> out;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const StreamRank& rank = p.ranks[r];
    const size_t n = rank.ops.size();
    if (n > 20) throw std::invalid_argument("stream_races: more than 20 operations on a rank");
    // Every reachable set of completed ops (ops complete one at a time, in any enabled order).
    std::set<uint32_t> seen{0};
    std::vector<uint32_t> todo{0};
    while (!todo.empty()) {
      uint32_t s = todo.back();
      todo.pop_back();
      for (size_t i = 0; i < n; ++i) {
        if (s >> i & 1u) continue;
        if (!stream_op_enabled(rank, i, p.any_record, [&](size_t j) { return (s >> j & 1u) != 0; })) continue;
        uint32_t t = s | (1u << i);
        if (seen.insert(t).second) todo.push_back(t);
      }
    }
    // Two calls of one domain: a race when each can complete while the other has not.
    for (size_t a = 0; a < n; ++a)
      for (size_t b = a + 1; b < n; ++b) {
        std::string da = stream_domain(p, static_cast<int>(r), rank.ops[a]);
        if (da.empty() || da != stream_domain(p, static_cast<int>(r), rank.ops[b])) continue;
        bool a_first = false, b_first = false;
        for (uint32_t s : seen) {
          a_first = a_first || ((s >> a & 1u) && !(s >> b & 1u));
          b_first = b_first || ((s >> b & 1u) && !(s >> a & 1u));
        }
        if (a_first && b_first) out.insert(da);
      }
  }
  return {out.begin(), out.end()};
}

bool stream_run_completes(const StreamProgram& p, unsigned seed) {
  const size_t R = p.ranks.size();
  std::vector<std::vector<char>> started(R), done(R);
  for (size_t r = 0; r < R; ++r) {
    started[r].assign(p.ranks[r].ops.size(), 0);
    done[r].assign(p.ranks[r].ops.size(), 0);
  }
  // Rendezvous: key -> the (rank, op) that joined it. A collective's key: (0, comm, k); a P2P's:
  // (1, src, dst, k).
  std::map<std::vector<int>, std::vector<std::pair<size_t, size_t>>> joined;
  std::map<std::vector<int>, int> calls;  // per rank and domain: calls started so far
  std::mt19937 rng(seed);
  for (;;) {
    std::vector<std::pair<size_t, size_t>> enabled;
    for (size_t r = 0; r < R; ++r)
      for (size_t i = 0; i < p.ranks[r].ops.size(); ++i)
        if (!started[r][i] && stream_op_enabled(p.ranks[r], i, p.any_record, [&](size_t j) { return done[r][j] != 0; }))
          enabled.push_back({r, i});
    if (enabled.empty()) break;
    auto [r, i] = enabled[std::uniform_int_distribution<size_t>(0, enabled.size() - 1)(rng)];
    started[r][i] = 1;
    const StreamOp& o = p.ranks[r].ops[i];
    if (o.kind == StreamOpKind::Compute) {
      done[r][i] = 1;
      continue;
    }
    const int ri = static_cast<int>(r);
    std::vector<int> domain, key;
    size_t need = 2;
    if (o.kind == StreamOpKind::Collective) {
      domain = {0, ri, o.comm};
      key = {0, o.comm, calls[domain]++};
      need = p.comms[static_cast<size_t>(o.comm)].ranks.size();
    } else if (o.kind == StreamOpKind::Send) {
      domain = {1, ri, o.peer};
      key = {1, ri, o.peer, calls[domain]++};
    } else {
      domain = {2, ri, o.peer};
      key = {1, o.peer, ri, calls[domain]++};
    }
    auto& members = joined[key];
    members.push_back({r, i});
    if (members.size() == need)
      for (auto [mr, mi] : members) done[mr][mi] = 1;
  }
  for (size_t r = 0; r < R; ++r)
    for (char d : done[r])
      if (!d) return false;
  return true;
}

}  // namespace ppsched::oracle

