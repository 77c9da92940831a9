// Each `ppsched` command registers a CLI11 subcommand and the action that runs it.
// Commands return an exit code: 0 ok, 1 problems found (violations), 2 bad input or usage.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>
#include <iosfwd>
#include <optional>
#include <string>

#include "schedule/generators/generator.hpp"
#include "lowering/options.hpp"
#include "schedule/text_format.hpp"
#include "schedule/validate.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/schedule.hpp"
#include "workload/workload.hpp"
#include "sim/engine.hpp"
#include "sim/cost_assembly.hpp"
#include "sim/workload_costs.hpp"
#include <nlohmann/json.hpp>

namespace ppsched::cli {

inline constexpr int kOk = 0;
inline constexpr int kFound = 1;
inline constexpr int kBadInput = 2;

using Action = std::function<int()>;

// A whole number from lo to hi (a count or size flag); the message names the limit, and the
// value is checked before anything is sized by it.
inline CLI::Validator whole_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        long long v = 0;
        size_t used = 0;
        try {
          v = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        const std::string range = "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
        if (used != 0 && used == text.size() && v > hi)
          return "'" + text.substr(0, 40) + "' is over the limit of " + std::to_string(hi) + " (expected " + range + ")";
        if (used == 0 || used != text.size() || v < lo || v > hi) return "expected " + range + ", got '" + text.substr(0, 40) + "'";
        return {};
      },
      "INT in " + std::to_string(lo) + ".." + std::to_string(hi));
}

// A random seed: a whole number from 0 to 2^64-1, in decimal (a longer one is refused, not
// wrapped or clamped into another seed).
inline CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.size() <= 20 &&
                            text.find_first_not_of("0123456789") == std::string::npos;
        if (!digits || (text.size() == 20 && text > "18446744073709551615"))
          return "expected a seed from 0 to 18446744073709551615, got '" + text.substr(0, 40) + "'";
        return {};
      },
      "UINT64");
}

// A number above lo and at most hi (seconds and the like); refuses nan and inf.
inline CLI::Validator number_in(double lo_exclusive, double hi) {
  return CLI::Validator(
      [lo_exclusive, hi](std::string& text) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !(v > lo_exclusive) || !(v <= hi)) {
          std::string range = format_text("a number above %g and at most %g", lo_exclusive, hi);
          return std::string("expected ") + range + ", got '" + text.substr(0, 40) + "'";
        }
        return {};
      },
      "NUMBER");
}

Action add_generate(CLI::App& app);
Action add_show(CLI::App& app);
Action add_convert(CLI::App& app);
Action add_check(CLI::App& app);
Action add_costs(CLI::App& app);
Action add_simulate(CLI::App& app);
Action add_compare(CLI::App& app);
Action add_fuzz(CLI::App& app);
Action add_calibrate(CLI::App& app);
Action add_tune(CLI::App& app);
Action add_model(CLI::App& app);
Action add_plan(CLI::App& app);

// `check --suggest`: searches and prints (or adds to `json`) the smallest move edit that makes
// `s` verify, writing the fixed schedule to fix_out when given (tools/cli/check_suggest.cpp).
void suggest_fix(const std::string& name, const Schedule& s, const CheckOptions& o, const std::string& fix_out,
                 nlohmann::json* json);

// Generator options shared by `generate` and `check --generate`.
struct GeneratorFlags {
  std::string family;
  GenerateOptions options;
  std::string overflow;  // "" : not given (full)
  std::string tower;     // "" : not given (trainable)
  bool batch = false;  // coalesce P2P runs into BATCH_SEND_RECV
  std::string transport;  // --p2p-transport: "" (not given), plain, batch, boundary
  bool fsdp_steps = false;  // insert FSDP_UNSHARD / RESHARD / REDUCE_GRAD as PyTorch lowers them
  bool data_steps_on = false, data_steps_off = false;  // --data-steps / --no-data-steps
};
void add_generator_flags(CLI::App& cmd, GeneratorFlags& flags, bool family_required);
// On commands that read FILEs too (check, simulate): the generator flags describe --generate's
// schedule, and without --generate they are refused (a FILE says its own P, V and M).
void generator_flags_need_generate(CLI::App& cmd);
// Builds the schedule the flags describe (throws InputError on bad parameters).
Schedule build_generated(GeneratorFlags& flags);

// The job's data parallelism, shared by `check`, `simulate` and `compare`: --dp N, --fsdp,
// --mesh-order dp,pp|pp,dp (README "Pipeline x data parallel").
struct DataParallelFlags {
  int degree = 1;
  bool fsdp = false;
  bool distributed_optimizer = false;
  std::string mesh_order = to_string(MeshOrder::DpPp);
  CLI::Option *degree_opt = nullptr, *fsdp_opt = nullptr, *dist_opt = nullptr;  // given on the command line?
  bool planned = false;  // degree and sharding taken from a planned schedule (take_planned_for): as if given
};
// --dp, --fsdp, --mesh-order and (`with_distributed_optimizer`: where the optimizer state is
// priced; the executor has none to shard) --distributed-optimizer.
void add_data_parallel_flags(CLI::App& cmd, DataParallelFlags& flags, bool with_distributed_optimizer = true);
// The options the flags give a job of `pipeline_ranks` ranks; throws InputError naming the
// flag when the world (pipeline ranks x N) is over the rank limit.
DataParallelOptions data_parallel_options(const DataParallelFlags& flags, int pipeline_ranks,
                                          const std::string& input = "");
// "DP 8 (mesh dp,pp, FSDP)": how a report names the layout.
std::string data_parallel_label(const DataParallelOptions& dp);
// How an FSDP_UNSHARD is priced under `dp` with memory model `mm` ("" without --fsdp over N > 1):
// "FSDP2 per-block gather (2 blocks of 34)" for a schedule without a pipeline priced from a
// network, else "whole stage gathered per FSDP_UNSHARD".
std::string gather_rule_label(const MemoryModel& mm, const DataParallelOptions& dp);

// The costs of a command: --costs FILE, --model MODEL with its training flags (README "Model
// and memory"), or the embedded default. With both, the cost file overrides what it sets.
struct CostFlags {
  std::string costs, model, layout, recompute, flash_attention, attention_core, precision, optimizer;
  long long seq_len = 0, micro_batch_size = 0;
  int tp = 0, ep = 0, etp = 0;
  std::optional<double> moe_capacity_factor;
  // Pricing assumptions every cost model states (unset: the model's): OVERLAP_* sub-steps, the
  // device's reserve (with --model) and the margin that marks a peak tight; ranks per node and
  // how much communication beside compute slows it (the MoE all-to-all's streams).
  std::optional<double> overlap_efficiency, memory_margin, comm_contention;
  std::optional<int> gpus_per_node;
  bool delay_wgrad = false;  // --delay-wgrad-compute (MoE models)
  std::string memory_reserve;
  CLI::Option* model_opt = nullptr;
  std::vector<int64_t> planned_layout;  // a planned schedule's layout (take_planned_for), without --layout
  std::vector<CLI::Option*> model_only;  // the flags that need a model, where a schedule may name it
};
// What `tune -o` writes a schedule was planned for: the model and training flags it priced with,
// the data parallelism and the best entry's layout (tools/cli/planned_for.cpp).
PlannedFor planned_for(const CostFlags& f, const DataParallelOptions& dp, const std::vector<int64_t>& layout,
                       const std::string& megatron);
// Before a command reads its costs: the plan its input schedules carry (all the same one, else an
// InputError) fills the flags the command line leaves unset: the model (opened as written, else
// beside the schedule file), the layout, the training settings and the data parallelism. An
// explicit --layout or data-parallel flag overrides the plan's and a --model of another file sets
// the plan aside, each with a note on stderr.
void take_planned_for(const std::vector<std::pair<std::string, const Schedule*>>& inputs, CostFlags& f,
                      DataParallelFlags& dp, const std::string& command);
// `positional_model`: `ppsched model MODEL` takes the model as its argument.
// `reads_schedules`: the model may come from a planned schedule, so the flags that need one are
// checked by cost_source() (after take_planned_for), not by the parser.
void add_cost_flags(CLI::App& cmd, CostFlags& f, bool with_costs_file = true, bool positional_model = false,
                    bool reads_schedules = false);
// The workload --model names with the training flags applied (a flag wins over the file); the
// data-parallel flags not given on the command line take the model file's training values.
// check_positions' notes go to `notes` when the command renders them (`model`), else to stderr.
Workload load_workload(const CostFlags& f, DataParallelFlags& dp, std::vector<std::string>* notes = nullptr);
// Where the command's costs come from (sim/cost_assembly.hpp), from its flags: the model with
// the training flags applied, --layout, --costs over the model (read once) or alone, and the
// pricing assumptions (--overlap-efficiency, --memory-margin). Throws InputError. `notes`: as
// load_workload's.
CostSource cost_source(const CostFlags& f, DataParallelFlags& dp, std::vector<std::string>* notes = nullptr);
PricingAssumptions pricing_assumptions(const CostFlags& f);
// Where a run's memory budget came from: --memory-budget (`flag_given`), else the cost model's
// capacity and how it was derived.
std::string budget_basis(bool flag_given, const CostModel& c);
// The figures a priced result assumed, as --json gives them (simulate's and tune's
// "assumptions"): the overlap, the budget and its basis (null without one), the margin.
nlohmann::json assumptions_json(const CostModel& c, std::optional<double> budget, bool budget_flag_given);
// costs_for(src, s) with its notes on stderr.
CostModel schedule_costs(const CostSource& src, const Schedule& s);
// The same from the flags.
CostModel load_cost_model(const CostFlags& f, DataParallelFlags& dp, const Schedule& s);
// A note on stderr when the model carries per-rank time factors that `command`, which prices
// stages rather than a schedule's ranks, does not apply.
void note_rank_times_unused(const CostSource& src, const char* command);

// The flags of a simulated run, shared by `simulate`, `compare` and `show --timeline`
// (tools/cli/sim_flags.cpp): the cost flags above, --memory-budget, --comm, --overlap-p2p,
// --no-overlap-p2p, --dyn-shape, --mpipe-batched-recv and the data-parallel flags.
// The runtime mode's flags, declared once for check, simulate, compare, show --timeline and
// ppsched-exec: --comm, --overlap-p2p, --no-overlap-p2p, --mpipe-batched-recv, --dyn-shape and,
// where no transport decides it (not ppsched-exec), --p2p-backend.
struct ModeFlags {
  std::string comm = "rendezvous";
  bool overlap_p2p = false, no_overlap_p2p = false, mpipe_batched_recv = false, dyn_shape = false;
  std::string backend;  // --p2p-backend; empty: NCCL's stream order
};
// Which of the mode flags a command takes: `reads_schedules` (a schedule file, maybe a
// compute_comms CSV or an MPipe schedule: --no-overlap-p2p and --mpipe-batched-recv; tune makes
// its own schedules, no MPipe among them), `backend` (--p2p-backend; the executor's transport
// carries its posted operations itself).
struct ModeFlagSet {
  bool reads_schedules = true, backend = true;
};
void add_mode_flags(CLI::App& cmd, ModeFlags& f, ModeFlagSet set = {});
// Whether input `comms_csv` (read from a compute_comms CSV) runs under --overlap-p2p because it
// is one: PyTorch's runtime semantics, unless --overlap-p2p was given or --no-overlap-p2p refuses it.
bool overlap_by_csv(const ModeFlags& f, bool comms_csv);
// The flags' mode on `o` for input `name`. --p2p-backend (what carries the P2P operations a
// rank posts without waiting) is refused (InputError) where nothing is posted without waiting
// (neither --overlap-p2p nor --mpipe-batched-recv).
void apply_mode(const ModeFlags& f, const std::string& name, bool comms_csv, CheckOptions& o);

struct SimFlags {
  CostFlags cost;
  std::string budget;
  ModeFlags mode;
  DataParallelFlags dp;
};
void add_sim_flags(CLI::App& cmd, SimFlags& f);
// The engine's options for schedule `s` priced by `c`. `comms_csv`: the schedule was read from a
// compute_comms CSV, which selects --overlap-p2p unless --no-overlap-p2p
// (schedule/formats/schedule_io.hpp, selects_overlap_p2p). Throws InputError (--dp, --memory-budget).
SimOptions sim_options(const SimFlags& f, const CostModel& c, const Schedule& s, const std::string& name, bool trace,
                       bool comms_csv = false);

// The format of an output file: `format` (the value of `flag`, json|csv) when given, which must
// agree with the extension of `out` (throws InputError naming both); else the extension, and
// JSON on stdout ("" or "-").
FileFormat output_format(const std::string& format, const std::string& flag, const std::string& out);

// read_schedule_file for a command: a file that is not a schedule but a Chrome trace (it has
// "traceEvents"), a cost file or a model file is named as such (InputError); when the column
// scan inserted the P2P steps of a compute-only file, a note on stderr says how many.
Schedule read_schedule_input(const std::string& path, std::optional<FileFormat> format = {},
                             const CsvReadOptions& csv = {}, std::optional<CsvKind>* csv_kind = nullptr);
// What a JSON file that is not a schedule is ("a Chrome trace (it has \"traceEvents\")", ...) and
// where it belongs; "" when it is none of those.
std::string misplaced_file_kind(const std::string& path);

// Writes `text` to `path`, or to stdout when path is empty or "-". Throws InputError when
// the file cannot be written.
void write_output(const std::string& path, const std::string& text);

// Makes folder `dir` and its parents when missing, like `mkdir -p`; "" when it is a folder now,
// else why not ("a file of that name exists", the system's reason).
std::string make_folder(const std::string& dir);

// Refuses (InputError) an output path that names one of the inputs: writing it would destroy
// the input (`simulate X.json --trace X.json`). "" and "-" (stdout) are never inputs.
void refuse_overwriting_input(const std::string& output, const std::vector<std::string>& inputs,
                              const std::string& flag);

}  // namespace ppsched::cli
