// The network layer (workload/): parameter counts against published models and Megatron's
// formulas, kept activations against Korthikanti et al., resident bytes against Megatron's
// 18 (and 6 + 12/DP) bytes per parameter, layouts in both spellings, the readers' located errors.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>

#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"
#include "workload/hf_config.hpp"
#include "workload/layout.hpp"
#include "workload/model_file.hpp"
#include "workload/stage_plan.hpp"
#include "sim/cost_assembly.hpp"
#include "sim/engine.hpp"
#include "sim/workload_costs.hpp"
#include "tests/support/model_data.hpp"

using namespace ppsched;

namespace {

using test_data::data;
using test_data::hf;

// A model file from text, for the error cases.
Workload model_text(const std::string& text) { return read_model(text, "m.json"); }
std::string error_of(const std::string& text) {
  try {
    model_text(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

int64_t layer_params(const Workload& n, LayerKind kind, size_t nth = 0) {
  for (const Layer& l : n.layers())
    if (l.kind == kind && nth-- == 0) return l.params;
  return -1;
}

}  // namespace

// ---- parameters --------------------------------------------------------------------------------

TEST_CASE("parameter totals of real config.json files equal their published counts", "[workload][params]") {
  // Published: the models' safetensors (model.safetensors.index.json "total_size" / 2 bytes for
  // bf16; GPT-2: sum(p.numel() for p in model.parameters()), the 124M of its card without the
  // attention-mask buffers its checkpoint also holds). tests/data/models/hf/README.md.
  CHECK(hf("llama3_8b").total_params() == 8030261248);
  CHECK(hf("llama3_70b").total_params() == 70553706496);
  CHECK(hf("mistral_7b_v0.1").total_params() == 7241732096);
  CHECK(hf("qwen2.5_7b").total_params() == 7615616512);
  CHECK(hf("qwen3_8b").total_params() == 8190735360);
  CHECK(hf("qwen3_30b_a3b").total_params() == 30532122624);  // MoE, 128 experts
  CHECK(hf("gpt2").total_params() == 124439808);
  // DeepSeek-V3: the main model is DeepSeek's "671B" (671,026,419,200); the one MTP module,
  // sharing the embedding and head, adds 11.61 B.
  const Workload ds = hf("deepseek_v3");
  int64_t mtp = 0;
  for (const Layer& l : ds.layers())
    if (l.kind == LayerKind::Mtp) mtp += l.params;
  CHECK(ds.total_params() - mtp == 671026419200);
  CHECK(mtp == 11610068224);
}

TEST_CASE("per-layer counts equal Megatron's formulas where its assumptions hold (no biases)", "[workload][params]") {
  // megatron/training/theoretical_memory_usage.py, compute_weight_and_optimizer_memory, restated:
  //   attention 2 h h (1 + g/a) (q/h); MLP 2 h (ffn m + norm) with m = 3/2 gated; MoE
  //   2 h (moe_ffn E m + shared m + norm) (router not counted); norm 1 for RMSNorm.
  const auto dense = [](double h, double a, double g, double q, double ffn) {
    return 2 * h * (ffn * 1.5 + 1) + 2 * h * h * (1 + g / a) * (q / h);
  };
  const Workload llama = hf("llama3_8b");
  CHECK(layer_params(llama, LayerKind::Decoder) == static_cast<int64_t>(dense(4096, 32, 8, 4096, 14336)));  // GQA + SwiGLU
  CHECK(layer_params(llama, LayerKind::Embedding) == 4096LL * 128256);
  CHECK(layer_params(llama, LayerKind::Head) == 4096LL * 128256);  // untied: Megatron's 2 h V
  CHECK(hf("mistral_7b_v0.1").total_params() ==
        static_cast<int64_t>(32 * dense(4096, 32, 8, 4096, 14336) + 2.0 * 4096 * 32000 + 4096));
  // MoE with a shared expert and MLA (DeepSeek-V3): Megatron's MLA term, q LoRA + rope + q norm,
  // kv LoRA + rope + kv norm, h x rope, the output projection.
  const double h = 7168, a = 128, ql = 1536, kvl = 512, nope = 128, rope = 64, v = 128;
  const double mla = ql * (h + a * (nope + rope) + 1) + kvl * (h + a * (nope + v) + 1) + h * rope + a * v * h;
  const Workload ds = hf("deepseek_v3");
  CHECK(layer_params(ds, LayerKind::Decoder, 0) == static_cast<int64_t>(2 * h * (18432 * 1.5 + 1) + mla));
  const double moe_megatron = 2 * h * (2048.0 * 256 * 1.5 + 2048.0 * 1.5 + 1) + mla;
  const double router = h * 256 + 256;  // gate weights and DeepSeek-V3's score-correction bias
  CHECK(layer_params(ds, LayerKind::Decoder, 3) == static_cast<int64_t>(moe_megatron + router));
  // Qwen3 MoE: no shared expert; q_norm and k_norm (2 head_dim) beside Megatron's terms.
  const Workload q3 = hf("qwen3_30b_a3b");
  const double qh = 2048;
  const double q3_megatron = 2 * qh * (768.0 * 128 * 1.5 + 1) + 2 * qh * qh * (1 + 4.0 / 32) * (4096 / qh);
  CHECK(layer_params(q3, LayerKind::Decoder) == static_cast<int64_t>(q3_megatron + qh * 128 + 2 * 128));
}

// ---- resident bytes ------------------------------------------------------------------------------

TEST_CASE("weight + optimizer bytes of the most loaded rank equal Megatron's 18 B/param and 6 + 12/DP", "[workload][memory]") {
  // Megatron's stage assignment: the first stage holds the embedding and L/P decoder layers;
  // its most loaded shard is (transformer block / P + embedding), the block including the final
  // norm, which ppsched puts on the last stage (Megatron's share of it: h / P).
  const Workload llama = hf("llama3_8b");
  const WorkloadCosts nc = workload_costs(llama, 4, "8,8,8,8");
  const double h = 4096, V = 128256, layer = 218112000, L = 32, P = 4;
  const double block = L * layer + h, embedding = h * V;
  const double megatron_params = block / P + embedding;
  const MemoryModel mm = nc.costs.memory_model(4);
  DataParallelOptions dp;
  CHECK(static_cast<double>(mm.resident(0, dp).total()) == 18 * (megatron_params - h / P));
  dp.degree = 8;
  dp.distributed_optimizer = true;
  const ResidentBytes r = mm.resident(0, dp);
  CHECK(static_cast<double>(r.weights + r.grads) == 6 * (megatron_params - h / P));
  CHECK(static_cast<double>(r.optimizer) == 12.0 / 8 * (megatron_params - h / P));
  // FSDP shards everything; SGD keeps one state (mixed precision: master + momentum).
  dp.distributed_optimizer = false;
  dp.fsdp = true;
  CHECK(static_cast<double>(mm.resident(0, dp).total()) == 18.0 / 8 * (megatron_params - h / P));
}

// ---- tied and shared weights on a rank ---------------------------------------------------------------

namespace {
// Each rank's weights, as bf16 parameters, when `family` runs the model laid out by `layout`.
std::vector<int64_t> rank_params(const Workload& net, const std::string& family, int pp, int vpp, const std::string& layout) {
  GenerateOptions o;
  o.pp = pp;
  o.vpp = vpp;
  o.micro = 2 * pp * vpp;
  const Schedule s = generate(family, o);
  const WorkloadCosts nc = workload_costs(net, s.stages, layout);
  SimOptions so;
  so.check.memory = nc.costs.memory_model(s.stages);
  so.record_trace = false;
  const RunRecord r = simulate(s, nc.costs, so);
  std::vector<int64_t> out;
  for (const auto& x : r.ranks) {
    // 2 + 4 + 12 bytes per parameter (bf16 mixed precision, Adam): every part counts it once.
    CHECK(x.memory.grads_bytes == 2 * x.memory.weights_bytes);
    CHECK(x.memory.optimizer_bytes == 6 * x.memory.weights_bytes);
    out.push_back(x.memory.weights_bytes / 2);
  }
  return out;
}
}  // namespace

TEST_CASE("a rank holding the embedding's and the tied head's stages holds the tied weight once", "[workload][memory]") {
  // GPT-2 (tied), hand-derived: h = 768, V = 50257, 1024 learned positions; a decoder layer
  // 12 h^2 + 13 h = 7,087,872 (QKV 3h^2 + 3h, projection h^2 + h, MLP 8h^2 + 5h, two LayerNorms
  // 4h); the embedding V h + 1024 h = 39,383,808; the final LayerNorm 2h; the head nothing of
  // its own (it is the embedding's weight, V h = 38,597,376).
  const Workload gpt = hf("gpt2");
  const int64_t h = 768, layer = 7087872, embedding = 39383808, norm = 2 * h, tied = 50257 * 768;
  // One rank with both stages (interleaved 1F1B, P 1, V 2): the model's published 124,439,808.
  CHECK(rank_params(gpt, "interleaved-1f1b", 1, 2, "6,6") == std::vector<int64_t>{124439808});
  // V placement: rank 0 holds stage 0 (embedding) and stage 3 (norm, head), rank 1 the middle.
  for (const char* family : {"zbv", "dualpipev"}) {
    INFO(family);
    CHECK(rank_params(gpt, family, 2, 2, "3,3,3,3") == std::vector<int64_t>{embedding + 6 * layer + norm, 6 * layer});
  }
  // On different ranks each holds a copy, as Megatron's last stage keeps its own copy of the
  // tied weight (gradients all-reduced between the two).
  CHECK(rank_params(gpt, "1f1b", 2, 1, "6,6") == std::vector<int64_t>{embedding + 6 * layer, 6 * layer + norm + tied});
}

TEST_CASE("DeepSeek-V3's MTP stage holds the embedding it embeds its tokens with", "[workload][params]") {
  // Megatron-LM's GPTModel builds the embedding on every stage that holds an MTP module
  // (pre_process or mtp_process). The MTP module's own count, by hand (the MoE decoder layer as
  // in Megatron's formula above, its router, the enorm, hnorm and final norm 3h, eh_proj 2h^2):
  // 11,610,068,224; the embedding 129280 x 7168 = 926,679,040.
  const double h = 7168, a = 128, ql = 1536, kvl = 512, nope = 128, rope = 64, v = 128;
  const double mla = ql * (h + a * (nope + rope) + 1) + kvl * (h + a * (nope + v) + 1) + h * rope + a * v * h;
  const double mtp = 2 * h * (2048.0 * 256 * 1.5 + 2048.0 * 1.5 + 1) + mla + (h * 256 + 256) + 3 * h + 2 * h * h;
  REQUIRE(mtp == 11610068224.0);
  const Workload ds = hf("deepseek_v3");
  const WorkloadCosts nc = workload_costs(ds, 2, "31,31");
  const auto& last = nc.plan.stages[1];
  int64_t own = 0;
  for (int32_t i : last.layers) own += nc.layers[static_cast<size_t>(i)].params;
  CHECK(last.params - own == 129280LL * 7168);  // the untied head is on the stage: only the embedding is added
  // Both stages: the published 671,026,419,200 of the main model, the MTP module, and the
  // second copy of the embedding.
  CHECK(nc.plan.stages[0].params + last.params == 671026419200LL + static_cast<int64_t>(mtp) + 129280LL * 7168);
  // The MTP module on a stage of its own holds the embedding and the head (Megatron's "m|L" split).
  const WorkloadCosts alone = workload_costs(ds, 3, "Et*61|m|L");
  CHECK(alone.plan.stages[1].params == static_cast<int64_t>(mtp) + 2 * 129280LL * 7168);
}

// ---- tensor parallelism ---------------------------------------------------------------------------

TEST_CASE("tensor parallelism splits what Megatron splits and replicates the rest on every TP rank", "[workload][params]") {
  // Megatron-LM: QKV and MLP up/gate column-parallel (weights and biases split), attention output
  // and MLP down row-parallel (weights split, biases replicated), norms replicated, the word
  // embedding and an untied head split by the vocabulary, learned positions (a plain
  // torch.nn.Embedding) and the MoE router replicated.
  const auto stage_params = [](const std::string& config, int t) {
    Workload n = read_model(config, "config.json");
    n.training.tp = t;
    const WorkloadCosts nc = workload_costs(n, 1, "");
    const MemoryModel mm = nc.costs.memory_model(1);
    CHECK(mm.resident(0, DataParallelOptions{}).total() == 18 * nc.plan.stages[0].params);
    return nc.plan.stages[0].params;
  };
  // GPT-2 shape, tied: per TP rank the embedding V h / t + P h, per layer (12 h^2 + 7 h) / t
  // split (QKV 3h^2 + 3h, projection h^2, MLP 8h^2 + 4h) + 6 h replicated (two LayerNorms 4h,
  // the two row-parallel biases 2h), the final LayerNorm 2h.
  const std::string gpt = R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128, "vocab_size": 512})";
  for (int t : {1, 2, 4, 8}) {
    INFO("gpt2-shaped, TP " << t);
    const int64_t h = 64, V = 512, P = 128, L = 2;
    CHECK(stage_params(gpt, t) == V * h / t + P * h + L * ((12 * h * h + 7 * h) / t + 6 * h) + 2 * h);
  }
  // Qwen3-MoE shape, untied: per layer q, k, v, o (h a d + 2 h g d + a d h) / t, the experts
  // 3 E h f / t, replicated the two RMSNorms 2h, q_norm and k_norm 2d and the router h E; the
  // embedding and the head V h / t each, the final norm h.
  const std::string moe = R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
      "vocab_size": 256, "tie_word_embeddings": false})";
  for (int t : {1, 2, 4, 8}) {
    INFO("qwen3_moe-shaped, TP " << t);
    const int64_t h = 64, a = 4, g = 2, d = 16, f = 32, E = 8, V = 256, L = 2;
    const int64_t split = (h * a * d + 2 * h * g * d + a * d * h) / t + 3 * E * h * f / t;
    const int64_t replicated = 2 * h + 2 * d + h * E;
    CHECK(stage_params(moe, t) == 2 * V * h / t + L * (split + replicated) + h);
  }
}

// ---- activations ---------------------------------------------------------------------------------

TEST_CASE("a standard GPT layer keeps s b h (34 + 5 a s / h) bytes, 34 s b h selective, 2 s b h full", "[workload][activations]") {
  // Korthikanti et al. 2022, Table 2 (t = 1): ffn = 4h, multi-head attention, dropout, 16-bit.
  for (auto [s, b] : {std::pair<int64_t, int64_t>{1024, 1}, {1024, 4}, {512, 2}}) {
    Workload gpt = hf("gpt2");
    gpt.training.seq_lens = {s};
    gpt.training.micro_batch_size = b;
    gpt.training.flash_attention = false;
    const double h = 768, a = 12;
    const auto decoder = [&](Recompute r) {
      gpt.training.recompute = {r};
      for (const Layer& l : gpt.layers())
        if (l.kind == LayerKind::Decoder) return l;
      return Layer{};
    };
    const double sbh = static_cast<double>(s * b) * h;
    CHECK(static_cast<double>(decoder(Recompute::None).activation_bytes) == sbh * (34 + 5 * a * static_cast<double>(s) / h));
    CHECK(static_cast<double>(decoder(Recompute::Selective).activation_bytes) == 34 * sbh);
    CHECK(static_cast<double>(decoder(Recompute::Full).activation_bytes) == 2 * sbh);
    // The Zero Bubble runtime's analytic unit: W keeps 32 s b h (every matmul's input and output gradient).
    CHECK(static_cast<double>(decoder(Recompute::None).weight_grad_bytes) == 32 * sbh);
    // FlashAttention keeps no scores.
    gpt.training.flash_attention = true;
    CHECK(static_cast<double>(decoder(Recompute::None).activation_bytes) == 34 * sbh);
  }
}

TEST_CASE("Megatron's output-layer term: the norm, head and loss keep 4 s b h (1 + V/h)", "[workload][activations]") {
  const Workload llama = hf("llama3_8b");
  int64_t kept = 0;
  for (const Layer& l : llama.layers())
    if (pinned_last(l.kind)) kept += l.activation_bytes;
  CHECK(static_cast<double>(kept) == 4.0 * 4096 * 4096 * (1 + 128256.0 / 4096));
}

TEST_CASE("recomputation moves time into the backward (full: one more forward) and memory out", "[workload][recompute]") {
  Workload llama = hf("llama3_8b");
  const auto plan = [&](Recompute r) {
    llama.training.recompute = {r};
    llama.training.flash_attention = false;
    return plan_stages(llama, parse_layout("8,8,8,8", llama.layers(), 4, "t")).stages[1];
  };
  const StageFigures none = plan(Recompute::None), sel = plan(Recompute::Selective), full = plan(Recompute::Full);
  CHECK(full.bwd_input_flops[0] == Approx(none.bwd_input_flops[0] + none.fwd_flops[0]));
  CHECK(full.bwd_weight_flops[0] == none.bwd_weight_flops[0]);
  CHECK(sel.bwd_input_flops[0] > none.bwd_input_flops[0]);
  CHECK(sel.bwd_input_flops[0] < full.bwd_input_flops[0]);
  CHECK(full.activation_bytes[0] < sel.activation_bytes[0]);
  CHECK(sel.activation_bytes[0] < none.activation_bytes[0]);
  CHECK(full.activation_bytes[0] == 8 * 2 * 4096 * 4096);  // each layer's input, 2 s b h
  // While a recomputing backward runs it holds one layer's recomputed activations.
  CHECK(full.workspace_bytes[0] == none.activation_bytes[0] / 8);
}

TEST_CASE("1F1B rank 0 with M >= P holds P micro-batches' activations at its peak (Megatron's in-flight count)",
          "[workload][memory]") {
  for (int P : {2, 4, 8})
    for (int M : {P, 2 * P, 4 * P}) {
      INFO("P=" << P << " M=" << M);
      const Workload llama = hf("llama3_8b");
      const WorkloadCosts nc = workload_costs(llama, P, "");
      GenerateOptions o;
      o.pp = P;
      o.micro = M;
      const Schedule s = generate("1f1b", o);
      SimOptions so;
      so.check.memory = nc.costs.memory_model(P);
      so.record_trace = false;
      const RunRecord r = simulate(s, nc.costs, so);
      REQUIRE(r.completed);
      CHECK(r.ranks[0].memory.activations_peak_bytes == P * nc.plan.stages[0].activation_bytes[0]);
      CHECK(r.ranks[0].peak_memory_bytes >= r.ranks[0].memory.resident_bytes() + r.ranks[0].memory.activations_peak_bytes);
    }
}

// ---- FLOPs ---------------------------------------------------------------------------------------

TEST_CASE("a causal FlashAttention GPT layer's forward is 24 b s h^2 + 2 b s^2 h, eager attention's 24 b s h^2 + 4 b s^2 h",
          "[workload][flops]") {
  // Narayanan et al. 2021: QKV and projection 8 b s h^2, MLP 16 b s h^2, the attention core
  // (QK^T and the weighted sum) 4 b s^2 h over the whole matrix; a causal kernel skips the blocks
  // above the diagonal, half of it. The backward: the matmuls twice, the core twice (input gradient).
  for (auto [s, b] : {std::pair<int64_t, int64_t>{1024, 1}, {1024, 4}, {512, 2}}) {
    Workload gpt = hf("gpt2");
    gpt.training.seq_lens = {s};
    gpt.training.micro_batch_size = b;
    const double h = 768, S = static_cast<double>(s), B = static_cast<double>(b);
    const auto decoder = [&] {
      for (const Layer& l : gpt.layers())
        if (l.kind == LayerKind::Decoder) return l;
      return Layer{};
    };
    for (auto [flash, core, attention] : {std::tuple{true, std::optional<AttentionCore>{}, 2.0},
                                          std::tuple{false, std::optional<AttentionCore>{}, 4.0},
                                          std::tuple{true, std::optional<AttentionCore>{AttentionCore::Full}, 4.0}}) {
      INFO("s=" << s << " b=" << b << " flash " << flash << " core " << (core ? to_string(*core) : "default"));
      gpt.training.flash_attention = flash;
      gpt.training.attention_core = core;
      const Layer l = decoder();
      const double matmuls = 24 * B * S * h * h, core_flops = attention * B * S * S * h;
      CHECK(l.fwd_flops == Approx(matmuls + core_flops).epsilon(1e-12));
      CHECK(l.bwd_input_flops == Approx(matmuls + 2 * core_flops).epsilon(1e-12));
      CHECK(l.bwd_weight_flops == Approx(matmuls).epsilon(1e-12));
    }
  }
}

TEST_CASE("a step's FLOPs equal Megatron-LM's num_floating_point_operations, run on the same models", "[workload][flops]") {
  // tests/data/peers/megatron/flops.json: Megatron-LM's own function (training.py at the commit
  // the file names), run by run_flops.py on these config.json files: forward, input-gradient and
  // weight-gradient FLOPs of one global batch, the causal core halved. ppsched's: every layer's
  // three steps for one micro-batch of the same sequences (FlashAttention, so a causal core).
  std::ifstream in(data("peers/megatron/flops.json"));
  REQUIRE(in);
  const nlohmann::json doc = nlohmann::json::parse(in);
  REQUIRE(doc["cases"].size() >= 4);
  for (const auto& c : doc["cases"]) {
    INFO(c.dump());
    Workload n = read_model_file(data("models/hf/" + c["model"].get<std::string>()));
    n.training.seq_lens = {c["seq_length"].get<int64_t>()};
    n.training.micro_batch_size = c["batch_size"].get<int64_t>();
    double total = 0;
    for (const Layer& l : n.layers()) total += l.fwd_flops + l.bwd_input_flops + l.bwd_weight_flops;
    CHECK(total == Approx(c["flops"].get<double>()).epsilon(1e-12));
  }
}

// ---- layouts -------------------------------------------------------------------------------------

TEST_CASE("the default layout is torchtitan's even split: embedding and head one layer each", "[workload][layout]") {
  // torchtitan generate_llm_fqn_per_model_part(4, 32, 1, 1): 34 effective layers, 8 per stage,
  // the first two stages one more; the first and last give one to the embedding and the head.
  const std::vector<Layer> layers = hf("llama3_8b").layers();
  CHECK(counts_text(even_layout(layers, 4), layers) == "8,9,8,7");
  CHECK(counts_text(even_layout(layers, 1), layers) == "32");
  CHECK(counts_text(even_layout(layers, 8), layers) == "4,5,4,4,4,4,4,3");  // 34 = 8 x 4 + 2
  CHECK_THROWS_WITH(even_layout(layers, 40), Catch::Contains("40 stages cannot share 32 layers"));
  // A model without embedding and head: a plain even split.
  const Workload listed = default_workload();
  CHECK(counts_text(even_layout(listed.explicit_layers, 3), listed.explicit_layers) == "11,11,10");
}

TEST_CASE("Megatron's layout string is parsed by Megatron's rules", "[workload][layout]") {
  const std::vector<Layer> ds = hf("deepseek_v3").layers();
  // Megatron's own docstring example: "Ettt|(tt|)*29,m|L" = [E,t,t,t] + [[t,t]] * 29 + [[m], [L]].
  const Layout l = parse_layout("Ettt|(tt|)*29,m|L", ds, 32, "--layout");
  REQUIRE(l.stages.size() == 32);
  const auto counts = body_counts(l, ds);
  CHECK(counts[0] == 3);
  for (int s = 1; s <= 29; ++s) CHECK(counts[static_cast<size_t>(s)] == 2);
  CHECK(counts[30] == 1);  // the MTP module
  CHECK(counts[31] == 0);
  CHECK(ds[static_cast<size_t>(l.stages[0][0])].kind == LayerKind::Embedding);
  CHECK(ds[static_cast<size_t>(l.stages[31].back())].kind == LayerKind::Loss);
  // Both spellings round-trip.
  const std::vector<Layer> llama = hf("llama3_8b").layers();
  for (const std::string text : {"8,9,8,7", "4,0,12,16", "Et*8|t*9|t*8|t*7L", "E|t*32||L", "Et*16||t*16|L"}) {
    INFO(text);
    const Layout a = parse_layout(text, llama, 4, "x");
    CHECK(parse_layout(megatron_text(a, llama), llama, 4, "x").stages == a.stages);
    CHECK(parse_layout(counts_text(a, llama), llama, 4, "x").stages.size() == 4);
  }
  CHECK(megatron_text(parse_layout("8,9,8,7", llama, 4, "x"), llama) == "Et*8|t*9|t*8|t*7L");
}

TEST_CASE("a layout that loses or duplicates a layer, or has the wrong stage count, is refused", "[workload][layout]") {
  const std::vector<Layer> llama = hf("llama3_8b").layers();
  const auto why = [&](const std::string& text, int stages) {
    try {
      parse_layout(text, llama, stages, "--layout");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(why("8,8,8,6", 4), Catch::Contains("add up to 30 layers but the model has 32") && Catch::Contains("2 would be lost"));
  CHECK_THAT(why("8,8,8,9", 4), Catch::Contains("1 would be built twice"));
  CHECK_THAT(why("8,8,16", 4), Catch::Contains("3 stages but the schedule has 4"));
  CHECK_THAT(why("Et*8|t*8|t*8|t*6L", 4), Catch::Contains("places 30 decoder layers (t) but the model has 32"));
  CHECK_THAT(why("t*8|Et*8|t*8|t*8L", 4), Catch::Contains("first layer must be the embedding"));
  CHECK_THAT(why("Et*8|t*8|t*8|t*8", 4), Catch::Contains("last layer must be the loss"));
  CHECK_THAT(why("Et*8|t*8|Et*8|t*8L", 4), Catch::Contains("E appears 2 times"));
  CHECK_THAT(why("Et*8|t*8|t*8|t*8xL", 4), Catch::Contains("invalid layer character 'x' in stage 3"));
  CHECK_THAT(why("Et*8|((tt|)*2)*2|L", 4), Catch::Contains("invalid layer character"));  // Megatron does not nest
  CHECK_THAT(why("Et*999999999|L", 2), Catch::Contains("unrolls to more than"));
  CHECK_THAT(why("8,x,8,8", 4), Catch::Contains("entry 1"));
  CHECK_THAT(why("", 4), Catch::Contains("empty layout"));
}

// ---- readers -------------------------------------------------------------------------------------

TEST_CASE("a Hugging Face config it cannot price is a located error naming the key", "[workload][readers]") {
  const auto why = [](const std::string& text) {
    try {
      read_model(text, "config.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(why(R"({"model_type": "mamba", "hidden_size": 1})"),
             Catch::Contains("config.json (model_type)") && Catch::Contains("\"mamba\" cannot be priced"));
  CHECK_THAT(why(R"({"model_type": "llama", "hidden_size": 4096})"), Catch::Contains("(num_hidden_layers): missing key"));
  CHECK_THAT(why(R"({"model_type": "llama", "hidden_size": "4096", "num_hidden_layers": 2})"),
             Catch::Contains("(hidden_size): expected a whole number"));
  CHECK_THAT(why(R"({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 1000000, "num_attention_heads": 32, "intermediate_size": 1, "vocab_size": 1})"),
             Catch::Contains("(num_hidden_layers)"));
  CHECK_THAT(why(R"({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 5, "intermediate_size": 1, "vocab_size": 1})"),
             Catch::Contains("5 key/value heads do not divide 32"));
}

TEST_CASE("a ppsched-model file lists layers with defaults for the backward, and refuses what it cannot hold",
          "[workload][readers]") {
  const Workload n = model_text(R"({"format": "ppsched-model", "version": 1, "layers": [
      {"name": "block", "count": 3, "params": 10, "fwd_flops": 100, "activation_bytes": 8, "output_bytes": 4},
      {"params": 1, "fwd_flops": 10, "bwd_input_flops": 15, "activation_bytes": 0, "output_bytes": 0}]})");
  REQUIRE(n.explicit_layers.size() == 4);
  CHECK(n.explicit_layers[1].name == "block.1");
  CHECK(n.explicit_layers[0].bwd_input_flops == 100);  // bwd_flops = 2 x forward, half each
  CHECK(n.explicit_layers[0].bwd_weight_flops == 100);
  CHECK(n.explicit_layers[0].weight_grad_bytes == 4);   // half the activation
  CHECK(n.explicit_layers[3].bwd_weight_flops == 5);    // the rest of 2 x 10
  CHECK(n.device.mfu == 1.0);                           // listed FLOPs are achieved unless told
  const std::string head = R"({"format": "ppsched-model", "version": 1, )";
  CHECK_THAT(error_of(head + R"("layers": [{"params": 1, "fwd_flops": 1, "activation_bytes": 0, "output_bytes": 0, "flops": 2}]})"),
             Catch::Contains("m.json (layers[0].flops): unknown key 'flops'"));
  CHECK_THAT(error_of(head + R"("layers": [{"params": -1, "fwd_flops": 1, "activation_bytes": 0, "output_bytes": 0}]})"),
             Catch::Contains("(layers[0].params): expected a parameter count"));
  CHECK_THAT(error_of(head + R"("layers": [{"params": 1, "fwd_flops": 1e400, "activation_bytes": 0, "output_bytes": 0}]})"),
             Catch::Contains("m.json"));
  CHECK_THAT(error_of(head + R"("layers": [{"params": 1, "fwd_flops": 1, "activation_bytes": 1e300, "output_bytes": 0}]})"),
             Catch::Contains("(layers[0].activation_bytes)"));
  CHECK_THAT(error_of(head + R"("layers": [{"count": 70000, "params": 1, "fwd_flops": 1, "activation_bytes": 0, "output_bytes": 0}]})"),
             Catch::Contains("(layers[0].count)"));
  CHECK_THAT(error_of(head + R"("layers": [{"params": 1, "fwd_flops": 1, "activation_bytes": 0}]})"),
             Catch::Contains("(layers[0].output_bytes): missing key"));
  CHECK_THAT(error_of(head + R"("layers": [{"params": 1, "fwd_flops": 1, "activation_bytes": 0, "output_bytes": 0}],
                                "training": {"seq_len": 4096}})"),
             Catch::Contains("(training.seq_len)"));
  CHECK_THAT(error_of(R"({"format": "ppsched-costs", "version": 1})"), Catch::Contains("this is a cost file"));
  CHECK_THAT(error_of(head + R"("hf_config": {"model_type": "llama"}, "layers": []})"), Catch::Contains("not both"));
}

TEST_CASE("a model file's bytes.meta sets the shape/dtype message, 64 bytes unless told; other bytes keys are refused",
          "[workload][readers]") {
  const std::string head = R"({"format": "ppsched-model", "version": 1,
      "layers": [{"params": 1, "fwd_flops": 10, "activation_bytes": 0, "output_bytes": 4}, {"params": 1, "fwd_flops": 10, "activation_bytes": 0, "output_bytes": 0}])";
  CHECK(workload_costs(model_text(head + "}"), 2).costs.meta_bytes == 64);
  CHECK(workload_costs(model_text(head + R"(, "bytes": {"meta": 0}})"), 2).costs.meta_bytes == 0);
  CHECK(workload_costs(model_text(head + R"(, "bytes": {"meta": 128}})"), 2).costs.activation_bytes.at(0, 0) == 4);
  CHECK_THAT(error_of(head + R"(, "bytes": {"activation": 8}})"), Catch::Contains("m.json (bytes.activation): unknown key 'activation'"));
  std::string bad;
  try {
    workload_costs(model_text(head + R"(, "bytes": {"meta": -1}})"), 2);
  } catch (const InputError& e) {
    bad = e.what();
  }
  CHECK_THAT(bad, Catch::Contains("m.json") && Catch::Contains("meta"));
}

TEST_CASE("the embedded default is the default network's costs, as it always priced", "[workload][costs]") {
  // README "Cost model": 8 layers of 4.323 ms (34.587 ms), BWD twice, 32 MiB messages,
  // 0.53 GiB kept per layer, 3 GiB of bf16 parameters per stage.
  const CostModel c = default_cost_model(4);
  CHECK(c.fwd.at(0, 0) == 34.587);
  CHECK(c.bwd.at(0, 0) == 69.174);
  CHECK(c.bwd_input.at(0, 0) == 34.587);
  CHECK(c.activation_bytes.at(0, 0) == 32.0 * 1024 * 1024);
  CHECK(c.kept_activation_bytes.at(0, 0) == 8 * 34.0 * 4096 * 4096);
  CHECK(c.param_bytes.at(0, 0) == 3.0 * (1 << 30));
  CHECK(c.tower_fwd.at(0, 0) == 8.647);
  CHECK(c.tower_bwd.at(0, 0) == 25.941);
  // 18 bytes per parameter: 27 GiB held by every rank of a 4-stage pipeline.
  CHECK(c.weights_bytes.at(0, 0) + c.grads_bytes.at(0, 0) + c.optimizer_bytes.at(0, 0) == 27.0 * (1 << 30));
}

// ---- FSDP without a pipeline ---------------------------------------------------------------------

namespace {
// The gathered parameters at rank 0's simulated peak when `family` runs `net` on `pp` ranks
// (one stage each) with PyTorch's FSDP steps, sharded over `dp`.
int64_t gathered_at_peak(const Workload& net, int pp, const std::string& layout, const DataParallelOptions& dp) {
  GenerateOptions o;
  o.pp = pp;
  o.micro = 2 * pp;
  const Schedule s = add_fsdp_steps(generate("1f1b", o));
  const WorkloadCosts nc = workload_costs(net, s.stages, layout);
  SimOptions so;
  so.check.memory = nc.costs.memory_model(s.stages);
  so.check.dp = dp;
  so.record_trace = false;
  const RunRecord r = simulate(s, nc.costs, so);
  return r.ranks.front().memory.at_peak_gathered_bytes;
}
}  // namespace

TEST_CASE("without a pipeline FSDP2 gathers one wrapped block and the prefetched next, not the whole model",
          "[workload][memory][fsdp]") {
  // Hand derivation (docs/model.md "FSDP without a pipeline"). torchtitan's apply_fsdp_to_decoder
  // wraps the embedding, each decoder layer, and the norm with the head as units; FSDP2 gathers a
  // unit before its forward and frees it after, the next unit's all-gather running meanwhile,
  // and in the backward the same in reverse. The model file's units, in millions of parameters:
  // embedding 100, layers 40, 200, 60, norm + head 1 + 150 = 151. Neighbours together: 140,
  // 240, 260, 211: layers.1 + layers.2 = 260 M at most. bf16 weights, 2 B per parameter; over 4
  // replicas a rank gathers the 3/4 of each unit it does not hold.
  const Workload net = read_model_file(data("models/listed_fsdp_units.json"));
  DataParallelOptions dp;
  dp.degree = 4;
  dp.fsdp = true;
  const int64_t per_block = (200000000 + 60000000) * 2 / 4 * 3;  // 390,000,000 B
  const int64_t whole_model = int64_t{551000000} * 2 / 4 * 3;     // 826,500,000 B, the rule before
  CHECK(workload_costs(net, 1).costs.memory_model(1).gathered(0, dp) == per_block);
  CHECK(gathered_at_peak(net, 1, "", dp) == per_block);
  CHECK(per_block < whole_model);

  // With a pipeline PyTorch's runtime keeps each stage's whole parameters gathered across its
  // micro-batches (torchtitan turns reshard_after_forward off under PP): unchanged. Layout 2,1:
  // embedding + layers.0-1 = 340 M on stage 0, layers.2 + norm + head = 211 M on stage 1.
  const MemoryModel two = workload_costs(net, 2, "2,1").costs.memory_model(2);
  CHECK(two.fsdp_units.empty());
  CHECK(two.gathered(0, dp) == int64_t{340000000} * 2 / 4 * 3);
  CHECK(two.gathered(1, dp) == int64_t{211000000} * 2 / 4 * 3);
  CHECK(gathered_at_peak(net, 2, "2,1", dp) == int64_t{340000000} * 2 / 4 * 3);

  // Without --fsdp, or with one replica, nothing is gathered.
  DataParallelOptions ddp;
  ddp.degree = 4;
  CHECK(workload_costs(net, 1).costs.memory_model(1).gathered(0, ddp) == 0);
}

TEST_CASE("a tied embedding and head are one FSDP2 unit that stays gathered through the step", "[workload][memory][fsdp]") {
  // GPT-2 (tied; the figures of the test above): torchtitan wraps [tok_embeddings, norm, lm_head]
  // as one unit with reshard_after_forward off by default, so it is gathered from the embedding's
  // forward to the end of the backward, under two neighbouring decoder layers at a time.
  // Unit: embedding 39,383,808 + final LayerNorm 1,536 = 39,385,344 parameters (78,770,688 B,
  // 3/4 of it gathered over 4 replicas: 59,078,016); a layer 7,087,872 (14,175,744 B: 10,631,808).
  const Workload gpt = hf("gpt2");
  DataParallelOptions dp;
  dp.degree = 4;
  dp.fsdp = true;
  const WorkloadCosts nc = workload_costs(gpt, 1);
  const std::vector<WrappedUnit>& units = nc.plan.stages.front().fsdp_units;
  REQUIRE(units.size() == 13);
  CHECK(units.front().params == 39385344);
  CHECK(units.front().kept_gathered);
  CHECK(units[1].params == 7087872);
  CHECK_FALSE(units[1].kept_gathered);
  CHECK(nc.costs.memory_model(1).gathered(0, dp) == 59078016 + 2 * 10631808);
}

TEST_CASE("tensor parallelism's all-gathers and reduce-scatters are priced into each stage's compute, over the link the group spans",
          "[workload][costs][tp]") {
  // Hand derivation (Korthikanti et al. 2022, sequence parallelism): a decoder layer moves its
  // whole s x b x h bf16 activation B = 4096 x 1 x 4096 x 2 bytes 4 times each way; the
  // embedding and the head once each way. A ring
  // all-gather or reduce-scatter over t ranks: (t-1)/t B / bw + (t-1) lat. Llama-3-8B on 4
  // stages of 8 layers, TP 2 in a node of 8 (NVLink 450 GB/s, 5 us: the model's link defaults).
  Workload llama = hf("llama3_8b");
  llama.training.tp = 2;
  const WorkloadCosts bare = workload_costs(llama, 4, "8,8,8,8");  // the figures before the platform prices TP
  CostSource src;
  src.workload = llama;
  src.layout = "8,8,8,8";
  const double B = 4096.0 * 4096 * 2;
  const auto ring = [&](double bw_GBps, double lat_ms) { return 0.5 * B / (bw_GBps * 1e9) * 1e3 + 1 * lat_ms; };
  const double in_node = ring(450, 0.005);
  const WorkloadCosts nc = assemble_costs(src, 4);
  const auto delta = [&](const WorkloadCosts& w, StageValue CostModel::*field, int stage) {
    return (w.costs.*field).at(stage, 0) - (bare.costs.*field).at(stage, 0);
  };
  CHECK(delta(nc, &CostModel::fwd, 1) == Approx(8 * 4 * in_node).margin(2e-3));
  CHECK(delta(nc, &CostModel::bwd_input, 1) == Approx(8 * 4 * in_node).margin(2e-3));
  CHECK(delta(nc, &CostModel::bwd, 1) == Approx(8 * 4 * in_node).margin(2e-3));
  CHECK(delta(nc, &CostModel::bwd_weight, 1) == 0);  // the weight gradients need no collective
  CHECK(delta(nc, &CostModel::fwd, 0) == Approx((1 + 8 * 4) * in_node).margin(2e-3));  // the embedding's scatter
  CHECK(delta(nc, &CostModel::bwd_input, 0) == Approx((1 + 8 * 4) * in_node).margin(2e-3));  // its gradient's gather
  CHECK(delta(nc, &CostModel::fwd, 3) == Approx((8 * 4 + 1) * in_node).margin(2e-3));   // the head's gather
  // A node of one GPU: the group spans nodes and takes InfiniBand (50 GB/s, 10 us).
  src.assumptions.ranks_per_node = 1;
  CHECK(delta(assemble_costs(src, 4), &CostModel::fwd, 1) == Approx(8 * 4 * ring(50, 0.010)).margin(2e-3));
  // Full recomputation re-runs the forward's collectives in the backward.
  src.assumptions.ranks_per_node.reset();
  src.workload->training.recompute = {Recompute::Full};
  Workload full = llama;
  full.training.recompute = {Recompute::Full};
  const WorkloadCosts bare_full = workload_costs(full, 4, "8,8,8,8");
  const WorkloadCosts nc_full = assemble_costs(src, 4);
  CHECK(nc_full.costs.bwd_input.at(1, 0) - bare_full.costs.bwd_input.at(1, 0) == Approx(8 * 8 * in_node).margin(2e-3));
  // TP 1 moves nothing.
  src.workload = hf("llama3_8b");
  src.workload->training.recompute = {Recompute::None};
  const WorkloadCosts one = assemble_costs(src, 4);
  const WorkloadCosts one_bare = workload_costs(*src.workload, 4, "8,8,8,8");
  CHECK(one.costs.fwd.at(1, 0) == one_bare.costs.fwd.at(1, 0));
}
