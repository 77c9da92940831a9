// The communication model shared by the P2P matcher, the rendezvous replay, the simulator
// and the executor's expectations: every rank's program lowered to a flat list of actions
// over messages on per-(src, dst) FIFO channels.
//
// Rules (reference hyper_parallel.md §3.2-3.4, simulators_and_verification.md §2.4):
//  - one FIFO channel per ordered rank pair; the k-th send message from src to dst is
//    matched with the k-th receive message on dst from src, whatever their step types;
//  - shape/dtype meta messages travel on the same channel, before the payload they describe:
//    body FWD P2P once per stage object and direction (every step with dyn_shape), every
//    MPipe/data transfer per tensor, every time; BWD P2P has none;
//  - a BATCH_SEND_RECV exchanges its sub-steps' metas one at a time, in order, then posts all
//    payloads as one group (NCCL group semantics) that completes when every payload matched;
//  - a collective is a barrier of its group; FSDP collectives belong to the data-parallel
//    group and do not synchronise pipeline ranks.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "lowering/diagnostics.hpp"
#include "lowering/options.hpp"
#include "schedule/schedule.hpp"
#include "schedule/validate.hpp"

namespace ppsched {

// One per message of the schedule (about one a step): 16 bytes, its small fields packed.
struct Message {
  Message() : step_index(0), readers(0), send(false), meta(false), in_batch(false), sub(-1), tensor(0) {}
  int32_t channel = -1;
  // The message it is matched with: the k-th receive on its channel for the k-th send, and the
  // other way round (FIFO order per channel); -1 when the other side has fewer.
  int32_t partner = -1;
  // In its rank's program (CommModel::rank_of): below 2^24, as a schedule holds at most
  // kMaxSlots (schedule/validate.hpp) slots over all ranks.
  uint32_t step_index : 24;
  // How many of its rank's actions list it (the one that posts it, the ones that wait for it),
  // at most kManyReaders: once its rank has passed them all, only its partner may still read
  // its state (the simulator frees a message's state then, sim/engine.cpp).
  uint32_t readers : 8;
  bool send : 1;
  bool meta : 1;
  bool in_batch : 1;         // a payload of a BATCH_SEND_RECV (its step, step_index, is the batch)
  int32_t sub : 15;          // sub-step of a batch, -1 otherwise (below kMaxListed)
  uint32_t tensor : 14;      // tensor position for multi-tensor transfers (below kMaxListed)
  // (Read as unsigned: a braced initialiser of an int takes static_cast<int>(m.step_index).)
  // The step index of the batch it belongs to (payloads only), -1 if none.
  int32_t batch() const { return in_batch ? static_cast<int32_t>(step_index) : -1; }
  static constexpr uint8_t kManyReaders = 255;  // this many or more: not counted
};
static_assert(sizeof(Message) == 16, "Message: keep it at 16 bytes");
static_assert(kMaxSlots <= (int64_t{1} << 24), "Message::step_index holds 24 bits");
static_assert(kMaxListed <= (1 << 14), "Message::sub and Message::tensor hold 15 (signed) and 14 bits");

// A FIFO channel: its messages are those whose Message::channel names it, its sends all posted
// by src and its receives by dst, each side in message-id order (the order its rank lists them).
struct Channel {
  int32_t src = -1, dst = -1;
  int32_t sends = 0, recvs = 0;  // how many messages each side posts
};

enum class ActionKind : uint8_t {
  Local,       // compute or local step: no communication (composites too)
  Phase,       // post messages and block until every one of them is matched
  Post,        // post messages, do not wait (overlap_p2p receives and deferred sends)
  Wait,        // block until the listed (already posted) messages are matched
  Collective,  // arrive at the collective instance and wait for the whole group
};

// One per step and per posting or waiting point (about one a step): 12 bytes.
struct Action {
  int32_t step_index = -1;  // a batch's sub-steps are its messages' (Message::sub), not the action's
  union {
    int32_t first = 0;    // Phase/Post/Wait: its message id (count 1) or range in CommModel::action_messages
    int32_t collective;   // Collective: instance id (it posts no messages: count is 0)
  };
  ActionKind kind = ActionKind::Local;
  // The step's op, copied here: the simulator prices a local step from it and the step's stage
  // and micro (read from the step: 16 bytes a slot, in the same order as the actions).
  Op op = Op::FWD;
  uint16_t count = 0;  // messages listed: at most kMaxActionMessages (the lowering refuses more)
  bool composite() const { return is_composite(op); }
  static constexpr size_t kMaxActionMessages = 65535;
};
static_assert(sizeof(Action) == 12, "Action: keep it at 12 bytes");

struct CollectiveGroup {
  std::vector<int32_t> members;  // sorted ranks
  std::string label;             // "all ranks" or "{0,3}"
};

struct CollectiveCall {
  int32_t group = -1;
  int32_t position = -1;  // k-th call of this group on the rank
  int32_t rank = -1;
  int32_t step_index = -1;
  Op op = Op::ALL_REDUCE;
  // What the call reduces when the op alone does not say: a REPLICA_GRAD_SYNC's model stage
  // (the copies of stage 0 and of stage 3 may share a group of ranks); -1 otherwise.
  int32_t subject = -1;
};

struct CommModel {
  int ranks = 0;
  std::vector<Message> messages;
  std::vector<Channel> channels;
  // (src, dst) -> channel id, for the pairs that exchange anything: memory in proportion to
  // the channels, not to ranks^2.
  std::unordered_map<uint64_t, int32_t> channel_of_pair;
  std::vector<std::vector<Action>> actions;  // per rank
  std::vector<int32_t> action_messages;      // pool for the message lists of actions of two or more
  // The j-th message action `a` lists: an action of one message (most) holds its id itself, a
  // longer one a range in action_messages.
  int32_t message_of(const Action& a, int j) const {
    return a.count == 1 ? a.first : action_messages[static_cast<size_t>(a.first + j)];
  }
  std::vector<CollectiveGroup> groups;
  std::vector<CollectiveCall> collective_calls;
  std::vector<std::vector<int32_t>> calls_by_rank;  // per rank: collective call ids in order
  std::vector<Violation> problems;  // P2P steps without a usable peer, bad groups
  // NCCL's stream order (CheckOptions::backend Nccl), kept only for a program that posts
  // without waiting (an Action of kind Post): otherwise every operation starts after its rank's
  // earlier ones completed and the order adds nothing (both vectors stay empty). A rank's
  // operations reach its stream in the order its actions post them: the e-th posting action
  // (Phase or Post) of rank r is stream_actions[r][e], and message m is on its rank's stream
  // as part of entry stream_entry[m]. An entry starts once every message of the entry before
  // it completed (a batch is one NCCL group: its messages start together).
  std::vector<std::vector<int32_t>> stream_actions;  // per rank: its posting actions' indices
  std::vector<int32_t> stream_entry;                 // per message: its entry on its rank's stream
  bool stream_ordered() const { return !stream_entry.empty(); }
  // Whether some action posts messages without waiting for them (an Action of kind Post).
  bool posts_without_waiting() const {
    for (const auto& acts : actions)
      for (const Action& a : acts)
        if (a.kind == ActionKind::Post) return true;
    return false;
  }
  bool testing_replay_buffers_sends = false;  // TEST-ONLY: CheckOptions::testing_replay_buffers_sends

  static uint64_t pair_key(int src, int dst) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(src)) << 32) | static_cast<uint32_t>(dst);
  }
  // The rank that posts message m: its channel's source for a send, its destination otherwise.
  int rank_of(const Message& m) const {
    const Channel& c = channels[static_cast<size_t>(m.channel)];
    return m.send ? c.src : c.dst;
  }
  // The channel from src to dst, or -1 when they exchange nothing.
  int channel(int src, int dst) const {
    auto it = channel_of_pair.find(pair_key(src, dst));
    return it == channel_of_pair.end() ? -1 : it->second;
  }
};

CommModel build_comm_model(const Schedule& s, const CheckOptions& options);

// Each message's position on its side of its channel (the k of the k-th send or receive),
// counted in message-id order: for readers that check the pairing rather than read
// Message::partner (the fuzz oracle, the test explorer).
std::vector<int32_t> fifo_positions(const CommModel& m);

// "the meta of FWD_SEND 3s1" / "FWD_SEND 3s1" for explanations.
std::string describe_message(const Schedule& s, const CommModel& model, const Message& m);

}  // namespace ppsched
