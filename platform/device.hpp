// The device a rank computes on: its peak rate and achieved fraction, what a run measured of it
// (calibrate's fitted rates, split-backward fractions, per-rank factors), and its memory with
// the reserve a training process cannot use. Part of the platform (platform/): a model file's
// "device" section and the flags read into it; the network's per-stage times divide by its rate.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace ppsched {

// The compute kinds a step time is priced for.
enum class RateKind : uint8_t { Fwd, BwdInput, BwdWeight };
inline constexpr const char* kRateKindKeys[] = {"FWD", "BWD_INPUT", "BWD_WEIGHT"};

// An H100 SXM 80 GB's memory as its driver reports it (NVML, nvidia-smi: 81,559 MiB = 79.65
// GiB; the "80 GB" is decimal marketing of a larger die less what the driver keeps).
inline constexpr int64_t kH100MemoryBytes = int64_t{81559} << 20;
// What a training process cannot use of a device's memory, by default: the CUDA context and
// the libraries' handles and workspaces (cuBLAS, cuDNN; ~0.5-1 GiB on an H100 with CUDA 12),
// NCCL's communicator buffers (channels x peers x NCCL_BUFFSIZE, 4 MiB each; ~0.5-1 GiB for the
// few communicators of a pipeline x data-parallel job) and the caching allocator's
// fragmentation (blocks it holds but cannot hand out; a few % of the device). An estimate, not
// a measurement: `--memory-reserve` / device.memory_reserve_bytes set it from a real run
// (torch.cuda.mem_get_info before the first step, less max_memory_reserved's excess over
// max_memory_allocated).
inline constexpr int64_t kDefaultMemoryReserveBytes = int64_t{4} << 30;

struct Device {
  double flops_per_s = 989e12;  // H100 SXM dense bf16 peak
  double mfu = 0.45;            // achieved fraction of the peak
  // The device's memory as its driver reports it (unset: no limit), and the reserve taken off
  // it: a plan is held to usable_memory_bytes().
  std::optional<int64_t> memory_bytes = kH100MemoryBytes;
  int64_t memory_reserve_bytes = kDefaultMemoryReserveBytes;
  std::optional<int64_t> usable_memory_bytes() const {
    if (!memory_bytes) return std::nullopt;
    return std::max<int64_t>(0, *memory_bytes - memory_reserve_bytes);
  }
  // What `ppsched calibrate --model` measured, per compute kind: an achieved rate and a fixed
  // time per step (a stage's step takes overhead_ms + its FLOPs / flops_per_s). Unset: the
  // peak x mfu, no overhead.
  struct Fitted {
    double flops_per_s = 0;
    double overhead_ms = 0;
  };
  std::optional<Fitted> fitted[3];  // by RateKind
  // What a split backward costs as fractions of the whole one, measured by the executor
  // (ppsched-exec --trace probes each stage; calibrate --model keeps the medians): on the first
  // stage, whose BWD_INPUT differentiates no input, and on the others. A split step's time is
  // then its fraction of the stage's whole backward. Unset: the halves cost what their FLOPs do.
  struct SplitCost {
    double input = 0.5, weight = 0.5;
  };
  std::optional<SplitCost> split_first, split_other;
  // What `ppsched calibrate --model` measured of each traced rank, by RateKind: the time its
  // stages' steps took over what the fitted rates price them at (a slower core, a throttled
  // GPU). A schedule run on as many ranks prices each stage's steps at its rank's factor;
  // empty: every rank alike.
  std::vector<std::array<double, 3>> rank_time;
  double effective_flops() const { return flops_per_s * mfu; }
};

}  // namespace ppsched
