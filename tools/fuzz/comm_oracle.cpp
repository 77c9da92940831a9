#include "tools/fuzz/comm_oracle.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace ppsched::oracle {

const std::vector<P2PRow>& own_p2p_rows() {
  using P = PeerRule;
  static const std::vector<P2PRow> rows = {
      // Body: activations down the chain, gradients up; one meta per stage and direction
      // before the first forward payload (_meta_been_send/_recv), none for gradients.
      {Op::FWD_SEND, true, P::NextStage, Op::FWD_RECV, +1, Meta::FirstPerStage},
      {Op::FWD_RECV, false, P::PrevStage, Op::FWD_SEND, -1, Meta::FirstPerStage},
      {Op::BWD_SEND, true, P::PrevStage, Op::BWD_RECV, -1, Meta::None},
      {Op::BWD_RECV, false, P::NextStage, Op::BWD_SEND, +1, Meta::None},
      // Data: beside the forward chain in the body, owner -> rank 0 in the MPipe prefix; a
      // meta before every message.
      {Op::DATA_SEND, true, P::DataChain, Op::DATA_RECV, +1, Meta::EveryStep},
      {Op::DATA_RECV, false, P::DataChain, Op::DATA_SEND, -1, Meta::EveryStep},
      // MPipe: features and tower inputs owner -> rank 0, feature gradients back (owner
      // backward); a meta before every message.
      {Op::MPIPE_FWD_SEND, true, P::OwnerToRank0, Op::MPIPE_FWD_RECV, 0, Meta::EveryStep},
      {Op::MPIPE_FWD_RECV, false, P::Rank0ToOwner, Op::MPIPE_FWD_SEND, 0, Meta::EveryStep},
      {Op::MPIPE_GRAPH_SEND, true, P::OwnerToRank0, Op::MPIPE_GRAPH_RECV, 0, Meta::EveryStep},
      {Op::MPIPE_GRAPH_RECV, false, P::Rank0ToOwner, Op::MPIPE_GRAPH_SEND, 0, Meta::EveryStep},
      {Op::MPIPE_GRAD_SEND, true, P::Rank0ToOwner, Op::MPIPE_GRAD_RECV_WITH_BACKWARD, 0, Meta::EveryStep},
      {Op::MPIPE_GRAD_RECV_WITH_BACKWARD, false, P::OwnerToRank0, Op::MPIPE_GRAD_SEND, 0, Meta::EveryStep},
  };
  return rows;
}

const P2PRow* own_row(Op op) {
  for (const P2PRow& r : own_p2p_rows())
    if (r.op == op) return &r;
  return nullptr;
}

const std::vector<CollectiveRow>& own_collective_rows() {
  using C = CollectiveScope;
  static const std::vector<CollectiveRow> rows = {
      // FSDP's collectives run over the data-parallel group: no pipeline rank waits on them.
      {Op::FSDP_UNSHARD, C::DataParallel},
      {Op::FSDP_RESHARD, C::DataParallel},
      {Op::FSDP_REDUCE_GRAD, C::DataParallel},
      // A tied-parameter all-reduce names its group; a replicated stage's gradient sync runs
      // over the ranks holding a copy; MPipe's broadcast and gradient reduce over every rank.
      {Op::ALL_REDUCE, C::ExplicitGroup},
      {Op::REPLICA_GRAD_SYNC, C::Replicas},
      {Op::MPIPE_PARAM_BROADCAST, C::AllPipelineRanks},
      {Op::MPIPE_GRAD_REDUCE, C::AllPipelineRanks},
  };
  return rows;
}

const CollectiveRow* own_collective_row(Op op) {
  for (const CollectiveRow& r : own_collective_rows())
    if (r.op == op) return &r;
  return nullptr;
}

namespace {

bool own_send(Op op) {
  const P2PRow* r = own_row(op);
  return r && r->send;
}
bool own_recv(Op op) {
  const P2PRow* r = own_row(op);
  return r && !r->send;
}
Meta own_meta(Op op) {
  const P2PRow* r = own_row(op);
  return r ? r->meta : Meta::None;
}

// The peer from the oracle's own peer rule (an explicit "peer" overrides it); -1 if none.
int peer_from_table(const Schedule& s, const Step& st) {
  if (st.peer != kNone) return st.peer;
  const P2PRow* row = own_row(st.op);
  if (!row) return -1;
  auto rank_of_stage = [&](int stage) { return stage >= 0 && stage < s.stages ? s.rank_of(stage) : -1; };
  auto owner = [&](int micro) { return s.mpipe && micro >= 0 && micro < s.micro_batches ? s.owner_of(micro) : -1; };
  const bool sends = row->send;
  switch (row->peer) {
    case PeerRule::None: return -1;
    case PeerRule::NextStage: return st.stage >= 0 ? rank_of_stage(st.stage + 1) : -1;
    case PeerRule::PrevStage: return st.stage >= 0 ? rank_of_stage(st.stage - 1) : -1;
    case PeerRule::DataChain:
      if (st.stage >= 0) return rank_of_stage(sends ? st.stage + 1 : st.stage - 1);
      return sends ? 0 : owner(st.micro);
    case PeerRule::OwnerToRank0: return 0;
    case PeerRule::Rank0ToOwner: return owner(st.micro);
  }
  return -1;
}

std::string where(int rank, int step, int sub, bool group = false) {
  return std::string(group ? "group: " : "p2p: ") + "rank " + std::to_string(rank) + " step " + std::to_string(step) + (sub >= 0 ? "." + std::to_string(sub) : "");
}

// One rank's communication, step by step (hyper_parallel.md §3.1-3.3).
class RankRun {
 public:
  RankRun(const Schedule& s, const CheckOptions& o, int rank, RankComm& out) : s_(s), o_(o), r_(rank), out_(out) {}

  std::vector<CommOp> run() {
    const Program& prog = s_.programs[static_cast<size_t>(r_)];
    bool features_received = false;
    for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
      if (!prog[static_cast<size_t>(i)]) continue;
      const Step& st = *prog[static_cast<size_t>(i)];
      if (st.op == Op::BATCH_SEND_RECV) {
        batch(st, i);
      } else if (const CollectiveRow* row = own_collective_row(st.op)) {
        collective(st, i, row->scope);
      } else if (own_row(st.op)) {
        if (st.op == Op::MPIPE_FWD_RECV && o_.mpipe_batched_recv) {
          // The first feature receive receives every micro's features at once; the later
          // ones find theirs done (§1.3).
          if (!features_received) batched_features(prog, i);
          features_received = true;
          continue;
        }
        single(st, i);
      } else {
        // A compute step waits the cached receive it consumes (overlap_p2p, §3.2).
        if (is_composite(st.op)) {
          for (const Step& leaf : st.sub_steps()) consume(leaf);
        } else {
          consume(st);
        }
      }
    }
    // End of the run: the deferred sends, then whatever receive handles are left (§3.1 5-6).
    std::vector<Transfer> drain = deferred_;
    for (const auto& [key, ts] : cached_) drain.insert(drain.end(), ts.begin(), ts.end());
    std::sort(drain.begin(), drain.end());
    drain.erase(std::unique(drain.begin(), drain.end()), drain.end());
    if (!drain.empty()) ops_.push_back({CommOpKind::Wait, drain, {}, Op::FWD, -1, -1});
    return std::move(ops_);
  }

 private:
  using Key = std::tuple<bool, int, int>;  // (forward cache, stage, micro)

  bool meta_before(const Step& st) {
    switch (own_meta(st.op)) {
      case Meta::None: return false;
      case Meta::EveryStep: return true;
      case Meta::FirstPerStage: {
        if (o_.dyn_shape) return true;
        // _meta_been_send / _meta_been_recv of the stage object: once per process.
        if (st.stage < 0 || st.stage >= s_.stages) return true;
        return meta_done_.insert({st.stage, own_send(st.op)}).second;
      }
    }
    return false;
  }
  int tensors_of(const Step& st) const {
    // Body transfers carry one activation or gradient; MPipe and data transfers one message
    // per tensor.
    if (own_meta(st.op) != Meta::EveryStep) return 1;
    return std::max(1, static_cast<int>(st.tensors().size()));
  }
  bool usable(const Step& st, int i, int sub, int& peer) {
    peer = peer_from_table(s_, st);
    if (peer >= 0 && peer < s_.ranks && peer != r_) return true;
    out_.problems.push_back(where(r_, i, sub));
    return false;
  }
  static bool body_recv(const Step& st) { return st.op == Op::FWD_RECV || st.op == Op::BWD_RECV; }
  static Key key_of(const Step& recv) { return {recv.op == Op::FWD_RECV, recv.stage, recv.micro}; }

  void single(const Step& st, int i) {
    int peer = -1;
    if (!usable(st, i, -1, peer)) return;
    const bool send = own_send(st.op);
    const bool meta = meta_before(st);
    const bool deferred =
        send && ((o_.overlap_p2p && (st.op == Op::FWD_SEND || st.op == Op::BWD_SEND)) ||
                 (o_.mpipe_batched_recv &&
                  (st.op == Op::MPIPE_FWD_SEND || st.op == Op::MPIPE_GRAPH_SEND || st.op == Op::MPIPE_GRAD_SEND)));
    const bool cached = !send && o_.overlap_p2p && body_recv(st);
    // Each tensor is a pair: a blocking meta, then its payload (§3.3): blocking, or an
    // isend/irecv waited later.
    std::vector<Transfer> payloads;
    for (int t = 0; t < tensors_of(st); ++t) {
      if (meta) ops_.push_back({CommOpKind::Block, {{send, peer, true, i, -1, t}}, {}, Op::FWD, -1, -1});
      payloads.push_back({send, peer, false, i, -1, t});
      ops_.push_back({deferred || cached ? CommOpKind::Post : CommOpKind::Block, {payloads.back()}, {}, Op::FWD, -1, -1});
    }
    if (deferred) deferred_.insert(deferred_.end(), payloads.begin(), payloads.end());
    if (cached) cached_[key_of(st)] = payloads;  // a second receive on the key overwrites the first
  }

  void batch(const Step& st, int i) {
    // Metas one at a time in sub-step order while the specs are built, then every payload
    // as one group (§3.3, README).
    std::vector<Transfer> payloads;
    std::vector<Key> keys;
    bool only_sends = true;
    for (int k = 0; k < static_cast<int>(st.sub_steps().size()); ++k) {
      const Step& leaf = st.sub_steps()[static_cast<size_t>(k)];
      int peer = -1;
      if (own_recv(leaf.op)) {
        only_sends = false;
        if (o_.overlap_p2p && body_recv(leaf)) keys.push_back(key_of(leaf));
      }
      if (!usable(leaf, i, k, peer)) continue;
      const bool send = own_send(leaf.op);
      const bool meta = meta_before(leaf);
      for (int t = 0; t < tensors_of(leaf); ++t) {
        if (meta) ops_.push_back({CommOpKind::Block, {{send, peer, true, i, k, t}}, {}, Op::FWD, -1, -1});
        payloads.push_back({send, peer, false, i, k, t});
      }
    }
    if (o_.overlap_p2p && (!keys.empty() || only_sends)) {
      // The batch handle is cached under every receive key it serves, its sends riding on
      // it; a send-only batch is drained at the end (§3.2).
      ops_.push_back({CommOpKind::Post, payloads, {}, Op::FWD, -1, i});
      if (keys.empty()) deferred_.insert(deferred_.end(), payloads.begin(), payloads.end());
      for (const Key& k : keys) cached_[k] = payloads;
    } else {
      ops_.push_back({CommOpKind::Block, payloads, {}, Op::FWD, -1, i});
    }
  }

  void batched_features(const Program& prog, int first) {
    // For every feature receive not yet done, ascending micro: a blocking meta, an irecv;
    // then wait them all.
    std::vector<std::pair<int, int>> todo;  // (micro, step)
    for (int j = first; j < static_cast<int>(prog.size()); ++j)
      if (prog[static_cast<size_t>(j)] && prog[static_cast<size_t>(j)]->op == Op::MPIPE_FWD_RECV)
        todo.emplace_back(prog[static_cast<size_t>(j)]->micro, j);
    std::stable_sort(todo.begin(), todo.end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::vector<Transfer> all;
    for (auto [micro, j] : todo) {
      const Step& st = *prog[static_cast<size_t>(j)];
      int peer = -1;
      if (!usable(st, j, -1, peer)) continue;
      for (int t = 0; t < tensors_of(st); ++t) {
        ops_.push_back({CommOpKind::Block, {{false, peer, true, j, -1, t}}, {}, Op::FWD, -1, -1});
        ops_.push_back({CommOpKind::Post, {{false, peer, false, j, -1, t}}, {}, Op::FWD, -1, -1});
        all.push_back({false, peer, false, j, -1, t});
      }
    }
    ops_.push_back({CommOpKind::Wait, all, {}, Op::FWD, -1, -1});
  }

  void collective(const Step& st, int i, CollectiveScope scope) {
    if (scope == CollectiveScope::DataParallel) return;  // outside the pipeline group
    std::vector<int> members;
    int subject = -1;
    if (scope == CollectiveScope::AllPipelineRanks) {
      for (int q = 0; q < s_.ranks; ++q) members.push_back(q);
    } else if (scope == CollectiveScope::Replicas) {
      // The ranks placing a copy of the step's model stage (stages k with k mod S equal).
      const int S = s_.stages / s_.pipes, model = st.stage % S;
      std::set<int> g;
      for (int k = model; k < s_.stages; k += S) g.insert(s_.placement.stage_to_rank[static_cast<size_t>(k)]);
      members.assign(g.begin(), g.end());
      subject = model;
      if (members.size() < 2 || !g.count(r_)) {
        out_.problems.push_back(where(r_, i, -1, true));
        return;
      }
    } else {
      std::set<int> g(st.group().begin(), st.group().end());
      members.assign(g.begin(), g.end());
      if (members.empty() || members.front() < 0 || members.back() >= s_.ranks || !g.count(r_)) {
        out_.problems.push_back(where(r_, i, -1, true));
        return;
      }
    }
    CommOp op{CommOpKind::Collective, {}, members, st.op, i, -1, subject};
    ops_.push_back(std::move(op));
  }

  void consume(const Step& leaf) {
    if (cached_.empty()) return;
    if (leaf.op != Op::FWD && leaf.op != Op::BWD && leaf.op != Op::BWD_INPUT) return;
    auto it = cached_.find({leaf.op == Op::FWD, leaf.stage, leaf.micro});
    if (it == cached_.end()) return;
    ops_.push_back({CommOpKind::Wait, it->second, {}, Op::FWD, -1, -1});
    cached_.erase(it);
  }

  const Schedule& s_;
  const CheckOptions& o_;
  int r_;
  RankComm& out_;
  std::vector<CommOp> ops_;
  std::set<std::pair<int, bool>> meta_done_;
  std::vector<Transfer> deferred_;
  std::map<Key, std::vector<Transfer>> cached_;
};

std::string name(const Transfer& t) {
  return std::string(t.send ? "send" : "recv") + (t.meta ? " meta" : "") + (t.send ? " to " : " from ") +
         std::to_string(t.peer) + " of step " + std::to_string(t.step) + (t.sub >= 0 ? "." + std::to_string(t.sub) : "") +
         (t.tensor > 0 ? " tensor " + std::to_string(t.tensor) : "");
}

const Step& leaf(const Schedule& s, int rank, const Transfer& t) {
  const Step& top = *s.programs[static_cast<size_t>(rank)][static_cast<size_t>(t.step)];
  return t.sub >= 0 ? top.sub_steps()[static_cast<size_t>(t.sub)] : top;
}

}  // namespace

bool Transfer::operator<(const Transfer& o) const {
  return std::tie(step, sub, tensor, meta, send, peer) < std::tie(o.step, o.sub, o.tensor, o.meta, o.send, o.peer);
}

RankComm reference_comm(const Schedule& s, const CheckOptions& o) {
  RankComm c;
  for (int r = 0; r < s.ranks; ++r) c.ranks.push_back(RankRun(s, o, r, c).run());
  std::sort(c.problems.begin(), c.problems.end());
  c.stream_ordered = o.backend == P2PBackend::Nccl;
  return c;
}

RankComm lowered_comm(const Schedule& s, const CommModel& m) {
  RankComm c;
  auto transfer = [&](int32_t id) {
    const Message& msg = m.messages[static_cast<size_t>(id)];
    const Channel& ch = m.channels[static_cast<size_t>(msg.channel)];
    return Transfer{msg.send, msg.send ? ch.dst : ch.src, msg.meta, static_cast<int>(msg.step_index), msg.sub,
                    static_cast<int>(msg.tensor)};
  };
  for (int r = 0; r < m.ranks; ++r) {
    std::vector<CommOp> ops;
    for (const Action& a : m.actions[static_cast<size_t>(r)]) {
      CommOp op;
      switch (a.kind) {
        case ActionKind::Local: continue;
        case ActionKind::Phase: op.kind = CommOpKind::Block; break;
        case ActionKind::Post: op.kind = CommOpKind::Post; break;
        case ActionKind::Wait: op.kind = CommOpKind::Wait; break;
        case ActionKind::Collective: {
          const CollectiveCall& call = m.collective_calls[static_cast<size_t>(a.collective)];
          op.kind = CommOpKind::Collective;
          op.members = m.groups[static_cast<size_t>(call.group)].members;
          op.subject = call.subject;
          op.op = call.op;
          op.step = call.step_index;
          break;
        }
      }
      for (int j = 0; j < a.count; ++j) op.transfers.push_back(transfer(m.message_of(a, j)));
      if (op.kind == CommOpKind::Wait) std::sort(op.transfers.begin(), op.transfers.end());
      ops.push_back(std::move(op));
    }
    c.ranks.push_back(std::move(ops));
  }
  for (const Violation& v : m.problems)
    if (!v.steps.empty())
      c.problems.push_back(where(v.steps[0].rank, v.steps[0].index, v.steps[0].sub, v.kind == ViolationKind::CollectiveMismatch));
  std::sort(c.problems.begin(), c.problems.end());
  (void)s;
  return c;
}

std::string describe(const CommOp& op) {
  std::string out;
  switch (op.kind) {
    case CommOpKind::Block: out = "block"; break;
    case CommOpKind::Post: out = "post"; break;
    case CommOpKind::Wait: out = "wait"; break;
    case CommOpKind::Collective: out = std::string(op_name(op.op)) + " at step " + std::to_string(op.step); break;
  }
  if (op.kind == CommOpKind::Collective) {
    out += " over {";
    for (size_t k = 0; k < op.members.size(); ++k) out += (k ? "," : "") + std::to_string(op.members[k]);
    return out + "}";
  }
  out += " [";
  for (size_t k = 0; k < op.transfers.size(); ++k) out += (k ? "; " : "") + name(op.transfers[k]);
  return out + "]";
}

std::string first_difference(const Schedule& s, const RankComm& ref, const RankComm& low) {
  if (ref.problems != low.problems) {
    auto list = [](const std::vector<std::string>& v) {
      std::string out;
      for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
      return out.empty() ? std::string("none") : out;
    };
    return "unusable P2P steps or groups: the reference finds " + list(ref.problems) + ", the lowering " + list(low.problems);
  }
  for (int r = 0; r < s.ranks; ++r) {
    auto norm = [](CommOp op) {
      if (op.kind == CommOpKind::Wait) std::sort(op.transfers.begin(), op.transfers.end());
      return op;
    };
    const auto& a = ref.ranks[static_cast<size_t>(r)];
    const auto& b = low.ranks[static_cast<size_t>(r)];
    for (size_t k = 0; k < std::max(a.size(), b.size()); ++k) {
      if (k >= a.size()) return "rank " + std::to_string(r) + ": the lowering has an extra " + std::to_string(k) + "th operation, " + describe(b[k]);
      if (k >= b.size()) return "rank " + std::to_string(r) + ": the lowering stops before the reference's " + std::to_string(k) + "th operation, " + describe(a[k]);
      CommOp x = norm(a[k]), y = norm(b[k]);
      bool same = x.kind == y.kind && x.transfers == y.transfers;
      if (same && x.kind == CommOpKind::Collective) same = x.members == y.members && x.op == y.op && x.step == y.step && x.subject == y.subject;
      if (!same)
        return "rank " + std::to_string(r) + ", communication operation " + std::to_string(k) + ": the reference does " +
               describe(x) + ", the lowering " + describe(y);
    }
  }
  return "";
}

std::string posting_order(const Schedule& s, const CommModel& m) {
  std::vector<int32_t> next_send(m.channels.size(), 0), next_recv(m.channels.size(), 0);
  const std::vector<int32_t> position = fifo_positions(m);  // the order the lowering numbered them in
  for (int r = 0; r < m.ranks; ++r)
    for (const Action& a : m.actions[static_cast<size_t>(r)]) {
      if (a.kind != ActionKind::Phase && a.kind != ActionKind::Post) continue;
      for (int j = 0; j < a.count; ++j) {
        const int32_t id = m.message_of(a, j);
        const Message& msg = m.messages[static_cast<size_t>(id)];
        int32_t& next = (msg.send ? next_send : next_recv)[static_cast<size_t>(msg.channel)];
        const int32_t k = position[static_cast<size_t>(id)];
        if (k != next)
          return "rank " + std::to_string(r) + " posts " + describe_message(s, m, msg) + " at step " + std::to_string(msg.step_index) +
                 " as its " + std::to_string(next) + "th message on the channel, but the lowering placed it " +
                 std::to_string(k) + "th";
        ++next;
      }
    }
  return "";
}

bool completes(const Schedule& s, const RankComm& c, CommMode mode) {
  const int R = s.ranks;
  // Channel positions: the k-th send (receive) a rank posts toward a peer.
  std::vector<std::map<Transfer, int>> pos(static_cast<size_t>(R));
  std::map<std::pair<int, int>, int> posted_sends, posted_recvs;  // (src, dst) -> count posted
  std::vector<std::vector<int>> coll_pos(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    std::map<std::pair<int, bool>, int> next;
    std::map<Transfer, int> at;
    std::map<std::vector<int>, int> calls;
    for (const CommOp& op : c.ranks[static_cast<size_t>(r)]) {
      if (op.kind == CommOpKind::Block || op.kind == CommOpKind::Post)
        for (const Transfer& t : op.transfers) at[t] = next[{t.peer, t.send}]++;
      coll_pos[static_cast<size_t>(r)].push_back(op.kind == CommOpKind::Collective ? calls[op.members]++ : -1);
    }
    pos[static_cast<size_t>(r)] = std::move(at);
  }
  auto k_of = [&](int r, const Transfer& t) { return pos[static_cast<size_t>(r)].at(t); };
  auto post = [&](int r, const Transfer& t) {
    auto& n = t.send ? posted_sends[{r, t.peer}] : posted_recvs[{t.peer, r}];
    n = std::max(n, k_of(r, t) + 1);
  };
  // Done once both ends are on the wire (counted in posted_*); an eager send once it is.
  auto done = [&](int r, const Transfer& t) {
    const int k = k_of(r, t);
    if (t.send) return posted_sends[{r, t.peer}] > k && (mode == CommMode::Eager || posted_recvs[{r, t.peer}] > k);
    return posted_recvs[{t.peer, r}] > k && posted_sends[{t.peer, r}] > k;
  };
  // Under stream order: per rank, its Block/Post ops (indices), how many reached the wire, and
  // which ones the rank has issued.
  std::vector<std::vector<size_t>> posting(static_cast<size_t>(R));
  std::vector<size_t> on_wire(static_cast<size_t>(R), 0);
  std::vector<std::vector<bool>> issued(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    const auto& ops = c.ranks[static_cast<size_t>(r)];
    issued[static_cast<size_t>(r)].assign(ops.size(), false);
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == CommOpKind::Block || ops[i].kind == CommOpKind::Post) posting[static_cast<size_t>(r)].push_back(i);
  }
  auto admit = [&](int r) {
    bool any = false;
    const auto& ops = c.ranks[static_cast<size_t>(r)];
    const auto& mine = posting[static_cast<size_t>(r)];
    size_t& n = on_wire[static_cast<size_t>(r)];
    while (n < mine.size() && issued[static_cast<size_t>(r)][mine[n]]) {
      if (n > 0)
        for (const Transfer& t : ops[mine[n - 1]].transfers)
          if (!done(r, t)) return any;
      for (const Transfer& t : ops[mine[n]].transfers) post(r, t);
      ++n;
      any = true;
    }
    return any;
  };
  std::map<std::pair<std::vector<int>, int>, std::set<int>> arrived;  // (group, position) -> ranks there
  std::vector<size_t> pc(static_cast<size_t>(R), 0);
  std::vector<bool> started(static_cast<size_t>(R), false);
  bool moved = true;
  while (moved) {
    moved = false;
    for (int r = 0; r < R; ++r) {
      const auto& ops = c.ranks[static_cast<size_t>(r)];
      size_t& i = pc[static_cast<size_t>(r)];
      if (c.stream_ordered && admit(r)) moved = true;
      while (i < ops.size()) {
        const CommOp& op = ops[i];
        if (!started[static_cast<size_t>(r)]) {
          started[static_cast<size_t>(r)] = true;
          if (op.kind == CommOpKind::Block || op.kind == CommOpKind::Post) {
            if (c.stream_ordered) {
              issued[static_cast<size_t>(r)][i] = true;
              admit(r);
            } else {
              for (const Transfer& t : op.transfers) post(r, t);
            }
          }
          if (op.kind == CommOpKind::Collective) arrived[{op.members, coll_pos[static_cast<size_t>(r)][i]}].insert(r);
          moved = true;
        }
        bool can = true;
        if (op.kind == CommOpKind::Block || op.kind == CommOpKind::Wait)
          for (const Transfer& t : op.transfers) can = can && done(r, t);
        if (op.kind == CommOpKind::Collective)
          can = arrived[{op.members, coll_pos[static_cast<size_t>(r)][i]}].size() == op.members.size();
        if (!can) break;
        ++i;
        started[static_cast<size_t>(r)] = false;
        moved = true;
      }
    }
  }
  for (int r = 0; r < R; ++r)
    if (pc[static_cast<size_t>(r)] < c.ranks[static_cast<size_t>(r)].size()) return false;
  return true;
}

std::string matching(const Schedule& s, const RankComm& c) {
  for (const auto& p : c.problems)
    if (p.rfind("p2p: ", 0) == 0) return p.substr(5) + ": a transfer without a usable peer";
  // Per ordered pair (src, dst): the sends of src and the receives of dst, in posting order,
  // with the group (batch step, or none) each payload travels in.
  struct Posted {
    int rank;
    Transfer t;
    int group;
  };
  std::map<std::pair<int, int>, std::vector<Posted>> sends, recvs;
  // Each payload's group position toward its peer: the groups (a batch, or a lone payload) a
  // rank posts toward one peer, counted in posting order; per (src, dst), as sends / recvs.
  std::map<std::pair<int, int>, std::vector<int>> send_turn, recv_turn;
  std::set<std::pair<int, int>> batched;  // unordered pairs with a batched payload
  for (int r = 0; r < s.ranks; ++r) {
    std::map<int, std::pair<int, int>> last;  // peer -> (its last group's batch step or -1, position)
    for (const CommOp& op : c.ranks[static_cast<size_t>(r)])
      if (op.kind == CommOpKind::Block || op.kind == CommOpKind::Post)
        for (const Transfer& t : op.transfers) {
          (t.send ? sends[{r, t.peer}] : recvs[{t.peer, r}]).push_back({r, t, t.meta ? -1 : op.batch});
          int turn = -1;
          if (!t.meta) {
            auto [it, fresh] = last.try_emplace(t.peer, std::pair<int, int>{-1, -1});
            if (fresh || op.batch < 0 || it->second.first != op.batch) it->second = {op.batch, it->second.second + 1};
            turn = it->second.second;
            if (op.batch >= 0) batched.insert(std::minmax(r, t.peer));
          }
          (t.send ? send_turn[{r, t.peer}] : recv_turn[{t.peer, r}]).push_back(turn);
        }
  }
  std::set<std::pair<int, int>> pairs;
  for (auto& [p, _] : sends) pairs.insert(p);
  for (auto& [p, _] : recvs) pairs.insert(p);
  // Batch shapes: each batch's payloads toward one peer face exactly one group of that peer.
  std::map<std::pair<int, int>, std::set<std::pair<int, int>>> faces;  // (rank, group) -> (rank, group)
  for (auto [src, dst] : pairs) {
    const auto& a = sends[{src, dst}];
    const auto& b = recvs[{src, dst}];
    std::string chan = "rank " + std::to_string(src) + " -> rank " + std::to_string(dst);
    for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) {
      const Step& snd = leaf(s, src, a[k].t);
      const Step& rcv = leaf(s, dst, b[k].t);
      std::string at = chan + ", message " + std::to_string(k) + " (" + short_label(snd) + " against " + short_label(rcv) + "): ";
      if (a[k].t.meta != b[k].t.meta) return at + "a meta meets a payload";
      const P2PRow* row = own_row(snd.op);
      if (!row || row->partner != rcv.op) return at + "not the partner step type";
      if (snd.micro != rcv.micro) return at + "other micro-batch";
      if ((snd.stage >= 0 || rcv.stage >= 0) && snd.peer == kNone && rcv.peer == kNone &&
          rcv.stage != (snd.stage >= 0 ? snd.stage + row->stage_delta : -1))
        return at + "other stage";
      if (a[k].t.tensor != b[k].t.tensor) return at + "other tensor";
      if (!snd.tensors().empty() && !rcv.tensors().empty()) {
        if (snd.tensors().size() != rcv.tensors().size()) return at + "other tensor count";
        size_t t = static_cast<size_t>(a[k].t.tensor);
        if (t < snd.tensors().size() && !(snd.tensors()[t] == rcv.tensors()[t])) return at + "other shape or dtype";
      }
      if (a[k].t.meta || (a[k].group < 0 && b[k].group < 0)) continue;
      // A lone payload is a group of its own (-2 - its position on the channel).
      std::pair<int, int> x{src, a[k].group >= 0 ? a[k].group : -2 - static_cast<int>(k)};
      std::pair<int, int> y{dst, b[k].group >= 0 ? b[k].group : -2 - static_cast<int>(k) - 1000000};
      faces[x].insert(y);
      faces[y].insert(x);
    }
    if (a.size() != b.size())
      return chan + ": " + std::to_string(a.size()) + " messages sent, " + std::to_string(b.size()) + " received";
  }
  for (auto& [side, partners] : faces) {
    if (side.second < 0) continue;
    // Toward each peer separately: a batch with two peers faces one group of each.
    std::map<int, std::set<std::pair<int, int>>> by_peer;
    for (auto& p : partners) by_peer[p.first].insert(p);
    for (auto& [peer, ps] : by_peer) {
      bool ok = ps.size() == 1;
      if (ok) {
        std::set<std::pair<int, int>> back;
        for (auto& q : faces[*ps.begin()])
          if (q.first == side.first) back.insert(q);
        ok = back.size() == 1 && *back.begin() == side;
      }
      if (!ok)
        return "the batch at rank " + std::to_string(side.first) + " step " + std::to_string(side.second) +
               " does not face exactly one mirrored group of rank " + std::to_string(peer);
    }
  }
  // Where a rank pair exchanges batches (one communicator per pair, served in queue order):
  // every payload travels in the same turn on both sides, the k-th group of one facing the k-th
  // of the other.
  for (auto [src, dst] : pairs) {
    if (!batched.count(std::minmax(src, dst))) continue;
    const auto& a = send_turn[{src, dst}];
    const auto& b = recv_turn[{src, dst}];
    for (size_t k = 0; k < std::min(a.size(), b.size()); ++k)
      if (a[k] >= 0 && b[k] >= 0 && a[k] != b[k])
        return "rank " + std::to_string(src) + " -> rank " + std::to_string(dst) + ", message " + std::to_string(k) +
               ": sent in group " + std::to_string(a[k]) + " toward the peer, received in group " + std::to_string(b[k]) +
               " (groups out of turn on the pair's communicator)";
  }
  return "";
}

}  // namespace ppsched::oracle
