// The one adapter between ppsched and libtorch's moving parts. Everything that is spelled
// differently in libtorch 1.13 (Debian 12) and 2.x lives behind these functions, in
// torch_compat.cpp, and nowhere else:
//  - c10d: TCPStore options (2.x adds libuv), ProcessGroupGloo being a ProcessGroup (1.13) or
//    a Backend (2.x), the Work type and its wait/abort;
//  - autograd: backward() restricted to chosen inputs;
//  - CUDA: whether this libtorch has CUDA, and torch's current stream for the NCCL transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Store;
class ProcessGroupGloo;
class Work;
}  // namespace c10d

namespace ppsched::exec::compat {

using StorePtr = c10::intrusive_ptr<c10d::Store>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// A TCPStore client; the server lives in the process with `is_server` (rank 0). Connecting
// retries until `timeout`.
StorePtr make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                        std::chrono::milliseconds timeout);
// The port a TCPStore listens on or connects to (the one it took when created with port 0).
int tcp_store_port(const StorePtr& store);
// Prefixed view of a store, so sub-groups and our own keys never collide.
StorePtr prefix_store(const std::string& prefix, const StorePtr& store);

// A Gloo process group over `store`: `size` members, this one being `rank`. `address` is the
// local address to bind (an interface name when `is_interface`). Blocks until every member
// connected, at most `timeout`, which is also the timeout of every operation on it.
class GlooGroup {
 public:
  GlooGroup(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout,
            const std::string& address, bool is_interface);
  ~GlooGroup();
  WorkPtr send(at::Tensor& t, int dst, int tag);
  WorkPtr recv(at::Tensor& t, int src, int tag);
  WorkPtr broadcast(std::vector<at::Tensor>& ts, int root);
  WorkPtr all_reduce_sum(std::vector<at::Tensor>& ts);
  // outputs[0][k] receives member k's inputs[0].
  WorkPtr all_gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs);
  WorkPtr barrier();

 private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};

// Waits for `w`; throws std::runtime_error (with the backend's message) on failure or when the
// work was aborted. `timeout` 0 = the group's timeout.
void wait(const WorkPtr& w, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
// Unblocks a pending wait on `w` (Gloo send/recv support it; collectives ignore it).
void abort(const WorkPtr& w) noexcept;

// Accumulates d(outputs)/d(inputs) . grads into inputs' .grad (all leaves when `inputs` is
// empty); keeps the graph when `retain_graph`.
void backward(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& grads, bool retain_graph,
              const std::vector<at::Tensor>& inputs = {});
// Returns d(outputs)/d(inputs) . grads without touching any .grad (undefined for unused inputs).
std::vector<at::Tensor> grad(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                             const std::vector<at::Tensor>& grads, bool retain_graph);

// TorchScript modules run operator by operator, recording the same autograd graph as eager
// code (graph-executor optimizations off, process-wide). Idempotent.
void plain_script_execution();

bool cuda_available();
int cuda_device_count();
// torch's current CUDA stream on `device` as a cudaStream_t; nullptr (the legacy default
// stream) when this libtorch has no CUDA.
void* current_cuda_stream(int device);
// Through torch's own CUDA runtime (c10_cuda), so the NCCL transport never links a second
// libcudart next to the one a pip wheel ships. Both throw std::runtime_error without CUDA.
void cuda_set_device(int device);
bool cuda_stream_ready(int device);  // the current stream finished its work; throws on a CUDA error
std::string torch_version();

// CUDA events on torch's current stream of `device`, for step timing. Without a CUDA
// libtorch cuda_timing_available() is false and the others must not be called.
bool cuda_timing_available();
void* cuda_event_record(int device);
// Milliseconds from `from` to `to`, after waiting for `to` to complete.
double cuda_event_elapsed_ms(void* from, void* to);
void cuda_event_destroy(void* event) noexcept;

}  // namespace ppsched::exec::compat
