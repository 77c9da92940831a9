// ppsched plan's sweep (sim/search/cluster_plan.hpp): every plan tiles the GPUs and the batch, is
// verified and timed as its schedule runs, the bound-pruned sweep finds what timing every shape
// finds, and MFU counts the model's FLOPs as derived by hand.
#include <catch2/catch.hpp>

#include "sim/engine.hpp"
#include "sim/search/cluster_plan.hpp"
#include "tests/support/model_data.hpp"

using namespace ppsched;
using namespace ppsched::search;
using test_data::hf;

namespace {

PlanRequest gpt2_on_8() {
  PlanRequest rq;
  rq.model = hf("gpt2");
  rq.model.training.seq_lens = {1024};
  rq.model_file = "gpt2.json";
  rq.gpus = 8;
  rq.gpus_per_node = 8;
  rq.global_batch = 32;
  rq.micro_batch_sizes = {1, 4};
  rq.refine = 0;
  rq.seconds = 0;
  rq.top = 3;
  return rq;
}

}  // namespace

TEST_CASE("plan: the bound-pruned sweep finds the best that timing every shape finds, each plan tiles the GPUs and the "
          "batch and runs as timed",
          "[plan]") {
  PlanRequest rq = gpt2_on_8();
  const PlanResult pruned = plan_cluster(rq);
  rq.prune = false;
  const PlanResult all = plan_cluster(rq);
  REQUIRE(!pruned.plans.empty());
  REQUIRE(!all.plans.empty());
  CHECK(all.pruned_by_bound == 0);
  CHECK(pruned.pruned_by_bound > 0);
  CHECK(pruned.timed < all.timed);
  CHECK(pruned.plans.front().shape.text() == all.plans.front().shape.text());
  CHECK(pruned.plans.front().step_ms == all.plans.front().step_ms);
  // GPT-2's 12 heads: TP 8 is refused, TP 1, 2 and 4 are swept.
  CHECK(all.refused.count("TP does not divide the heads") == 1);
  for (size_t i = 0; i < all.plans.size(); ++i) {
    const Plan& p = all.plans[i];
    INFO(p.shape.text() << " " << p.best.name);
    if (i > 0) CHECK(all.plans[i - 1].step_ms <= p.step_ms);
    CHECK(p.shape.tp * p.shape.pp * p.shape.dp == rq.gpus);
    CHECK(p.shape.dp * p.shape.micro_batch_size * p.shape.micro == rq.global_batch);
    CHECK(12 % p.shape.tp == 0);
    CHECK(p.peak_bytes <= p.budget_bytes);
    // The schedule as written runs as timed: verified, the same makespan.
    SimOptions o;
    o.check.dp.degree = p.shape.dp;
    o.check.dp.fsdp = p.shape.sharding == Sharding::Fsdp;
    o.check.dp.distributed_optimizer = p.shape.sharding == Sharding::DistributedOptimizer;
    o.check.memory_budget = p.budget_bytes;
    const RunRecord r = simulate(p.schedule, p.costs, o);
    CHECK(r.completed);
    CHECK(r.check.ok());
    CHECK(r.makespan_ms == Approx(p.step_ms).epsilon(1e-9));
    CHECK(p.tokens_per_s_per_gpu == Approx(32.0 * 1024 / (p.step_ms / 1e3) / 8));
  }
  REQUIRE(all.baseline);
  CHECK(all.baseline->shape.pp == 1);
  CHECK(all.baseline->step_ms >= all.plans.front().step_ms);
  // The trajectory only improves, ending at the best.
  REQUIRE(!all.trajectory.empty());
  for (size_t i = 1; i < all.trajectory.size(); ++i) CHECK(all.trajectory[i].second <= all.trajectory[i - 1].second);
  CHECK(all.trajectory.back().second == all.plans.front().step_ms);
}

TEST_CASE("plan: Megatron-LM plans are its 1F1B or interleaved 1F1B in groups of P with its distributed optimizer; "
          "torchtitan's shard with FSDP",
          "[plan]") {
  PlanRequest rq = gpt2_on_8();
  rq.framework = Framework::Megatron;
  for (const Plan& p : plan_cluster(rq).plans) {
    INFO(p.best.name);
    const int v = p.schedule.stages / p.schedule.ranks;
    CHECK((p.best.name == "1f1b" ||
           p.best.name == "interleaved-1f1b --group-size " + std::to_string(p.shape.pp) + " V=" + std::to_string(v)));
    CHECK((p.shape.dp == 1 || p.shape.sharding == Sharding::DistributedOptimizer));
  }
  rq.framework = Framework::Torchtitan;
  for (const Plan& p : plan_cluster(rq).plans) CHECK((p.shape.dp == 1 || p.shape.sharding == Sharding::Fsdp));
}

TEST_CASE("plan: a memory the weights alone overflow leaves no plan, and says why", "[plan]") {
  PlanRequest rq = gpt2_on_8();
  rq.model.device.memory_bytes = int64_t{5} << 30;  // 1 GiB usable after the 4 GiB reserve
  rq.model.device.memory_reserve_bytes = int64_t{4} << 30;
  rq.micro_batch_sizes = {4};
  rq.sharding = {Sharding::Replicas};
  rq.tp = {1};
  rq.pp = {1};
  // GPT-2 (124M parameters) x 18 bytes = 2.1 GB of weights, gradients and Adam state on one rank.
  CHECK_THROWS_WITH(plan_cluster(rq), Catch::Contains("over the usable memory in weights, gradients and optimizer state"));
}

TEST_CASE("plan: MFU's FLOPs are the model's forward and backward without recomputation, as derived by hand", "[plan]") {
  // Llama-3-8B, s = 8192, per token: forward 2 x (32 layers x 218,103,808 matmul parameters + the
  // head's 4096 x 128,256) plus the causal attention core 2 x 2 x s x h / 2 per layer;
  // backward twice the forward (input and weight gradients; the core's two matmuls twice).
  Workload llama = hf("llama3_8b");
  llama.training.seq_lens = {8192};
  llama.training.recompute = {Recompute::Full};  // MFU leaves the recomputation out
  const double s = 8192, h = 4096;
  const double fwd_per_token = 2 * (32 * 218103808.0 + h * 128256) + 32 * 2 * s * h;
  CHECK(model_flops_per_step(llama, 64) == Approx(3 * fwd_per_token * s * 64).epsilon(1e-6));
}
