// What one ppsched-exec process is asked to do: the launcher's view of the world, the model,
// the transport and the run. Torch-free on purpose: the command line, the launcher variables
// and the model/schedule agreement checks are plain C++, so everything that can refuse a run
// does it before libtorch is initialised and before any rank talks to another.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exec/cpu_binding.hpp"
#include "exec/mesh.hpp"
#include "exec/stage_manifest.hpp"
#include "lowering/options.hpp"
#include "schedule/schedule.hpp"

namespace ppsched::exec {

// The standard launcher variables (torchrun, Slurm, tools/launch-local); exec/launch_env.hpp
// says which launcher sets which.
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = -1;  // ranks on this node (LOCAL_WORLD_SIZE); -1: not told
  int node_rank = -1;         // GROUP_RANK (torchrun) or SLURM_NODEID; -1: not told
  std::string master_addr = "127.0.0.1";
  int master_port = 0;        // 0 only for a single process: its store takes a free port
  // torchrun's static rendezvous: its agent hosts the store; no rank hosts one.
  bool use_agent_store = false;
  std::string store_prefix = "ppsched";  // our keys' prefix (per torchrun restart attempt)
  std::string error_file;     // TORCHELASTIC_ERROR_FILE ("" when not under torchrun)
  std::string source;         // "torchrun", "RANK/WORLD_SIZE", "SLURM_*" or "defaults (single process)"
  bool hosts_store() const { return rank == 0 && !use_agent_store; }
};

// Mlp, Gpt: built in (exec/models.cpp); StageModules: the user's TorchScript stages (--stage-module).
enum class ModelKind { Mlp, Gpt, StageModules };

struct ModelConfig {
  ModelKind kind = ModelKind::Gpt;
  int layers = 0;            // MLP blocks / decoder blocks, split over the virtual stages;
                             // 0: default_layers() (one per stage, at least 4)
  std::string layout;        // --layout, network's spelling (workload/layout.hpp); empty: its even split
  int hidden = 32;
  int heads = 2;             // gpt
  int seq = 8;               // gpt: tokens per sample
  int vocab = 64;            // gpt
  int micro_batch_size = 2;  // samples per micro-batch
  uint64_t seed = 1234;
  bool tie_embeddings = false;  // gpt: the LM head shares the token embedding
  // --model moe: a gpt whose blocks' MLP is a mixture of `experts` experts, each token routed to
  // its top `topk`; with expert parallelism (`ep` > 1, the data-parallel replicas) expert j lives
  // on member j mod ep of the rank's expert-parallel group (exec/expert_link.hpp). 0: dense.
  int experts = 0;
  int topk = 2;
  int ep = 1;
  // MPipe Transpose tower: the first T units of stage 0 (gpt units: embedding, block 0, ...;
  // mlp units: block 0, ...). T = 0 ships data only.
  int tower_layers = -1;     // -1: derived from the schedule (1 with a tower, 0 without)
  std::optional<Tower> tower;  // trainable / frozen / none; unset: the schedule's
  // Agreement inputs that default to the schedule's values.
  std::optional<int> stages;             // --model-stages
  std::optional<int> global_batch_size;  // --global-batch-size (must be M * micro_batch_size)
  // --stage-module DIR: one TorchScript module per virtual stage; set with kind StageModules.
  // micro_batch_size is then dim 0 of the manifest's input shape.
  std::optional<StageModules> stage_modules;
};

enum class TransportKind { Auto, Gloo, Nccl };

// A deliberately injected fault, for the fault tests: at `step` of `rank`'s program in
// iteration `iteration`, throw, die (SIGKILL), hang, or (the parity check's negative control)
// silently scale this rank's gradients by 1.001 after the step.
struct FaultInjection {
  int rank = -1;  // a global rank (with --dp: of any replica)
  int step = -1;
  int iteration = 0;
  // Delay: the step's first sub-step starts 300 ms late (the other sub-step of an overlapped
  // step runs meanwhile): a rank whose compute is slower, to provoke an order race.
  enum class Mode { Throw, Kill, Hang, Corrupt, Delay } mode = Mode::Throw;
};

struct RunConfig {
  TransportKind transport = TransportKind::Auto;
  double timeout_s = 300;            // every blocking operation
  double heartbeat_timeout_s = -1;   // a rank silent this long is declared dead; -1: min(10, timeout)
  int iterations = 1;
  bool json = false;
  bool check_parity = false;
  bool verify = true;
  double lr = 0;                     // > 0: one SGD step after the last iteration, all or nothing
  std::optional<FaultInjection> fault;
  // --trace FILE: rank 0 writes a Chrome trace of the last iteration, every rank's steps.
  std::string trace;
  // The runtime mode, with ppsched check's flags (--comm, --overlap-p2p, --mpipe-batched-recv,
  // --dyn-shape): what the schedule is verified under and the lowering the run must match.
  CheckOptions mode;
  // --cpu-bind: which CPUs each local rank's process runs on (exec/cpu_binding.hpp).
  CpuBindMode cpu_bind = CpuBindMode::Auto;
  // --moe-a2a-order: lowered (the stream lowering's order, verified) or ready (whichever
  // all-to-all an overlapped step's chains reach first; refused by the checker there).
  bool a2a_ready_order = false;
};

struct ExecConfig {
  LaunchEnv env;
  ModelConfig model;
  RunConfig run;
};

}  // namespace ppsched::exec
