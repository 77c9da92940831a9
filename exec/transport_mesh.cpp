// The replica view of the transport (transport.hpp, make_replica_view) and the collectives every
// transport gets from all_reduce_sum when it has nothing better.
#include <ATen/ATen.h>

#include <algorithm>

#include "exec/transport.hpp"

namespace ppsched::exec {

void Transport::all_gather(const at::Tensor& shard, at::Tensor& full, const std::vector<int>& members, int index) {
  const int64_t n = shard.numel();
  full = at::zeros({static_cast<int64_t>(members.size()) * n}, shard.options());
  full.narrow(0, static_cast<int64_t>(index) * n, n).copy_(shard.reshape({-1}));
  std::vector<at::Tensor> one{full};
  all_reduce_sum(one, members);
  full = one[0];
}

namespace {

class ReplicaView final : public Transport {
 public:
  ReplicaView(Transport& world, const DeviceMesh& mesh, int replica) : world_(world), mesh_(mesh), replica_(replica) {}

  std::string name() const override { return world_.name(); }
  at::Device device() const override { return world_.device(); }

  void send(const at::Tensor& t, int peer) override { world_.send(t, global(peer)); }
  void recv(at::Tensor& t, int peer) override { world_.recv(t, global(peer)); }
  void group(std::vector<P2POp>& ops) override {
    std::vector<P2POp> g = translated(ops);  // the same tensors: receives fill the caller's buffers
    world_.group(g);
  }
  bool non_blocking() const override { return world_.non_blocking(); }
  int post(std::vector<P2POp>& ops) override {
    std::vector<P2POp> g = translated(ops);
    return world_.post(g);
  }
  void wait(int handle) override { world_.wait(handle); }

  void prepare_group(const std::vector<int>& members) override { world_.prepare_group(members_of(members)); }
  void broadcast(std::vector<at::Tensor>& ts, int root, const std::vector<int>& members) override {
    world_.broadcast(ts, global(root), members_of(members));
  }
  void all_reduce_sum(std::vector<at::Tensor>& ts, const std::vector<int>& members) override {
    world_.all_reduce_sum(ts, members_of(members));
  }
  void all_gather(const at::Tensor& shard, at::Tensor& full, const std::vector<int>& members, int index) override {
    world_.all_gather(shard, full, members_of(members), index);
  }
  void barrier() override { world_.barrier(); }
  void abort() noexcept override { world_.abort(); }

 private:
  int global(int pipeline_rank) const { return mesh_.global_rank(replica_, pipeline_rank); }
  std::vector<P2POp> translated(const std::vector<P2POp>& ops) const {
    std::vector<P2POp> out = ops;
    for (auto& op : out) op.peer = global(op.peer);
    return out;
  }
  // Pipeline ranks -> this replica's global ranks, ascending; empty: the whole pipeline.
  std::vector<int> members_of(const std::vector<int>& members) const {
    if (mesh_.dp == 1) return members;
    if (members.empty()) return mesh_.replica_ranks(replica_);
    std::vector<int> out;
    for (int r : members) out.push_back(global(r));
    std::sort(out.begin(), out.end());
    return out;
  }

  Transport& world_;
  DeviceMesh mesh_;
  int replica_;
};

}  // namespace

std::unique_ptr<Transport> make_replica_view(Transport& world, const DeviceMesh& mesh, int replica) {
  return std::make_unique<ReplicaView>(world, mesh, replica);
}

}  // namespace ppsched::exec
