// Gloo transport: CPU tensors through c10d's ProcessGroupGloo. Gloo's unbound-buffer send
// waits for the receiver's notification before it completes, which is the rendezvous the
// comm model assumes. A peer that dies closes its sockets, so a pending wait fails at once
// with the backend's message; a silent peer fails the wait after the group timeout.
#include <map>
#include <mutex>
#include <stdexcept>

#include <ATen/ATen.h>

#include "exec/transport.hpp"

#if defined(USE_C10D_GLOO)

namespace ppsched::exec {
namespace {

class GlooTransport final : public Transport {
 public:
  explicit GlooTransport(const TransportSetup& s)
      : setup_(s), world_(s.store, s.rank, s.world_size, s.timeout, s.address, s.is_interface) {}

  std::string name() const override { return "gloo"; }
  at::Device device() const override { return at::Device(at::kCPU); }

  void send(const at::Tensor& t, int peer) override {
    at::Tensor c = t.contiguous();
    run(world_.send(c, peer, kTag));
  }
  void recv(at::Tensor& t, int peer) override { run(world_.recv(t, peer, kTag)); }

  void group(std::vector<P2POp>& ops) override { exchange_on(ops, kTag); }
  void exchange(std::vector<P2POp>& ops, int tag) override { exchange_on(ops, tag); }

  bool non_blocking() const override { return true; }
  int post(std::vector<P2POp>& ops) override {
    Posted p;
    for (auto& op : ops) {
      if (op.send) {
        p.keep.push_back(op.tensor.contiguous());  // must outlive the send
        p.works.push_back(world_.send(p.keep.back(), op.peer, kTag));
      } else {
        p.works.push_back(world_.recv(op.tensor, op.peer, kTag));
      }
      track(p.works.back());
    }
    const int h = next_handle_++;
    posted_.emplace(h, std::move(p));
    return h;
  }
  void wait(int handle) override {
    auto it = posted_.find(handle);
    if (it == posted_.end()) throw std::logic_error("gloo: wait on an unknown or completed post");
    Posted p = std::move(it->second);
    posted_.erase(it);
    for (auto& w : p.works) wait_tracked(w);
  }

  void prepare_group(const std::vector<int>& members) override {
    if (members.empty() || static_cast<int>(members.size()) == setup_.world_size) return;
    if (groups_.count(members)) return;
    int me = -1;
    std::string label;
    for (size_t k = 0; k < members.size(); ++k) {
      if (members[k] == setup_.rank) me = static_cast<int>(k);
      label += (k ? "_" : "") + std::to_string(members[k]);
    }
    if (me < 0) return;  // not a member: nothing to create here
    auto store = compat::prefix_store("group_" + label, setup_.store);
    groups_.emplace(members, std::make_unique<compat::GlooGroup>(store, me, static_cast<int>(members.size()),
                                                                 setup_.timeout, setup_.address, setup_.is_interface));
  }

  // Gloo's collectives take a list of equally shaped tensors (one per device), so a list of
  // parameters travels as one flat buffer per dtype and is copied back.
  void broadcast(std::vector<at::Tensor>& ts, int root, const std::vector<int>& members) override {
    auto& g = group_of(members);
    int root_in_group = members.empty() ? root : index_in(members, root);
    flat_collective(ts, [&](std::vector<at::Tensor>& flat) { return g.broadcast(flat, root_in_group); });
  }
  void all_reduce_sum(std::vector<at::Tensor>& ts, const std::vector<int>& members) override {
    auto& g = group_of(members);
    flat_collective(ts, [&](std::vector<at::Tensor>& flat) { return g.all_reduce_sum(flat); });
  }
  void all_gather(const at::Tensor& shard, at::Tensor& full, const std::vector<int>& members, int) override {
    auto& g = group_of(members);
    std::vector<at::Tensor> in{shard.reshape({-1}).contiguous()};
    std::vector<std::vector<at::Tensor>> out(1);
    const size_t n = members.empty() ? static_cast<size_t>(setup_.world_size) : members.size();
    for (size_t k = 0; k < n; ++k) out[0].push_back(at::empty_like(in[0]));
    run(g.all_gather(out, in));
    full = at::cat(out[0]);
  }
  void barrier() override { run(world_.barrier()); }

  void abort() noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    for (auto& w : inflight_) compat::abort(w);
  }

 private:
  static constexpr int kTag = 0;  // one tag: one FIFO channel per ordered rank pair
  void exchange_on(std::vector<P2POp>& ops, int tag) {
    // Post everything first: a one-sided wait would block the peer's half of the group.
    std::vector<compat::WorkPtr> works;
    std::vector<at::Tensor> keep;  // contiguous copies must outlive the sends
    for (auto& op : ops) {
      if (op.send) {
        keep.push_back(op.tensor.contiguous());
        works.push_back(world_.send(keep.back(), op.peer, tag));
      } else {
        works.push_back(world_.recv(op.tensor, op.peer, tag));
      }
      track(works.back());
    }
    for (auto& w : works) wait_tracked(w);
  }

  compat::GlooGroup& group_of(const std::vector<int>& members) {
    if (members.empty() || static_cast<int>(members.size()) == setup_.world_size) return world_;
    auto it = groups_.find(members);
    if (it == groups_.end()) throw std::logic_error("collective group was not prepared before the run");
    return *it->second;
  }
  template <class Op>
  void flat_collective(std::vector<at::Tensor>& ts, Op&& op) {
    std::map<at::ScalarType, std::vector<size_t>> by_dtype;
    for (size_t k = 0; k < ts.size(); ++k) by_dtype[ts[k].scalar_type()].push_back(k);
    for (auto& [dtype, idx] : by_dtype) {
      std::vector<at::Tensor> parts;
      for (size_t k : idx) parts.push_back(ts[k].reshape({-1}));
      std::vector<at::Tensor> flat{at::cat(parts)};
      run(op(flat));
      int64_t offset = 0;
      for (size_t k : idx) {
        ts[k].copy_(flat[0].narrow(0, offset, ts[k].numel()).view_as(ts[k]));
        offset += ts[k].numel();
      }
    }
  }

  static int index_in(const std::vector<int>& members, int rank) {
    for (size_t k = 0; k < members.size(); ++k)
      if (members[k] == rank) return static_cast<int>(k);
    throw std::logic_error("root is not a member of its group");
  }

  void track(const compat::WorkPtr& w) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) {
      compat::abort(w);
      throw TransportError("the transport was aborted");
    }
    inflight_.push_back(w);
  }
  void wait_tracked(const compat::WorkPtr& w) {
    struct Untrack {
      GlooTransport* t;
      const compat::WorkPtr& w;
      ~Untrack() {
        std::lock_guard<std::mutex> lock(t->mu_);
        for (auto it = t->inflight_.begin(); it != t->inflight_.end(); ++it)
          if (*it == w) {
            t->inflight_.erase(it);
            break;
          }
      }
    } untrack{this, w};
    try {
      compat::wait(w);
    } catch (const c10::Error& e) {
      throw TransportError(std::string("gloo: ") + e.what_without_backtrace());
    } catch (const std::exception& e) {
      throw TransportError(std::string("gloo: ") + e.what());
    }
  }
  void run(const compat::WorkPtr& w) {
    track(w);
    wait_tracked(w);
  }

  struct Posted {
    std::vector<compat::WorkPtr> works;
    std::vector<at::Tensor> keep;
  };
  std::map<int, Posted> posted_;  // post() handles not waited yet
  int next_handle_ = 0;

  TransportSetup setup_;
  compat::GlooGroup world_;
  std::map<std::vector<int>, std::unique_ptr<compat::GlooGroup>> groups_;
  std::mutex mu_;
  std::vector<compat::WorkPtr> inflight_;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Transport> make_gloo_transport(const TransportSetup& setup) {
  return std::make_unique<GlooTransport>(setup);
}

}  // namespace ppsched::exec

#else  // a -Dtorch_prefix libtorch without Gloo's headers (exec/meson.build)

namespace ppsched::exec {
std::unique_ptr<Transport> make_gloo_transport(const TransportSetup&) {
  throw std::runtime_error("this ppsched-exec was built against a libtorch without Gloo's headers, so it has no Gloo "
                           "transport: use --transport nccl");
}
}  // namespace ppsched::exec

#endif
