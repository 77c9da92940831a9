// --costs, --model and the training flags, shared by every command that prices a schedule.
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "schedule/errors.hpp"
#include "schedule/formats/json_support.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/text_format.hpp"
#include "workload/model_file.hpp"
#include "sim/workload_costs.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/render.hpp"

namespace ppsched::cli {
namespace {

CLI::Validator one_of(std::vector<std::string> choices) {
  std::string names;
  for (const auto& c : choices) names += (names.empty() ? "" : "|") + c;
  return CLI::Validator(
      [choices, names](std::string& text) -> std::string {
        for (const auto& c : choices)
          if (text == c) return {};
        return "expected " + names + ", got '" + text.substr(0, 40) + "'";
      },
      names);
}

}  // namespace

void add_cost_flags(CLI::App& cmd, CostFlags& f, bool with_costs_file, bool positional_model, bool reads_schedules) {
  if (with_costs_file)
    cmd.add_option("--costs", f.costs,
                   "cost model file (ppsched-costs JSON); with --model it overrides what it sets; default: the "
                   "embedded 7B model (ppsched costs --default)");
  f.model_opt = positional_model
                    ? cmd.add_option("model", f.model, "model: a ppsched-model file or a Hugging Face config.json")->required()
                    : cmd.add_option("--model", f.model,
                                     "price the schedule from a model: a ppsched-model file or a Hugging Face config.json "
                                     "(per-stage costs and the whole per-rank memory)");
  // A command that reads schedules may take the model from a planned one (take_planned_for):
  // cost_source() refuses these flags without a model then, after the plan is taken.
  const auto needs_model = [&](CLI::Option* o) {
    if (reads_schedules) f.model_only.push_back(o);
    else if (!positional_model) o->needs(f.model_opt);
  };
  needs_model(cmd.add_option("--layout", f.layout,
                             "which layers each stage holds: counts per stage (4,2,1,1) or Megatron's "
                             "--pipeline-model-parallel-layout (\"Et*8|t*8|t*8|t*8L\"); default: torchtitan's even split"));
  needs_model(cmd.add_option("--seq-len", f.seq_len, "sequence length (default: the model file's, else 4096)")
                  ->check(whole_in(1, kMaxSeqLen)));
  needs_model(cmd.add_option("--micro-batch-size", f.micro_batch_size, "sequences per micro-batch (default 1)")
                  ->check(whole_in(1, kMaxMicroBatchSize)));
  needs_model(cmd.add_option("--recompute", f.recompute, "activation recomputation of every decoder layer: none, selective, full")
                  ->check(one_of({"none", "selective", "full"})));
  needs_model(cmd.add_option("--flash-attention", f.flash_attention, "FlashAttention (no attention scores kept): on (default) or off")
                  ->check(one_of({"on", "off"})));
  needs_model(cmd.add_option("--attention-core", f.attention_core,
                             "FLOPs of the attention core under the causal mask: causal (the kernel skips the blocks above "
                             "the diagonal, half the s x s matrix; default with FlashAttention) or full (the whole matrix; "
                             "eager attention, the default without)")
                  ->check(one_of({"causal", "full"})));
  needs_model(cmd.add_option("--tp", f.tp, "tensor-parallel degree: every figure divided by it (Megatron's accounting, with sequence parallelism) and each layer's TP all-gathers and reduce-scatters priced over the intra-node link (the inter-node one when it is over --gpus-per-node); it must divide the attention heads and key/value heads, as Megatron-LM requires")
                  ->check(whole_in(1, 65536)));
  needs_model(cmd.add_option("--ep", f.ep,
                             "expert parallelism of an MoE model (Megatron's --expert-model-parallel-size): each stage's "
                             "routed experts split over N of its data-parallel x tensor-parallel ranks (default 1)")
                  ->check(whole_in(1, kMaxExperts)));
  needs_model(cmd.add_option("--etp", f.etp,
                             "expert tensor parallelism (Megatron's --expert-tensor-parallel-size): each routed expert "
                             "split over N ranks (default: --tp)")
                  ->check(whole_in(1, 65536)));
  needs_model(cmd.add_option("--moe-capacity-factor", f.moe_capacity_factor,
                             "tokens the busiest expert rank receives over the uniform share (Megatron's "
                             "--moe-expert-capacity-factor; routing imbalance): scales the routed experts' FLOPs, "
                             "activations and all-to-all bytes (default 1)")
                  ->check(CLI::Range(1.0, 1024.0)));
  needs_model(cmd.add_option("--precision", f.precision, "bf16 (default), fp16 (mixed precision) or fp32")
                  ->check(one_of({"bf16", "fp16", "fp32"})));
  needs_model(cmd.add_option("--optimizer", f.optimizer, "adam (default; adamw alike) or sgd (momentum)")
                  ->check(one_of({"adam", "adamw", "sgd"})));
  needs_model(cmd.add_option("--memory-reserve", f.memory_reserve,
                             "device memory a training process cannot use (CUDA context, NCCL's buffers, allocator "
                             "fragmentation), with its unit: the usable capacity is the device's memory less it "
                             "(default: the model file's device.memory_reserve_bytes, else 4GiB)"));
  cmd.add_option("--memory-margin", f.memory_margin,
                 "a rank whose peak is within this fraction below the usable capacity is reported tight (default 0.05)")
      ->check(CLI::Range(0.0, 0.5));
  cmd.add_option("--overlap-efficiency", f.overlap_efficiency,
                 "how much of the shorter sub-step of an OVERLAP_F_B / OVERLAP_B_F runs hidden behind the longer one, "
                 "0 to 1 (default 0: two computes on one device take turns; the cost file's overlap_efficiency)")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--comm-contention", f.comm_contention,
                 "the share of the device communication takes while it runs beside compute (a compute kernel then "
                 "runs at 1 - this of its speed): the MoE all-to-all on its own stream (default 20/132 = 0.152, the "
                 "SMs DeepSeek-V3 gives its all-to-all kernels on an H800)")
      ->check(CLI::Range(0.0, 0.9));
  needs_model(cmd.add_flag("--delay-wgrad-compute", f.delay_wgrad,
                           "Megatron-Core's --delay-wgrad-compute: in each backward of an MoE stage the weight "
                           "gradients leave the layer's backward phases and run right after its input gradients, "
                           "beside the chain (the experts' while the dispatch all-to-all's gradient travels), the last "
                           "layer's at the end of the step; priced as the split backward's halves"));
  cmd.add_option("--gpus-per-node", f.gpus_per_node,
                 "ranks that share a node (the intra-node link): where the pipeline's, the data-parallel and the "
                 "expert-parallel groups' links are read (default: the model's or cost file's link.ranks_per_node, else 8)")
      ->check(whole_in(1, 65536));
}

PricingAssumptions pricing_assumptions(const CostFlags& f) {
  return {f.overlap_efficiency, f.memory_margin, f.comm_contention, f.gpus_per_node, f.delay_wgrad};
}

std::string budget_basis(bool flag_given, const CostModel& c) {
  if (flag_given) return "--memory-budget";
  return c.capacity_basis.empty() ? "the cost model's capacity_bytes" : "usable: " + c.capacity_basis;
}

nlohmann::json assumptions_json(const CostModel& c, std::optional<double> budget, bool budget_flag_given) {
  return {{"overlap_efficiency", c.overlap_efficiency},
          {"comm_contention", c.moe.contention},
          {"delay_wgrad_compute", c.moe.delay_wgrad},
          {"ranks_per_node", c.links.ranks_per_node},
          {"memory_budget_bytes", budget ? nlohmann::json(static_cast<int64_t>(*budget)) : nlohmann::json(nullptr)},
          {"memory_budget_basis", budget ? nlohmann::json(budget_basis(budget_flag_given, c)) : nlohmann::json(nullptr)},
          {"memory_margin", c.memory_margin}};
}

namespace {

TrainingOverrides training_overrides(const CostFlags& f, const DataParallelFlags& dp) {
  TrainingOverrides o;
  if (f.seq_len > 0) o.seq_len = f.seq_len;
  if (f.micro_batch_size > 0) o.micro_batch_size = f.micro_batch_size;
  if (!f.recompute.empty())
    o.recompute = f.recompute == "full" ? Recompute::Full : f.recompute == "selective" ? Recompute::Selective : Recompute::None;
  if (!f.flash_attention.empty()) o.flash_attention = f.flash_attention == "on";
  if (!f.attention_core.empty()) o.attention_core = f.attention_core == "causal" ? AttentionCore::Causal : AttentionCore::Full;
  if (f.tp > 0) o.tp = f.tp;
  if (f.ep > 0) o.ep = f.ep;
  if (f.etp > 0) o.etp = f.etp;
  o.moe_capacity_factor = f.moe_capacity_factor;
  if (!f.precision.empty()) o.precision = f.precision == "fp32" ? Precision::Fp32 : f.precision == "fp16" ? Precision::Fp16 : Precision::Bf16;
  if (!f.optimizer.empty()) o.optimizer = f.optimizer == "sgd" ? Optimizer::Sgd : Optimizer::Adam;
  // The data-parallel flags given win over the model file's training values.
  const auto given = [](CLI::Option* opt) { return opt && opt->count() > 0; };
  if (given(dp.degree_opt) || dp.planned) o.dp = dp.degree;
  if (given(dp.fsdp_opt) || given(dp.dist_opt) || dp.planned) {
    o.fsdp = dp.fsdp;
    o.distributed_optimizer = dp.distributed_optimizer;
  }
  if (!f.memory_reserve.empty()) {
    o.memory_reserve_bytes = parse_bytes(f.memory_reserve, "--memory-reserve");
    o.memory_reserve_text = f.memory_reserve;
  }
  return o;
}

}  // namespace

Workload load_workload(const CostFlags& f, DataParallelFlags& dp, std::vector<std::string>* notes) {
  Workload net = read_model_file(f.model);
  std::vector<std::string> noted = apply_training(net, training_overrides(f, dp), f.model);
  if (notes)
    *notes = std::move(noted);
  else
    for (const std::string& n : noted) std::cerr << "note: " << n << "\n";
  // The data-parallel flags not given take the model file's training values.
  dp.degree = net.training.dp;
  dp.fsdp = net.training.fsdp;
  dp.distributed_optimizer = net.training.distributed_optimizer;
  return net;
}

CostSource cost_source(const CostFlags& f, DataParallelFlags& dp, std::vector<std::string>* notes) {
  CostSource src;
  src.assumptions = pricing_assumptions(f);
  if (f.model.empty())
    for (const CLI::Option* o : f.model_only)
      if (o->count() > 0)
        throw InputError({}, o->get_name() + " needs --model (or a schedule file planned for a model): a cost file "
                                             "has no layers");
  if (f.model.empty()) {
    if (!f.costs.empty()) src.file_costs = read_cost_file(f.costs);
    return src;
  }
  src.workload = load_workload(f, dp, notes);
  src.model_file = f.model;
  src.layout = f.layout;
  src.layout_counts = f.planned_layout;
  if (!f.costs.empty()) src.overlay = read_cost_overlay(f.costs);
  return src;
}

CostModel schedule_costs(const CostSource& src, const Schedule& s) {
  std::vector<std::string> notes;
  CostModel c = costs_for(src, s, &notes);
  for (const std::string& n : notes) std::cerr << "note: " << n << "\n";
  return c;
}

CostModel load_cost_model(const CostFlags& f, DataParallelFlags& dp, const Schedule& s) {
  return schedule_costs(cost_source(f, dp), s);
}

void note_rank_times_unused(const CostSource& src, const char* command) {
  if (const std::string n = rank_times_unused_note(src, command); !n.empty()) std::cerr << "note: " << n << "\n";
}

}  // namespace ppsched::cli
