// --costs, --model and the training flags, shared by every command that prices a schedule.
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "model/errors.hpp"
#include "model/formats/json_support.hpp"
#include "model/formats/schedule_io.hpp"
#include "model/text_format.hpp"
#include "network/model_file.hpp"
#include "sim/network_costs.hpp"
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

// A cost file's keys laid over a model's cost model (as a document): objects merge key by key,
// anything else replaces. A backward the file gives replaces all of the model's (BWD and its
// halves derive from each other), and so does an activation message its gradient.
void overlay(nlohmann::json& base, const nlohmann::json& top) {
  if (top.contains("compute") && top["compute"].is_object() && base.contains("compute")) {
    const auto& c = top["compute"];
    if (c.contains("BWD") || c.contains("BWD_INPUT") || c.contains("BWD_WEIGHT"))
      for (const char* k : {"BWD", "BWD_INPUT", "BWD_WEIGHT"}) base["compute"].erase(k);
  }
  if (top.contains("bytes") && top["bytes"].is_object() && base.contains("bytes") && top["bytes"].contains("activation") &&
      !top["bytes"].contains("gradient"))
    base["bytes"].erase("gradient");
  if (top.contains("memory") && top["memory"].is_object() && base.contains("memory") &&
      top["memory"].contains("activation_bytes") && !top["memory"].contains("weight_grad_bytes"))
    base["memory"].erase("weight_grad_bytes");
  for (auto it = top.begin(); it != top.end(); ++it) {
    if (it.value().is_object() && base.contains(it.key()) && base[it.key()].is_object() && it.key() != "link")
      overlay(base[it.key()], it.value());
    else
      base[it.key()] = it.value();
  }
}

}  // namespace

void add_cost_flags(CLI::App& cmd, CostFlags& f, bool with_costs_file, bool positional_model) {
  if (with_costs_file)
    cmd.add_option("--costs", f.costs,
                   "cost model file (ppsched-costs JSON); with --model it overrides what it sets; default: the "
                   "embedded 7B model (ppsched costs --default)");
  f.model_opt = positional_model
                    ? cmd.add_option("model", f.model, "model: a ppsched-model file or a Hugging Face config.json")->required()
                    : cmd.add_option("--model", f.model,
                                     "price the schedule from a model: a ppsched-model file or a Hugging Face config.json "
                                     "(per-stage costs and the whole per-rank memory)");
  const auto needs_model = [&](CLI::Option* o) {
    if (!positional_model) o->needs(f.model_opt);
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
  needs_model(cmd.add_option("--tp", f.tp, "tensor-parallel degree: every figure divided by it (Megatron's accounting)")
                  ->check(whole_in(1, 65536)));
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
}

void apply_cost_assumptions(const CostFlags& f, CostModel& c) {
  if (f.overlap_efficiency) c.overlap_efficiency = *f.overlap_efficiency;
  if (f.memory_margin) c.memory_margin = *f.memory_margin;
}

std::string budget_basis(bool flag_given, const CostModel& c) {
  if (flag_given) return "--memory-budget";
  return c.capacity_basis.empty() ? "the cost model's capacity_bytes" : "usable: " + c.capacity_basis;
}

nlohmann::json assumptions_json(const CostModel& c, std::optional<double> budget, bool budget_flag_given) {
  return {{"overlap_efficiency", c.overlap_efficiency},
          {"memory_budget_bytes", budget ? nlohmann::json(static_cast<int64_t>(*budget)) : nlohmann::json(nullptr)},
          {"memory_budget_basis", budget ? nlohmann::json(budget_basis(budget_flag_given, c)) : nlohmann::json(nullptr)},
          {"memory_margin", c.memory_margin}};
}

Network load_network(const CostFlags& f, DataParallelFlags& dp) {
  Network net = read_network_file(f.model);
  Training& t = net.training;
  const bool listed = !net.arch.has_value();
  const auto refuse_listed = [&](bool given, const char* flag) {
    if (given && listed)
      throw InputError(in_file(f.model), std::string(flag) +
                                             " does not apply: the model lists its layers with their figures (it applies "
                                             "to a Hugging Face config or a model file's hf_config)");
  };
  refuse_listed(f.seq_len > 0, "--seq-len");
  refuse_listed(f.micro_batch_size > 0, "--micro-batch-size");
  refuse_listed(!f.recompute.empty(), "--recompute");
  refuse_listed(!f.flash_attention.empty(), "--flash-attention");
  refuse_listed(!f.attention_core.empty(), "--attention-core");
  if (f.seq_len > 0) t.seq_lens = {f.seq_len};
  if (f.micro_batch_size > 0) t.micro_batch_size = f.micro_batch_size;
  if (!f.recompute.empty())
    t.recompute = {f.recompute == "full" ? Recompute::Full : f.recompute == "selective" ? Recompute::Selective : Recompute::None};
  if (!f.flash_attention.empty()) t.flash_attention = f.flash_attention == "on";
  if (!f.attention_core.empty()) t.attention_core = f.attention_core == "causal" ? AttentionCore::Causal : AttentionCore::Full;
  if (const std::string why = attention_core_problem(t); !why.empty())
    throw InputError(in_file(f.attention_core.empty() ? f.model : ""),
                     (f.attention_core.empty() ? "the model file's training.attention_core is causal: " : "--attention-core causal: ") +
                         why + (f.flash_attention == "off" ? " (--flash-attention off)" : ""));
  if (f.tp > 0) t.tp = f.tp;
  if (!f.precision.empty()) t.precision = f.precision == "fp32" ? Precision::Fp32 : f.precision == "fp16" ? Precision::Fp16 : Precision::Bf16;
  if (!f.optimizer.empty()) t.optimizer = f.optimizer == "sgd" ? Optimizer::Sgd : Optimizer::Adam;
  // The data-parallel flags win; those not given take the model file's training values.
  const auto given = [](CLI::Option* o) { return o && o->count() > 0; };
  if (!given(dp.degree_opt)) dp.degree = t.dp;
  if (!given(dp.fsdp_opt) && !given(dp.dist_opt)) {
    dp.fsdp = t.fsdp;
    dp.distributed_optimizer = t.distributed_optimizer;
  }
  t.dp = dp.degree;
  t.fsdp = dp.fsdp;
  t.distributed_optimizer = dp.distributed_optimizer;
  if (!f.memory_reserve.empty()) {
    net.device.memory_reserve_bytes = parse_bytes(f.memory_reserve, "--memory-reserve");
    if (net.device.memory_bytes && net.device.memory_reserve_bytes >= *net.device.memory_bytes)
      throw InputError({}, "--memory-reserve " + f.memory_reserve + " leaves nothing of the device's " +
                               human_bytes(*net.device.memory_bytes) + " (" + f.model + ": device.memory_bytes)");
  }
  // A sequence past learned positions is refused; past a RoPE model's trained length, noted
  // (`model` shows the notes in its output).
  const std::vector<std::string> notes = check_positions(net, f.seq_len > 0 ? "--seq-len" : "training.seq_len");
  if (!f.notes_in_output)
    for (const std::string& n : notes) std::cerr << "note: " << n << "\n";
  return net;
}

CostModel load_cost_model(const CostFlags& f, DataParallelFlags& dp, int stages, NetworkCosts* out) {
  if (f.model.empty()) {
    CostModel c = f.costs.empty() ? default_cost_model(stages) : read_cost_file(f.costs);
    apply_cost_assumptions(f, c);
    return c;
  }
  return model_cost_model(load_network(f, dp), f, stages, f.layout, out);
}

namespace {

// A network's cost model with --costs overriding what it sets and the pricing assumptions'
// flags applied.
CostModel finish_model_costs(NetworkCosts nc, const CostFlags& f, NetworkCosts* out) {
  if (!f.costs.empty()) {
    nlohmann::json base = cost_document(nc.costs);
    const nlohmann::json top = parse_json_strict(read_input_file(f.costs, kMaxCostFileBytes), f.costs, false);
    if (!top.is_object()) throw InputError(in_file(f.costs), "expected a JSON object (a ppsched-costs file)");
    overlay(base, top);
    CostModel merged = read_cost_document(base, f.costs);
    merged.source = nc.costs.source + " + " + f.costs;
    // The model's FSDP2 units stay unless the file sets the parameters they split.
    const auto sets = [&](const char* group, const char* key) {
      return top.contains(group) && top[group].is_object() && top[group].contains(key);
    };
    if (!sets("bytes", "params") && !sets("memory", "weights_bytes")) {
      merged.fsdp_units = nc.costs.fsdp_units;
      merged.fsdp_layers = nc.costs.fsdp_layers;
    }
    nc.costs = std::move(merged);
  }
  apply_cost_assumptions(f, nc.costs);
  CostModel c = nc.costs;
  if (out) *out = std::move(nc);
  return c;
}

}  // namespace

CostModel model_cost_model(const Network& net, const CostFlags& f, int stages, const std::string& layout, NetworkCosts* out) {
  return finish_model_costs(network_costs(net, stages, layout, "--layout"), f, out);
}

CostModel model_cost_model(const Network& net, const CostFlags& f, Layout layout, NetworkCosts* out) {
  return finish_model_costs(network_costs(net, std::move(layout)), f, out);
}

CostModel load_cost_model(const CostFlags& f, DataParallelFlags& dp, const Schedule& s) {
  std::optional<Network> net;
  if (!f.model.empty()) net = load_network(f, dp);
  auto costs = [&](int stages) { return net ? model_cost_model(*net, f, stages, f.layout) : load_cost_model(f, dp, stages); };
  // A per-stage array of another length would price the missing stages as its last one: refused
  // here, for every command that prices a schedule.
  CostModel c;
  if (s.pipes <= 1) {
    c = costs(s.stages);
  } else {
    // Replicated stages: the model is split into the model stages; each copy costs the same.
    c = costs(s.model_stages());
    if (c.stage_count() != s.stages || !c.shared_weights.empty()) {
      c.check_fits(s.model_stages(), s.micro_batches);
      c = c.per_copies(s.pipes, s.model_stages());
    }
  }
  c.check_fits(s.stages, s.micro_batches);
  // The ranks calibrate measured (device.rank_time_factors) price the stages each one runs.
  if (net && !apply_rank_time(c, net->device, s))
    std::cerr << "note: " << f.model << ": device.rank_time_factors describe " << net->device.rank_time.size()
              << " ranks, the schedule has " << s.ranks << ": its stages are priced at the fitted rates alone\n";
  return c;
}

void note_rank_times_unused(const Network& net, const CostFlags& f, const char* command) {
  if (net.device.rank_time.empty()) return;
  std::cerr << "note: " << f.model << ": `" << command << "` prices stages, not a schedule's ranks: its device.rank_time_factors ("
            << net.device.rank_time.size() << " ranks) are not applied (simulate, check and calibrate --schedule apply them)\n";
}

}  // namespace ppsched::cli
