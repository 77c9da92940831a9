#include "exec/torch_compat.hpp"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <stdexcept>

#if defined(PPSCHED_TORCH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ppsched::exec::compat {

StorePtr make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                        std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = is_server;
  o.numWorkers = static_cast<std::size_t>(world_size);
  // Ranks meet in the process group's rendezvous, which has its own timeout; the server must
  // not block its constructor waiting for clients.
  o.waitWorkers = false;
  o.timeout = timeout;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  o.useLibUV = false;  // 2.2 added the libuv server (default from 2.4); keep the classic one
#endif
  return c10::make_intrusive<c10d::TCPStore>(host, o);
}

int tcp_store_port(const StorePtr& store) {
  const auto* tcp = dynamic_cast<const c10d::TCPStore*>(store.get());
  if (!tcp) throw std::logic_error("tcp_store_port: not a TCPStore");
  return tcp->getPort();
}

StorePtr prefix_store(const std::string& prefix, const StorePtr& store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

#if defined(USE_C10D_GLOO)  // else no Gloo transport (transport_gloo.cpp), so no GlooGroup
GlooGroup::GlooGroup(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout,
                     const std::string& address, bool is_interface) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(is_interface ? c10d::ProcessGroupGloo::createDeviceForInterface(address)
                                       : c10d::ProcessGroupGloo::createDeviceForHostname(address));
  opts->threads = 2;
  pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}

GlooGroup::~GlooGroup() = default;

WorkPtr GlooGroup::send(at::Tensor& t, int dst, int tag) {
  std::vector<at::Tensor> v{t};
  return pg_->send(v, dst, tag);
}
WorkPtr GlooGroup::recv(at::Tensor& t, int src, int tag) {
  std::vector<at::Tensor> v{t};
  return pg_->recv(v, src, tag);
}
WorkPtr GlooGroup::broadcast(std::vector<at::Tensor>& ts, int root) {
  c10d::BroadcastOptions o;
  o.rootRank = root;
  return pg_->broadcast(ts, o);
}
WorkPtr GlooGroup::all_reduce_sum(std::vector<at::Tensor>& ts) {
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return pg_->allreduce(ts, o);
}
WorkPtr GlooGroup::all_gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs) {
  return pg_->allgather(outputs, inputs);
}
WorkPtr GlooGroup::barrier() { return pg_->barrier(); }

#endif

void wait(const WorkPtr& w, std::chrono::milliseconds timeout) {
  // 1.13 and 2.x: wait() returns false when the work was aborted and throws the backend's
  // error (peer closed the connection, timeout) otherwise.
  bool done = w->wait(timeout);
  if (!done) throw std::runtime_error("the operation was aborted");
}

void abort(const WorkPtr& w) noexcept {
  try {
    w->abort();
  } catch (...) {
    // Collective works of 1.13 do not support abort; the watchdog ends the process instead.
  }
}

void backward(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& grads, bool retain_graph,
              const std::vector<at::Tensor>& inputs) {
  torch::autograd::backward(outputs, grads, retain_graph, /*create_graph=*/false, inputs);
}

std::vector<at::Tensor> grad(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                             const std::vector<at::Tensor>& grads, bool retain_graph) {
  return torch::autograd::grad(outputs, inputs, grads, retain_graph, /*create_graph=*/false, /*allow_unused=*/true);
}

void plain_script_execution() { torch::jit::setGraphExecutorOptimize(false); }

bool cuda_available() { return torch::cuda::is_available(); }
int cuda_device_count() { return static_cast<int>(torch::cuda::device_count()); }

void* current_cuda_stream(int device) {
#if defined(PPSCHED_TORCH_CUDA)
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
#else
  (void)device;
  return nullptr;
#endif
}

void cuda_set_device(int device) {
#if defined(PPSCHED_TORCH_CUDA)
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
#else
  (void)device;
  throw std::runtime_error("this libtorch (" + torch_version() + ") has no CUDA");
#endif
}

bool cuda_stream_ready(int device) {
#if defined(PPSCHED_TORCH_CUDA)
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).query();
#else
  (void)device;
  throw std::runtime_error("this libtorch (" + torch_version() + ") has no CUDA");
#endif
}

std::string torch_version() { return TORCH_VERSION; }

#if defined(PPSCHED_TORCH_CUDA)
// Timing events (cudaEventDefault, not DisableTiming) recorded on the stream the steps use.
bool cuda_timing_available() { return cuda_available(); }
void* cuda_event_record(int device) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) throw std::runtime_error("cudaEventCreate failed");
  if (cudaEventRecord(e, c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream()) != cudaSuccess)
    throw std::runtime_error("cudaEventRecord failed");
  return e;
}
double cuda_event_elapsed_ms(void* from, void* to) {
  if (cudaEventSynchronize(static_cast<cudaEvent_t>(to)) != cudaSuccess) throw std::runtime_error("cudaEventSynchronize failed");
  float ms = 0;
  if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)) != cudaSuccess)
    throw std::runtime_error("cudaEventElapsedTime failed");
  return ms;
}
void cuda_event_destroy(void* event) noexcept {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}
#else
bool cuda_timing_available() { return false; }
void* cuda_event_record(int) { throw std::logic_error("CUDA events without a CUDA libtorch"); }
double cuda_event_elapsed_ms(void*, void*) { throw std::logic_error("CUDA events without a CUDA libtorch"); }
void cuda_event_destroy(void*) noexcept {}
#endif

}  // namespace ppsched::exec::compat
