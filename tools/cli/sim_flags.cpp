// The flags of a simulated run (costs, memory budget, P2P semantics, data parallelism), shared
// by `simulate`, `compare` and `show --timeline`, so that each prices and runs a schedule alike.
#include "lowering/options.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/render.hpp"

namespace ppsched::cli {

void add_sim_flags(CLI::App& cmd, SimFlags& f) {
  add_cost_flags(cmd, f.cost);
  cmd.add_option("--memory-budget", f.budget,
                 "per-rank memory budget for everything a rank holds (e.g. 80GiB); default: the cost model's capacity");
  cmd.add_option("--comm", f.comm, "P2P semantics: rendezvous (default) or eager")->check(CLI::IsMember({"rendezvous", "eager"}));
  cmd.add_flag("--overlap-p2p", f.check.overlap_p2p,
               "receives waited by their consumer, sends drained at the end (the default for a compute_comms CSV)");
  cmd.add_flag("--dyn-shape", f.check.dyn_shape, "body FWD P2P exchanges shape/dtype meta at every step (as check)");
  cmd.add_flag("--no-overlap-p2p", f.no_overlap_p2p,
               "run a compute_comms CSV blocking instead of under PyTorch's runtime semantics")
      ->excludes("--overlap-p2p");
  cmd.add_flag("--mpipe-batched-recv", f.check.mpipe_batched_recv, "MPipe executor's batched feature receive");
  add_data_parallel_flags(cmd, f.dp);
}

SimOptions sim_options(const SimFlags& f, const CostModel& c, const Schedule& s, const std::string& name, bool trace,
                       bool comms_csv) {
  const int stages = s.stages;
  SimOptions o;
  o.check = f.check;
  o.check.dp = data_parallel_options(f.dp, s.ranks, name);
  o.check.overlap_p2p = f.check.overlap_p2p || (comms_csv && !f.no_overlap_p2p);
  o.check.comm = f.comm == "eager" ? CommMode::Eager : CommMode::Rendezvous;
  o.check.memory = c.memory_model(stages);
  if (c.capacity_bytes) o.check.memory_budget = static_cast<int64_t>(*c.capacity_bytes);
  if (!f.budget.empty()) o.check.memory_budget = parse_bytes(f.budget, "--memory-budget");
  o.record_trace = trace;
  return o;
}

}  // namespace ppsched::cli
