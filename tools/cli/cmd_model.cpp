// `ppsched model MODEL`: a model's layers, their layout over the stages, per-stage costs and the
// whole per-stage memory; -o writes the ordinary cost file the other commands read.
#include <cinttypes>
#include <cstdio>
#include <iostream>

#include "schedule/errors.hpp"
#include "schedule/text_format.hpp"
#include "workload/hf_config.hpp"
#include "workload/model_file.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/render.hpp"

namespace ppsched::cli {
namespace {

// ", EP 8 (ETP 1), capacity factor 1, all-to-all 112 MiB an MoE layer and micro-batch each way" for an
// MoE model ("" for a dense one).
std::string moe_label(const Workload& net, const std::vector<Layer>& layers) {
  if (!net.arch || net.arch->experts == 0) return "";
  const Training& t = net.training;
  int64_t a2a = 0;
  for (const Layer& l : layers) a2a = std::max(a2a, l.a2a_bytes);
  return ", EP " + std::to_string(t.ep) + " (ETP " + std::to_string(t.expert_tp()) + "), capacity factor " +
         general(t.moe_capacity_factor) + ", all-to-all " + human_bytes(a2a) + " an MoE layer and micro-batch each way";
}

// 8030261248 -> "8,030,261,248"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ",";
    out += digits[i];
  }
  return out;
}

std::string billions(double n) { return n >= 1e9 ? fixed(n / 1e9, 2) + " B" : n >= 1e6 ? fixed(n / 1e6, 1) + " M" : fixed(n, 0); }

// "embedding, layers.0-7" for a stage's layers.
std::string layer_span(const std::vector<int32_t>& idx, const std::vector<Layer>& layers) {
  std::string out;
  size_t k = 0;
  while (k < idx.size()) {
    const Layer& l = layers[static_cast<size_t>(idx[k])];
    size_t j = k + 1;
    const bool numbered = l.kind == LayerKind::Decoder || l.kind == LayerKind::Mtp || l.kind == LayerKind::Generic;
    while (numbered && j < idx.size() && idx[j] == idx[j - 1] + 1 && layers[static_cast<size_t>(idx[j])].kind == l.kind) ++j;
    std::string name = l.name;
    if (j - k > 1) {
      const std::string& last = layers[static_cast<size_t>(idx[j - 1])].name;
      const size_t dot = last.rfind('.');
      name += "-" + (dot == std::string::npos ? last : last.substr(dot + 1));
    }
    out += (out.empty() ? "" : ", ") + name;
    k = j;
  }
  return out.empty() ? "(empty)" : out;
}

std::string describe(const Workload& net) {
  if (!net.arch) return std::to_string(net.explicit_layers.size()) + " listed layers";
  const Architecture& a = *net.arch;
  std::string out = a.model_type + ": " + std::to_string(a.layers) + " decoder layers";
  if (a.mtp_layers) out += " + " + std::to_string(a.mtp_layers) + " MTP";
  out += ", hidden " + std::to_string(a.hidden) + ", " + std::to_string(a.heads) + " heads";
  if (a.kv_lora_rank) out += " (MLA)";
  else if (a.kv_heads != a.heads) out += " (" + std::to_string(a.kv_heads) + " key/value)";
  if (a.experts) {
    int64_t moe = 0;
    for (bool b : a.moe_layers) moe += b;
    out += ", " + std::to_string(moe) + " MoE layers of " + std::to_string(a.experts) + " experts (top " +
           std::to_string(a.experts_per_token) + ", FFN " + std::to_string(a.moe_ffn) + ")";
    if (moe < a.layers) out += ", dense FFN " + std::to_string(a.ffn);
  } else {
    out += ", FFN " + std::to_string(a.ffn) + (a.gated_mlp ? " (SwiGLU)" : "");
  }
  out += ", vocabulary " + std::to_string(a.vocab) + (a.tied_embeddings ? ", tied" : ", untied");
  return out;
}

// What --fsdp over N > 1 replicas gathers on top of the resident bytes: the rule, the most
// any stage gathers (and which stage), and without a pipeline the FSDP2 units at that peak.
struct GatherFigures {
  std::string rule;                 // gather_rule_label; "" without sharding
  int64_t bytes = 0;
  int stage = 0;
  std::vector<std::string> peak_units;  // the units gathered together at the peak (one stage)
};

GatherFigures gather_figures(const WorkloadCosts& nc, const MemoryModel& mm, const DataParallelOptions& dp) {
  GatherFigures g;
  g.rule = gather_rule_label(mm, dp);
  if (g.rule.empty()) return g;
  for (size_t s = 0; s < nc.plan.stages.size(); ++s)
    if (const int64_t b = mm.gathered(static_cast<int>(s), dp); b > g.bytes) g.bytes = b, g.stage = static_cast<int>(s);
  if (!mm.fsdp_units.empty()) {
    const std::vector<WrappedUnit>& units = nc.plan.stages.front().fsdp_units;
    const FsdpGatherPeak peak = mm.fsdp_gather_peak(dp);
    for (int u : peak.units) g.peak_units.push_back(layer_span(units[static_cast<size_t>(u)].layers, nc.layers));
  }
  return g;
}

nlohmann::json model_json(const WorkloadCosts& nc, const DataParallelOptions& dp, const std::vector<std::string>& notes) {
  const Workload& net = nc.workload;
  const Training& t = net.training;
  nlohmann::json j;
  j["model"] = net.name;
  j["source"] = net.source;
  j["notes"] = notes;
  j["parameters"] = {{"total", net.total_params()}};
  const BytesPerParam bpp = t.bytes_per_param();
  j["training"] = {{"seq_len", t.seq_lens},
                   {"micro_batch_size", t.micro_batch_size},
                   {"precision", to_string(t.precision)},
                   {"optimizer", to_string(t.optimizer)},
                   {"bytes_per_param", {{"weights", bpp.weights}, {"grads", bpp.grads}, {"optimizer", bpp.optimizer}}},
                   {"tp", t.tp},
                   {"dp", dp.degree},
                   {"fsdp", dp.fsdp},
                   {"distributed_optimizer", dp.distributed_optimizer},
                   {"flash_attention", t.flash_attention},
                   {"attention_core", to_string(t.core())},
                   {"ep", t.ep},
                   {"etp", t.expert_tp()},
                   {"moe_capacity_factor", t.moe_capacity_factor}};
  nlohmann::json rc = nlohmann::json::array();
  for (Recompute r : t.recompute) rc.push_back(to_string(r));
  j["training"]["recompute"] = t.recompute.size() == 1 ? rc[0] : rc;
  j["device"] = {{"flops_per_s", net.device.flops_per_s},
                 {"mfu", net.device.mfu},
                 {"memory_bytes", net.device.memory_bytes ? nlohmann::json(*net.device.memory_bytes) : nlohmann::json(nullptr)},
                 {"memory_reserve_bytes", net.device.memory_reserve_bytes},
                 {"usable_memory_bytes", net.device.usable_memory_bytes() ? nlohmann::json(*net.device.usable_memory_bytes())
                                                                           : nlohmann::json(nullptr)}};
  j["layers"] = nlohmann::json::array();
  for (const Layer& l : nc.layers) j["layers"].push_back(layer_json(l));
  j["layout"] = {{"counts", body_counts(nc.layout, nc.layers)},
                 {"megatron", megatron_text(nc.layout, nc.layers)},
                 {"how", nc.layout.how}};
  j["stages"] = nlohmann::json::array();
  const MemoryModel mm = nc.costs.memory_model(static_cast<int>(nc.plan.stages.size()));
  for (size_t s = 0; s < nc.plan.stages.size(); ++s) {
    const StageFigures& st = nc.plan.stages[s];
    const ResidentBytes held = mm.resident(static_cast<int>(s), dp);
    j["stages"].push_back({{"stage", s},
                           {"layers", st.layers},
                           {"params", st.params},
                           {"fwd_flops", st.fwd_flops.front()},
                           {"fwd_ms", st.fwd_ms.front()},
                           {"bwd_ms", st.bwd_ms.front()},
                           {"bwd_input_ms", st.bwd_input_ms.front()},
                           {"bwd_weight_ms", st.bwd_weight_ms.front()},
                           {"activation_bytes_per_micro", st.activation_bytes.front()},
                           {"weight_grad_bytes_per_micro", st.weight_grad_bytes.front()},
                           {"workspace_bytes", st.workspace_bytes.front()},
                           {"boundary_bytes", st.boundary_bytes.front()},
                           {"weights_bytes", held.weights},
                           {"grads_bytes", held.grads},
                           {"optimizer_bytes", held.optimizer},
                           {"resident_bytes", held.total()},
                           {"gathered_bytes", mm.gathered(static_cast<int>(s), dp)}});
  }
  const GatherFigures g = gather_figures(nc, mm, dp);
  if (g.rule.empty()) {
    j["fsdp_gather"] = nullptr;
  } else {
    j["fsdp_gather"] = {{"rule", g.rule}, {"per_block", !mm.fsdp_units.empty()}, {"peak_bytes", g.bytes}, {"stage", g.stage}};
    if (!mm.fsdp_units.empty()) {
      nlohmann::json units = nlohmann::json::array();
      for (const WrappedUnit& u : nc.plan.stages.front().fsdp_units)
        units.push_back({{"layers", layer_span(u.layers, nc.layers)}, {"params", u.params}, {"kept_gathered", u.kept_gathered}});
      j["fsdp_gather"]["units"] = std::move(units);
      j["fsdp_gather"]["peak_units"] = g.peak_units;
    }
  }
  return j;
}

std::string model_text(const WorkloadCosts& nc, const DataParallelOptions& dp, const std::vector<std::string>& notes) {
  const Workload& net = nc.workload;
  const Training& t = net.training;
  const int64_t total = net.total_params();
  std::string out = "model " + (net.source.empty() ? net.name : net.source) + ": " + describe(net) + "\n";
  out += "  parameters: " + grouped(total) + " (" + billions(static_cast<double>(total)) + ")\n";
  const BytesPerParam bpp = t.bytes_per_param();
  std::string seq;
  for (size_t k = 0; k < t.seq_lens.size() && k < 8; ++k) seq += (k ? "," : "") + std::to_string(t.seq_lens[k]);
  if (t.seq_lens.size() > 8) seq += ",... (" + std::to_string(t.seq_lens.size()) + " micro-batches)";
  out += "  training: sequence " + seq + " x micro-batch " + std::to_string(t.micro_batch_size) + ", " +
         to_string(t.precision) + (t.precision == Precision::Fp32 ? "" : " mixed precision") + ", " +
         (t.optimizer == Optimizer::Adam ? "Adam" : "SGD") + " (" + general(bpp.weights) + " + " + general(bpp.grads) +
         " + " + general(bpp.optimizer) + " B per parameter), recompute " +
         (t.recompute.size() == 1 ? std::string(to_string(t.recompute[0])) : std::string("per layer")) + ", FlashAttention " +
         (t.flash_attention ? "on" : "off") + ", attention core " +
         (t.core() == AttentionCore::Causal ? "causal (half of s x s)" : "full (s x s)") + ", TP " + std::to_string(t.tp) +
         ", " + data_parallel_label(dp) + moe_label(net, nc.layers) + "\n";
  out += "  device: " + general(net.device.flops_per_s / 1e12, 4) + " TFLOP/s x MFU " + general(net.device.mfu, 3) + " = " +
         general(net.device.effective_flops() / 1e12, 4) + " TFLOP/s" +
         (net.device.memory_bytes ? ", " + human_bytes(*net.device.usable_memory_bytes()) + " usable per rank (" +
                                        human_bytes(*net.device.memory_bytes) + " less a " +
                                        human_bytes(net.device.memory_reserve_bytes) + " reserve; --memory-reserve)"
                                  : std::string(", memory unlimited")) +
         "\n";
  out += "  layout (" + std::to_string(nc.plan.stages.size()) + " stages, " + nc.layout.how + "): " +
         counts_text(nc.layout, nc.layers) + " = Megatron \"" + megatron_text(nc.layout, nc.layers) + "\"\n";
  out += "  stage  layers                      params  fwd TFLOP     F ms     B ms     I ms     W ms   act/micro    W state   boundary"
         "     weights       grads   optimizer    resident\n";
  const MemoryModel mm = nc.costs.memory_model(static_cast<int>(nc.plan.stages.size()));
  for (size_t s = 0; s < nc.plan.stages.size(); ++s) {
    const StageFigures& st = nc.plan.stages[s];
    const ResidentBytes held = mm.resident(static_cast<int>(s), dp);
    std::string span = layer_span(st.layers, nc.layers);
    if (span.size() > 26) span = span.substr(0, 23) + "...";
    out += format_text(
                  "  %5zu  %-26s %9s %10.2f %8.3f %8.3f %8.3f %8.3f %11s %10s %10s %11s %11s %11s %11s\n", s, span.c_str(),
                  billions(static_cast<double>(st.params)).c_str(), st.fwd_flops.front() / 1e12, st.fwd_ms.front(),
                  st.bwd_ms.front(), st.bwd_input_ms.front(), st.bwd_weight_ms.front(),
                  human_bytes(st.activation_bytes.front()).c_str(), human_bytes(st.weight_grad_bytes.front()).c_str(),
                  human_bytes(st.boundary_bytes.front()).c_str(), human_bytes(held.weights).c_str(),
                  human_bytes(held.grads).c_str(), human_bytes(held.optimizer).c_str(), human_bytes(held.total()).c_str());
  }
  out += "  (act/micro: kept from forward to backward per micro-batch; W state: kept from BWD_INPUT to BWD_WEIGHT; "
         "resident: held for the whole step, after data-parallel sharding; the peak over a schedule: ppsched simulate "
         "--model)\n";
  if (const GatherFigures g = gather_figures(nc, mm, dp); !g.rule.empty()) {
    out += "  gathered (--fsdp): " + g.rule + ": ";
    if (g.peak_units.empty()) {
      out += "up to " + human_bytes(g.bytes) + " (stage " + std::to_string(g.stage) +
             ") while its FSDP_UNSHARD holds it, as PyTorch's pipelining runtime keeps a stage gathered";
    } else {
      std::string names;
      for (const std::string& n : g.peak_units) names += (names.empty() ? "" : " + ") + n;
      out += names + ", " + human_bytes(g.bytes) + " at most, one wrapped block running and the next prefetched";
    }
    out += ", on top of the resident\n";
  }
  for (const std::string& n : notes) out += "  note: " + n + "\n";
  return out;
}

}  // namespace

Action add_model(CLI::App& app) {
  auto* cmd = app.add_subcommand("model", "a model's layers, their layout over the stages, per-stage costs and memory");
  struct State {
    CostFlags cost;
    DataParallelFlags dp;
    int pp = 1, vpp = 1;
    std::string out;
    bool json = false, layers = false;
  };
  auto st = std::make_shared<State>();
  add_cost_flags(*cmd, st->cost, false, true);
  // Where a backward's weight gradients run inside a step changes no stage figure.
  cmd->remove_option(cmd->get_option("--delay-wgrad-compute"));
  cmd->add_option("--pp", st->pp, "pipeline ranks P (default 1)")->check(whole_in(1, kMaxCount));
  cmd->add_option("--vpp", st->vpp, "stages per rank V (default 1): the layout has P x V stages")->check(whole_in(1, kMaxCount));
  add_data_parallel_flags(*cmd, st->dp);
  cmd->add_option("-o,--output", st->out, "write the per-stage costs as a cost file (ppsched-costs) here");
  cmd->add_flag("--layers", st->layers, "also list every layer's figures");
  cmd->add_flag("--json", st->json, "machine-readable result");
  return [st]() {
    const int64_t stages = int64_t{st->pp} * st->vpp;
    if (stages > kMaxCount) throw InputError({}, "--pp x --vpp is over the limit of 2^20 stages");
    std::vector<std::string> notes;  // check_positions', shown in the output
    const CostSource src = cost_source(st->cost, st->dp, &notes);
    const WorkloadCosts nc = assemble_costs(src, static_cast<int>(stages));
    note_rank_times_unused(src, "model");
    const DataParallelOptions dp = data_parallel_options(st->dp, st->pp, st->cost.model);
    if (!st->out.empty()) {
      refuse_overwriting_input(st->out, {st->cost.model}, "-o");
      // The writer refuses a figure over a cost file's limits (what is written always reads back).
      std::string text;
      try {
        text = write_cost_model(nc.costs);
      } catch (const InputError& e) {
        throw InputError({}, "-o: the costs of this layout do not fit a cost file: " + e.message() +
                                 " (README \"Limits\"; more stages or --tp make each stage smaller)");
      }
      write_output(st->out, text);
    }
    if (st->json) {
      std::cout << model_json(nc, dp, notes).dump(2) << "\n";
    } else {
      std::cout << model_text(nc, dp, notes);
      if (st->layers) {
        std::cout << "  layer                kind        params   fwd TFLOP  bwd-in TFLOP  bwd-w TFLOP   activation    W state  workspace     output\n";
        for (const Layer& l : nc.layers) {
          std::string line = format_text("  %-20s %-9s %9s %11.3f %13.3f %12.3f %12s %10s %10s %10s\n", l.name.substr(0, 20).c_str(),
                        to_string(l.kind), billions(static_cast<double>(l.params)).c_str(), l.fwd_flops / 1e12,
                        l.bwd_input_flops / 1e12, l.bwd_weight_flops / 1e12, human_bytes(l.activation_bytes).c_str(),
                        human_bytes(l.weight_grad_bytes).c_str(), human_bytes(l.workspace_bytes).c_str(),
                        human_bytes(l.output_bytes).c_str());
          std::cout << line;
        }
      }
      if (!st->out.empty()) std::cout << "wrote " << st->out << " (ppsched-costs, " << stages << " stages)\n";
    }
    return kOk;
  };
}

}  // namespace ppsched::cli
