#include "sim/cost_assembly.hpp"

#include "schedule/errors.hpp"
#include "schedule/formats/json_support.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/text_format.hpp"

namespace ppsched {
namespace {

using nlohmann::json;

void overlay_document(json& base, const json& top) {
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
      overlay_document(base[it.key()], it.value());
    else
      base[it.key()] = it.value();
  }
}

// The architecture-only settings a listed model refuses.
void refuse_listed(const Workload& net, const TrainingOverrides& o, const std::string& file) {
  if (net.arch.has_value()) return;
  const auto refuse = [&](bool given, const char* flag) {
    if (given)
      throw InputError(in_file(file), std::string(flag) +
                                          " does not apply: the model lists its layers with their figures (it applies "
                                          "to a Hugging Face config or a model file's hf_config)");
  };
  refuse(o.seq_len.has_value(), "--seq-len");
  refuse(o.micro_batch_size.has_value(), "--micro-batch-size");
  refuse(o.recompute.has_value(), "--recompute");
  refuse(o.flash_attention.has_value(), "--flash-attention");
  refuse(o.attention_core.has_value(), "--attention-core");
  refuse(o.ep.has_value(), "--ep");
  refuse(o.etp.has_value(), "--etp");
  refuse(o.moe_capacity_factor.has_value(), "--moe-capacity-factor");
}

}  // namespace

std::vector<std::string> apply_training(Workload& net, const TrainingOverrides& o, const std::string& file) {
  refuse_listed(net, o, file);
  Training& t = net.training;
  if (o.seq_len) t.seq_lens = {*o.seq_len};
  if (o.micro_batch_size) t.micro_batch_size = *o.micro_batch_size;
  if (o.recompute) t.recompute = {*o.recompute};
  if (o.flash_attention) t.flash_attention = *o.flash_attention;
  if (o.attention_core) t.attention_core = *o.attention_core;
  if (const std::string why = attention_core_problem(t); !why.empty())
    throw InputError(in_file(o.attention_core ? "" : file),
                     (o.attention_core ? "--attention-core causal: " : "the model file's training.attention_core is causal: ") +
                         why + (o.flash_attention && !*o.flash_attention ? " (--flash-attention off)" : ""));
  if (o.tp) t.tp = *o.tp;
  if (o.precision) t.precision = *o.precision;
  if (o.optimizer) t.optimizer = *o.optimizer;
  if (o.dp) t.dp = *o.dp;
  if (o.fsdp) t.fsdp = *o.fsdp;
  if (o.distributed_optimizer) t.distributed_optimizer = *o.distributed_optimizer;
  if (o.ep) t.ep = *o.ep;
  if (o.etp) t.etp = *o.etp;
  if (o.moe_capacity_factor) t.moe_capacity_factor = *o.moe_capacity_factor;
  if (const std::string why = expert_parallel_problem(t, net.arch ? net.arch->experts : 0); !why.empty())
    throw InputError(in_file(file), (o.ep ? "--ep " + std::to_string(*o.ep) : std::string("--dp/--tp")) + ": " + why);
  if (const std::string why = tensor_parallel_problem(t, net.arch ? &*net.arch : nullptr); !why.empty())
    throw InputError(in_file(file), (o.tp ? "--tp " + std::to_string(*o.tp) : std::string("training.tp")) + ": " + why);
  if (o.memory_reserve_bytes) {
    net.device.memory_reserve_bytes = *o.memory_reserve_bytes;
    if (net.device.memory_bytes && net.device.memory_reserve_bytes >= *net.device.memory_bytes)
      throw InputError({}, "--memory-reserve " + o.memory_reserve_text + " leaves nothing of the device's " +
                               human_bytes(*net.device.memory_bytes) + " (" + file + ": device.memory_bytes)");
  }
  // A sequence past learned positions is refused; past a RoPE model's trained length, noted.
  return check_positions(net, o.seq_len ? "--seq-len" : "training.seq_len");
}

void apply_assumptions(const PricingAssumptions& a, CostModel& c) {
  if (a.overlap_efficiency) c.overlap_efficiency = *a.overlap_efficiency;
  if (a.memory_margin) c.memory_margin = *a.memory_margin;
  if (a.comm_contention) c.moe.contention = *a.comm_contention;
  if (a.ranks_per_node) c.links.ranks_per_node = *a.ranks_per_node;
  if (a.delay_wgrad) {
    if (c.moe.stages.empty())
      throw InputError({}, "--delay-wgrad-compute moves the weight gradients of MoE layers' backward phases, and this "
                           "model has no MoE layers (give a model with experts, e.g. tests/data/models/hf/qwen3_30b_a3b.json)");
    c.moe.delay_wgrad = true;
  }
}

CostOverlay read_cost_overlay(const std::string& path) {
  CostOverlay o{path, parse_json_strict(read_input_file(path, kMaxCostFileBytes), path, false)};
  if (!o.doc.is_object()) throw InputError(in_file(path), "expected a JSON object (a ppsched-costs file)");
  return o;
}

CostModel overlay_costs(const CostModel& base, const CostOverlay& top) {
  json doc = cost_document(base);
  overlay_document(doc, top.doc);
  CostModel merged = read_cost_document(doc, top.file);
  merged.source = base.source + " + " + top.file;
  const auto sets = [&](const char* group, const char* key) {
    return top.doc.contains(group) && top.doc[group].is_object() && top.doc[group].contains(key);
  };
  if (!sets("bytes", "params") && !sets("memory", "weights_bytes")) {
    merged.fsdp_units = base.fsdp_units;
    merged.fsdp_layers = base.fsdp_layers;
  }
  // The model's MoE phases are shares of the step times and the layers' all-to-all bytes: they
  // stay whatever times the file gives.
  merged.moe.stages = base.moe.stages;
  if (!base.moe.stages.empty() && merged.moe.ep != base.moe.ep)
    throw InputError(in_file(top.file), "moe.ep " + std::to_string(merged.moe.ep) + " over a model priced at EP " +
                                            std::to_string(base.moe.ep) +
                                            ": the model's all-to-all bytes and expert memory follow its EP; give --ep instead");
  return merged;
}

namespace {

WorkloadCosts finish(WorkloadCosts nc, const CostSource& src) {
  Links links = nc.costs.links;
  if (src.assumptions.ranks_per_node) links.ranks_per_node = *src.assumptions.ranks_per_node;
  price_tensor_parallel(nc, links);
  if (src.overlay) nc.costs = overlay_costs(nc.costs, *src.overlay);
  apply_assumptions(src.assumptions, nc.costs);
  return nc;
}

const Workload& workload_of(const CostSource& src) {
  if (!src.workload) throw std::logic_error("assemble_costs: the cost source has no model description");
  return *src.workload;
}

}  // namespace

WorkloadCosts assemble_costs(const CostSource& src, int stages) {
  if (src.layout.empty() && !src.layout_counts.empty()) {
    if (src.layout_counts.size() != static_cast<size_t>(stages))
      throw InputError({}, "the schedule's planned layout has " + std::to_string(src.layout_counts.size()) +
                               " stages, and " + std::to_string(stages) + " are priced: give --layout");
    const std::vector<int> counts(src.layout_counts.begin(), src.layout_counts.end());
    return finish(workload_costs(workload_of(src), counts, "the schedule's planned_for.layout"), src);
  }
  return finish(workload_costs(workload_of(src), stages, src.layout, "--layout"), src);
}

WorkloadCosts assemble_costs(const CostSource& src, Layout layout) {
  return finish(workload_costs(workload_of(src), std::move(layout)), src);
}

CostModel costs_for(const CostSource& src, int stages) {
  if (src.workload) return assemble_costs(src, stages).costs;
  CostModel c = src.file_costs ? *src.file_costs : default_cost_model(stages);
  apply_assumptions(src.assumptions, c);
  return c;
}

CostModel costs_for(const CostSource& src, const Schedule& s, std::vector<std::string>* notes) {
  // A per-stage array of another length would price the missing stages as its last one: refused
  // here, for every command that prices a schedule.
  CostModel c;
  if (s.pipes <= 1) {
    c = costs_for(src, s.stages);
  } else {
    // Replicated stages: the model is split into the model stages; each copy costs the same.
    c = costs_for(src, s.model_stages());
    if (c.stage_count() != s.stages || !c.shared_weights.empty()) {
      c.check_fits(s.model_stages(), s.micro_batches);
      c = c.per_copies(s.pipes, s.model_stages());
    }
  }
  c.check_fits(s.stages, s.micro_batches);
  // The ranks calibrate measured (device.rank_time_factors) price the stages each one runs.
  if (src.workload && !apply_rank_time(c, src.workload->device, s) && notes)
    notes->push_back(src.model_file + ": device.rank_time_factors describe " +
                     std::to_string(src.workload->device.rank_time.size()) + " ranks, the schedule has " +
                     std::to_string(s.ranks) + ": its stages are priced at the fitted rates alone");
  return c;
}

std::string rank_times_unused_note(const CostSource& src, const char* command) {
  if (!src.workload || src.workload->device.rank_time.empty()) return "";
  return src.model_file + ": `" + command + "` prices stages, not a schedule's ranks: its device.rank_time_factors (" +
         std::to_string(src.workload->device.rank_time.size()) +
         " ranks) are not applied (simulate, check and calibrate --schedule apply them)";
}

}  // namespace ppsched
