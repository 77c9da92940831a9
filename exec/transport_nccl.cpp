// NCCL transport: CUDA tensors through the NCCL API directly (ncclSend/ncclRecv,
// ncclGroupStart/End for groups, ncclBroadcast/ncclAllReduce), on torch's current CUDA stream
// (compat::current_cuda_stream). Compiled when the CUDA headers are present (-Dcuda); selected
// at run time only with a CUDA build of libtorch. Device selection and stream queries go
// through torch's CUDA runtime (compat), so this file links NCCL only: no second libcudart.
//
// Timeouts: communicators are created non-blocking (ncclConfig_t.blocking = 0), so no NCCL
// call ever blocks the host. Every operation is enqueued, then the host polls the stream and
// ncclCommGetAsyncError until it completes, fails, times out or the watchdog asks to abort; on
// timeout or abort the communicator is aborted (ncclCommAbort) and the operation throws.
#include <stdexcept>

#include "exec/transport.hpp"

#if defined(PPSCHED_HAVE_NCCL)

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>  // cudaStream_t
#include <nccl.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

namespace ppsched::exec {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kByte:
    case at::kBool: return ncclUint8;
    case at::kChar: return ncclInt8;
    default: throw std::runtime_error("NCCL transport: unsupported dtype " + std::string(c10::toString(t.scalar_type())));
  }
}

class NcclTransport final : public Transport {
 public:
  explicit NcclTransport(const TransportSetup& s) : setup_(s) {
    int devices = compat::cuda_device_count();
    if (devices < 1) throw std::runtime_error("NCCL transport: no CUDA device is visible");
    device_ = setup_.local_rank % devices;
    compat::cuda_set_device(device_);
    world_ = create_comm("world", setup_.rank, setup_.world_size);
  }
  ~NcclTransport() override {
    for (auto& [members, c] : groups_) destroy(c);
    destroy(world_);
  }

  std::string name() const override { return "nccl"; }
  at::Device device() const override { return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_)); }

  void send(const at::Tensor& t, int peer) override {
    at::Tensor c = t.contiguous();
    run(world_, [&] { return ncclSend(c.data_ptr(), static_cast<size_t>(c.numel()), nccl_type(c), peer, world_, stream()); });
  }
  void recv(at::Tensor& t, int peer) override {
    run(world_, [&] { return ncclRecv(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t), peer, world_, stream()); });
  }
  void group(std::vector<P2POp>& ops) override {
    std::vector<at::Tensor> keep;
    keep.reserve(ops.size());
    run(world_, [&] {
      ncclResult_t r = ncclGroupStart();
      for (auto& op : ops) {
        if (r != ncclSuccess && r != ncclInProgress) break;
        if (op.send) {
          keep.push_back(op.tensor.contiguous());
          r = ncclSend(keep.back().data_ptr(), static_cast<size_t>(keep.back().numel()), nccl_type(keep.back()), op.peer,
                       world_, stream());
        } else {
          r = ncclRecv(op.tensor.data_ptr(), static_cast<size_t>(op.tensor.numel()), nccl_type(op.tensor), op.peer, world_,
                       stream());
        }
      }
      ncclResult_t end = ncclGroupEnd();
      return r == ncclSuccess || r == ncclInProgress ? end : r;
    });
  }

  void prepare_group(const std::vector<int>& members) override {
    if (members.empty() || static_cast<int>(members.size()) == setup_.world_size || groups_.count(members)) return;
    int me = -1;
    std::string label;
    for (size_t k = 0; k < members.size(); ++k) {
      if (members[k] == setup_.rank) me = static_cast<int>(k);
      label += (k ? "_" : "") + std::to_string(members[k]);
    }
    if (me < 0) return;
    groups_[members] = create_comm("group_" + label, me, static_cast<int>(members.size()));
  }
  void broadcast(std::vector<at::Tensor>& ts, int root, const std::vector<int>& members) override {
    ncclComm_t c = comm_of(members);
    int r = root;
    if (!members.empty())
      for (size_t k = 0; k < members.size(); ++k)
        if (members[k] == root) r = static_cast<int>(k);
    run(c, [&] {
      ncclResult_t res = ncclGroupStart();
      for (auto& t : ts)
        if (res == ncclSuccess || res == ncclInProgress)
          res = ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t), r, c, stream());
      ncclResult_t end = ncclGroupEnd();
      return res == ncclSuccess || res == ncclInProgress ? end : res;
    });
  }
  void all_reduce_sum(std::vector<at::Tensor>& ts, const std::vector<int>& members) override {
    ncclComm_t c = comm_of(members);
    run(c, [&] {
      ncclResult_t res = ncclGroupStart();
      for (auto& t : ts)
        if (res == ncclSuccess || res == ncclInProgress)
          res = ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t), ncclSum, c,
                              stream());
      ncclResult_t end = ncclGroupEnd();
      return res == ncclSuccess || res == ncclInProgress ? end : res;
    });
  }
  void barrier() override {
    std::vector<at::Tensor> one{at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device()))};
    all_reduce_sum(one, {});
  }
  // Only raises a flag: the main thread is always in poll(), never inside a blocking NCCL call
  // (non-blocking communicators), and aborts the communicator itself.
  void abort() noexcept override { abort_requested_ = true; }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(compat::current_cuda_stream(device_)); }

  ncclComm_t create_comm(const std::string& key, int rank, int size) {
    ncclUniqueId id;
    const std::string store_key = "nccl_id_" + key;
    if (rank == 0) {
      nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      const auto* p = reinterpret_cast<const uint8_t*>(&id);
      setup_.store->set(store_key, std::vector<uint8_t>(p, p + sizeof(id)));
    } else {
      auto v = setup_.store->get(store_key);  // blocks until rank 0 published it (store timeout)
      if (v.size() != sizeof(id)) throw std::runtime_error("NCCL transport: malformed unique id in the store");
      std::memcpy(&id, v.data(), sizeof(id));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t c = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&c, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) nccl(r, "ncclCommInitRankConfig");
    poll(c, /*stream_too=*/false, "communicator init");
    return c;
  }

  ncclComm_t comm_of(const std::vector<int>& members) {
    if (members.empty() || static_cast<int>(members.size()) == setup_.world_size) return world_;
    auto it = groups_.find(members);
    if (it == groups_.end()) throw std::logic_error("collective group was not prepared before the run");
    return it->second;
  }

  template <class Enqueue>
  void run(ncclComm_t c, Enqueue&& enqueue) {
    if (abort_requested_) throw TransportError("the transport was aborted");
    ncclResult_t r = enqueue();
    if (r != ncclSuccess && r != ncclInProgress) nccl(r, "enqueue");
    poll(c, /*stream_too=*/true, "operation");
  }

  // Waits until the communicator is idle (and the stream drained), polling so that a timeout
  // or an abort request can end the wait; aborts the communicator on either.
  void poll(ncclComm_t c, bool stream_too, const char* what) {
    const auto deadline = Clock::now() + setup_.timeout;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(c, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        ncclCommAbort(c);
        throw TransportError(std::string("NCCL ") + what + " failed: " + ncclGetErrorString(state));
      }
      if (state == ncclSuccess) {
        if (!stream_too) return;
        if (compat::cuda_stream_ready(device_)) return;
      }
      if (abort_requested_ || Clock::now() > deadline) {
        ncclCommAbort(c);
        throw TransportError(abort_requested_ ? std::string("NCCL ") + what + " aborted"
                                                  : std::string("NCCL ") + what + " timed out after " +
                                                        std::to_string(setup_.timeout.count() / 1000) + " s");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  static void nccl(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
  }
  static void destroy(ncclComm_t c) noexcept {
    if (c) ncclCommDestroy(c);
  }

  TransportSetup setup_;
  int device_ = 0;
  ncclComm_t world_ = nullptr;
  std::map<std::vector<int>, ncclComm_t> groups_;
  std::atomic<bool> abort_requested_{false};
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(const TransportSetup& setup) {
  if (!compat::cuda_available())
    throw std::runtime_error("--transport nccl needs a CUDA build of libtorch (this one is CPU-only: " +
                             compat::torch_version() + ")");
  return std::make_unique<NcclTransport>(setup);
}
bool nccl_transport_built() { return true; }

}  // namespace ppsched::exec

#else  // no CUDA headers at build time

namespace ppsched::exec {
std::unique_ptr<Transport> make_nccl_transport(const TransportSetup&) {
  throw std::runtime_error("this ppsched-exec was built without the NCCL transport (configure with -Dcuda=enabled "
                           "where nccl.h and cuda_runtime.h are available)");
}
bool nccl_transport_built() { return false; }
}  // namespace ppsched::exec

#endif
