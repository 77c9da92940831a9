// The life of one ppsched-exec process after its checks passed: rendezvous, watchdog,
// transport, iterations, an all-or-nothing commit, results gathered on rank 0, orderly exit.
// What happened is returned (ExecOutcome); tools/exec_main.cpp prints it.
#include "exec/session.hpp"

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include <unistd.h>


#include "exec/cpu_binding.hpp"
#include "exec/error_file.hpp"
#include "exec/expert_link.hpp"
#include "exec/launch_env.hpp"
#include "exec/measured_trace.hpp"
#include "exec/moe_streams.hpp"
#include "exec/parity.hpp"
#include "exec/runtime.hpp"
#include "exec/transport.hpp"
#include "exec/watchdog.hpp"
#include "exec/rank_report.hpp"
#include "schedule/text_format.hpp"
#include "traces/chrome_trace.hpp"

namespace ppsched::exec {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// Everything that changes what the ranks will do together: ranks started with different
// arguments would otherwise meet with mismatched messages.
std::string digest_of(const ExecConfig& cfg, const Schedule& s) {
  std::ostringstream o;
  const auto& m = cfg.model;
  o << schedule_digest(s) << '|' << static_cast<int>(m.kind) << ' ' << m.layers << ' ' << m.hidden << ' '
    << m.heads << ' ' << m.seq << ' ' << m.vocab << ' ' << m.micro_batch_size << ' ' << m.seed << ' ' << m.tie_embeddings
    << ' ' << m.tower_layers << ' ' << static_cast<int>(m.tower.value_or(Tower::None)) << '|' << cfg.run.iterations << ' '
    << cfg.run.check_parity << ' ' << cfg.run.lr << ' ' << static_cast<int>(cfg.run.transport) << ' '
    << !cfg.run.trace.empty() << ' ' << static_cast<int>(cfg.run.mode.comm) << cfg.run.mode.overlap_p2p
    << cfg.run.mode.mpipe_batched_recv << cfg.run.mode.dyn_shape << '|' << cfg.run.mode.dp.degree << ' '
    << static_cast<int>(cfg.run.mode.dp.mesh_order) << ' ' << cfg.run.mode.dp.fsdp;
  if (m.stage_modules) o << '|' << m.stage_modules->dir << ' ' << m.stage_modules->stages;
  o << "|layout " << m.layout;
  return std::to_string(std::hash<std::string>{}(o.str()));
}

// The collective groups of every ALL_REDUCE and REPLICA_GRAD_SYNC in the schedule, sorted: each member creates them
// in this same order (reference §3.5 item 17).
std::vector<std::vector<int>> reduce_groups(const Schedule& s) {
  std::set<std::vector<int>> groups;
  for (const auto& prog : s.programs)
    for (const auto& slot : prog) {
      if (!slot) continue;
      auto visit = [&](const Step& st) {
        const CollectiveScope scope = info(st.op).collective;
        if (scope != CollectiveScope::ExplicitGroup && scope != CollectiveScope::Replicas) return;
        // REPLICA_GRAD_SYNC: the ranks holding the copies of its stage.
        const std::vector<int32_t> ranks = scope == CollectiveScope::Replicas ? s.replica_ranks(st.stage)
                                                                              : std::vector<int32_t>(st.group().begin(), st.group().end());
        std::vector<int> g(ranks.begin(), ranks.end());
        std::sort(g.begin(), g.end());
        g.erase(std::unique(g.begin(), g.end()), g.end());
        if (g.size() > 1) groups.insert(g);
      };
      visit(*slot);
      for (const auto& sub : slot->sub_steps()) visit(sub);
    }
  return {groups.begin(), groups.end()};
}

// Every collective group the run creates, over the whole mesh in global ranks, sorted: each
// process creates the ones it belongs to in this order (overlapping groups created in
// different orders deadlock). Per replica: the tied-parameter ALL_REDUCE and replicated stages' groups and, with
// data parallelism and pipeline-wide collectives (MPipe), the replica's pipeline; per pipeline
// rank, its data-parallel group when the schedule has FSDP steps.
std::vector<std::vector<int>> mesh_groups(const Schedule& s, const DeviceMesh& mesh) {
  bool pipeline_wide = false, fsdp = false;
  for (const auto& prog : s.programs)
    for (const auto& slot : prog)
      if (slot) {
        auto visit = [&](const Step& st) {
          pipeline_wide = pipeline_wide || info(st.op).collective == CollectiveScope::AllPipelineRanks;
          fsdp = fsdp || info(st.op).collective == CollectiveScope::DataParallel;
        };
        visit(*slot);
        for (const auto& sub : slot->sub_steps()) visit(sub);
      }
  std::set<std::vector<int>> groups;
  for (int d = 0; d < mesh.dp; ++d) {
    for (const auto& g : reduce_groups(s)) {
      std::vector<int> global;
      for (int r : g) global.push_back(mesh.global_rank(d, r));
      std::sort(global.begin(), global.end());
      groups.insert(global);
    }
    if (pipeline_wide && mesh.dp > 1 && mesh.pp > 1) groups.insert(mesh.replica_ranks(d));
  }
  if (fsdp && mesh.dp > 1)
    for (int r = 0; r < mesh.pp; ++r) groups.insert(mesh.dp_group(r));
  return {groups.begin(), groups.end()};
}

// The model layers each stage holds, by the executor's names (exec/model_layout.hpp): an MPipe
// tower's units are stage 0's first.
std::vector<StageLayers> stage_layers(const ModelConfig& m, const ModelLayout& layout, int stages) {
  std::vector<StageLayers> out;
  for (int st = 0; st < stages && static_cast<size_t>(st) < layout.stage_units.size(); ++st) {
    StageLayers sl;
    sl.stage = st;
    if (st == 0)
      for (int u : layout.tower_units) sl.layers.push_back(unit_name(m, layout, u));
    for (int u : layout.stage_units[static_cast<size_t>(st)]) sl.layers.push_back(unit_name(m, layout, u));
    out.push_back(std::move(sl));
  }
  return out;
}

// Rank 0: replica 0's records (by pipeline rank), one RunRecord, one Chrome trace file.
TraceWritten write_measured_trace(const std::vector<RankTrace>& ranks, const Schedule& s, const CommModel& lowering,
                                  const MeasuredRunInfo& info, const std::string& path, bool cuda) {
  const RunRecord run = assemble_measured_run(s, ranks, info, lowering);
  const std::string doc = chrome_trace_json(s, run);
  std::ofstream out(path, std::ios::binary);
  out << doc;
  out.close();
  if (!out) throw std::runtime_error("cannot write the trace to '" + path + "'");
  return {path, run.slices.size(), run.flows.size(), run.makespan_ms, cuda, run.provenance.shared_clock, run.provenance.notes};
}

// Waits until `count` ranks incremented `key`, polling, at most `limit`.
void wait_count(const compat::StorePtr& store, const std::string& key, int count, std::chrono::milliseconds limit) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    try {
      if (store->add(key, 0) >= count) return;
    } catch (...) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

namespace {

// Where this process runs (--cpu-bind): what the kernel says after the binding, not what was
// planned, and why.
struct CpuPlacement {
  std::vector<int> cpus;
  bool bound = false;
  std::string reason;
};

ExecOutcome refused(std::vector<std::string> errors);

// An explicit --cpu-bind blocks that the kernel refuses is refused; under auto the run goes on
// where the launcher put it, and says so.
std::optional<ExecOutcome> bind_cpus(const ExecConfig& cfg, bool cpu_run, CpuPlacement& out) {
  const CpuBindPlan plan =
      plan_cpu_binding(cfg.run.cpu_bind, cpu_run, cfg.env.local_rank, cfg.env.local_world_size, allowed_cpus(), online_cpus());
  out.reason = plan.reason;
  try {
    apply_cpu_binding(plan.cpus);
    out.bound = !plan.cpus.empty();
  } catch (const std::exception& e) {
    if (cfg.run.cpu_bind == CpuBindMode::Blocks)
      return refused({"rank " + std::to_string(cfg.env.rank) + ": --cpu-bind blocks: " + e.what()});
    out.reason = std::string("not bound: ") + e.what();
  }
  out.cpus = allowed_cpus();
  return std::nullopt;
}

// Whether pipeline rank r holds a last stage (one per copy of the pipeline with replicated
// stages): those ranks report the losses of their micro-batches.
bool holds_last_stage(const Schedule& s, int r) {
  for (int st = 0; st < s.stages; ++st)
    if (s.is_last_stage(st) && s.rank_of(st) == r) return true;
  return false;
}

// Rank 0: every rank's report from the store; the global batch's loss (the mean of the
// replicas', each the sum over its last-stage ranks of their micro-batches' share), the parity
// check, the trace of replica 0, where each rank ran and what it held.
void collect_on_rank0(const compat::StorePtr& store, const ExecConfig& cfg, const Schedule& s, const ModelLayout& layout,
                      const CommModel& lowering,
                      const DeviceMesh& mesh, const MeasuredRunInfo& info, bool cuda, ExecOutcome& outcome) {
  const int world = mesh.world();
  std::vector<RankReport> reports;
  for (int q = 0; q < world; ++q) reports.push_back(parse_rank_report(text(store->get("report/" + std::to_string(q)))));
  std::vector<double> losses;
  for (const RankReport& r : reports) {
    if (!r.losses) continue;
    for (size_t k = 0; k < r.losses->size(); ++k) {
      if (k >= losses.size()) losses.push_back(0);
      losses[k] += (*r.losses)[k] / mesh.dp;
    }
  }
  if (cfg.run.check_parity) {
    std::vector<std::vector<GradRecord>> grads;
    for (int q = 0; q < world; ++q) grads.push_back(unpack_grads(store->get("grads/" + std::to_string(q))));
    outcome.parity = check_parity(cfg.model, layout, s, cfg.run.iterations, grads, losses, mesh);
  }
  if (!cfg.run.trace.empty()) {
    std::vector<RankTrace> traces;
    for (int r = 0; r < s.ranks; ++r) {
      const RankReport& rep = reports[static_cast<size_t>(mesh.global_rank(0, r))];
      if (!rep.trace) throw std::runtime_error("rank " + std::to_string(rep.rank) + " sent no trace record");
      traces.push_back(*rep.trace);
    }
    outcome.trace = write_measured_trace(traces, s, lowering, info, cfg.run.trace, cuda);
  }
  for (const RankReport& r : reports) {
    outcome.cpu_binding.push_back(r.cpu);
    outcome.parameter_elements.push_back(r.parameter_elements);
    outcome.held_parameter_elements.push_back(r.held_parameter_elements);
    outcome.all_to_alls.push_back(r.all_to_alls);
    outcome.all_to_alls_overlapped.push_back(r.all_to_alls_overlapped);
  }
  outcome.reporter = true;
  outcome.losses = std::move(losses);
}

}  // namespace

bool executor_has_handler(Op op) { return has_handler(op); }

std::string describe_exception(const std::exception& e) { return message_of(e); }

bool claim_final_error() { return Watchdog::claim_final(); }

namespace {
ExecOutcome refused(std::vector<std::string> errors) {
  ExecOutcome o;
  o.status = ExecOutcome::Status::Refused;
  o.errors = std::move(errors);
  return o;
}
ExecOutcome failed(std::string message) {
  ExecOutcome o;
  o.status = ExecOutcome::Status::Failed;
  o.errors = {std::move(message)};
  return o;
}
// --transport auto picks NCCL where it runs (a CUDA libtorch and the NCCL transport built),
// else Gloo; a transport that cannot run this configuration is refused on every rank.
std::optional<ExecOutcome> choose_transport(const ExecConfig& cfg, TransportKind& kind) {
  const bool nccl_ok = nccl_transport_built() && compat::cuda_available();
  if (kind == TransportKind::Auto) kind = nccl_ok ? TransportKind::Nccl : TransportKind::Gloo;
  if (kind == TransportKind::Nccl && !nccl_ok)
    return refused({"--transport nccl: " +
                    (nccl_transport_built() ? "this libtorch (" + compat::torch_version() + ") has no CUDA"
                                            : std::string("this ppsched-exec was built without the NCCL transport (-Dcuda)"))});
  if (kind == TransportKind::Nccl && (cfg.run.mode.overlap_p2p || cfg.run.mode.mpipe_batched_recv))
    return refused({std::string(cfg.run.mode.overlap_p2p ? "--overlap-p2p" : "--mpipe-batched-recv") +
                    ": the NCCL transport has no non-blocking P2P yet (post now, wait later); run it with --transport gloo" +
                    (cfg.run.mode.overlap_p2p ? std::string(", or blocking with --no-overlap-p2p (a compute_comms CSV "
                                                            "selects --overlap-p2p by default)")
                                              : std::string())});
  return std::nullopt;
}

// Stage modules that do not fit together are refused like any other mismatch: on every rank,
// before anyone connects.
std::optional<ExecOutcome> check_stage_modules(const ExecConfig& cfg, int rank) {
  if (cfg.model.kind != ModelKind::StageModules) return std::nullopt;
  std::vector<std::string> problems;
  try {
    problems = check_stage_chain(cfg.model);
  } catch (const std::exception& e) {
    problems.push_back(message_of(e));
  }
  if (!problems.empty()) {
    std::vector<std::string> errors;
    for (const auto& p : problems) errors.push_back("rank " + std::to_string(rank) + ": " + p);
    errors.push_back("rank " + std::to_string(rank) + ": the stage modules in " + cfg.model.stage_modules->dir +
                     " do not fit together; nothing was run");
    return refused(std::move(errors));
  }
  return std::nullopt;
}

// How this rank's transport meets the others: through the store, on GLOO_SOCKET_IFNAME's
// interface, else loopback for a local master, else this host's name.
TransportSetup transport_setup(const ExecConfig& cfg, const compat::StorePtr& store, std::chrono::milliseconds timeout) {
  TransportSetup ts;
  ts.rank = cfg.env.rank;
  ts.world_size = cfg.env.world_size;
  ts.local_rank = cfg.env.local_rank;
  ts.store = compat::prefix_store("transport", store);
  ts.timeout = timeout;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    ts.address = ifname;
    ts.is_interface = true;
  } else {
    ts.address = cfg.env.master_addr == "127.0.0.1" || cfg.env.master_addr == "localhost" ? "127.0.0.1" : "";
  }
  if (ts.address.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    ts.address = host;
  }
  return ts;
}

// The optimizer step after the commit point: plain SGD, each replica on its own shard under --fsdp.
void sgd_step(RunContext& ctx, RankModel& model, double lr) {
  torch::NoGradGuard no_grad;
  if (ctx.dp.sharded()) {
    sgd_step_on_shards(ctx, lr);  // each replica updates its own shard
  } else {
    for (auto& [name, p] : model.named_parameters())
      if (p.grad().defined()) p.sub_(p.grad() * lr);
  }
}

// What rank 0's record says of the run beyond its slices: mode, transport, mesh (which replica
// the trace is, and the global rank of each of its pipeline ranks), CPU binding, layers.
MeasuredRunInfo measured_run_info(const ExecConfig& cfg, const Schedule& s, const ModelLayout& layout, const DeviceMesh& mesh,
                                  const Transport& transport) {
  MeasuredRunInfo info;
  info.mode = cfg.run.mode;
  info.transport = transport_from_name(transport.name()).value_or(RunTransport::None);
  RunMesh m;  // which replica the trace is (--dp), and the global rank of each of its pipeline ranks
  m.dp = mesh.dp;
  m.pp = mesh.pp;
  m.order = to_string(mesh.order);
  for (int r = 0; r < mesh.pp; ++r) m.global_ranks.push_back(mesh.global_rank(0, r));
  info.mesh = m;
  info.cpu_bind = cfg.run.cpu_bind;
  info.layers = stage_layers(cfg.model, layout, s.stages);
  return info;
}
// Rank 0 hosts the store, except under torchrun's static rendezvous, whose agent already hosts
// one on MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE): then every rank is a client,
// under a prefix of its own (exec/launch_env.hpp). Every rank then checks that all were started
// with the same schedule, model and options. An outcome when they cannot meet or disagree.
std::optional<ExecOutcome> meet_through_store(const ExecConfig& cfg, const Schedule& s, std::chrono::milliseconds timeout,
                                              compat::StorePtr& store, int& store_port) {
  const int rank = cfg.env.rank, world = cfg.env.world_size;
  const auto connect_start = Clock::now();
  try {
    compat::StorePtr tcp = compat::make_tcp_store(cfg.env.master_addr, cfg.env.master_port, cfg.env.hosts_store(), world, timeout);
    store_port = compat::tcp_store_port(tcp);
    store = compat::prefix_store(cfg.env.store_prefix, tcp);
  } catch (const std::exception& e) {
    const double waited = std::chrono::duration<double>(Clock::now() - connect_start).count();
    return failed(store_failure_message(cfg.env, waited, cfg.run.timeout_s, message_of(e)));
  }
  try {
    store->set("digest/" + std::to_string(rank), bytes(digest_of(cfg, s)));
    const std::string mine = digest_of(cfg, s);
    for (int q = 0; q < world; ++q) {
      if (text(store->get("digest/" + std::to_string(q))) == mine) continue;
      return refused({"rank " + std::to_string(q) + " was started with a different schedule, model or run options than rank " +
                      std::to_string(rank) + "; every rank must get the same arguments"});
    }
  } catch (const std::exception& e) {
    return failed("rank " + std::to_string(rank) + " cannot meet the other ranks through the store at " + cfg.env.master_addr +
                  ":" + std::to_string(store_port) + " within " + general(cfg.run.timeout_s, 9) + " s: " + message_of(e));
  }
  return std::nullopt;
}

// The iterations, each timed; the last one traced (--trace). Returns the loss of each.
std::vector<double> run_iterations(const ExecConfig& cfg, RunContext& ctx, Runtime& runtime, Transport& transport,
                                   StepClock& clock, RankTrace& traced, ExecOutcome& outcome) {
  const bool tracing = !cfg.run.trace.empty();
  std::vector<double> losses;
  for (int it = 0; it < cfg.run.iterations; ++it) {
    const bool trace_this = tracing && it == cfg.run.iterations - 1;
    if (trace_this) {
      // Every rank's epoch right after one barrier: their clocks agree up to how far apart
      // the barrier released them (one message latency on the transport).
      transport.barrier();
      clock.start();
      ctx.clock = &clock;
    }
    auto t0 = Clock::now();
    runtime.run_iteration(it);
    ctx.clock = nullptr;
    if (trace_this) {
      char host[256] = {0};
      gethostname(host, sizeof host - 1);
      traced.rank = ctx.rank;
      traced.host = host;
      traced.epoch_ns = clock.epoch_ns();
      traced.intervals = clock.resolve();
      traced.messages = ctx.messages;
    }
    outcome.seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    losses.push_back(ctx.loss);
  }
  return losses;
}

// What this rank sends rank 0: its losses (the last stage's rank), CPUs, parameter counts and
// (replica 0's pipeline, --trace) its trace; the other replicas only kept in step.
RankReport rank_report(const ExecConfig& cfg, const RunContext& ctx, const CpuPlacement& placement,
                       const std::vector<double>& losses, RankTrace traced) {
  RankReport mine;
  mine.rank = cfg.env.rank;
  if (holds_last_stage(ctx.schedule, ctx.rank)) mine.losses = losses;
  mine.cpu = {cfg.env.rank, placement.bound, placement.cpus.empty() ? "" : cpu_list(placement.cpus), placement.reason};
  mine.parameter_elements = parameter_elements(ctx);
  mine.held_parameter_elements = held_parameter_elements(ctx);
  if (ctx.experts) {
    mine.all_to_alls = ctx.experts->calls();
    mine.all_to_alls_overlapped = ctx.experts->overlapped();
  }
  if (!cfg.run.trace.empty() && ctx.dp.replica == 0) {
    traced.cpus = placement.cpus;
    traced.cpu_bound = placement.bound;
    mine.trace = std::move(traced);
  }
  return mine;
}

}  // namespace

ExecOutcome run_executor(const ExecConfig& cfg, const Schedule& s, const ModelLayout& layout, const CommModel& lowering,
                         const StreamProgram* streams) {
  std::signal(SIGPIPE, SIG_IGN);  // a peer that died must surface as an error, not kill us
  const int rank = cfg.env.rank, world = cfg.env.world_size;
  // With --dp this process is pipeline rank `prank` of replica `replica` (exec/mesh.hpp); the
  // schedule, the model and the runtime speak pipeline ranks.
  const DeviceMesh mesh = cfg.run.mode.dp.mesh(s.ranks);
  const int prank = mesh.pipeline_rank(rank), replica = mesh.replica(rank);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.run.timeout_s * 1000));
  const double hb_s = cfg.run.heartbeat_timeout_s > 0 ? cfg.run.heartbeat_timeout_s : std::min(10.0, cfg.run.timeout_s);
  const auto heartbeat = std::chrono::milliseconds(static_cast<int64_t>(hb_s * 1000));

  TransportKind kind = cfg.run.transport;
  if (auto refusal = choose_transport(cfg, kind)) return *refusal;
  const at::Device device = kind == TransportKind::Gloo
                                ? at::Device(at::kCPU)
                                : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(cfg.env.local_rank % compat::cuda_device_count()));

  // ---- CPUs (--cpu-bind): before the store, Gloo and the watchdog start their threads ----
  CpuPlacement placement;
  if (auto refusal = bind_cpus(cfg, kind == TransportKind::Gloo, placement)) return *refusal;

  if (auto refusal = check_stage_modules(cfg, rank)) return *refusal;
  // ---- rendezvous (meet_through_store) --------------------------------------------------
  compat::StorePtr store;
  int store_port = cfg.env.master_port;  // 0 (one process): the port the store took
  if (auto refusal = meet_through_store(cfg, s, timeout, store, store_port)) return *refusal;
  std::unique_ptr<Watchdog> watchdog;

  Progress progress;
  std::atomic<Transport*> live_transport{nullptr};
  std::unique_ptr<Transport> transport;
  ExecOutcome outcome;
  std::string phase = "while connecting";
  auto leave = [&](bool failed) {
    if (watchdog) watchdog->stop();
    // Rank 0 hosts the store: it stays until every other rank has left (or gave up on it).
    try {
      if (rank != 0) {
        store->add("left", 1);
      } else {
        wait_count(store, "left", world - 1 - (watchdog ? watchdog->dead_count() : 0),
                   failed ? std::min(timeout, heartbeat + std::chrono::seconds(5)) : timeout);
      }
    } catch (...) {
    }
  };

  try {
    watchdog = std::make_unique<Watchdog>(
        compat::prefix_store(cfg.env.store_prefix, compat::make_tcp_store(cfg.env.master_addr, store_port, false, world, timeout)),
        rank, world, s, progress, heartbeat, [&] {
          if (Transport* t = live_transport.load()) t->abort();
        }, mesh);
    watchdog->start();

    // Built once every rank is watched: a rank that cannot build its model (out of memory)
    // fails like any other, and the watchdog stops the others with its message.
    phase = "while building its model";
    RankModel model = build_rank_model(cfg.model, layout, s.stages_of(prank), !layout.tower_units.empty(), device,
                                       cfg.model.experts > 0 ? replica : -1);
    Dataset data(cfg.model, device, replica * s.micro_batches);  // replica d: global micro-batches d*M ..
    phase = "while connecting";

    const TransportSetup ts = transport_setup(cfg, store, timeout);
    transport = kind == TransportKind::Gloo ? make_gloo_transport(ts) : make_nccl_transport(ts);
    live_transport = transport.get();
    for (const auto& g : mesh_groups(s, mesh))
      if (std::count(g.begin(), g.end(), rank)) transport->prepare_group(g);
    std::unique_ptr<Transport> pipeline = make_replica_view(*transport, mesh, replica);

    RunContext ctx{s, prank, cfg.model, model, data, *pipeline, device};
    ctx.dp.mesh = mesh;
    ctx.dp.global_rank = rank;
    ctx.dp.replica = replica;
    ctx.dp.fsdp = cfg.run.mode.dp.fsdp;
    ctx.dp.world = transport.get();
    ctx.dp.group = mesh.dp_group(prank);
    phase = "while sharding its parameters";
    shard_parameters(ctx);
    phase = "while connecting";
    // --model moe --ep N: the expert all-to-alls over this pipeline rank's data-parallel group,
    // in the order of the verified stream program (exec/moe_streams.hpp).
    std::unique_ptr<ExpertLink> experts;
    if (cfg.model.experts > 0 && cfg.model.ep > 1) {
      if (!streams) throw std::logic_error("an expert-parallel run without its stream program");
      experts = std::make_unique<ExpertLink>(*transport, ctx.dp.group, replica, progress,
                                             cfg.run.a2a_ready_order ? ExpertLink::Order::Ready : ExpertLink::Order::Lowered);
      experts->set_lowered(moe_all_to_alls(*streams, prank));
      ctx.experts = experts.get();
      model.experts->link = experts.get();
    }
    Runtime runtime(ctx, lowering, progress, [&] { watchdog->poll(); }, cfg.run.fault);
    const bool tracing = !cfg.run.trace.empty();
    // The trace also carries each stage's split-backward cost, probed after the run on the
    // stage's first input (replica 0, whole parameters: not under --fsdp's shards).
    // Not with expert all-to-alls: a probe's backward would call them outside the schedule.
    const bool probe_split = tracing && replica == 0 && !ctx.dp.sharded() && !ctx.experts;
    ctx.keep_probe_inputs = probe_split;
    StepClock clock(device.is_cuda(), device.is_cuda() ? device.index() : -1);
    RankTrace traced;
    // Per iteration (meaningful on the last stage's rank).
    const std::vector<double> local_losses = run_iterations(cfg, ctx, runtime, *transport, clock, traced, outcome);
    // Commit point: every rank finished every step, or nobody reports success or updates.
    progress.step = -1;
    transport->barrier();
    if (cfg.run.lr > 0) sgd_step(ctx, model, cfg.run.lr);

    if (probe_split) {
      const std::string before = phase;
      phase = "while probing its split backward";
      for (int st = 0; st < s.stages; ++st)
        if (s.rank_of(st) == prank)
          if (auto probe = probe_split_backward(ctx, st, 5)) traced.split_backward.push_back(*probe);
      ctx.probe_inputs.clear();
      phase = before;
    }

    // ---- results to rank 0 (through the store, outside the schedule's channels) ---------
    const RankReport mine = rank_report(cfg, ctx, placement, local_losses, std::move(traced));
    store->set("report/" + std::to_string(rank), bytes(serialize(mine)));
    if (cfg.run.check_parity) {
      // --fsdp: the full gradients back from the shards (a DP all-gather outside the schedule,
      // like the store traffic of the check itself).
      gather_full_grads(ctx);
      store->set("grads/" + std::to_string(rank), pack_grads(model));
    }
    if (rank == 0) {
      const MeasuredRunInfo info = measured_run_info(cfg, s, layout, mesh, *transport);
      collect_on_rank0(store, cfg, s, layout, lowering, mesh, info, clock.cuda(), outcome);
      outcome.transport = transport->name();
      if (outcome.parity && !outcome.parity->ok) outcome.status = ExecOutcome::Status::Failed;
    }
    leave(false);
    return outcome;
  } catch (const StepFailure& f) {
    outcome = failed(watchdog ? watchdog->settle_failure(f) : f.what());
  } catch (const PeerFailure& f) {
    outcome = failed(std::string(f.what()) + "; this rank stopped at " +
                     watchdog->describe_progress(progress.iteration.load(), progress.step.load(), rank));
  } catch (const std::exception& e) {
    std::string msg = "rank " + std::to_string(rank) + " failed " +
                      (progress.iteration < 0 ? phase : std::string("after its steps")) + ": " +
                      message_of(e);
    if (watchdog) {
      if (auto f = watchdog->fault()) msg = *f + "; rank " + std::to_string(rank) + " then failed: " + message_of(e);
      watchdog->publish(msg);
    }
    outcome = failed(msg);
  }
  live_transport = nullptr;
  leave(true);
  return outcome;
}

}  // namespace ppsched::exec
