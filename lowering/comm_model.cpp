#include "lowering/comm_model.hpp"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "schedule/errors.hpp"

namespace ppsched {
namespace {

class Builder {
 public:
  Builder(const Schedule& s, const CheckOptions& o) : s_(s), o_(o) {
    m_.ranks = s.ranks;
    m_.actions.resize(static_cast<size_t>(s.ranks));
    m_.calls_by_rank.resize(static_cast<size_t>(s.ranks));
  }

  CommModel build() {
    const size_t steps = s_.slot_count();
    m_.messages.reserve(steps);
    for (int r = 0; r < s_.ranks; ++r) build_rank(r);
    pair_fifo_ends();
    if (o_.backend == P2PBackend::Nccl) order_streams();
    m_.testing_replay_buffers_sends = o_.testing_replay_buffers_sends;
    return std::move(m_);
  }

 private:
  // Pending non-blocking receives (overlap_p2p), keyed by the receive: its consumer looks up
  // (its input_recv, stage, micro).
  struct Key {
    Op recv;
    int stage, micro;
    bool operator<(const Key& o) const { return std::tie(recv, stage, micro) < std::tie(o.recv, o.stage, o.micro); }
  };

  // FIFO matching: the k-th send on a channel meets its k-th receive. Each message holds its
  // position k in `partner` so far; this turns positions into partners (-1: none), through the
  // sends' ids by channel and position (4 bytes a send, held only here).
  void pair_fifo_ends() {
    std::vector<size_t> first(m_.channels.size() + 1, 0);
    for (size_t c = 0; c < m_.channels.size(); ++c)
      first[c + 1] = first[c] + static_cast<size_t>(m_.channels[c].sends);
    std::vector<int32_t> send_at(first.back());
    for (size_t id = 0; id < m_.messages.size(); ++id) {
      Message& m = m_.messages[id];
      if (!m.send) continue;
      send_at[first[static_cast<size_t>(m.channel)] + static_cast<size_t>(m.partner)] = static_cast<int32_t>(id);
      m.partner = -1;
    }
    for (size_t id = 0; id < m_.messages.size(); ++id) {
      Message& m = m_.messages[id];
      if (m.send) continue;
      const size_t c = static_cast<size_t>(m.channel), k = static_cast<size_t>(m.partner);
      m.partner = -1;
      if (k >= static_cast<size_t>(m_.channels[c].sends)) continue;
      const int32_t send = send_at[first[c] + k];
      m.partner = send;
      m_.messages[static_cast<size_t>(send)].partner = static_cast<int32_t>(id);
    }
  }

  // NCCL's stream order (CommModel::stream_actions): only where some action posts without
  // waiting; a program of blocking phases leaves both vectors empty.
  void order_streams() {
    if (!posts_) return;
    m_.stream_actions.resize(static_cast<size_t>(m_.ranks));
    m_.stream_entry.assign(m_.messages.size(), -1);
    for (size_t r = 0; r < m_.actions.size(); ++r) {
      const auto& acts = m_.actions[r];
      for (size_t i = 0; i < acts.size(); ++i) {
        const Action& a = acts[i];
        if ((a.kind != ActionKind::Phase && a.kind != ActionKind::Post) || a.count == 0) continue;
        const auto entry = static_cast<int32_t>(m_.stream_actions[r].size());
        m_.stream_actions[r].push_back(static_cast<int32_t>(i));
        for (int j = 0; j < a.count; ++j) m_.stream_entry[static_cast<size_t>(m_.message_of(a, j))] = entry;
      }
    }
  }

  int channel_for(int src, int dst) {
    auto [it, added] = m_.channel_of_pair.try_emplace(CommModel::pair_key(src, dst), -1);
    int32_t& id = it->second;
    if (added) {
      id = static_cast<int32_t>(m_.channels.size());
      Channel c;
      c.src = src;
      c.dst = dst;
      m_.channels.push_back(c);
    }
    return id;
  }

  int32_t add_message(int rank, int peer, bool send, bool meta, int index, int sub, int tensor, int batch) {
    // A validated schedule is within these (schedule/validate.hpp); one built in code may not be.
    if (sub >= kMaxListed || tensor >= kMaxListed || index >= (int{1} << 24))
      throw InputError({"", rank, index, -1, sub >= kMaxListed ? ".sub_steps" : tensor >= kMaxListed ? ".tensors" : ""},
                       "the lowering packs a message's step index into 24 bits and its sub-step and tensor positions "
                       "into 15 and 14: at most " + std::to_string(kMaxListed) + " sub-steps or tensors a step");
    Message msg;
    msg.channel = channel_for(send ? rank : peer, send ? peer : rank);
    auto& ch = m_.channels[static_cast<size_t>(msg.channel)];
    int32_t& side = send ? ch.sends : ch.recvs;
    msg.send = send;
    msg.meta = meta;
    msg.step_index = index;
    msg.sub = sub;
    msg.tensor = tensor;
    // A batch's payloads are lowered with the batch's own step index (build_rank).
    assert(batch < 0 || batch == index);
    msg.in_batch = batch >= 0;
    msg.partner = side++;  // its position on its side of the channel, until pair_fifo_ends()
    int32_t id = static_cast<int32_t>(m_.messages.size());
    m_.messages.push_back(msg);
    return id;
  }

  void describe(Action& a, int rank, int index) const {
    const Step& st = *s_.programs[static_cast<size_t>(rank)][static_cast<size_t>(index)];
    a.step_index = index;
    a.op = st.op;
  }

  void action(int rank, ActionKind kind, int index, const int32_t* msgs = nullptr, size_t count = 0) {
    Action a;
    a.kind = kind;
    describe(a, rank, index);
    a.first = count == 1 ? msgs[0] : static_cast<int32_t>(m_.action_messages.size());
    // A validated step lists at most 2^14 sub-steps or tensors, but their product may pass this.
    if (count > Action::kMaxActionMessages)
      throw InputError({"", rank, index, -1, ""},
                       "the step posts or waits for " + std::to_string(count) + " messages at once; the lowering holds at most " +
                           std::to_string(Action::kMaxActionMessages) + " (a batch's payloads: its sub-steps' tensors)");
    a.count = static_cast<uint16_t>(count);
    posts_ = posts_ || kind == ActionKind::Post;
    for (size_t j = 0; j < count; ++j) {
      if (count > 1) m_.action_messages.push_back(msgs[j]);
      Message& m = m_.messages[static_cast<size_t>(msgs[j])];
      if (m.readers < Message::kManyReaders) ++m.readers;
    }
    m_.actions[static_cast<size_t>(rank)].push_back(a);
  }
  void action(int rank, ActionKind kind, int index, const std::vector<int32_t>& msgs) {
    action(rank, kind, index, msgs.data(), msgs.size());
  }
  void action(int rank, ActionKind kind, int index, int32_t msg) { action(rank, kind, index, &msg, 1); }

  void problem(ViolationKind kind, int rank, int index, int sub, const std::string& msg) {
    Violation v;
    v.kind = kind;
    v.ranks = {rank};
    v.steps = {step_ref(s_, rank, index, sub)};
    v.message = msg;
    m_.problems.push_back(std::move(v));
  }

  // Whether this P2P leaf exchanges a meta before its payload (per tensor for EveryStep).
  bool wants_meta(int rank, const Step& st) {
    switch (info(st.op).meta) {
      case Meta::None: return false;
      case Meta::EveryStep: return true;
      case Meta::FirstPerStage: {
        if (o_.dyn_shape) return true;
        // Once per stage object and direction, per process (flags never reset between runs).
        // Per rank (build_rank resets it): one bit per (stage, op).
        (void)rank;
        if (st.stage < 0 || st.stage >= s_.stages) return true;
        uint64_t& seen = meta_done_[static_cast<size_t>(st.stage)];
        const uint64_t bit = uint64_t{1} << static_cast<unsigned>(st.op);
        if (seen == 0) meta_touched_.push_back(st.stage);
        if (seen & bit) return false;
        seen |= bit;
        return true;
      }
    }
    return false;
  }

  int tensor_count(const Step& st) const {
    if (info(st.op).meta != Meta::EveryStep) return 1;  // body payload: one message
    return std::max<int>(1, static_cast<int>(st.tensors().size()));
  }

  // Whether the options put this P2P step's posting column in force (step table, Posting).
  bool non_blocking(const Step& st) const {
    switch (info(st.op).posting) {
      case Posting::Blocking: return false;
      case Posting::OverlapP2P: return o_.overlap_p2p;
      case Posting::MPipeBatched: return o_.mpipe_batched_recv;
    }
    return false;
  }
  bool deferred_send(const Step& st) const { return is_send(st.op) && non_blocking(st); }
  bool posted_recv(const Step& st) const {
    return is_recv(st.op) && info(st.op).posting == Posting::OverlapP2P && non_blocking(st);
  }
  bool batched_recv(const Step& st) const {
    return is_recv(st.op) && info(st.op).posting == Posting::MPipeBatched && non_blocking(st);
  }

  // Lowers one P2P leaf. Metas are blocking phases; a single step posts each payload right
  // after its meta (a blocking phase unless non-blocking); a batch's payloads are returned for
  // the caller to post as one group. Appends the payload message ids to `payload`.
  void lower_leaf(int rank, const Step& st, int index, int sub, int batch, bool& usable, std::vector<int32_t>& payload) {
    usable = true;
    int peer = peer_of(s_, rank, st);
    if (peer < 0 || peer >= s_.ranks || peer == rank) {
      usable = false;
      std::string why = peer == rank ? "its peer is its own rank " + std::to_string(rank)
                                     : "no peer can be derived (" +
                                           std::string(st.stage >= 0 && stage_places(st.op) ? "no neighbouring stage" : "no MPipe owner") + ")";
      problem(ViolationKind::P2PMismatch, rank, index, sub,
              short_label(st) + " cannot be matched: " + why + ". Give an explicit \"peer\" or fix the stage.");
      return;
    }
    bool send = is_send(st.op);
    int n = tensor_count(st);
    bool meta = wants_meta(rank, st);
    if (o_.testing_meta_after_payload && meta && info(st.op).meta == Meta::FirstPerStage && batch < 0 &&
        !deferred_send(st) && !posted_recv(st)) {
      action(rank, ActionKind::Phase, index, add_message(rank, peer, send, false, index, sub, 0, -1));
      action(rank, ActionKind::Phase, index, add_message(rank, peer, send, true, index, sub, 0, -1));
      usable = false;  // lowered here: the caller posts nothing more
      return;
    }
    for (int t = 0; t < n; ++t) {
      if (meta) {
        int32_t id = add_message(rank, peer, send, true, index, sub, t, -1);
        action(rank, ActionKind::Phase, index, id);
      }
      payload.push_back(add_message(rank, peer, send, false, index, sub, t, batch));
      // A single step issues each tensor as a pair, meta then payload (§3.3), in the order
      // the messages take their channel positions; a batch posts its payloads as one group.
      if (batch < 0)
        action(rank, deferred_send(st) || posted_recv(st) ? ActionKind::Post : ActionKind::Phase, index, payload.back());
    }
  }

  void wait_pending_for(int rank, const Step& st, int index) {
    if (pending_.empty()) return;
    auto consume = [&](const Step& leaf) {
      const std::optional<Op> recv = info(leaf.op).input_recv;
      if (!recv) return;
      auto it = pending_.find(Key{*recv, leaf.stage, leaf.micro});
      if (it == pending_.end()) return;
      action(rank, ActionKind::Wait, index, it->second);
      pending_.erase(it);
    };
    if (is_composite(st.op))
      for (const auto& sub : st.sub_steps()) consume(sub);
    else
      consume(st);
  }

  void build_rank(int r) {
    const Program& prog = s_.programs[static_cast<size_t>(r)];
    pending_.clear();
    for (int32_t stage : meta_touched_) meta_done_[static_cast<size_t>(stage)] = 0;
    meta_touched_.clear();
    m_.actions[static_cast<size_t>(r)].reserve(prog.size());
    std::vector<int32_t> deferred;  // sends waited at the end of the run
    bool recvs_batched = false;
    for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
      const Slot& slot = prog[static_cast<size_t>(i)];
      if (!slot) continue;
      const Step& st = *slot;
      const auto& inf = info(st.op);
      if (inf.kind == StepKind::Compute || inf.kind == StepKind::Local ||
          inf.composite == CompositeKind::Overlap) {
        wait_pending_for(r, st, i);
        action(r, ActionKind::Local, i);
        continue;
      }
      if (inf.kind == StepKind::Collective) {
        if (inf.collective == CollectiveScope::DataParallel) {
          action(r, ActionKind::Local, i);
          continue;
        }
        add_collective(r, st, i);
        continue;
      }
      if (inf.composite == CompositeKind::Batch) {
        std::vector<int32_t> payloads;
        std::vector<Key> keys;
        bool all_sends = true;
        for (int k = 0; k < static_cast<int>(st.sub_steps().size()); ++k) {
          const Step& leaf = st.sub_steps()[static_cast<size_t>(k)];
          bool usable = false;
          lower_leaf(r, leaf, i, k, i, usable, payloads);
          if (is_recv(leaf.op)) {
            all_sends = false;
            if (posted_recv(leaf)) keys.push_back({leaf.op, leaf.stage, leaf.micro});
          }
        }
        if (o_.overlap_p2p && (!keys.empty() || all_sends)) {
          // The batch's handle is cached under every receive key it serves (its sends ride
          // on it); a send-only batch is drained at the end (reference §3.2).
          action(r, ActionKind::Post, i, payloads);
          if (keys.empty()) deferred.insert(deferred.end(), payloads.begin(), payloads.end());
          for (const Key& k : keys) pending_[k] = payloads;
        } else {
          action(r, ActionKind::Phase, i, payloads);
        }
        continue;
      }
      // A single P2P step.
      if (batched_recv(st)) {
        if (recvs_batched) continue;  // already received by the first one
        recvs_batched = true;
        lower_batched_recvs(r, prog, i);
        continue;
      }
      bool usable = false;
      std::vector<int32_t>& payload = scratch_;
      payload.clear();
      lower_leaf(r, st, i, -1, -1, usable, payload);
      if (!usable) continue;
      // lower_leaf posted the payloads (blocking, or not where they are waited later).
      if (deferred_send(st)) {
        deferred.insert(deferred.end(), payload.begin(), payload.end());
      } else if (posted_recv(st)) {
        pending_[{st.op, st.stage, st.micro}] = payload;
      }
    }
    // Receives never consumed and deferred sends are drained at the end of the run.
    for (auto& [k, msgs] : pending_) deferred.insert(deferred.end(), msgs.begin(), msgs.end());
    if (!deferred.empty()) {
      std::sort(deferred.begin(), deferred.end());
      deferred.erase(std::unique(deferred.begin(), deferred.end()), deferred.end());
      // Attributed to the last step: a program may end with idle slots, which have no step.
      int last = static_cast<int>(prog.size()) - 1;
      while (last > 0 && !prog[static_cast<size_t>(last)]) --last;
      action(r, ActionKind::Wait, last, deferred);
    }
  }

  // hyper-parallel's default MPipe receive (Posting::MPipeBatched, MPIPE_FWD_RECV): the first
  // one posts, for every micro not yet received, in ascending order, a blocking meta receive
  // then the payload receive, and then waits them all (reference §1.3).
  void lower_batched_recvs(int r, const Program& prog, int first_index) {
    std::vector<std::pair<int, int>> mfrs;  // (micro, index)
    for (int j = first_index; j < static_cast<int>(prog.size()); ++j)
      if (prog[static_cast<size_t>(j)] && batched_recv(*prog[static_cast<size_t>(j)]))
        mfrs.emplace_back(prog[static_cast<size_t>(j)]->micro, j);
    std::stable_sort(mfrs.begin(), mfrs.end());
    std::vector<int32_t> all;
    for (auto& [micro, j] : mfrs) {
      const Step& st = *prog[static_cast<size_t>(j)];
      int peer = peer_of(s_, r, st);
      if (peer < 0 || peer >= s_.ranks || peer == r) {
        problem(ViolationKind::P2PMismatch, r, j, -1, short_label(st) + " has no usable owner rank to receive from");
        continue;
      }
      for (int t = 0; t < tensor_count(st); ++t) {
        int32_t meta = add_message(r, peer, false, true, j, -1, t, -1);
        action(r, ActionKind::Phase, first_index, meta);
        int32_t payload = add_message(r, peer, false, false, j, -1, t, -1);
        action(r, ActionKind::Post, first_index, payload);
        all.push_back(payload);
      }
    }
    action(r, ActionKind::Wait, first_index, all);
  }

  void add_collective(int r, const Step& st, int index) {
    std::vector<int32_t> members;
    const auto& inf = info(st.op);
    if (inf.collective == CollectiveScope::AllPipelineRanks) {
      for (int q = 0; q < s_.ranks; ++q) members.push_back(q);
    } else if (inf.collective == CollectiveScope::Replicas) {
      members = s_.replica_ranks(st.stage);
      if (members.size() < 2 || !std::binary_search(members.begin(), members.end(), r)) {
        problem(ViolationKind::CollectiveMismatch, r, index, -1,
                short_label(st) + " synchronises the copies of stage " + std::to_string(st.stage) +
                    ", but the schedule holds " + (members.size() < 2 ? "no other copy of it" : "it on another rank") +
                    " (\"pipes\" and the placement say where the copies live)");
        action(r, ActionKind::Local, index);
        return;
      }
    } else {
      members = st.group();
      std::sort(members.begin(), members.end());
      members.erase(std::unique(members.begin(), members.end()), members.end());
      bool bad = members.empty() || members.front() < 0 || members.back() >= s_.ranks ||
                 !std::binary_search(members.begin(), members.end(), r);
      if (bad) {
        problem(ViolationKind::CollectiveMismatch, r, index, -1,
                short_label(st) + " needs a group of ranks that contains rank " + std::to_string(r));
        action(r, ActionKind::Local, index);
        return;
      }
    }
    // A group is its ranks: where two model stages' copies live on the same ranks (Chimera and
    // DualPipe place model stages j and P-1-j on the same pair), their syncs share the group and
    // must come in the same order on both (the executor runs them in one communicator); the
    // collective pass compares the model stage (CollectiveCall::subject).
    const int32_t subject = inf.collective == CollectiveScope::Replicas ? s_.model_stage_of(st.stage) : -1;
    const std::vector<int32_t>& key = members;
    auto it = group_ids_.find(key);
    int32_t gid;
    if (it == group_ids_.end()) {
      gid = static_cast<int32_t>(m_.groups.size());
      CollectiveGroup g;
      g.members = members;
      if (static_cast<int>(members.size()) == s_.ranks) {
        g.label = "all ranks";
      } else {
        g.label = "{";
        for (size_t k = 0; k < members.size(); ++k) g.label += (k ? "," : "") + std::to_string(members[k]);
        g.label += "}";
      }
      m_.groups.push_back(g);
      group_ids_.emplace(key, gid);
    } else {
      gid = it->second;
    }
    CollectiveCall call;
    call.group = gid;
    call.position = position_[{r, gid}]++;
    call.rank = r;
    call.step_index = index;
    call.op = st.op;
    call.subject = subject;
    int32_t cid = static_cast<int32_t>(m_.collective_calls.size());
    m_.collective_calls.push_back(call);
    m_.calls_by_rank[static_cast<size_t>(r)].push_back(cid);
    Action a;
    a.kind = ActionKind::Collective;
    describe(a, r, index);
    a.collective = cid;
    m_.actions[static_cast<size_t>(r)].push_back(a);
  }

  const Schedule& s_;
  const CheckOptions& o_;
  CommModel m_;
  std::map<Key, std::vector<int32_t>> pending_;
  static_assert(kOpCount <= 64, "meta_done_ keeps one bit per op");
  std::vector<uint64_t> meta_done_ = std::vector<uint64_t>(static_cast<size_t>(std::max(s_.stages, 0)), 0);
  std::vector<int32_t> meta_touched_;
  std::vector<int32_t> scratch_;
  bool posts_ = false;  // some action posts without waiting (CommModel::posts_without_waiting)
  std::map<std::vector<int32_t>, int32_t> group_ids_;
  std::map<std::pair<int, int32_t>, int32_t> position_;
};

}  // namespace

CommModel build_comm_model(const Schedule& s, const CheckOptions& options) {
  return Builder(s, options).build();
}

std::vector<int32_t> fifo_positions(const CommModel& m) {
  std::vector<int32_t> position(m.messages.size(), -1), sends(m.channels.size(), 0), recvs(m.channels.size(), 0);
  for (size_t id = 0; id < m.messages.size(); ++id) {
    const Message& msg = m.messages[id];
    position[id] = (msg.send ? sends : recvs)[static_cast<size_t>(msg.channel)]++;
  }
  return position;
}

std::string describe_message(const Schedule& s, const CommModel& model, const Message& m) {
  const Slot& slot = s.programs[static_cast<size_t>(model.rank_of(m))][static_cast<size_t>(m.step_index)];
  if (!slot) return "?";
  const Step& st = m.sub >= 0 ? slot->sub_steps()[static_cast<size_t>(m.sub)] : *slot;
  std::string what = short_label(st) + " (" + std::string(op_name(st.op)) + ")";
  if (m.meta) what = "the shape/dtype meta of " + what;
  if (m.tensor > 0) what += " tensor " + std::to_string(m.tensor);
  return what;
}

StepRef step_ref(const Schedule& s, int rank, int index, int sub) {
  StepRef ref;
  ref.rank = rank;
  ref.index = index;
  ref.sub = sub;
  if (rank >= 0 && rank < s.ranks && index >= 0 &&
      index < static_cast<int>(s.programs[static_cast<size_t>(rank)].size())) {
    const Slot& slot = s.programs[static_cast<size_t>(rank)][static_cast<size_t>(index)];
    if (slot) ref.step = sub >= 0 && sub < static_cast<int>(slot->sub_steps().size()) ? slot->sub_steps()[static_cast<size_t>(sub)] : *slot;
  }
  return ref;
}

std::string_view to_string(P2PBackend b) {
  switch (b) {
    case P2PBackend::Nccl: return "nccl";
    case P2PBackend::Gloo: return "gloo";
  }
  return "?";
}

std::string_view to_string(DeadlockCause c) {
  switch (c) {
    case DeadlockCause::None: return "none";
    case DeadlockCause::WaitForCycle: return "wait_for_cycle";
    case DeadlockCause::WaitsOnFinished: return "waits_on_finished";
  }
  return "?";
}

std::string_view to_string(ViolationKind k) {
  switch (k) {
    case ViolationKind::Deadlock: return "deadlock";
    case ViolationKind::P2PMismatch: return "p2p_mismatch";
    case ViolationKind::CacheViolation: return "cache_violation";
    case ViolationKind::Dependency: return "dependency";
    case ViolationKind::CollectiveMismatch: return "collective_mismatch";
    case ViolationKind::Memory: return "memory";
    case ViolationKind::CollectiveOrderRace: return "collective_order_race";
  }
  return "?";
}

}  // namespace ppsched
