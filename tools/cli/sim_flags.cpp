// The flags of a simulated run (costs, memory budget, P2P semantics, data parallelism), shared
// by `simulate`, `compare` and `show --timeline`, so that each prices and runs a schedule alike.
#include "lowering/options.hpp"
#include "schedule/errors.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/render.hpp"

namespace ppsched::cli {

void add_sim_flags(CLI::App& cmd, SimFlags& f) {
  add_cost_flags(cmd, f.cost, true, false, true);
  cmd.add_option("--memory-budget", f.budget,
                 "per-rank memory budget for everything a rank holds (e.g. 80GiB); default: the cost model's capacity");
  add_mode_flags(cmd, f.mode);
  add_data_parallel_flags(cmd, f.dp);
}

void add_mode_flags(CLI::App& cmd, ModeFlags& f, ModeFlagSet set) {
  cmd.add_option("--comm", f.comm, "P2P semantics: rendezvous (NCCL-like, default) or eager (buffered sends)")
      ->check(CLI::IsMember({"rendezvous", "eager"}));
  cmd.add_flag("--overlap-p2p", f.overlap_p2p,
               std::string("receives waited by their consumer, sends drained at the end") +
                   (set.reads_schedules ? " (the default for a compute_comms CSV)" : ""));
  if (set.reads_schedules) {
    cmd.add_flag("--no-overlap-p2p", f.no_overlap_p2p,
                 "run a compute_comms CSV blocking instead of under PyTorch's runtime semantics")
        ->excludes("--overlap-p2p");
    cmd.add_flag("--mpipe-batched-recv", f.mpipe_batched_recv,
                 "MPipe executor: the first MPIPE_FWD_RECV receives every outstanding micro; MPipe sends deferred");
  }
  cmd.add_flag("--dyn-shape", f.dyn_shape, "body FWD P2P exchanges shape/dtype meta at every step");
  if (!set.backend) return;
  cmd.add_option("--p2p-backend", f.backend,
                 "what carries the P2P operations posted without waiting (--overlap-p2p, a compute_comms CSV, "
                 "--mpipe-batched-recv): nccl (default: a rank's operations run in posting order on its stream, so "
                 "a receive posted after a send waits for that send) or gloo (each progresses on its own)")
      ->check(CLI::IsMember({"nccl", "gloo"}));
}

bool overlap_by_csv(const ModeFlags& f, bool comms_csv) { return comms_csv && !f.overlap_p2p && !f.no_overlap_p2p; }

void apply_mode(const ModeFlags& f, const std::string& name, bool comms_csv, CheckOptions& o) {
  o.comm = f.comm == "eager" ? CommMode::Eager : CommMode::Rendezvous;
  o.overlap_p2p = f.overlap_p2p || overlap_by_csv(f, comms_csv);
  o.mpipe_batched_recv = f.mpipe_batched_recv;
  o.dyn_shape = f.dyn_shape;
  if (f.backend.empty()) return;
  if (!o.overlap_p2p && !o.mpipe_batched_recv)
    throw InputError({},
                     "--p2p-backend applies to P2P operations posted without waiting, and " + name +
                         " waits for each where it is posted: give --overlap-p2p or --mpipe-batched-recv, or read a "
                         "compute_comms CSV");
  o.backend = f.backend == "gloo" ? P2PBackend::Gloo : P2PBackend::Nccl;
}

SimOptions sim_options(const SimFlags& f, const CostModel& c, const Schedule& s, const std::string& name, bool trace,
                       bool comms_csv) {
  const int stages = s.stages;
  SimOptions o;
  o.check.dp = data_parallel_options(f.dp, s.ranks, name);
  apply_mode(f.mode, name, comms_csv, o.check);
  o.check.memory = c.memory_model(stages);
  if (c.capacity_bytes) o.check.memory_budget = static_cast<int64_t>(*c.capacity_bytes);
  if (!f.budget.empty()) o.check.memory_budget = parse_bytes(f.budget, "--memory-budget");
  o.record_trace = trace;
  return o;
}

}  // namespace ppsched::cli
