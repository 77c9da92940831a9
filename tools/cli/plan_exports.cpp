// The launch files of a plan (tools/cli/plan_exports.hpp): torchtitan's TOML, Megatron-LM's
// arguments, ppsched-exec's torchrun line. The frameworks' rules they follow are the ones their
// own readers apply (tests/plan_exports_cli.py checks the files against what those readers
// accepted: tests/data/peers/torchtitan, tests/data/peers/megatron).
#include "tools/cli/plan_exports.hpp"

#include "schedule/errors.hpp"
#include "schedule/text_format.hpp"
#include "workload/layout.hpp"

namespace ppsched::cli {
namespace {

using search::Plan;
using search::Sharding;

// The family a plan's schedule was generated from and the options it was generated with
// ("--group-size 4"; its " V=2" left out); family "" for an order the search found.
std::pair<std::string, std::string> family_and_options(const Plan& p) {
  if (!p.best.origin.is_family()) return {"", ""};
  std::string name = p.best.name;
  if (const size_t v = name.find(" V="); v != std::string::npos) name = name.substr(0, v);
  const size_t space = name.find(' ');
  if (space == std::string::npos) return {name, ""};
  return {name.substr(0, space), name.substr(space + 1)};
}

// The family when it was generated with no options (what torch's classes run).
std::string plain_family(const Plan& p) {
  const auto [family, options] = family_and_options(p);
  return options.empty() ? family : "";
}

// What ppsched predicts of the plan, for a launch file's header.
std::string predicted(const Plan& p) {
  return format_text("predicted %.1f ms per step, %.0f tokens/s per GPU, MFU %.1f%%, peak %s per GPU", p.step_ms,
                     p.tokens_per_s_per_gpu, 100 * p.mfu, human_bytes(p.peak_bytes).c_str());
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

std::string torchtitan_schedule_class(const Plan& p) {
  const std::string f = plain_family(p);
  const int v = p.vpp();
  if (f == "1f1b") return "1F1B";
  if (f == "gpipe") return "GPipe";
  if (f == "interleaved-1f1b" && v > 1) return "Interleaved1F1B";
  if (f == "looped-bfs") return "LoopedBFS";
  if (f == "interleaved-zb" && v > 1) return "InterleavedZeroBubble";
  if (f == "zbv") return "ZBVZeroBubble";
  if (f == "dualpipev") return "DualPipeV";
  return "";
}

std::vector<std::vector<std::string>> torchtitan_fqns(const Plan& p, const Workload& model) {
  const std::vector<Layer> layers = model.layers();
  const Layout lay = counts_layout(p.layout, layers, p.schedule.stages, "plan");
  std::vector<std::vector<std::string>> out;
  for (const auto& stage : lay.stages) {
    std::vector<std::string> names;
    for (int32_t i : stage) {
      const Layer& l = layers[static_cast<size_t>(i)];
      switch (l.kind) {
        case LayerKind::Embedding: names.push_back("tok_embeddings"); break;
        case LayerKind::Decoder: names.push_back(l.name); break;  // "layers.<i>", torchtitan's name too
        case LayerKind::FinalNorm: names.push_back("norm"); break;
        case LayerKind::Head: names.push_back("output"); break;
        case LayerKind::Loss: break;  // torchtitan's loss is no module
        case LayerKind::Mtp:
        case LayerKind::Generic:
          throw InputError({}, "--torchtitan: layer " + l.name + " has no module in torchtitan's decoders (they have no "
                               "multi-token prediction): write --megatron instead, or plan a model without it");
      }
    }
    out.push_back(std::move(names));
  }
  return out;
}

std::string torchtitan_toml(const PlanContext& c, const std::string& csv_name) {
  const Plan& p = c.plan;
  const search::PlanShape& s = p.shape;
  if (s.sharding == Sharding::DistributedOptimizer)
    throw InputError({}, "--torchtitan: the plan shards only the optimizer state (Megatron's distributed optimizer), "
                         "which torchtitan does not run: plan with --framework torchtitan");
  const int v = p.vpp();
  const std::string cls = torchtitan_schedule_class(p);
  const int64_t seq = c.rq.model.training.seq_lens.front();
  std::string t;
  t += "# torchtitan (v0.2.2) job settings for the plan ppsched plan chose: " + s.text() + ", " + p.best.name + "\n";
  t += "# " + predicted(p) + "\n";
  t += "# Merge into your model's job file ([model], [optimizer], ... stay yours); run it with\n";
  t += "# torchrun ... -m torchtitan.train --job.config_file <this file>.\n";
  t += "[training]\n";
  if (s.pp > 1) {
    // n_microbatches = local_batch_size // pipeline_parallel_microbatch_size = M, no accumulation.
    t += "local_batch_size = " + std::to_string(s.micro * s.micro_batch_size) + "\n";
  } else {
    // Without a pipeline: M micro-batches are M gradient-accumulation steps of a local batch of mbs.
    t += "local_batch_size = " + std::to_string(s.micro_batch_size) + "\n";
  }
  t += "global_batch_size = " + std::to_string(c.rq.global_batch) + "\n";
  t += "seq_len = " + std::to_string(seq) + "\n";
  t += "\n[parallelism]\n";
  const bool fsdp = s.sharding == Sharding::Fsdp;
  t += "data_parallel_replicate_degree = " + std::to_string(fsdp ? 1 : s.dp) + "\n";
  t += "data_parallel_shard_degree = " + std::to_string(fsdp ? s.dp : 1) + "\n";
  t += "tensor_parallel_degree = " + std::to_string(s.tp) + "\n";
  if (c.rq.model.arch && c.rq.model.arch->experts > 0) t += "expert_parallel_degree = " + std::to_string(s.ep) + "\n";
  t += "pipeline_parallel_degree = " + std::to_string(s.pp) + "\n";
  if (s.pp > 1) {
    if (!cls.empty()) {
      t += "pipeline_parallel_schedule = " + quoted(cls) + "\n";
    } else {
      // The CSV runtime runs the order; the class named only says how stages sit on the ranks.
      const std::string placement = v == 1 ? "PipelineScheduleSingle"
                                    : p.schedule.placement.kind == PlacementKind::V ? "ZBVZeroBubble"
                                                                                    : "PipelineScheduleMulti";
      t += "pipeline_parallel_schedule = " + quoted(placement) + "\n";
      t += "pipeline_parallel_schedule_csv = " + quoted(csv_name) + "\n";
    }
    t += "pipeline_parallel_microbatch_size = " + std::to_string(s.micro_batch_size) + "\n";
    t += "module_fqns_per_model_part = [\n";
    for (const auto& part : torchtitan_fqns(p, c.rq.model)) {
      std::string row;
      for (const std::string& n : part) row += (row.empty() ? "" : ", ") + quoted(n);
      t += "  [" + row + "],\n";
    }
    t += "]\n";
  }
  t += "\n[activation_checkpoint]\n";
  t += std::string("mode = ") + quoted(s.recompute == Recompute::Full        ? "full"
                                       : s.recompute == Recompute::Selective ? "selective"
                                                                              : "none") + "\n";
  return t;
}

std::string megatron_script(const PlanContext& c) {
  const Plan& p = c.plan;
  const search::PlanShape& s = p.shape;
  if (s.sharding == Sharding::Fsdp)
    throw InputError({}, "--megatron: the plan shards with FSDP; plan with --framework megatron (its distributed "
                         "optimizer or plain replicas)");
  const int v = p.vpp();
  // Megatron's orders: 1F1B, and interleaved 1F1B in micro-batch groups of P (its default group).
  const auto [f, options] = family_and_options(p);
  const bool megatron_order = (f == "1f1b" && v == 1 && options.empty()) ||
                              (f == "interleaved-1f1b" && v > 1 && options == "--group-size " + std::to_string(s.pp));
  if (!megatron_order)
    throw InputError({}, "--megatron: the plan's schedule (" + p.best.name +
                             ") is not one Megatron-LM runs (1F1B, interleaved 1F1B): plan with --framework megatron");
  const Workload& m = c.rq.model;
  int64_t decoders = 0, mtp = 0;
  for (const Layer& l : m.layers()) {
    decoders += l.kind == LayerKind::Decoder ? 1 : 0;
    mtp += l.kind == LayerKind::Mtp ? 1 : 0;
  }
  std::string a;
  const auto arg = [&](const std::string& flag, const std::string& value = "") {
    a += "  " + flag + (value.empty() ? "" : " " + value) + "\n";
  };
  arg("--tensor-model-parallel-size", std::to_string(s.tp));
  if (s.tp > 1) arg("--sequence-parallel");
  arg("--pipeline-model-parallel-size", std::to_string(s.pp));
  if (m.arch && m.arch->experts > 0) arg("--expert-model-parallel-size", std::to_string(s.ep));
  arg("--num-layers", std::to_string(decoders));
  // Rotary positions (Megatron's default is learned absolute ones; its MTP asserts rope).
  if (m.arch && m.arch->learned_positions == 0) arg("--position-embedding-type", "rope");
  if (mtp > 0) arg("--mtp-num-layers", std::to_string(mtp));
  if (s.pp > 1) {
    // The layout says the virtual stages too (Megatron refuses it with --num-virtual-stages-per-pipeline-rank).
    arg("--pipeline-model-parallel-layout", "'" + p.layout_megatron + "'");
    if (v > 1) arg("--microbatch-group-size-per-virtual-pipeline-stage", std::to_string(s.pp));
  }
  arg("--micro-batch-size", std::to_string(s.micro_batch_size));
  arg("--global-batch-size", std::to_string(c.rq.global_batch));
  arg("--seq-length", std::to_string(m.training.seq_lens.front()));
  if (s.sharding == Sharding::DistributedOptimizer) arg("--use-distributed-optimizer");
  if (s.recompute == Recompute::Selective) arg("--recompute-granularity", "selective");
  if (s.recompute == Recompute::Full) {
    arg("--recompute-granularity", "full");
    arg("--recompute-method", "uniform");
    arg("--recompute-num-layers", "1");
  }
  std::string t = "#!/bin/bash\n";
  t += "# Megatron-LM (core_v0.15.3) arguments for the plan ppsched plan chose: " + s.text() + ", " + p.best.name + "\n";
  t += "# " + predicted(p) + ";\n";
  t += format_text("# M = global batch / (micro-batch size x DP) = %d micro-batches per step.\n", s.micro);
  t += "# Source it in bash, then: torchrun ... pretrain_gpt.py \"${MEGATRON_PLAN_ARGS[@]}\" <your model, data and\n";
  t += "# optimizer arguments> (an array: the layout's * and | stay one argument).\n";
  // Megatron's validate_args requires it with TP on Hopper (the TP collectives' stream order).
  if (s.tp > 1) t += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  t += "MEGATRON_PLAN_ARGS=(\n" + a + ")\n";
  return t;
}

std::string exec_script(const PlanContext& c) {
  const Plan& p = c.plan;
  const search::PlanShape& s = p.shape;
  if (s.tp > 1)
    throw InputError({}, "--exec-cmd: ppsched-exec runs pipeline x data (x expert) parallel, and the plan has TP " +
                             std::to_string(s.tp) + ": write --torchtitan or --megatron, or plan with --tp 1");
  if (c.schedule_file.empty()) throw InputError({}, "--exec-cmd needs -o (the schedule file ppsched-exec runs)");
  if (s.sharding == Sharding::DistributedOptimizer)
    throw InputError({}, "--exec-cmd: ppsched-exec shards with FSDP or keeps replicas; the plan uses the distributed optimizer");
  const int nodes = (c.rq.gpus + c.rq.gpus_per_node - 1) / c.rq.gpus_per_node;
  std::string t = "#!/bin/sh\n";
  t += "# ppsched-exec runs the verified schedule file as it is: " + s.text() + ", " + p.best.name + ".\n";
  t += "# Each node runs this line (torchrun's rendezvous at $MASTER_ADDR); the stage modules are your model's,\n";
  t += "# exported per virtual stage (ppsched-exec --help: --stage-module).\n";
  t += "STAGE_MODULE=${STAGE_MODULE:?set STAGE_MODULE to the folder of your model's stage modules}\n";
  t += format_text("torchrun --nnodes %d --nproc-per-node %d --rdzv-backend c10d --rdzv-endpoint \"${MASTER_ADDR:-localhost}:29500\" \\\n",
                   nodes, std::min(c.rq.gpus, c.rq.gpus_per_node));
  t += "  \"$(command -v ppsched-exec)\" --schedule " + quoted(c.schedule_file) + " --stage-module \"$STAGE_MODULE\" \\\n";
  t += format_text("  --dp %d%s --micro-batch-size %lld --global-batch-size %lld --transport nccl\n", s.dp,
                   s.sharding == Sharding::Fsdp ? " --fsdp" : "", static_cast<long long>(s.micro_batch_size),
                   static_cast<long long>(s.micro * s.micro_batch_size));
  return t;
}

}  // namespace ppsched::cli
