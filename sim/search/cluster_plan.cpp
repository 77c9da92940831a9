#include "sim/search/cluster_plan.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "schedule/errors.hpp"
#include "schedule/text_format.hpp"
#include "schedule/validate.hpp"
#include "sim/search/partition.hpp"
#include "sim/workload_costs.hpp"
#include "workload/layout.hpp"

namespace ppsched::search {

const char* to_string(Sharding s) {
  switch (s) {
    case Sharding::Replicas: return "ddp";
    case Sharding::DistributedOptimizer: return "zero1";
    case Sharding::Fsdp: return "fsdp";
  }
  return "?";
}

std::string PlanShape::text() const {
  return format_text("TP %d PP %d DP %d%s mbs %lld M %d recompute %s %s", tp, pp, dp,
                     ep > 1 ? (" EP " + std::to_string(ep)).c_str() : "", static_cast<long long>(micro_batch_size), micro,
                     ppsched::to_string(recompute), to_string(sharding));
}

DataParallelOptions PlanShape::data_parallel() const {
  DataParallelOptions o;
  o.degree = dp;
  o.fsdp = sharding == Sharding::Fsdp;
  o.distributed_optimizer = sharding == Sharding::DistributedOptimizer;
  return o;
}

double model_flops_per_step(const Workload& model, int64_t global_batch) {
  Workload w = model;
  w.training.tp = 1;
  w.training.ep = 1;
  w.training.etp = 0;
  w.training.micro_batch_size = 1;
  w.training.recompute = {Recompute::None};
  w.training.moe_capacity_factor = 1;
  double per_sequence = 0;
  for (const Layer& l : w.layers()) per_sequence += l.fwd_flops + l.bwd_input_flops + l.bwd_weight_flops;
  return per_sequence * static_cast<double>(global_batch);
}

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> divisors(int64_t n, int64_t at_most) {
  std::vector<int> out;
  for (int64_t d = 1; d <= std::min(n, at_most); ++d)
    if (n % d == 0) out.push_back(static_cast<int>(d));
  return out;
}

int body_layers(const Workload& net) {
  int n = 0;
  for (const Layer& l : net.layers()) n += is_body(l.kind) ? 1 : 0;
  return n;
}

// One shape to time: its priced model and its bound.
struct Candidate {
  PlanShape shape;
  std::shared_ptr<const CostSource> src;
  double bound_ms = 0;
};

struct Sweep {
  const PlanRequest& rq;
  PlanResult& out;
  Clock::time_point t0 = Clock::now();
  int body = 0;

  // What a plan is held to: the device's usable memory less the margin (none: no limit).
  std::optional<double> budget() const {
    const auto usable = rq.model.device.usable_memory_bytes();
    if (!usable) return std::nullopt;
    return static_cast<double>(*usable) * (1 - rq.assumptions.memory_margin.value_or(kPlanMemoryMargin));
  }

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }
  double left() const { return rq.seconds > 0 ? rq.seconds - elapsed() : 0; }

  void refuse(const std::string& why) { ++out.refused[why]; }

  std::vector<int> tp_values() const {
    std::vector<int> v = rq.tp;
    if (v.empty())
      for (int t = 1; t <= rq.gpus && t <= 64; t *= 2) v.push_back(t);
    return v;
  }
  std::vector<int> ep_values(int dp, int tp) const {
    if (!rq.model.arch || rq.model.arch->experts == 0) return {1};
    if (!rq.ep.empty()) return rq.ep;
    std::vector<int> v;
    for (int e = 1; e <= dp * tp && e <= rq.model.arch->experts; e *= 2) v.push_back(e);
    return v;
  }
  std::vector<Sharding> shardings(int dp) const {
    if (dp == 1) return {Sharding::Replicas};
    if (!rq.sharding.empty()) return rq.sharding;
    switch (rq.framework) {
      case Framework::Torchtitan: return {Sharding::Fsdp};
      case Framework::Megatron: return {Sharding::DistributedOptimizer};
      case Framework::Any: break;
    }
    return {Sharding::Fsdp, Sharding::DistributedOptimizer};
  }
  std::vector<Recompute> recomputes() const {
    if (!rq.recompute.empty()) return rq.recompute;
    // With FlashAttention there are no scores to drop: selective recomputation is no recomputation.
    if (rq.model.training.flash_attention) return {Recompute::None, Recompute::Full};
    return {Recompute::None, Recompute::Selective, Recompute::Full};
  }

  // Every shape the constraints allow, each priced once (its bound) or refused with a reason.
  std::vector<Candidate> enumerate() {
    std::vector<Candidate> cands;
    const int64_t B = rq.global_batch;
    for (int tp : tp_values()) {
      if (rq.gpus % tp != 0) {
        refuse("TP does not divide the GPUs");
        continue;
      }
      if (tp > rq.gpus_per_node && !rq.tp_across_nodes) {
        refuse("TP over a node (give --tp-across-nodes)");
        continue;
      }
      {
        Training t = rq.model.training;
        t.tp = tp;
        if (const std::string why = tensor_parallel_problem(t, rq.model.arch ? &*rq.model.arch : nullptr); !why.empty()) {
          refuse("TP does not divide the heads");
          continue;
        }
      }
      const std::vector<int> pps = rq.pp.empty() ? divisors(rq.gpus / tp, body) : rq.pp;
      for (int pp : pps) {
        if ((rq.gpus / tp) % pp != 0) {
          refuse("TP x PP does not divide the GPUs");
          continue;
        }
        if (pp > body) {
          refuse("more pipeline stages than layers");
          continue;
        }
        const int dp = rq.gpus / (tp * pp);
        if (B % dp != 0) {
          refuse("DP does not divide the global batch");
          continue;
        }
        const int64_t local = B / dp;
        std::vector<int64_t> mbss = rq.micro_batch_sizes;
        if (mbss.empty()) mbss = {1, 2, 4};
        for (int64_t mbs : mbss) {
          if (local % mbs != 0) {
            refuse("the micro-batch size does not divide the batch per replica");
            continue;
          }
          const int64_t micro = local / mbs;
          if (micro > kMaxCount || static_cast<int64_t>(pp) * std::max(rq.vpp_max, 1) * micro > 1'000'000) {
            refuse("too many micro-batches for the search");
            continue;
          }
          for (int ep : ep_values(dp, tp))
            for (Recompute rc : recomputes())
              for (Sharding sh : shardings(dp)) {
                PlanShape s{tp, pp, dp, ep, mbs, static_cast<int>(micro), rc, sh};
                ++out.enumerated;
                add_candidate(s, cands);
              }
        }
      }
    }
    return cands;
  }

  void add_candidate(const PlanShape& s, std::vector<Candidate>& cands) {
    Workload net = rq.model;
    TrainingOverrides o;
    o.micro_batch_size = s.micro_batch_size;
    o.tp = s.tp;
    if (net.arch && net.arch->experts > 0) o.ep = s.ep;
    o.recompute = s.recompute;
    o.dp = s.dp;
    o.fsdp = s.sharding == Sharding::Fsdp;
    o.distributed_optimizer = s.sharding == Sharding::DistributedOptimizer;
    try {
      apply_training(net, o, rq.model_file);
    } catch (const InputError& e) {
      const std::string w = e.what();
      refuse(w.find("expert") != std::string::npos ? "EP does not tile the experts or the ranks" : "the model refuses the shape");
      return;
    }
    auto src = std::make_shared<CostSource>();
    src->workload = std::move(net);
    src->model_file = rq.model_file;
    src->assumptions = rq.assumptions;
    src->assumptions.ranks_per_node = rq.gpus_per_node;
    Candidate c{s, src, 0};
    try {
      const CostModel m = costs_for(*src, s.pp);
      double per_micro = 0;
      for (int st = 0; st < s.pp; ++st) per_micro += m.fwd.at(st, 0) + m.bwd.at(st, 0);
      c.bound_ms = s.micro * per_micro / s.pp;
      // Weights, gradients and optimizer state alone (the even split, V = 1) over the usable memory.
      if (const auto cap = budget()) {
        const MemoryModel mm = m.memory_model(s.pp);
        const DataParallelOptions dp = s.data_parallel();
        int64_t resident = 0;
        for (int st = 0; st < s.pp; ++st) resident = std::max(resident, mm.resident(st, dp).total());
        if (static_cast<double>(resident) > *cap) {
          ++out.over_memory;
          return;
        }
      }
    } catch (const InputError&) {
      refuse("the model's figures leave the limits");
      return;
    }
    cands.push_back(std::move(c));
  }

  TuneRequest tune_request(const Candidate& c, double seconds) const {
    TuneRequest q;
    q.pp = c.shape.pp;
    q.micro = c.shape.micro;
    q.vpp_min = 1;
    q.vpp_max = c.shape.pp == 1 ? 1 : std::max(1, std::min(rq.vpp_max, body / c.shape.pp));
    q.placements = {PlacementKind::Loop, PlacementKind::V};
    if (rq.framework == Framework::Megatron) q.placements = {PlacementKind::Loop};
    auto src = c.src;
    q.costs = [src](int stages) { return costs_for(*src, stages); };
    q.sim.check.dp = c.shape.data_parallel();
    q.budget = budget();
    q.families = true;
    q.only_families = rq.families;
    q.megatron_orders = rq.framework == Framework::Megatron;
    q.search_orders = false;
    q.settings.seed = rq.seed;
    q.settings.threads = 1;
    q.settings.seconds = seconds;
    return q;
  }

  // The plan of tune's best (its schedule and DES run), with the figures a report gives.
  Plan make_plan(const Candidate& c, TuneResult&& r) const {
    Plan p;
    p.shape = c.shape;
    p.tune_seconds = r.seconds;
    p.best = r.leaderboard[static_cast<size_t>(r.best)];
    p.schedule = std::move(r.best_schedule);
    p.sim = std::move(r.best_sim);
    const int stages = p.schedule.stages;
    const WorkloadCosts nc =
        p.best.layout.empty() ? assemble_costs(*c.src, stages)
                              : assemble_costs(*c.src, counts_layout(p.best.layout, c.src->workload->layers(), stages, "plan"));
    p.costs = nc.costs;
    p.layout = body_counts(nc.layout, nc.layers);
    p.best.layout = p.layout;
    p.layout_megatron = megatron_text(nc.layout, nc.layers);
    p.layout_even = counts_text(even_layout(nc.layers, stages), nc.layers);
    p.step_ms = p.best.makespan_ms;
    const double step_s = p.step_ms / 1e3;
    const double tokens = static_cast<double>(rq.global_batch) * static_cast<double>(rq.model.training.seq_lens.front());
    p.tokens_per_s_per_gpu = step_s > 0 ? tokens / step_s / rq.gpus : 0;
    p.mfu = step_s > 0 ? out.model_flops_per_step / (rq.gpus * out.peak_flops * step_s) : 0;
    // TP collectives per rank and step: M x those of the rank's stages (as assemble_costs priced them).
    {
      const TensorParallelTime& tt = nc.tensor_parallel;
      std::vector<double> per_rank(static_cast<size_t>(p.schedule.ranks), 0.0);
      for (size_t st = 0; st < tt.fwd_ms.size(); ++st)
        per_rank[static_cast<size_t>(p.schedule.rank_of(static_cast<int>(st)))] += tt.fwd_ms[st] + tt.bwd_ms[st];
      for (double x : per_rank) p.tp_ms = std::max(p.tp_ms, x * c.shape.micro);
    }
    const double ranks = std::max<double>(1, static_cast<double>(p.sim.ranks.size()));
    p.dp_exposed_ms = p.sim.dp_exposed_ms / ranks;
    p.a2a_exposed_ms = p.sim.a2a_exposed_ms / ranks;
    // The peak rank and the largest part of its peak.
    for (size_t q = 0; q < p.best.peak_bytes.size(); ++q)
      if (p.best.peak_bytes[q] > p.peak_bytes) {
        p.peak_bytes = p.best.peak_bytes[q];
        p.peak_rank = static_cast<int>(q);
      }
    const MemoryModel mm = p.costs.memory_model(stages);
    ResidentBytes held;
    for (int st = 0; st < stages; ++st)
      if (p.schedule.rank_of(st) == p.peak_rank) held += mm.resident(st, c.shape.data_parallel());
    const std::pair<const char*, int64_t> parts[] = {{"weights", held.weights},
                                                     {"gradients", held.grads},
                                                     {"optimizer state", held.optimizer},
                                                     {"activations and buffers", std::max<int64_t>(0, p.peak_bytes - held.total())}};
    for (const auto& [name, bytes] : parts)
      if (bytes > p.largest_part_bytes) {
        p.largest_part = name;
        p.largest_part_bytes = bytes;
      }
    p.budget_bytes = budget() ? static_cast<int64_t>(*budget()) : 0;
    return p;
  }

  // Faster first; a tie by the shape's and the schedule's names (whatever order the workers finish in).
  static bool before(const Plan& a, const Plan& b) {
    if (a.step_ms != b.step_ms) return a.step_ms < b.step_ms;
    const std::string x = a.shape.text(), y = b.shape.text();
    return x != y ? x < y : a.best.name < b.best.name;
  }

  void keep(Plan&& p, std::vector<Plan>& plans) {
    const double best_before = plans.empty() ? 0 : plans.front().step_ms;
    if (p.shape.pp == 1 && (!out.baseline || before(p, *out.baseline))) {
      out.baseline = p;
      out.baseline->sim.slices.clear();  // the report reads its figures, not its trace
      out.baseline->sim.memory.clear();
      out.baseline->sim.flows.clear();
    }
    plans.push_back(std::move(p));
    std::stable_sort(plans.begin(), plans.end(), before);
    if (plans.size() > static_cast<size_t>(rq.top)) plans.resize(static_cast<size_t>(rq.top));
    if (plans.front().step_ms != best_before) out.trajectory.emplace_back(elapsed(), plans.front().step_ms);
  }

  void run() {
    body = body_layers(rq.model);
    out.model_flops_per_step = model_flops_per_step(rq.model, rq.global_batch);
    out.peak_flops = rq.model.device.flops_per_s;
    std::vector<Candidate> cands = enumerate();
    if (cands.empty()) {
      std::string why;
      for (const auto& [reason, n] : out.refused) why += (why.empty() ? "" : "; ") + reason + " (" + std::to_string(n) + ")";
      if (out.over_memory > 0) why += (why.empty() ? "" : "; ") + std::to_string(out.over_memory) + " over the usable memory in weights, gradients and optimizer state alone";
      throw InputError({}, "plan: no shape to time for " + std::to_string(rq.gpus) + " GPUs and a global batch of " +
                               std::to_string(rq.global_batch) + (why.empty() ? "" : ": " + why));
    }
    std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.bound_ms < b.bound_ms; });
    std::vector<Plan> plans;
    // A tenth of the time stays for the refinement.
    const double sweep_seconds = rq.seconds > 0 ? 0.9 * rq.seconds : 0;
    // Shapes are timed in bound order by `threads` workers. A shape is skipped when its bound
    // cannot beat the top plans' last nor (PP = 1) the baseline: what is skipped could never be
    // reported, so the plans do not depend on the order the workers finish in (the counts do).
    std::mutex mu;
    std::atomic<long> next{0};
    auto worker = [&]() {
      for (;;) {
        const long i = next++;
        if (i >= static_cast<long>(cands.size())) return;
        const Candidate& c = cands[static_cast<size_t>(i)];
        {
          std::lock_guard<std::mutex> lock(mu);
          if (sweep_seconds > 0 && elapsed() >= sweep_seconds) {
            out.stopped_by_time = true;
            return;
          }
          const bool top_full = plans.size() >= static_cast<size_t>(rq.top);
          const bool beats_top = !top_full || c.bound_ms < plans.back().step_ms;
          const bool beats_baseline = c.shape.pp == 1 && (!out.baseline || c.bound_ms < out.baseline->step_ms);
          if (rq.prune && !beats_top && !beats_baseline) {
            ++out.pruned_by_bound;
            continue;
          }
        }
        TuneResult r;
        bool timed = true;
        try {
          r = tune(tune_request(c, sweep_seconds > 0 ? std::max(1e-3, sweep_seconds - elapsed()) : 0));
        } catch (const InputError&) {
          timed = false;
        }
        std::optional<Plan> plan;
        if (timed && r.best >= 0) plan = make_plan(c, std::move(r));
        std::lock_guard<std::mutex> lock(mu);
        if (!timed) {
          ++out.no_schedule;
          continue;
        }
        ++out.timed;
        if (plan) keep(std::move(*plan), plans);
        else ++out.no_schedule;
        if (rq.progress) rq.progress(out.timed, static_cast<long>(cands.size()), plans.empty() ? 0 : plans.front().step_ms, elapsed());
      }
    };
    const int threads = std::max(1, rq.threads > 0 ? rq.threads : static_cast<int>(std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
    // Refinement: the layout walk and (unless the framework runs only its own) the order search
    // on the best few, with what is left of the time.
    const int n = std::min<int>(rq.refine, static_cast<int>(plans.size()));
    for (int k = 0; k < n; ++k) {
      if (rq.seconds > 0 && left() <= 0) {
        out.stopped_by_time = true;
        break;
      }
      Plan& p = plans[static_cast<size_t>(k)];
      if (p.shape.pp == 1) continue;
      const auto it = std::find_if(cands.begin(), cands.end(), [&](const Candidate& c) {
        return c.shape.text() == p.shape.text();
      });
      if (it == cands.end()) continue;
      const double share = rq.seconds > 0 ? std::max(1e-3, left() / (n - k)) : 0;
      // The layout walk times a layout as the sweep timed the shape, and ends with two full tunes:
      // a share under four such timings would overrun --seconds.
      if (rq.seconds > 0 && share < 4 * p.tune_seconds) {
        out.stopped_by_time = true;
        continue;
      }
      PartitionRequest pr;
      pr.tune = tune_request(*it, share);
      pr.tune.search_orders = rq.framework != Framework::Megatron;
      pr.tune.settings.iterations = 3000;
      pr.tune.settings.des_iterations = 50;
      pr.max_layouts = 200;
      describe_workload(pr, *it->src->workload);
      const auto src = it->src;
      const std::vector<Layer> layers = src->workload->layers();
      pr.costs = [src, &layers](const std::vector<int>& counts) {
        const std::vector<int64_t> c64(counts.begin(), counts.end());
        return assemble_costs(*src, counts_layout(c64, layers, static_cast<int>(c64.size()), "plan")).costs;
      };
      try {
        PartitionResult part = search_partition(pr);
        TuneResult& r = part.result;
        if (r.best >= 0 && r.leaderboard[static_cast<size_t>(r.best)].makespan_ms < p.step_ms) {
          Plan better = make_plan(*it, std::move(r));
          better.refined = true;
          p = std::move(better);
        } else {
          p.refined = true;
        }
        out.stopped_by_time = out.stopped_by_time || part.stopped_by_time;
      } catch (const InputError&) {
        // no layout of this shape is a candidate: the plan keeps its even split
      }
    }
    std::stable_sort(plans.begin(), plans.end(), before);
    if (!plans.empty() && (out.trajectory.empty() || out.trajectory.back().second != plans.front().step_ms))
      out.trajectory.emplace_back(elapsed(), plans.front().step_ms);
    out.plans = std::move(plans);
    out.seconds = elapsed();
  }
};

}  // namespace

PlanResult plan_cluster(const PlanRequest& rq) {
  if (rq.gpus < 1) throw InputError({}, "plan: --gpus must be >= 1");
  if (rq.global_batch < 1) throw InputError({}, "plan: --global-batch-size must be >= 1");
  PlanResult out;
  Sweep sweep{rq, out};
  sweep.run();
  return out;
}

}  // namespace ppsched::search
