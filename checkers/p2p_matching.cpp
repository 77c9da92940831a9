// P2P matching: the static, positional view of every channel (reference hyper_parallel.md
// §3.4: "for every ordered pair, the sequence of ops must be positionally complementary").
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "checkers/checks.hpp"

namespace ppsched {
namespace {

const Step& leaf_of(const Schedule& s, int rank, const Message& m) {
  const Step& top = *s.programs[static_cast<size_t>(rank)][static_cast<size_t>(m.step_index)];
  return m.sub >= 0 ? top.sub_steps()[static_cast<size_t>(m.sub)] : top;
}

std::string ordinal(int k) {
  int n = k + 1;
  std::string suf = "th";
  if (n % 100 < 11 || n % 100 > 13) {
    if (n % 10 == 1) suf = "st";
    else if (n % 10 == 2) suf = "nd";
    else if (n % 10 == 3) suf = "rd";
  }
  return std::to_string(n) + suf;
}

// Why the k-th send and k-th receive disagree, or "" when they agree.
std::string disagreement(const Step& send, const Message& ms, const Step& recv, const Message& mr) {
  if (ms.meta != mr.meta) {
    return ms.meta ? "the sender posts a shape/dtype meta where the receiver expects a payload"
                   : "the receiver expects a shape/dtype meta where the sender posts a payload (recv_object_list "
                     "would decode payload bytes as meta)";
  }
  if (info(send.op).partner != recv.op)
    return std::string(op_name(send.op)) + " is received by " + std::string(op_name(info(send.op).partner)) +
           ", not by " + std::string(op_name(recv.op));
  if (send.micro != recv.micro)
    return "micro-batch " + std::to_string(send.micro) + " is sent where micro-batch " + std::to_string(recv.micro) +
           " is expected";
  // An MPipe step's stage is a tag (the owner rule routes it), so only body steps compare stages.
  if (stage_places(send.op) && (send.stage >= 0 || recv.stage >= 0)) {
    int want = send.stage >= 0 ? send.stage + info(send.op).partner_stage_delta : -1;
    if (recv.stage != want && send.peer == kNone && recv.peer == kNone)
      return "the sender's stage " + std::to_string(send.stage) + " feeds stage " + std::to_string(want) +
             ", but the receive is for stage " + std::to_string(recv.stage);
  }
  if (ms.tensor != mr.tensor) return "tensor " + std::to_string(ms.tensor) + " meets tensor " + std::to_string(mr.tensor);
  if (!send.tensors().empty() && !recv.tensors().empty()) {
    size_t t = static_cast<size_t>(ms.tensor);
    if (send.tensors().size() != recv.tensors().size())
      return "the sender describes " + std::to_string(send.tensors().size()) + " tensors, the receiver " +
             std::to_string(recv.tensors().size());
    if (t < send.tensors().size() && send.tensors()[t] != recv.tensors()[t]) {
      auto shape = [](const TensorDesc& d) {
        std::string out = "[";
        for (size_t k = 0; k < d.shape.size(); ++k) out += (k ? "," : "") + std::to_string(d.shape[k]);
        return out + "] " + d.dtype;
      };
      return "payload " + shape(send.tensors()[t]) + " is sent where " + shape(recv.tensors()[t]) + " is expected";
    }
  }
  return "";
}

}  // namespace

void check_p2p_matching(const PassInput& in, CheckReport& out) {
  const Schedule& s = in.schedule;
  const CommModel& m = in.lowering;
  // Each matched pair once, from its send, in message-id order: each channel's sends in FIFO
  // order (its sender lists them so), so a channel's k-th pair is the k-th met.
  const size_t C = m.channels.size();
  std::vector<int32_t> pairs_seen(C, 0);
  std::vector<uint8_t> reported(C, 0);  // after the first disagreement the channel has drifted
  std::vector<Violation> mismatch(C);
  for (size_t id = 0; id < m.messages.size(); ++id) {
    const Message& ms = m.messages[id];
    if (!ms.send || ms.partner < 0) continue;
    const size_t c = static_cast<size_t>(ms.channel);
    const int k = pairs_seen[c]++;
    out.stats.messages++;
    if (ms.meta) out.stats.meta_messages++;
    if (reported[c]) continue;
    const Channel& ch = m.channels[c];
    const Message& mr = m.messages[static_cast<size_t>(ms.partner)];
    const Step& send = leaf_of(s, ch.src, ms);
    const Step& recv = leaf_of(s, ch.dst, mr);
    std::string why = disagreement(send, ms, recv, mr);
    if (why.empty()) continue;
    reported[c] = 1;
    Violation& v = mismatch[c];
    v.kind = ViolationKind::P2PMismatch;
    v.ranks = {ch.src, ch.dst};
    v.steps = {step_ref(s, ch.src, ms.step_index, ms.sub), step_ref(s, ch.dst, mr.step_index, mr.sub)};
    v.message = "On the channel rank " + std::to_string(ch.src) + " -> rank " + std::to_string(ch.dst) + ", the " +
                ordinal(k) + " message sent is " + describe_message(s, m, ms) + " (rank " + std::to_string(ch.src) +
                ", step " + std::to_string(ms.step_index) + ") but the " + ordinal(k) + " message received is " +
                describe_message(s, m, mr) + " (rank " + std::to_string(ch.dst) + ", step " +
                std::to_string(mr.step_index) + "): " + why +
                ". Messages on a rank pair are matched in FIFO order whatever their type, so both ends must "
                "issue their transfers in the same order (e.g. both type-major, both ascending micro).";
  }
  // The first message left unmatched on the longer side of each uneven channel.
  std::vector<int32_t> first_unmatched(C, -1);
  for (size_t id = 0; id < m.messages.size(); ++id) {
    const Message& msg = m.messages[id];
    const Channel& ch = m.channels[static_cast<size_t>(msg.channel)];
    if (msg.partner < 0 && first_unmatched[static_cast<size_t>(msg.channel)] < 0 && msg.send == (ch.sends > ch.recvs))
      first_unmatched[static_cast<size_t>(msg.channel)] = static_cast<int32_t>(id);
  }
  for (size_t c = 0; c < C; ++c) {
    const Channel& ch = m.channels[c];
    out.stats.channels++;
    if (reported[c]) out.violations.push_back(std::move(mismatch[c]));
    if (ch.sends != ch.recvs) {
      const bool extra_sends = ch.sends > ch.recvs;
      const Message& first = m.messages[static_cast<size_t>(first_unmatched[c])];
      const int first_rank = extra_sends ? ch.src : ch.dst;
      Violation v;
      v.kind = ViolationKind::P2PMismatch;
      v.ranks = {ch.src, ch.dst};
      v.steps = {step_ref(s, first_rank, first.step_index, first.sub)};
      const int extra = extra_sends ? ch.sends - ch.recvs : ch.recvs - ch.sends;
      v.message = "Rank " + std::to_string(ch.src) + " sends " + std::to_string(ch.sends) + " messages to rank " +
                  std::to_string(ch.dst) + ", which receives " + std::to_string(ch.recvs) + " from it: " +
                  std::to_string(extra) + " " + (extra_sends ? "send" : "receive") + (extra == 1 ? " is" : "s are") +
                  " never matched, the first being " + describe_message(s, m, first) + " at rank " +
                  std::to_string(first_rank) + " step " + std::to_string(first.step_index) + ".";
      out.violations.push_back(std::move(v));
    }
  }

  // Batch shapes per rank pair. The batch transport issues one group per peer, and a lone
  // transfer is a group of one (hyper-parallel §2.4, §3.4): the transfers of one group toward
  // a peer must be matched by exactly the transfers of one group of that peer toward it. A
  // duplex batch facing two split single steps (a one-sided split) hangs.
  struct Side {
    int rank, group;  // group: batch step index, or -(message id)-2 for a lone step
    bool operator<(const Side& o) const { return std::tie(rank, group) < std::tie(o.rank, o.group); }
  };
  std::map<std::pair<int, int>, std::map<Side, std::set<Side>>> links;  // unordered pair -> side -> partners
  for (size_t id = 0; id < m.messages.size(); ++id) {
    const Message& ms = m.messages[id];
    if (!ms.send || ms.partner < 0) continue;
    const Message& mr = m.messages[static_cast<size_t>(ms.partner)];
    if (ms.meta || mr.meta) continue;  // metas are exchanged one by one, before any batch
    if (ms.batch() < 0 && mr.batch() < 0) continue;  // plain facing plain: nothing to mirror
    const Channel& ch = m.channels[static_cast<size_t>(ms.channel)];
    Side a{ch.src, ms.batch() >= 0 ? ms.batch() : -static_cast<int>(id) - 2};
    Side b{ch.dst, mr.batch() >= 0 ? mr.batch() : -ms.partner - 2};
    auto key = std::minmax(ch.src, ch.dst);
    links[key][a].insert(b);
    links[key][b].insert(a);
  }
  bool shapes_mirror = true;
  for (auto& [pair, sides] : links) {
    for (auto& [side, partners] : sides) {
      if (side.group < 0) continue;  // a lone step has one partner; mismatches show from the batch side
      bool ok = partners.size() == 1;
      if (ok) {
        // The partner batch must map back to this batch only.
        const auto& back = sides[*partners.begin()];
        ok = back.size() == 1 && back.begin()->rank == side.rank && back.begin()->group == side.group;
      }
      if (ok) continue;
      int plain = 0, batches = 0;
      for (const Side& p : partners) (p.group >= 0 ? batches : plain)++;
      Violation v;
      v.kind = ViolationKind::P2PMismatch;
      int peer = pair.first == side.rank ? pair.second : pair.first;
      v.ranks = {side.rank, peer};
      v.steps = {step_ref(s, side.rank, side.group)};
      for (const Side& p : partners)
        if (p.group >= 0) v.steps.push_back(step_ref(s, p.rank, p.group));
      v.message = "The BATCH_SEND_RECV at rank " + std::to_string(side.rank) + " step " + std::to_string(side.group) +
                  " exchanges its payloads with rank " + std::to_string(peer) + " through " +
                  std::to_string(batches) + " batch(es) and " + std::to_string(plain) +
                  " lone step(s) there. Toward one peer, a batch must face exactly one group whose transfers "
                  "mirror its own: a duplex batch facing split single steps (a one-sided split) hangs on "
                  "HCCL/NCCL (hyper-parallel §3.4-3.5).";
      out.violations.push_back(std::move(v));
      shapes_mirror = false;
    }
  }
  if (!shapes_mirror) return;
  if (std::none_of(m.messages.begin(), m.messages.end(), [](const Message& x) { return x.batch() >= 0; })) return;

  // Group order per rank pair (reference §3.4: one communicator per adjacent rank pair, its
  // operations served in queue order). Where a pair exchanges batches, each side's groups toward
  // the other (a batch, or a lone transfer: a batch of one on that transport) meet position by
  // position: the k-th group of one side must face the k-th of the other. Two groups that face
  // each other out of turn wait on each other (both ends receive first: hyper-parallel's
  // "send-crossing hoist" hang). Reported once per pair, at the first position out of turn.
  struct Group {
    int rank, id;  // id: batch step index, or -(message id)-2 for a lone transfer
    int step;      // its step in the rank's program
    bool sends = false, receives = false;
  };
  std::map<std::pair<int, int>, std::vector<Group>> toward;  // (rank, peer) -> groups in program order
  std::set<std::pair<int, int>> batched_pairs;
  std::vector<size_t> order;
  for (size_t id = 0; id < m.messages.size(); ++id)
    if (!m.messages[id].meta) order.push_back(id);
  const auto rank_of = [&](size_t id) {
    const Message& x = m.messages[id];
    const Channel& ch = m.channels[static_cast<size_t>(x.channel)];
    return x.send ? ch.src : ch.dst;
  };
  const auto peer_of = [&](size_t id) {
    const Message& x = m.messages[id];
    const Channel& ch = m.channels[static_cast<size_t>(x.channel)];
    return x.send ? ch.dst : ch.src;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_tuple(rank_of(a), m.messages[a].step_index, m.messages[a].sub) <
           std::make_tuple(rank_of(b), m.messages[b].step_index, m.messages[b].sub);
  });
  std::vector<int> group_of(m.messages.size(), -1);  // message -> index in its side's list
  for (size_t id : order) {
    const Message& x = m.messages[id];
    const int r = rank_of(id), q = peer_of(id);
    if (x.batch() >= 0) batched_pairs.insert(std::minmax(r, q));
    auto& list = toward[{r, q}];
    const int gid = x.batch() >= 0 ? x.batch() : -static_cast<int>(id) - 2;
    if (list.empty() || list.back().id != gid || gid < -1) list.push_back({r, gid, static_cast<int>(x.step_index)});
    (x.send ? list.back().sends : list.back().receives) = true;
    group_of[id] = static_cast<int>(list.size()) - 1;
  }
  for (const auto& [a, b] : batched_pairs) {
    const auto& ga = toward[{a, b}];
    const auto& gb = toward[{b, a}];
    // The first position where a group's transfers are not all matched by the peer's group at
    // the same position.
    int bad = -1;
    for (size_t id : order) {
      const Message& x = m.messages[id];
      if (x.partner < 0 || rank_of(id) != a || peer_of(id) != b) continue;
      const int k = group_of[id], k2 = group_of[static_cast<size_t>(x.partner)];
      if (k != k2 && (bad < 0 || std::min(k, k2) < bad)) bad = std::min(k, k2);
    }
    if (bad < 0) continue;
    const size_t k = static_cast<size_t>(bad);
    if (k >= ga.size() || k >= gb.size()) continue;  // unmatched transfers are reported above
    Violation v;
    v.kind = ViolationKind::P2PMismatch;
    v.ranks = {a, b};
    v.steps = {step_ref(s, a, ga[k].step), step_ref(s, b, gb[k].step)};
    const bool both_receive = !ga[k].sends && !gb[k].sends;
    v.message = "Ranks " + std::to_string(a) + " and " + std::to_string(b) + " exchange batches, and their " +
                ordinal(bad) + " groups toward each other (rank " + std::to_string(a) + " step " +
                std::to_string(ga[k].step) + ", rank " + std::to_string(b) + " step " + std::to_string(gb[k].step) +
                ") are not each other's partners: " +
                (both_receive ? std::string("both only receive, each from the other (a receive hoisted over a send)")
                              : std::string("each holds a transfer the other side posts in another group")) +
                ". On one communicator per rank pair (HCCL's, hyper-parallel's) the groups are served in queue "
                "order, the k-th group of one side facing the k-th of the other, so these two wait on each other "
                "and hang (hyper-parallel §3.4-3.5: a send-crossing hoist makes both ends receive first).";
    out.violations.push_back(std::move(v));
  }
}

}  // namespace ppsched
