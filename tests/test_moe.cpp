// MoE pipelines priced (issue 38): expert parallelism in the model against Megatron-LM's own
// estimator (run unmodified on the same configurations: tests/data/peers/megatron/
// moe_weight_optimizer.json) and hand derivations, each MoE layer's phases as the step table
// declares them, and the engine's two streams (sim/engine_streams.hpp) by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lowering/moe_phases.hpp"
#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"
#include "sim/cost_assembly.hpp"
#include "sim/engine.hpp"
#include "sim/engine_streams.hpp"
#include "sim/workload_costs.hpp"
#include "workload/model_file.hpp"
#include "tests/support/model_data.hpp"

using namespace ppsched;

namespace {

using test_data::data;
using test_data::hf;

Workload with_ep(Workload net, int ep, int dp) {
  TrainingOverrides o;
  o.ep = ep;
  o.dp = dp;
  apply_training(net, o, "test");
  return net;
}

Layer first_moe(const std::vector<Layer>& layers) {
  for (const Layer& l : layers)
    if (l.moe) return l;
  FAIL("no MoE layer");
  return layers.front();
}

std::string training_error(Workload net, const TrainingOverrides& o) {
  try {
    apply_training(net, o, "m.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// ---- expert parallelism in the model -------------------------------------------------------------

TEST_CASE("expert parallelism divides the routed experts and shards their optimizer over EDP as Megatron-LM does",
          "[moe][megatron]") {
  // Megatron-LM's compute_weight_and_optimizer_memory (commit d98e8a64, run unmodified) at PP 1,
  // TP 1, DP 8: its weight and optimizer bytes on the most loaded rank. It leaves Qwen3's
  // q_norm and k_norm out (2 x 128 replicated parameters a layer, 48 layers): ppsched counts
  // them, as the checkpoint holds them (30,532,122,624 parameters in all).
  std::ifstream in(data("peers/megatron/moe_weight_optimizer.json"));
  const nlohmann::json figures = nlohmann::json::parse(in);
  const double qk_norms = 48 * 2 * 128;
  int checked = 0;
  for (const auto& f : figures) {
    if (f["model"] != "Qwen3-30B-A3B" || f["pp"] != 1) continue;
    const int ep = f["ep"];
    const bool dist = f["dist_opt"];
    INFO("Qwen3-30B-A3B, EP " << ep << (dist ? ", distributed optimizer" : ""));
    const Workload net = with_ep(hf("qwen3_30b_a3b"), ep, 8);
    const WorkloadCosts wc = workload_costs(net, 1);
    DataParallelOptions dp;
    dp.degree = 8;
    dp.distributed_optimizer = dist;
    const ResidentBytes held = wc.costs.memory_model(1).resident(0, dp);
    // Megatron's most loaded shard, its parameters: dense ones whole, the routed experts / EP.
    CHECK(wc.plan.stages[0].params == static_cast<int64_t>(f["num_parameters_on_most_loaded_model_shard"].get<double>() + qk_norms));
    // Its bytes: 18 a parameter, or 6 + 12 / DP for the dense ones and 6 + 12 / EDP (EDP = 8 / EP)
    // for the experts; ppsched's the same plus the norms at the dense rate (a rounding byte apart:
    // the shards round up).
    const double dense_rate = dist ? 6 + 12.0 / 8 : 18;
    const double expected = f["weight_and_optimizer_bytes"].get<double>() + qk_norms * dense_rate;
    CHECK(std::abs(static_cast<double>(held.total()) - expected) <= 4);
    ++checked;
  }
  CHECK(checked == 6);
}

TEST_CASE("DeepSeek-V3's routed experts per layer and rank are Megatron-LM's over EP", "[moe][megatron]") {
  std::ifstream in(data("peers/megatron/moe_weight_optimizer.json"));
  const nlohmann::json figures = nlohmann::json::parse(in);
  for (const auto& f : figures) {
    if (f["model"] != "DeepSeek-V3") continue;
    const int ep = f["ep"];
    INFO("EP " << ep);
    const Layer& l = first_moe(with_ep(hf("deepseek_v3"), ep, 8).layers());
    // routed_expert_params = 2 h moe_ffn E 3/2 (SwiGLU), split over EP (ETP 1).
    CHECK(static_cast<double>(l.expert_params) * ep == f["routed_expert_params"].get<double>());
  }
}

TEST_CASE("an MoE layer's all-to-all bytes, expert FLOPs and activations by hand", "[moe]") {
  // Qwen3-30B-A3B: h 2048, 128 experts, top 8, moe_ffn 768, SwiGLU; s 4096, b 1, bf16 (e = 2).
  const double T = 4096, k = 8, h = 2048, fm = 768, e = 2, E = 128;
  for (const auto& [ep, cf] : {std::pair{1, 1.0}, {4, 1.0}, {8, 1.0}, {8, 1.25}}) {
    INFO("EP " << ep << ", capacity factor " << cf);
    Workload net = with_ep(hf("qwen3_30b_a3b"), ep, 8);
    net.training.moe_capacity_factor = cf;
    const Layer& l = first_moe(net.layers());
    // Each routed copy's h elements leave for another EP rank with probability (EP - 1) / EP.
    CHECK(l.a2a_bytes == std::llround(cf * T * k * h * e * (ep - 1) / ep));
    // The routed experts' matmuls: 2 T k (3 h fm) a way, cf times on the busiest rank.
    CHECK(l.expert_fwd_flops == Approx(cf * 2 * T * k * 3 * h * fm).epsilon(1e-12));
    CHECK(l.expert_bwd_input_flops == Approx(l.expert_fwd_flops).epsilon(1e-12));
    CHECK(l.expert_bwd_weight_flops == Approx(l.expert_fwd_flops).epsilon(1e-12));
    // Parameters: E / EP experts of 3 h fm each.
    CHECK(l.expert_params == std::llround(E / ep * 3 * h * fm));
  }
  // Kept activations grow with the capacity factor by the routed copies' share: per copy its
  // input, its gated MLP (3 fm) and its output, e bytes each.
  Workload a = hf("qwen3_30b_a3b"), b = a;
  b.training.moe_capacity_factor = 2;
  CHECK(first_moe(b.layers()).activation_bytes - first_moe(a.layers()).activation_bytes ==
        std::llround(T * k * e * (2 * h + 3 * fm)));
}

TEST_CASE("expert parallelism that cannot split the model is refused, naming the flag and why", "[moe][errors]") {
  TrainingOverrides o;
  o.ep = 3;
  o.dp = 3;
  CHECK_THAT(training_error(hf("qwen3_30b_a3b"), o), Catch::Contains("--ep 3") && Catch::Contains("does not divide the 128 routed experts"));
  o.ep = 8;
  o.dp = 1;
  CHECK_THAT(training_error(hf("qwen3_30b_a3b"), o), Catch::Contains("does not divide the 1 ranks of a stage"));
  o.ep = 2;
  o.dp = 2;
  CHECK_THAT(training_error(hf("llama3_8b"), o), Catch::Contains("needs a model with routed experts"));
}

TEST_CASE("tensor parallelism that cannot split the attention is refused as Megatron-LM refuses it", "[errors]") {
  // Llama-3-8B: 32 heads, 8 key/value heads (config.json); DeepSeek-V3: 128 heads, MLA (no groups).
  TrainingOverrides o;
  o.tp = 3;
  CHECK_THAT(training_error(hf("llama3_8b"), o), Catch::Contains("--tp 3") && Catch::Contains("does not divide the 32 attention heads"));
  o.tp = 16;
  CHECK_THAT(training_error(hf("llama3_8b"), o), Catch::Contains("does not divide the 8 key/value heads"));
  o.tp = 64;
  CHECK_THAT(training_error(hf("llama3_8b"), o), Catch::Contains("does not divide the 32 attention heads"));
  o.tp = 8;
  CHECK(training_error(hf("llama3_8b"), o).empty());
  o.tp = 16;  // 128 heads, latent attention: no key/value groups to divide
  CHECK(training_error(hf("deepseek_v3"), o).empty());
  o.tp = 3;
  CHECK_THAT(training_error(hf("deepseek_v3"), o), Catch::Contains("does not divide the 128 attention heads"));
}

// ---- phases ------------------------------------------------------------------------------------------

TEST_CASE("a stage's steps expand into each MoE layer's phases in the step table's order", "[moe][phases]") {
  MoeStage m;
  m.layers.push_back({{0.2f, 0.2f, 0.2f, 0.2f}, {0.3f, 0.3f, 0.3f, 0.3f}, 1000});
  m.layers.push_back({{0.1f, 0.1f, 0.1f, 0.1f}, {0.3f, 0.3f, 0.3f, 0.3f}, 1000});
  m.after = {0.1f, 0.1f, 0.1f, 0.1f};
  const auto names = [&](Op op) {
    std::vector<PhaseItem> items;
    expand_phases(op, m, items);
    std::string out;
    double share = 0;
    for (const PhaseItem& it : items) {
      out += std::string(out.empty() ? "" : " ") + std::string(it.phase.name) + (it.layer >= 0 ? std::to_string(it.layer) : "");
      share += it.share;
    }
    CHECK(share == Approx(1.0));
    return out;
  };
  CHECK(names(Op::FWD) == "attn_fwd0 dispatch_fwd0 mlp_fwd0 combine_fwd0 attn_fwd1 dispatch_fwd1 mlp_fwd1 combine_fwd1 attn_fwd");
  CHECK(names(Op::BWD) == "attn_bwd combine_bwd1 mlp_bwd1 dispatch_bwd1 attn_bwd1 combine_bwd0 mlp_bwd0 dispatch_bwd0 attn_bwd0");
  CHECK(names(Op::BWD_INPUT) ==
        "attn_bwd_dx combine_bwd1 mlp_bwd_dx1 dispatch_bwd1 attn_bwd_dx1 combine_bwd0 mlp_bwd_dx0 dispatch_bwd0 attn_bwd_dx0");
  // The weight gradients move nothing.
  CHECK(names(Op::BWD_WEIGHT) == "attn_bwd_dw mlp_bwd_dw1 attn_bwd_dw1 mlp_bwd_dw0 attn_bwd_dw0");
  // One EP rank: no all-to-all; a stage without MoE layers, or a step without phases: nothing.
  m.layers[0].a2a_bytes = m.layers[1].a2a_bytes = 0;
  CHECK(names(Op::FWD) == "attn_fwd0 mlp_fwd0 attn_fwd1 mlp_fwd1 attn_fwd");
  std::vector<PhaseItem> none;
  expand_phases(Op::FWD_SEND, m, none);
  expand_phases(Op::FWD, MoeStage{}, none);
  CHECK(none.empty());
}

TEST_CASE("--delay-wgrad-compute: a backward's weight gradients leave its phases and run beside the chain, each "
          "after its layer's input gradient, priced as the split halves",
          "[moe][phases][delay_wgrad]") {
  MoeStage m;
  // before / experts shares by part: Forward, Backward, BackwardInput, BackwardWeight.
  m.layers.push_back({{0.2f, 0.2f, 0.25f, 0.15f}, {0.3f, 0.3f, 0.25f, 0.35f}, 1000});
  m.layers.push_back({{0.1f, 0.1f, 0.15f, 0.05f}, {0.3f, 0.3f, 0.25f, 0.35f}, 1000});
  m.after = {0.1f, 0.1f, 0.1f, 0.1f};
  std::vector<PhaseItem> items;
  expand_phases(Op::BWD, m, items, true);
  std::string names;
  double dx = 0, dw = 0;
  for (const PhaseItem& it : items) {
    names += std::string(names.empty() ? "" : " ") + std::string(it.phase.name) + (it.layer >= 0 ? std::to_string(it.layer) : "") +
             (it.beside ? "*" : "");
    if (it.phase.stream == Stream::Compute) {
      REQUIRE(it.part >= 0);
      (it.beside ? dw : dx) += it.share;
      CHECK(it.part == static_cast<int>(it.beside ? PhasePart::BackwardWeight : PhasePart::BackwardInput));
      // A name the step table gives the op at that index (the traces read it so).
      CHECK(info(Op::BWD).moe_phases[it.index].name == it.phase.name);
    }
  }
  // Megatron's layer backward with delay: combine, mlp backward (dgrad), mlp wgrad, dispatch,
  // attention backward (dgrad), attention wgrad; the compute past the last layer first.
  CHECK(names ==
        "attn_bwd attn_wgrad* combine_bwd1 mlp_bwd1 mlp_wgrad1* dispatch_bwd1 attn_bwd1 attn_wgrad1* combine_bwd0 mlp_bwd0 "
        "mlp_wgrad0* dispatch_bwd0 attn_bwd0 attn_wgrad0*");
  CHECK(dx == Approx(1.0));  // the whole input-gradient step ...
  CHECK(dw == Approx(1.0));  // ... and the whole weight-gradient step
  // Without the mode, and for ops without delayed phases, nothing changes.
  std::vector<PhaseItem> plain, split;
  expand_phases(Op::BWD, m, plain);
  for (const PhaseItem& it : plain) CHECK((it.part == -1 && !it.beside && !it.phase.delayed_wgrad));
  CHECK(plain.size() == 9);
  expand_phases(Op::BWD_INPUT, m, split, true);
  for (const PhaseItem& it : split) CHECK((it.part == -1 && !it.beside));
}

TEST_CASE("a model's stage phases are its layers' FLOP shares and all-to-all bytes", "[moe][phases]") {
  const WorkloadCosts wc = workload_costs(with_ep(hf("qwen3_30b_a3b"), 8, 8), 4);
  REQUIRE(wc.costs.moe.stages.size() == 4);
  CHECK(wc.costs.moe.ep == 8);
  size_t layers = 0;
  for (size_t s = 0; s < 4; ++s) {
    const MoeStage& m = wc.costs.moe.stages[s];
    layers += m.layers.size();
    CHECK(m.layers.size() == wc.plan.stages[s].layers.size() - (s == 0 ? 1 : s == 3 ? 3 : 0));  // less embedding, norm, head, loss
    for (size_t part = 0; part < kPhaseParts; ++part) {
      double sum = m.after[part];
      for (const MoeLayerShare& l : m.layers) sum += l.before[part] + l.experts[part];
      CHECK(sum == Approx(1.0).epsilon(1e-5));
    }
    CHECK(m.layers[0].a2a_bytes == first_moe(wc.layers).a2a_bytes);
  }
  CHECK(layers == 48);
}

// ---- the two streams ------------------------------------------------------------------------------

namespace {
des::TimedPhase compute(double ms) { return {PhaseItem{Phase{PhaseWork::Attention, Stream::Compute, "c"}, 0, 0, 1, 0}, ms}; }
des::TimedPhase comm(double ms) { return {PhaseItem{Phase{PhaseWork::Dispatch, Stream::Comm, "a2a"}, 1, 0, 0, 1}, ms}; }
}  // namespace

TEST_CASE("one chain's all-to-alls are all exposed; two chains hide them behind each other's compute", "[moe][streams]") {
  const des::StreamTimeline one = des::run_streams({{compute(2), comm(1), compute(3), comm(1)}}, 0.2);
  CHECK(one.span_ms == 7);
  CHECK(one.a2a_ms == 2);
  CHECK(one.a2a_exposed_ms == 2);
  CHECK(one.slowdown_ms == 0);
  // By hand, contention 0: B's first all-to-all [0,1] beside A's compute [0,2]; A's [2,3] beside
  // B's compute [2,4]; B's [4,5] beside A's [4,7]; A's last [7,8] beside B's last compute [7,8].
  const des::StreamTimeline two =
      des::run_streams({{compute(2), comm(1), compute(3), comm(1)}, {comm(1), compute(2), comm(1), compute(1)}}, 0.0);
  CHECK(two.span_ms == 8);
  CHECK(two.compute_ms == 8);
  CHECK(two.a2a_ms == 4);
  CHECK(two.a2a_exposed_ms == 0);
  REQUIRE(two.comm.size() == 4);
  CHECK(two.comm[0].chain == 1);
  CHECK(two.comm[0].start_ms == 0);
  CHECK(two.comm[3].start_ms == 7);
  // Sharing the device slows the compute that runs beside an all-to-all.
  const des::StreamTimeline slowed =
      des::run_streams({{compute(2), comm(1), compute(3), comm(1)}, {comm(1), compute(2), comm(1), compute(1)}}, 0.5);
  CHECK(slowed.slowdown_ms > 0);
  CHECK(slowed.span_ms > two.span_ms);
  CHECK(slowed.span_ms < 8 + slowed.slowdown_ms + 1e-9);
}

TEST_CASE("a weight gradient beside the chain runs while the all-to-all after its input gradient travels; the "
          "last one after every chain phase",
          "[moe][streams][delay_wgrad]") {
  const auto beside = [](des::TimedPhase p) {
    p.item.beside = true;
    return p;
  };
  // By hand, contention 0. Without the mode the expert backward carries its weight gradient:
  // combine [0,1], mlp (dgrad + wgrad) [1,4], dispatch [4,6], attention [6,7].
  const des::StreamTimeline whole = des::run_streams({{comm(1), compute(3), comm(2), compute(1)}}, 0.0);
  CHECK(whole.span_ms == 7);
  CHECK(whole.a2a_exposed_ms == 3);
  // With it: combine [0,1], mlp dgrad [1,2], then the dispatch [2,4] beside the mlp wgrad [2,4];
  // attention [4,5]; the chain no longer waits for the weight gradient.
  const des::StreamTimeline delayed = des::run_streams({{comm(1), compute(1), beside(compute(2)), comm(2), compute(1)}}, 0.0);
  CHECK(delayed.span_ms == 5);
  CHECK(delayed.compute_ms == 4);
  CHECK(delayed.a2a_exposed_ms == 1);
  REQUIRE(delayed.comm.size() == 2);
  CHECK(delayed.comm[1].start_ms == 2);
  // A trailing weight gradient (the chain's last phase) waits for every chain of the step: A's
  // compute [0,1], its all-to-all [1,2] beside B's first compute [1,2], A's [2,2.5] (the chain
  // listed first at the tie), B's [2.5,4.5], then the weight gradient [4.5,6.5]; it would start
  // at 2.5 were it an ordinary phase beside the chain.
  const des::StreamTimeline last =
      des::run_streams({{compute(1), comm(1), compute(0.5), beside(compute(2))}, {compute(1), compute(2)}}, 0.0);
  CHECK(last.span_ms == Approx(6.5));
  CHECK(last.compute_ms == Approx(6.5));
}

TEST_CASE("the all-to-all is priced over the EP group's links by locality", "[moe][streams]") {
  // One MoE layer a stage, one all-to-all of 1 GB each way; intra-node 100 GB/s, inter 10 GB/s.
  GenerateOptions g;
  g.pp = 2;
  g.micro = 4;
  const Schedule s = generate("1f1b", g);
  CostModel c = default_cost_model(2);
  c.links.intra_node = Link{0.0, 100.0};
  c.links.inter_node = Link{0.0, 10.0};
  c.links.ranks_per_node = 8;
  c.moe.ep = 8;
  c.moe.contention = 0;
  MoeStage st;
  st.layers.push_back({{0.5f, 0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f, 0.5f}, 1e9});
  c.moe.stages = {st, st};
  SimOptions o;
  o.check.dp.degree = 8;
  // Mesh pp,dp: pipeline rank r's replicas are global ranks 8r .. 8r+7, one node: 7 peers of
  // 1e9 / 7 bytes each over 100 GB/s = 10 ms an all-to-all.
  o.check.dp.mesh_order = MeshOrder::PpDp;
  const RunRecord inside = simulate(s, c, o);
  // Each rank runs 4 forwards and 4 backwards, each with a dispatch and a combine.
  CHECK(inside.ranks[0].a2a_ms == Approx(16 * 10.0));
  CHECK(inside.ranks[0].a2a_exposed_ms == Approx(16 * 10.0));  // 1F1B overlaps nothing
  // Mesh dp,pp: replicas k of rank 0 are global ranks 2k: 0..14, two nodes of 4; 3 peers at
  // 100 GB/s (30 ms... / 7 per peer) and 4 across at 10 GB/s: the slower, 4/7 GB / 10 GB/s.
  o.check.dp.mesh_order = MeshOrder::DpPp;
  const RunRecord across = simulate(s, c, o);
  CHECK(across.ranks[0].a2a_ms == Approx(16 * 4.0 / 7.0 * 100.0));
  CHECK(across.makespan_ms > inside.makespan_ms);
}

TEST_CASE("DualPipeV hides the all-to-all that 1F1B exposes", "[moe][streams]") {
  CostSource src;
  src.workload = with_ep(hf("qwen3_30b_a3b"), 8, 8);
  src.model_file = "qwen3_30b_a3b.json";
  SimOptions o;
  o.check.dp.degree = 8;
  o.record_trace = true;
  const auto run = [&](const char* family) {
    GenerateOptions g;
    g.pp = 4;
    g.vpp = std::string(family) == "dualpipev" ? 2 : 1;
    g.micro = 16;
    const Schedule s = generate(family, g);
    return simulate(s, costs_for(src, s), o);
  };
  const RunRecord f1b = run("1f1b"), dpv = run("dualpipev");
  REQUIRE(f1b.completed);
  REQUIRE(dpv.completed);
  CHECK(f1b.a2a_ms > 0);
  CHECK(f1b.a2a_exposed_ms == Approx(f1b.a2a_ms));
  CHECK(dpv.a2a_exposed_ms / dpv.a2a_ms < 0.8 * f1b.a2a_exposed_ms / f1b.a2a_ms);
  // The trace has the all-to-alls on the communication stream.
  size_t comm_slices = 0;
  for (const TimedSlice& sl : dpv.slices) comm_slices += sl.lane == Lane::Comm;
  CHECK(comm_slices > 0);
}
