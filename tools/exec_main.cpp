// ppsched-exec: runs a pipeline schedule on real hardware, one process per pipeline rank.
// The command line of the exec/ library: it parses, refuses, prints and picks the exit code;
// exec/ runs and returns what happened (exec/outcome.hpp).
//
//   tools/launch-local 4 -- ppsched-exec --generate mpipe-transpose --pp 4 --micro 8
//       --model gpt --layers 8 --tower-layers 2 --check-parity --json
//
// Everything that can refuse the run happens here, before libtorch is initialised and before
// any rank talks to another: the launcher variables, the schedule (read or generated),
// the verifier (a schedule with violations is refused unless --no-verify), and the
// model/schedule agreement. A refusal prints the same errors on every rank and exits 2.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "checkers/checks.hpp"
#include "exec/agreement.hpp"
#include "exec/error_file.hpp"
#include "lowering/comm_model.hpp"
#include "exec/flag_limits.hpp"
#include "exec/launch_env.hpp"
#include "exec/model_description.hpp"
#include "exec/moe_streams.hpp"
#include "exec/outcome.hpp"
#include "exec/session.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/text_format.hpp"
#include "tools/cli/command.hpp"

namespace {

using namespace ppsched;
using namespace ppsched::exec;

FaultInjection parse_fault(const std::string& spec) {
  // RANK:STEP[:throw|kill|hang|corrupt|delay[:ITERATION]]
  FaultInjection f;
  std::vector<std::string> parts;
  std::string cur;
  for (char c : spec + ":") {
    if (c == ':') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  try {
    if (parts.size() < 2 || parts.size() > 4) throw std::invalid_argument("");
    f.rank = std::stoi(parts[0]);
    f.step = std::stoi(parts[1]);
    if (parts.size() > 2) {
      if (parts[2] == "throw") f.mode = FaultInjection::Mode::Throw;
      else if (parts[2] == "kill") f.mode = FaultInjection::Mode::Kill;
      else if (parts[2] == "hang") f.mode = FaultInjection::Mode::Hang;
      else if (parts[2] == "corrupt") f.mode = FaultInjection::Mode::Corrupt;
      else if (parts[2] == "delay") f.mode = FaultInjection::Mode::Delay;
      else throw std::invalid_argument("");
    }
    if (parts.size() > 3) f.iteration = std::stoi(parts[3]);
  } catch (const std::exception&) {
    throw InputError({}, "--fail-at wants RANK:STEP[:throw|kill|hang|corrupt|delay[:ITERATION]], got '" + spec + "'");
  }
  return f;
}

// CLI11 validators from the limits in exec/flag_limits.hpp, checked on the text typed.
CLI::Validator limit(std::string (*check)(const std::string&), const std::string& what) {
  return CLI::Validator([check](std::string& text) { return check(text); }, what);
}

// Rank 0's report of a completed run: one JSON line (--json) or a few lines of text.
void print_report(const ExecConfig& cfg, const Schedule& s, const ExecOutcome& o) {
  const std::string& transport = o.transport;
  const std::vector<double>& losses = o.losses;
  const ParityResult* parity = o.parity ? &*o.parity : nullptr;
  const TraceWritten* trace = o.trace ? &*o.trace : nullptr;
  double mean_s = 0;
  for (double t : o.seconds) mean_s += t / static_cast<double>(o.seconds.size());
  const char* model = cfg.model.kind == ModelKind::Gpt ? (cfg.model.experts > 0 ? "moe" : "gpt")
                      : cfg.model.kind == ModelKind::Mlp ? "mlp"
                                                         : "stage-module";
  if (cfg.run.json) {
    // nlohmann: every string escaped, a non-finite number (a diverged loss) written as null.
    using nlohmann::json;
    json j = {{"ok", !(parity && !parity->ok)},
              {"schedule", s.name},
              {"ranks", s.ranks},
              {"stages", s.stages},
              {"micro_batches", s.micro_batches},
              {"transport", transport},
              {"dp", cfg.run.mode.dp.degree},
              {"world_size", cfg.env.world_size},
              {"fsdp", cfg.run.mode.dp.fsdp},
              {"overlap_p2p", cfg.run.mode.overlap_p2p},
              {"model", model},
              {"experts", cfg.model.experts},
              {"topk", cfg.model.experts > 0 ? cfg.model.topk : 0},
              {"ep", cfg.model.experts > 0 ? cfg.model.ep : 1},
              {"iterations", o.seconds.size()},
              {"loss", losses.empty() ? 0.0 : losses.back()},
              {"losses", losses},
              {"iteration_time_s", mean_s},
              {"iteration_times_s", o.seconds}};
    {
      // Every global rank's (dp, pp) coordinates: rank g is mesh.coordinates[g].
      const DeviceMesh mesh = cfg.run.mode.dp.mesh(s.ranks);
      json coords = json::array();
      for (int g = 0; g < mesh.world(); ++g) coords.push_back({{"dp", mesh.replica(g)}, {"pp", mesh.pipeline_rank(g)}});
      j["mesh"] = {{"dim_names", {"dp", "pp"}}, {"shape", {mesh.dp, mesh.pp}}, {"order", to_string(mesh.order)},
                   {"coordinates", coords}};
      // Per global rank: its stages' parameter elements, and what it holds after the run
      // (with --fsdp and resharded stages: its shards only).
      j["parameter_elements"] = o.parameter_elements;
      j["held_parameter_elements"] = o.held_parameter_elements;
      if (cfg.model.experts > 0 && cfg.model.ep > 1)
        j["all_to_alls"] = {{"calls", o.all_to_alls}, {"overlapped", o.all_to_alls_overlapped}};
    }
    {
      // Per global rank: the CPUs its process could run on and whether ppsched-exec bound it.
      json cpus = json::array();
      for (const auto& b : o.cpu_binding)
        cpus.push_back({{"rank", b.rank}, {"cpus", b.cpus}, {"bound", b.bound}, {"reason", b.reason}});
      j["cpu_binding"] = {{"mode", to_string(cfg.run.cpu_bind)}, {"ranks", cpus}};
    }
    if (parity)
      j["parity"] = {{"ok", parity->ok},           {"max_rel_error", parity->max_rel_error},
                     {"loss_rel_error", parity->loss_rel_error}, {"tolerance", parity->tolerance},
                     {"tensors", parity->tensors}, {"worst", parity->worst},
                     {"problems", parity->problems}};
    if (trace)
      j["trace"] = {{"path", trace->path},
                    {"iteration", o.seconds.size() - 1},
                    {"clock", trace->cuda ? "cuda events" : "host"},
                    {"aligned", trace->shared_clock ? "shared host clock" : "barrier"},
                    {"replica", 0},
                    {"slices", trace->slices},
                    {"flows", trace->flows},
                    {"makespan_ms", trace->makespan_ms},
                    {"notes", trace->notes}};
    std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
    return;
  }
  const DataParallelOptions& dpc = cfg.run.mode.dp;
  std::cout << "ppsched-exec: " << s.name << " on " << s.ranks << " ranks";
  if (dpc.degree > 1)
    std::cout << " x " << dpc.degree << " data-parallel replicas (" << cfg.env.world_size << " processes, mesh "
              << to_string(dpc.mesh_order) << (dpc.fsdp ? ", fsdp" : "") << ")";
  std::cout << " (" << transport << "), " << model << ", " << s.stages << " stages, " << s.micro_batches
            << " micro-batches" << (dpc.degree > 1 ? " per replica" : "") << (cfg.run.mode.overlap_p2p ? ", --overlap-p2p" : "")
            << "\n";
  {
    // One line for the CPUs: each rank's, or the reason nobody was bound (the same on every rank).
    bool any_bound = false;
    for (const auto& b : o.cpu_binding) any_bound = any_bound || b.bound;
    if (any_bound) {
      std::cout << "  cpus (--cpu-bind " << to_string(cfg.run.cpu_bind) << "):";
      for (const auto& b : o.cpu_binding)
        std::cout << (b.rank ? ", " : " ") << "rank " << b.rank << " on " << (b.cpus.empty() ? "?" : b.cpus)
                  << (b.bound ? "" : " (not bound)");
      std::cout << "\n";
    } else if (!o.cpu_binding.empty()) {
      std::cout << "  cpus: " << o.cpu_binding.front().reason << "\n";
    }
  }
  for (size_t k = 0; k < o.seconds.size(); ++k)
    std::cout << "  iteration " << k << ": loss " << general(k < losses.size() ? losses[k] : 0, 9) << ", "
              << general(o.seconds[k], 9) << " s\n";
  if (parity) {
    std::cout << "  parity: " << (parity->ok ? "ok" : "FAILED") << " (max relative error " << general(parity->max_rel_error, 9)
              << " over " << parity->tensors << " gradients, loss " << general(parity->loss_rel_error, 9) << ", tolerance "
              << general(parity->tolerance, 9) << ")\n";
    for (const auto& p : parity->problems) std::cout << "    " << p << "\n";
  }
  if (trace) {
    std::cout << "  trace: " << trace->path << " (iteration " << o.seconds.size() - 1 << ", "
              << (trace->cuda ? "CUDA events" : "host clock") << ", aligned "
              << (trace->shared_clock ? "on the shared host clock" : "at the barrier") << "): " << trace->slices << " slices, " << trace->flows
              << " flows, makespan " << general(trace->makespan_ms, 9) << " ms\n";
    for (const auto& n : trace->notes) std::cout << "    " << n << "\n";
  }
  std::cout.flush();
}

// 0: the run succeeded; 1: it failed (a step, a peer, the parity check); 2: refused.
int report(const ExecConfig& cfg, const Schedule& s, const ExecOutcome& o) {
  if (o.reporter) print_report(cfg, s, o);
  switch (o.status) {
    case ExecOutcome::Status::Ok: return cli::kOk;
    case ExecOutcome::Status::Refused:
      for (const auto& e : o.errors) std::cerr << "error: " << e << "\n";
      return cli::kBadInput;
    case ExecOutcome::Status::Failed:
      // One final error per process: the watchdog thread may have printed its own already.
      if (!o.errors.empty() && claim_final_error()) {
        for (const auto& e : o.errors) std::cerr << "error: " << e << "\n";
        std::cerr.flush();
      }
      return cli::kFound;
  }
  return cli::kFound;
}

// What ppsched-exec was asked, as its flags say; cfg collects what the run needs.
struct ExecFlags {
  ExecConfig cfg;
  std::string schedule_file;
  cli::GeneratorFlags gen;
  std::string model_kind = "gpt", transport = "auto", fail_at, layout_text, stage_module_dir, cpu_bind = "auto";
  std::string model_out, a2a_order = "lowered";
  int experts = 4, topk = 2, ep = 0;
  cli::DataParallelFlags dp;
  cli::ModeFlags mode;
  int stages = 0, global_batch = 0;
  bool no_verify = false, verbose = false;
  CLI::Option *tower_opt = nullptr, *stage_module_opt = nullptr, *ep_opt = nullptr;
};

// The schedule and the model: a file or a generator's flags, a built-in model or stage modules.
void declare_model_flags(CLI::App& app, ExecFlags& f) {
  app.add_option("--schedule", f.schedule_file, "schedule file (.json or .csv)");
  cli::add_generator_flags(app, f.gen, /*family_required=*/false);
  f.tower_opt = app.get_option("--tower");
  app.add_option("--model", f.model_kind, "built-in model: gpt|mlp|moe (moe: gpt whose blocks route each token to its top-k experts)")
      ->check(CLI::IsMember({"gpt", "mlp", "moe"}));
  app.add_option("--experts", f.experts, "moe: experts per block (default 4)")->check(CLI::Range(1, 1 << 16));
  app.add_option("--topk", f.topk, "moe: experts per token (default 2)")->check(CLI::Range(1, 1 << 16));
  f.ep_opt = app.add_option("--ep", f.ep,
                            "moe: expert-parallel size, the experts split over each pipeline rank's data-parallel group "
                            "(must equal --dp; sets it when --dp is not given)")
                 ->check(CLI::Range(1, 1 << 16));
  app.add_option("--moe-a2a-order", f.a2a_order,
                 "moe: lowered (default: the all-to-alls in the stream lowering's order, Megatron's combined 1F1B, verified) "
                 "or ready (each as soon as its chain reaches it, as a runtime launching on a shared event does; the "
                 "checker refuses it where an overlapped step's two chains both communicate)")
      ->check(CLI::IsMember({"lowered", "ready"}));
  app.add_option("--layers", f.cfg.model.layers, "blocks, split over the virtual stages (default: 4, or one per stage when there are more, or --layout's)")->check(CLI::PositiveNumber);
  app.add_option("--layout", f.layout_text,
                 "blocks per virtual stage, stage order (\"3,5\"), or Megatron's layout (\"Et*3|t*5L\"), as `ppsched simulate "
                 "--layout` reads them (default: torchtitan's even split, the embedding and the head counting one block each, "
                 "as the simulator and calibrate split)");
  app.add_option("--hidden", f.cfg.model.hidden, "hidden size")->check(CLI::PositiveNumber);
  app.add_option("--heads", f.cfg.model.heads, "gpt: attention heads")->check(CLI::PositiveNumber);
  app.add_option("--seq", f.cfg.model.seq, "gpt: tokens per sample")->check(CLI::PositiveNumber);
  app.add_option("--vocab", f.cfg.model.vocab, "gpt: vocabulary size")->check(CLI::PositiveNumber);
  app.add_option("--micro-batch-size", f.cfg.model.micro_batch_size, "samples per micro-batch")->check(CLI::PositiveNumber);
  app.add_option("--seed", f.cfg.model.seed, "seed of the parameters and the data")->check(limit(check_seed, "UINT64"));
  app.add_flag("--tie-embeddings", f.cfg.model.tie_embeddings, "gpt: the LM head shares the token embedding (needs ALL_REDUCE steps when they sit on different ranks)");
  app.add_option("--tower-layers", f.cfg.model.tower_layers, "MPipe tower: the first T units of stage 0 (default 1 with a tower, 0 without)")
      ->check(limit([](const std::string& t) { return check_count(t, 0, 1 << 20); }, "T"));
  app.add_option("--model-stages", f.stages, "virtual stages the model is cut into (default: the schedule's; must agree)");
  app.add_option("--global-batch-size", f.global_batch, "samples per iteration (must be micro-batches x micro-batch size)");
  f.stage_module_opt = app.add_option(
      "--stage-module", f.stage_module_dir,
      "directory with stages.json and one TorchScript module per virtual stage (stage0.pt, ...) instead of a built-in model");
}

// How it runs: transport, CPUs, timeouts, iterations, outputs, the runtime mode and the mesh.
void declare_run_flags(CLI::App& app, ExecFlags& f) {
  app.add_option("--transport", f.transport, "auto|gloo|nccl (auto: nccl with a CUDA libtorch, else gloo)")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
  app.add_option("--cpu-bind", f.cpu_bind,
                 "which CPUs each local rank's process runs on: auto (default: a CPU run with no more local ranks than "
                 "CPUs, not yet bound by its launcher, gives local rank r of LOCAL_WORLD_SIZE L the r-th of L equal "
                 "blocks of the CPUs, so two ranks never take turns on one core), none (where the launcher put it), "
                 "blocks (that split always, also for GPU ranks or with more ranks than CPUs)")
      ->check(CLI::IsMember({"auto", "none", "blocks"}));
  app.add_option("--timeout", f.cfg.run.timeout_s, "seconds any blocking operation may take (default 300; 0.001..86400)")
      ->check(limit([](const std::string& t) { return check_seconds(t, kMinTimeoutS, kMaxTimeoutS); }, "SECONDS"));
  app.add_option("--heartbeat-timeout", f.cfg.run.heartbeat_timeout_s,
                 "seconds without a heartbeat before a rank is declared dead (default min(10, timeout); 0.5..86400)")
      ->check(limit([](const std::string& t) { return check_seconds(t, kMinHeartbeatS, kMaxTimeoutS); }, "SECONDS"));
  app.add_option("--iterations", f.cfg.run.iterations, "iterations, gradients accumulating (default 1)")->check(CLI::PositiveNumber);
  app.add_flag("--json", f.cfg.run.json, "rank 0 prints one JSON summary line");
  app.add_flag("--check-parity", f.cfg.run.check_parity, "compare loss and every gradient with a single-process reference");
  app.add_flag("--no-verify", f.no_verify, "run even if the verifier finds violations (may hang or fail)");
  app.add_option("--lr", f.cfg.run.lr, "SGD step after the last iteration, only when every rank succeeded (default 0: none)")
      ->check(limit(check_learning_rate, "LR"));
  app.add_option("--trace", f.cfg.run.trace,
                 "write a Chrome trace (Perfetto) of the LAST iteration to FILE on rank 0: every rank's steps, host "
                 "clock on CPU, CUDA events on GPU, the format of ppsched simulate --trace (ppsched calibrate reads it); "
                 "the first iteration includes warm-up costs, so trace with --iterations 2 or more");
  app.add_option("--fail-at", f.fail_at,
                 "testing: RANK:STEP[:throw|kill|hang|corrupt|delay[:ITERATION]] injects a fault (corrupt: scales the rank's "
                 "gradients by 1.001 after the step; after a DATA_RECV, perturbs the micro-batch it received; delay: "
                 "the step's first sub-step starts 300 ms late)");
  app.add_option("--model-out", f.model_out,
                 "rank 0 writes the built-in model as a ppsched-model file (one layer per unit, named as the trace's "
                 "otherData.layers names them), for ppsched calibrate TRACE --model FILE");
  app.add_flag("--verbose", f.verbose, "errors from libtorch keep their C++ backtrace");
  // The runtime mode, with ppsched check's flags: verified under it, refused when the
  // executor cannot run it (exec/agreement.hpp unsupported_modes).
  // (no --p2p-backend: the transport carries the posted operations, below).
  cli::add_mode_flags(app, f.mode, {.reads_schedules = true, .backend = false});
  // Pipeline x data parallel, ppsched check's flags (WORLD_SIZE = pipeline ranks x N): N replicas
  // of the pipeline, each on its own micro-batches; --fsdp shards each stage's parameters.
  cli::add_data_parallel_flags(app, f.dp, /*with_distributed_optimizer=*/false);
}

// The parsed flags made a run: the launch environment, the schedule (a generated one with --dp
// gets PyTorch's FSDP steps), the model and the runtime mode. Throws on bad input, before any
// communication.
Schedule configure(ExecFlags& f, CLI::App& app) {
  f.cfg.env = read_launch_env();
  install_terminate_handler("rank " + std::to_string(f.cfg.env.rank), describe_exception);
  if (f.schedule_file.empty() == f.gen.family.empty())
    throw InputError({}, "give exactly one of --schedule FILE or --generate FAMILY (with --pp, --micro, ...)");
  std::optional<CsvKind> csv_kind;
  // --dp, --mesh-order and --fsdp are the runtime mode's: the verifier judges the job that runs
  // (its data-parallel pass holds the FSDP steps to PyTorch's rules, as ppsched check --dp N [--fsdp]).
  // A generated order with --dp N gets PyTorch's FSDP steps, as PyTorch's lowering adds them
  // to a compute-only order: without them nothing would reduce the gradients over the replicas.
  // A file is run as written (the agreement check refuses one that lacks them).
  // --model moe: --ep is the data-parallel size (the experts are split over its group).
  for (const char* flag : {"--experts", "--topk", "--ep", "--moe-a2a-order"})
    if (app.get_option(flag)->count() > 0 && f.model_kind != "moe")
      throw InputError({}, std::string(flag) + " describes the MoE model: give --model moe");
  if (f.model_kind == "moe" && f.ep_opt->count() > 0 && app.get_option("--dp")->count() == 0) f.dp.degree = f.ep;
  const bool add_fsdp = f.schedule_file.empty() && f.dp.degree > 1 && !f.gen.fsdp_steps;
  if (add_fsdp) f.gen.fsdp_steps = true;
  Schedule s = f.schedule_file.empty() ? cli::build_generated(f.gen) : read_schedule_file(f.schedule_file, {}, {}, &csv_kind);
  if (add_fsdp && f.cfg.env.rank == 0)
    std::cerr << "note: --dp " << f.dp.degree << ": added PyTorch's FSDP steps to the generated " << f.gen.family
              << " schedule (FSDP_UNSHARD / FSDP_RESHARD around each stage's steps, FSDP_REDUCE_GRAD after its last backward"
              << (f.dp.fsdp ? "" : "; without --fsdp the unshard and reshard do nothing") << "), as PyTorch's lowering does\n";
  f.cfg.model.kind = f.model_kind == "mlp" ? ModelKind::Mlp : ModelKind::Gpt;
  f.cfg.model.layout = f.layout_text;
  if (f.model_kind == "moe") {
    f.cfg.model.experts = f.experts;
    f.cfg.model.topk = f.topk;
    f.cfg.model.ep = f.ep_opt->count() > 0 ? f.ep : f.dp.degree;
    f.cfg.run.a2a_ready_order = f.a2a_order == "ready";
    if (!f.model_out.empty())
      throw InputError({}, "--model-out with --model moe: the ppsched-model file has no MoE layers from ppsched-exec yet");
  }
  if (f.stage_module_opt->count() > 0) {
    // The modules define the model: the built-in model's options would be silently ignored.
    for (const char* flag : {"--model", "--layers", "--layout", "--hidden", "--heads", "--seq", "--vocab",
                             "--micro-batch-size", "--tie-embeddings"})
      if (app.get_option(flag)->count() > 0)
        throw InputError({}, std::string(flag) + " describes a built-in model; with --stage-module the modules and "
                             "stages.json define the model (micro-batch size = dim 0 of the manifest's input shape)");
    f.cfg.model.kind = ModelKind::StageModules;
    f.cfg.model.stage_modules = read_stage_modules(f.stage_module_dir);
    f.cfg.model.micro_batch_size = static_cast<int>(f.cfg.model.stage_modules->input.shape[0]);
  }
  if (f.tower_opt->count() > 0 && !f.schedule_file.empty())
    f.cfg.model.tower = f.gen.tower == "frozen" ? Tower::Frozen : f.gen.tower == "none" ? Tower::None : Tower::Trainable;
  if (f.stages > 0) f.cfg.model.stages = f.stages;
  if (f.global_batch > 0) f.cfg.model.global_batch_size = f.global_batch;
  f.cfg.run.transport = f.transport == "gloo" ? TransportKind::Gloo : f.transport == "nccl" ? TransportKind::Nccl : TransportKind::Auto;
  f.cfg.run.cpu_bind = f.cpu_bind == "none" ? CpuBindMode::None : f.cpu_bind == "blocks" ? CpuBindMode::Blocks : CpuBindMode::Auto;
  f.cfg.run.verify = !f.no_verify;
  // PyTorch's lowered schedule runs under PyTorch's runtime semantics (schedule_io.hpp).
  cli::apply_mode(f.mode, f.schedule_file, selects_overlap_p2p(csv_kind), f.cfg.run.mode);
  // The verdict for operations posted without waiting is the transport's: only Gloo's has
  // non-blocking P2P (the NCCL transport refuses the posting modes, exec/transport.hpp), so
  // a run that posts runs on Gloo, each posted operation progressing on its own.
  f.cfg.run.mode.backend = f.cfg.run.transport == TransportKind::Nccl ? P2PBackend::Nccl : P2PBackend::Gloo;
  const DataParallelOptions& dpc = f.cfg.run.mode.dp = cli::data_parallel_options(f.dp, s.ranks, f.schedule_file);
  if (!f.fail_at.empty()) {
    f.cfg.run.fault = parse_fault(f.fail_at);
    std::vector<std::string> errors = check_fault(*f.cfg.run.fault, s, f.cfg.run.iterations, dpc.mesh(s.ranks));
    for (size_t k = 0; k + 1 < errors.size(); ++k) std::cerr << "error: " << errors[k] << "\n";
    if (!errors.empty()) throw InputError({}, errors.back());
  }
  return s;
}

// The schedule must verify in the mode it runs in (unless --no-verify): kBadInput when it does not.
int refuse_unverified(const ExecConfig& cfg, const Schedule& s, const CommModel& lowering) {
  const int rank = cfg.env.rank;
  if (cfg.run.verify) {
    CheckReport report = verify(s, cfg.run.mode, lowering);
    if (!report.ok()) {
      for (const auto& v : report.violations)
        std::cerr << "error: rank " << rank << ": schedule violation (" << to_string(v.kind) << "): " << v.message << "\n";
      std::cerr << "error: rank " << rank << ": refusing to run '" << s.name << "': the verifier found "
                << report.violations.size() << " violation(s) (ppsched check shows them; --no-verify runs it anyway)\n";
      return cli::kBadInput;
    }
  } else {
    std::cerr << "warning: rank " << rank << ": --no-verify: running '" << s.name
              << "' unverified; a schedule with violations may hang until --timeout or fail mid-run\n";
  }
  return cli::kOk;
}

// --model moe --ep > 1: the program of compute and all-to-all threads (`p`, the one the run
// follows) must verify too (checkers/stream_order.cpp): kBadInput when it has violations, unless
// --no-verify.
int refuse_racy_streams(const ExecConfig& cfg, const Schedule& s, const StreamProgram& p) {
  const int rank = cfg.env.rank;
  const CheckReport report = verify_streams(p);
  if (report.ok()) return cli::kOk;
  const char* order = cfg.run.a2a_ready_order ? "ready" : "lowered";
  if (!cfg.run.verify) {
    std::cerr << "warning: rank " << rank << ": --no-verify: the expert all-to-alls (--moe-a2a-order " << order << ") have "
              << report.violations.size() << " violation(s), first: " << report.violations.front().message << "\n";
    return cli::kOk;
  }
  for (const auto& v : report.violations)
    std::cerr << "error: rank " << rank << ": stream violation (" << to_string(v.kind) << "): " << v.message << "\n";
  std::cerr << "error: rank " << rank << ": refusing to run '" << s.name << "' with --moe-a2a-order " << order
            << ": the checker found " << report.violations.size()
            << " violation(s) in the order of its expert all-to-alls (ppsched check --emit-streams shows the program; "
               "--no-verify runs it anyway)\n";
  return cli::kBadInput;
}

// A mode the executor cannot run is refused; every rank decides the same, before any communication.
int refuse_unsupported_mode(const ExecConfig& cfg, const Schedule& s) {
  const int rank = cfg.env.rank;
  // Every rank decides the same, before any communication.
  bool rendezvous_ok = true;
  if (cfg.run.mode.comm == CommMode::Eager) {
    CheckOptions strict = cfg.run.mode;
    strict.comm = CommMode::Rendezvous;
    rendezvous_ok = verify(s, strict).completes;
  }
  const std::vector<std::string> modes = unsupported_modes(cfg.run.mode, rendezvous_ok);
  if (!modes.empty()) {
    for (const auto& m : modes) std::cerr << "error: rank " << rank << ": " << m << "\n";
    std::cerr << "error: rank " << rank << ": refusing to run '" << s.name << "' in this mode; nothing was run\n";
    return cli::kBadInput;
  }
  return cli::kOk;
}

// Rank 0 writes the built-in model as a ppsched-model file (--model-out).
int write_model_out(const ExecConfig& cfg, const std::string& path, const Agreement& a) {
  try {
    const int blocks = a.layout.units - (cfg.model.kind == ModelKind::Gpt ? 2 : 0);
    const std::string text = describe_model(cfg.model, blocks);
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) throw InputError({}, "--model-out: cannot write '" + path + "'");
  } catch (const std::exception& e) {
    std::cerr << "error: " << describe_exception(e) << "\n";
    return cli::kBadInput;
  }
  return cli::kOk;
}

int run(int argc, char** argv) {
  CLI::App app{"ppsched-exec: run a pipeline-parallel schedule with libtorch, one process per rank "
               "(RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT from torchrun, Slurm or tools/launch-local)"};
  ExecFlags f;
  declare_model_flags(app, f);
  declare_run_flags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : cli::kBadInput;
  }
  set_verbose_errors(f.verbose);
  Schedule s;
  try {
    s = configure(f, app);
  } catch (const std::exception& e) {
    // InputError, and anything else a file or a generator threw: all before any communication.
    std::cerr << "error: " << describe_exception(e) << "\n";
    return cli::kBadInput;
  }
  ExecConfig& cfg = f.cfg;
  // Lowered once: the verifier judges, the runtime runs and rank 0's record times this lowering.
  const CommModel lowering = build_comm_model(s, cfg.run.mode);
  if (const int rc = refuse_unverified(cfg, s, lowering); rc != cli::kOk) return rc;
  if (const int rc = refuse_unsupported_mode(cfg, s); rc != cli::kOk) return rc;
  const int rank = cfg.env.rank;
  Agreement a = check_agreement(s, cfg.env.world_size, cfg.model, executor_has_handler, cfg.run.mode.dp);
  if (!a.ok()) {
    // One failure, one message: a lone reason says that nothing ran; several get a count.
    for (size_t k = 0; k < a.errors.size(); ++k)
      std::cerr << "error: rank " << rank << ": " << a.errors[k] << (a.errors.size() == 1 ? "; nothing was run" : "") << "\n";
    if (a.errors.size() > 1)
      std::cerr << "error: rank " << rank << ": " << a.errors.size() << " problems with the schedule, the model or the launch; nothing was run\n";
    return cli::kBadInput;
  }
  // Lowered once, like the schedule: the verifier judges it and the run's all-to-alls follow it.
  std::optional<StreamProgram> streams;
  if (cfg.model.experts > 0 && cfg.model.ep > 1) {
    streams = moe_stream_program(s, cfg.model, a.layout, cfg.run.a2a_ready_order);
    if (const int rc = refuse_racy_streams(cfg, s, *streams); rc != cli::kOk) return rc;
  }
  if (!f.model_out.empty() && rank == 0)
    if (const int rc = write_model_out(cfg, f.model_out, a); rc != cli::kOk) return rc;
  return report(cfg, s, run_executor(cfg, s, a.layout, lowering, streams ? &*streams : nullptr));
}

}  // namespace

int main(int argc, char** argv) {
  // Every line this rank prints on stderr also goes to torchrun's error file on a failing exit
  // (exec/error_file.hpp); an exception nobody catches becomes an error line and exit 1.
  ppsched::exec::StderrRecorder recorder;
  ppsched::exec::install_terminate_handler("ppsched-exec", ppsched::exec::describe_exception);
  const int rc = run(argc, argv);
  ppsched::exec::report_failure_to_launcher(rc);
  return rc;
}
