// The executor's only view of communication. Two implementations: Gloo (CPU tensors, c10d's
// ProcessGroupGloo) and NCCL (CUDA tensors, the NCCL API directly). Both are bootstrapped
// through the same TCPStore and give every blocking operation the run's timeout.
//
// Semantics the comm model (lowering/comm_model.hpp) assumes and these keep:
//  - send/recv block until the message is delivered (rendezvous: the partner must be posted);
//  - per ordered rank pair, messages are matched in FIFO order (one tag, one channel);
//  - group() posts every operation before waiting for any, so the group completes when all of
//    them matched (NCCL group semantics; BATCH_SEND_RECV);
//  - collectives block every member of their group.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "exec/mesh.hpp"
#include "exec/torch_compat.hpp"

namespace ppsched::exec {

// A communication operation failed (peer closed the connection, timeout, abort). Told apart
// from a step's own errors so the failure report can look for the rank that caused it.
struct TransportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct P2POp {
  bool send = false;
  int peer = -1;
  at::Tensor tensor;  // recv: preallocated, filled in place
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  virtual at::Device device() const = 0;

  virtual void send(const at::Tensor& t, int peer) = 0;
  virtual void recv(at::Tensor& t, int peer) = 0;
  virtual void group(std::vector<P2POp>& ops) = 0;
  // group() on a channel of its own: `tag` > 0 keeps these messages apart from the pipeline's
  // (tag 0) and from other tags, each a FIFO per ordered rank pair. The expert all-to-alls
  // (exec/expert_link.hpp) use one tag per kind, so two ranks that call different kinds wait
  // for each other (a hang, as NCCL's collectives would) instead of pairing mismatched
  // messages. A transport without tags (NCCL) runs group() and refuses tag > 0.
  virtual void exchange(std::vector<P2POp>& ops, int tag) {
    if (tag != 0) throw std::logic_error(name() + " has no tagged channels");
    group(ops);
  }

  // Non-blocking P2P, for the lowering's Post and Wait actions (--overlap-p2p,
  // --mpipe-batched-recv): post() starts every operation of `ops` (one group) and returns a
  // handle; wait() blocks until all of them completed. A received tensor is filled in place by
  // then. A transport without them says so in non_blocking(), and the run refuses those modes
  // on every rank before any communication.
  virtual bool non_blocking() const { return false; }
  virtual int post(std::vector<P2POp>&) { throw std::logic_error(name() + " has no non-blocking P2P"); }
  virtual void wait(int) { throw std::logic_error(name() + " has no non-blocking P2P"); }

  // Collectives over `members` (ascending world ranks; empty = every rank). A group other than
  // the world must be prepared first, by its members, in the same order on each of them
  // (creating overlapping groups in different orders deadlocks: reference §3.5 item 17).
  virtual void prepare_group(const std::vector<int>& members) = 0;
  virtual void broadcast(std::vector<at::Tensor>& ts, int root, const std::vector<int>& members) = 0;
  virtual void all_reduce_sum(std::vector<at::Tensor>& ts, const std::vector<int>& members) = 0;
  // Every member's equally sized 1-D `shard`, concatenated in member order into `full`
  // (members.size() x shard.numel()); this process is members[index]. The default is an
  // all-reduce of a zero-padded buffer (twice the traffic); Gloo overrides it with allgather.
  virtual void all_gather(const at::Tensor& shard, at::Tensor& full, const std::vector<int>& members, int index);
  virtual void barrier() = 0;

  // Called from the watchdog thread: unblocks what can be unblocked (Gloo P2P waits, NCCL
  // communicators); afterwards every operation throws.
  virtual void abort() noexcept = 0;
};

struct TransportSetup {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  compat::StorePtr store;          // already prefixed for this run
  std::chrono::milliseconds timeout{300000};
  std::string address = "127.0.0.1";  // Gloo: local address to bind, or interface name
  bool is_interface = false;
};

std::unique_ptr<Transport> make_gloo_transport(const TransportSetup& setup);

// One pipeline replica's view of the world's transport (--dp, exec/mesh.hpp): the runtime and
// its handlers speak the schedule's pipeline ranks; this view sends to the global ranks of
// `replica`, and a collective over the whole pipeline (members empty) or over a group of
// pipeline ranks stays inside the replica. barrier() stays world-wide (the commit point of
// every replica). Group names are the members' global ranks, so no two replicas share a key.
std::unique_ptr<Transport> make_replica_view(Transport& world, const DeviceMesh& mesh, int replica);
// Throws std::runtime_error when the NCCL transport was not built (no -Dcuda) or this
// libtorch has no CUDA.
std::unique_ptr<Transport> make_nccl_transport(const TransportSetup& setup);
bool nccl_transport_built();

}  // namespace ppsched::exec
