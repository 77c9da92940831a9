// Tests of the cost and memory model: the "ppsched-costs" reader, the pricing functions (which
// follow the step table), the embedded default and the template.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "schedule/errors.hpp"
#include "sim/cost_model.hpp"
#include "tests/support/expect_error.hpp"

using namespace ppsched;

namespace {

std::string costs(const std::string& name) {
  const char* d = std::getenv("PPSCHED_TEST_DATA");
  REQUIRE(d != nullptr);
  return std::string(d) + "/costs/" + name;
}

using testing::expect_error;

// Two models are equal when they write the same complete file (the source aside).
std::string canonical(CostModel m) {
  m.source = "";
  return write_cost_model(m);
}

constexpr double kMiB = 1024.0 * 1024;
constexpr double kGiB = 1024.0 * kMiB;

}  // namespace

TEST_CASE("the smallest valid cost file is accepted as is and means what it says") {
  const std::string text = R"({"format": "ppsched-costs", "version": 1,
   "compute": {"FWD": 1.0, "BWD": 2.0, "BWD_INPUT": 1.0, "BWD_WEIGHT": 1.0},
   "link": {"latency_ms": 0.0, "bandwidth_GBps": null}})";
  const CostModel inline_model = read_cost_model(text, "inline.json");
  const CostModel m = read_cost_file(costs("minimal.json"));
  CHECK(canonical(m) == canonical(inline_model));
  CHECK(m.source == costs("minimal.json"));
  for (int stage : {0, 3, 17})
    for (int micro : {0, 5}) {
      CHECK(m.compute_ms(Op::FWD, stage, micro) == 1.0);
      CHECK(m.compute_ms(Op::BWD, stage, micro) == 2.0);
      CHECK(m.compute_ms(Op::BWD_INPUT, stage, micro) == 1.0);
      CHECK(m.compute_ms(Op::BWD_WEIGHT, stage, micro) == 1.0);
      CHECK(m.compute_ms(Op::DATA_LOAD, stage, micro) == 0.0);
      CHECK(m.compute_ms(Op::MPIPE_TRANSPOSE_FWD, stage, micro) == 0.0);
    }
  for (auto [src, dst] : {std::pair{0, 1}, {0, 9}, {15, 3}}) {
    const Link& l = m.link(src, dst);
    CHECK(l.latency_ms == 0.0);
    CHECK_FALSE(l.bandwidth_GBps.has_value());
    CHECK(l.transfer_ms(1e12) == 0.0);
  }
  CHECK(m.payload_bytes(Op::FWD_SEND, 0, 0) == 0.0);
  CHECK(m.meta_bytes == 64);
  CHECK(m.stage_count() == 1);
  CHECK(m.overlap_efficiency == 0);  // two computes on one device take turns unless measured
  CHECK(m.protocol.eager_threshold_bytes == 4.0 * kMiB);
  CHECK_FALSE(m.protocol.compute_blocks_host);  // GPUs: the host launches compute and goes on
  CHECK(m.protocol.background_progress);        // GPUs: a posted transfer moves on its own
  CHECK_FALSE(m.protocol.send_handoff_ms.has_value());  // NCCL: a send completes when its payload arrived
  CHECK(m.protocol.deferred_start_ms == 0);
  CHECK_FALSE(m.capacity_bytes.has_value());
  CHECK(m.collectives == CollectiveAlgorithm::Ring);
}

TEST_CASE("a scalar applies to every stage, an array gives one per stage, a nested array one per micro") {
  const CostModel m = read_cost_file(costs("per_stage.json"));
  CHECK(m.stage_count() == 4);
  // FWD: [1.0, [1.0, 2.0, 1.5], 1.0, 1.5]
  CHECK(m.compute_ms(Op::FWD, 0, 2) == 1.0);
  CHECK(m.compute_ms(Op::FWD, 1, 0) == 1.0);
  CHECK(m.compute_ms(Op::FWD, 1, 1) == 2.0);
  CHECK(m.compute_ms(Op::FWD, 1, 2) == 1.5);
  CHECK(m.compute_ms(Op::FWD, 3, 7) == 1.5);
  // BWD_WEIGHT is a scalar; BWD is derived per stage and micro as BWD_INPUT + BWD_WEIGHT.
  CHECK(m.compute_ms(Op::BWD_WEIGHT, 2, 1) == 1.0);
  CHECK(m.compute_ms(Op::BWD, 1, 1) == 3.0);
  CHECK(m.compute_ms(Op::BWD, 1, 2) == 2.5);
  CHECK(m.compute_ms(Op::BWD, 3, 0) == 2.5);
  CHECK(m.compute_ms(Op::DATA_LOAD, 2, 0) == Approx(0.1));
  // A message is priced by the boundary it crosses, alike at both ends.
  CHECK(m.payload_bytes(Op::FWD_SEND, 2, 0) == 2 * kMiB);
  CHECK(m.payload_bytes(Op::FWD_RECV, 3, 0) == 2 * kMiB);
  CHECK(m.payload_bytes(Op::FWD_RECV, 2, 0) == 1 * kMiB);
  // The gradient defaults to the activation it is the gradient of.
  CHECK(m.payload_bytes(Op::BWD_SEND, 3, 0) == 2 * kMiB);
  CHECK(m.payload_bytes(Op::BWD_RECV, 2, 0) == 2 * kMiB);
  CHECK(m.payload_bytes(Op::DATA_SEND, 0, 0) == 4096);
  CHECK(m.capacity_bytes == Approx(kGiB));
  // The memory model counts the largest micro of a per-micro row.
  const MemoryModel mem = m.memory_model(4);
  CHECK(mem.activation_bytes == std::vector<int64_t>{300, 400, 500, 600});
  CHECK(mem.boundary_bytes == std::vector<int64_t>{1 << 20, 1 << 20, 2 << 20, 1 << 20});
  CHECK(mem.data_bytes == 4096);
  CHECK(mem.bytes_of(Cache::fwd_cache, 2) == 500);
  CHECK(mem.bytes_of(Cache::fwd_recv_buffer, 2) == 2 << 20);
}

TEST_CASE("a model whose arrays fit the schedule passes check_fits; one that does not names the field") {
  const CostModel m = read_cost_file(costs("per_stage.json"));
  CHECK_NOTHROW(m.check_fits(4, 3));
  CHECK_NOTHROW(m.check_fits(4, 0));
  const InputError stages = expect_error([&] { m.check_fits(5, 3); });
  CHECK(stages.where().field == "compute.FWD");
  CHECK(stages.where().file == costs("per_stage.json"));
  CHECK_THAT(stages.message(), Catch::Contains("4 per-stage values for 5 stages"));
  const InputError micros = expect_error([&] { m.check_fits(4, 8); });
  CHECK(micros.where().field == "compute.FWD[1]");
  CHECK_NOTHROW(read_cost_file(costs("minimal.json")).check_fits(64, 1000));
  CHECK_NOTHROW(default_cost_model(7).check_fits(7, 12));
}

TEST_CASE("BWD, BWD_INPUT and BWD_WEIGHT are derived from each other by the documented rules") {
  SECTION("missing BWD_INPUT and BWD_WEIGHT are half of BWD each") {
    const CostModel m = read_cost_file(costs("halves.json"));
    CHECK(m.compute_ms(Op::BWD_INPUT, 0, 0) == 2.0);
    CHECK(m.compute_ms(Op::BWD_WEIGHT, 0, 0) == 2.0);
    CHECK(m.compute_ms(Op::BWD_INPUT, 1, 0) == 3.0);
    CHECK(m.compute_ms(Op::BWD_WEIGHT, 1, 4) == 3.0);
  }
  SECTION("missing BWD is BWD_INPUT + BWD_WEIGHT") {
    const CostModel m = read_cost_model(
        R"({"format": "ppsched-costs", "version": 1, "compute": {"FWD": 1, "BWD_INPUT": [1, 2], "BWD_WEIGHT": 0.5}})", "");
    CHECK(m.compute_ms(Op::BWD, 0, 0) == 1.5);
    CHECK(m.compute_ms(Op::BWD, 1, 0) == 2.5);
  }
  SECTION("one half given: the other is what remains of BWD") {
    const CostModel m = read_cost_file(costs("one_half.json"));
    CHECK(m.compute_ms(Op::BWD_INPUT, 0, 0) == 1.25);
    CHECK(m.compute_ms(Op::BWD_WEIGHT, 0, 0) == 1.75);
  }
  SECTION("no backward time at all: every backward costs 0") {
    const CostModel m = read_cost_model(R"({"format": "ppsched-costs", "version": 1, "compute": {"FWD": 1}})", "");
    CHECK(m.compute_ms(Op::BWD, 0, 0) == 0.0);
    CHECK(m.compute_ms(Op::BWD_WEIGHT, 2, 0) == 0.0);
  }
  SECTION("one half without BWD is an error at BWD") {
    const InputError e = expect_error([] {
      read_cost_model(R"({"format": "ppsched-costs", "version": 1, "compute": {"FWD": 1, "BWD_INPUT": 1}})", "x.json");
    });
    CHECK(e.where().field == "compute.BWD");
    CHECK_THAT(e.message(), Catch::Contains("both BWD_INPUT and BWD_WEIGHT"));
  }
}

TEST_CASE("compute_ms follows the step table's ComputeKind for every op") {
  // Distinct per-stage values for every key, so that a wrong kind or a wrong stage shows.
  std::string compute;
  int next = 1;
  for (const auto& k : compute_keys()) {
    compute += (compute.empty() ? "" : ", ") + ("\"" + std::string(k.key) + "\": [") + std::to_string(next) + ", " +
               std::to_string(next + 100) + "]";
    ++next;
  }
  const CostModel m = read_cost_model(
      R"({"format": "ppsched-costs", "version": 1, "compute": {)" + compute + "}}", "every_kind.json");
  int priced = 0;
  for (const auto& row : step_table()) {
    if (row.kind == StepKind::Composite) continue;
    const double expected = row.compute == ComputeKind::None ? 0.0 : m.compute(row.compute).at(1, 0);
    INFO(row.name);
    CHECK(m.compute_ms(row.op, 1, 0) == expected);
    if (row.compute != ComputeKind::None) {
      CHECK(expected > 100);
      ++priced;
    }
  }
  CHECK(priced >= 10);  // the body four, the tower three, data load, FSDP and swap steps
  CHECK(m.compute_ms(Op::MPIPE_GRAD_RECV_WITH_BACKWARD, 0, 0) == m.tower_grad_bwd.at(0, 0));
  CHECK(m.compute_ms(Op::FWD_SEND, 0, 0) == 0.0);
}

TEST_CASE("payload_bytes follows the step table's Payload, and collectives their scope") {
  CostModel m;
  m.activation_bytes = StageValue::scalar(1);
  m.gradient_bytes = StageValue::scalar(2);
  m.data_bytes = 3;
  m.features_bytes = 4;
  m.tower_input_bytes = 5;
  m.feature_grad_bytes = 6;
  m.tower_param_bytes = 7;
  m.tied_param_bytes = 8;
  const auto by_payload = [&](Payload p) {
    switch (p) {
      case Payload::Activation: return 1.0;
      case Payload::Gradient: return 2.0;
      case Payload::Data: return 3.0;
      case Payload::Features: return 4.0;
      case Payload::TowerInputs: return 5.0;
      case Payload::FeatureGrads: return 6.0;
      case Payload::None: return 0.0;
    }
    return -1.0;
  };
  for (const auto& row : step_table()) {
    INFO(row.name);
    if (is_p2p(row.op)) CHECK(m.payload_bytes(row.op, 1, 0) == by_payload(row.payload));
  }
  CHECK(m.payload_bytes(Op::MPIPE_PARAM_BROADCAST, -1, -1) == 7);
  CHECK(m.payload_bytes(Op::MPIPE_GRAD_REDUCE, -1, -1) == 7);
  CHECK(m.payload_bytes(Op::ALL_REDUCE, -1, -1) == 8);
  CHECK(m.payload_bytes(Op::FSDP_UNSHARD, 0, -1) == 0);  // no bytes.params given
  m.param_bytes = StageValue{{{9}, {10}}, true};
  CHECK(m.payload_bytes(Op::FSDP_UNSHARD, 1, -1) == 10);  // a DP collective moves its stage's parameters
  CHECK(m.payload_bytes(Op::FSDP_REDUCE_GRAD, 0, -1) == 9);
  CHECK(m.payload_bytes(Op::FWD, 0, 0) == 0);
}

TEST_CASE("links: intra- or inter-node by ranks_per_node, per-pair overrides in either direction") {
  const CostModel m = read_cost_file(costs("links.json"));
  CHECK(m.links.ranks_per_node == 4);
  const Link& intra = m.link(0, 3);
  CHECK(intra.latency_ms == 0.005);
  CHECK(*intra.bandwidth_GBps == 400);
  CHECK(&m.link(4, 7) == &m.links.intra_node);
  CHECK(&m.link(3, 4) == &m.links.inter_node);
  CHECK(*m.link(3, 4).bandwidth_GBps == 25);
  // 1 <-> 2: bandwidth overridden, latency from the intra-node link it replaces
  for (auto [a, b] : {std::pair{1, 2}, {2, 1}}) {
    CHECK(*m.link(a, b).bandwidth_GBps == 10);
    CHECK(m.link(a, b).latency_ms == 0.005);
  }
  // 0 -> 5 and 5 -> 0 listed separately: each direction its own
  CHECK(m.link(0, 5).latency_ms == 1);
  CHECK(*m.link(0, 5).bandwidth_GBps == 25);
  CHECK(m.link(5, 0).latency_ms == 2);
  CHECK_FALSE(m.link(5, 0).bandwidth_GBps.has_value());
  // latency + bytes / bandwidth
  CHECK(m.link(1, 2).transfer_ms(1e9) == Approx(0.005 + 100.0));
  CHECK(m.link(3, 4).transfer_ms(1e9) == Approx(0.02 + 40.0));
  CHECK(m.collectives == CollectiveAlgorithm::Tree);
  CHECK(m.protocol.eager_threshold_bytes == 65536);
  CHECK(m.protocol.compute_blocks_host);
  CHECK_FALSE(m.protocol.background_progress);
  REQUIRE(m.protocol.send_handoff_ms.has_value());
  CHECK(*m.protocol.send_handoff_ms == 0.125);
  CHECK(m.protocol.deferred_start_ms == 0.5);
  CHECK(m.overlap_efficiency == 0.75);
}

TEST_CASE("comment and x- keys are ignored everywhere") {
  const CostModel m = read_cost_model(R"({
    "comment": "top", "x-owner": {"anything": [1, 2]},
    "format": "ppsched-costs", "version": 1,
    "compute": {"comment": ["a", "b"], "FWD": 1, "x-BWD": "ignored"},
    "bytes": {"comment": 1, "activation": 10},
    "link": {"comment": null, "intra_node": {"comment": "", "latency_ms": 1}, "inter_node": {"x-y": 1},
             "pairs": [{"comment": "slow", "src": 0, "dst": 1, "latency_ms": 3}]},
    "collectives": {"comment": "", "algorithm": "ring"},
    "protocol": {"comment": ""},
    "memory": {"comment": "", "capacity_bytes": 100}
  })", "annotated.json");
  CHECK(m.compute_ms(Op::FWD, 0, 0) == 1);
  CHECK(m.compute_ms(Op::BWD, 0, 0) == 0);
  CHECK(m.payload_bytes(Op::FWD_SEND, 0, 0) == 10);
  CHECK(m.link(0, 1).latency_ms == 3);
  CHECK(m.link(0, 2).latency_ms == 1);
  CHECK(m.link(0, 8).latency_ms == 0);
}

TEST_CASE("the template is a valid cost file equal to the default it describes") {
  const CostModel from_template = read_cost_model(cost_template(), "template.json");
  CHECK(canonical(from_template) == canonical(default_cost_model(kDefaultCostStages)));
  CHECK(canonical(default_cost_model()) == canonical(default_cost_model(kDefaultCostStages)));
  CHECK(canonical(default_cost_model(0)) == canonical(default_cost_model(kDefaultCostStages)));
  CHECK_THAT(cost_template(), Catch::Contains("\"comment\""));
  for (int stages : {1, 3, 8, 32}) {
    INFO(stages);
    CHECK(canonical(read_cost_model(cost_template(stages), "t.json")) == canonical(default_cost_model(stages)));
  }
}

TEST_CASE("a written model reads back to the same model") {
  for (const char* name : {"minimal.json", "per_stage.json", "links.json", "halves.json", "data_parallel.json"}) {
    INFO(name);
    const CostModel m = read_cost_file(costs(name));
    const CostModel back = read_cost_model(write_cost_model(m), "written.json");
    CHECK(canonical(back) == canonical(m));
  }
}

TEST_CASE("bad cost files are reported with the file, the JSON path and what was expected") {
  struct Case {
    const char* file;
    const char* field;  // "" when located by line instead
    const char* says;
  };
  const Case cases[] = {
      {"bad_unknown_key.json", "compute.BWDD", "expected one of FWD, BWD, BWD_INPUT"},
      {"bad_negative_time.json", "compute.FWD[3]", "a time in ms >= 0, got -1"},
      {"bad_wrong_type.json", "compute.BWD", "got a string"},
      {"bad_bandwidth_zero.json", "link.inter_node.bandwidth_GBps", "> 0, or null for infinite, got 0"},
      {"bad_overlap.json", "overlap_efficiency", "between 0 and 1, got 1.5"},
      {"bad_missing_fwd.json", "compute.FWD", "missing FWD"},
      {"bad_negative_bytes.json", "bytes.activation[1]", "whole number of bytes >= 0, got -5"},
      {"bad_format.json", "format", "expected \"ppsched-costs\""},
      {"bad_version.json", "version", "unsupported version 2"},
      {"bad_stage_lengths.json", "compute.BWD", "3 per-stage values but compute.FWD has 4"},
      {"bad_micro_lengths.json", "compute.FWD[1]", "3 per-micro values but compute.FWD[0] has 2"},
      {"bad_pair_same_rank.json", "link.pairs[0]", "a pair needs two ranks"},
      {"bad_duplicate_key.json", "compute.FWD", "duplicate key 'FWD'"},
      {"bad_fractional_bytes.json", "bytes.data", "whole number of bytes"},
      {"bad_link_mixed.json", "link", "not both"},
      {"bad_bwd_input_exceeds.json", "compute.BWD_INPUT", "3 ms exceeds BWD (2 ms)"},
      {"bad_algorithm.json", "collectives.algorithm", "\"ring\" or \"tree\", got \"butterfly\""},
      {"bad_blocks_host.json", "protocol.compute_blocks_host", "expected true or false, got a string"},
      {"bad_background_progress.json", "protocol.background_progress", "expected true or false, got a number"},
      {"bad_send_handoff.json", "protocol.send_handoff_ms", "a time in ms >= 0, got -0.5"},
      {"bad_deferred_start.json", "protocol.deferred_start_ms", "a time in ms >= 0"},
      {"bad_ranks_per_node.json", "link.ranks_per_node", "ranks >= 1, got 0"},
      {"bad_nested_too_deep.json", "compute.FWD[0][0]", "got an array"},
      {"bad_unknown_link_key.json", "link.intra_node.bandwidth_Gbps", "expected one of latency_ms, bandwidth_GBps"},
      {"bad_missing_compute.json", "compute", "missing key 'compute'"},
      {"bad_params_per_micro.json", "bytes.params[1]", "parameters do not vary by micro-batch, got 2 per-micro values"},
  };
  for (const auto& c : cases) {
    INFO(c.file);
    const InputError e = expect_error([&] { read_cost_file(costs(c.file)); });
    CHECK(e.where().file == costs(c.file));
    CHECK(e.where().field == c.field);
    CHECK_THAT(e.message(), Catch::Contains(c.says));
    CHECK_THAT(std::string(e.what()), Catch::Contains(c.field));
  }
  SECTION("malformed JSON gives line and column") {
    const InputError e = expect_error([] { read_cost_file(costs("bad_malformed.json")); });
    CHECK(e.where().line == 2);
    CHECK_THAT(e.message(), Catch::StartsWith("malformed JSON at column 29"));
  }
  SECTION("a missing file names the file") {
    const InputError e = expect_error([] { read_cost_file(costs("no_such_file.json")); });
    CHECK(e.where().file == costs("no_such_file.json"));
  }
  SECTION("not an object at the top level") {
    const InputError e = expect_error([] { read_cost_model("[1, 2]", "list.json"); });
    CHECK_THAT(e.message(), Catch::Contains("got an array"));
  }
}

TEST_CASE("the default costs of many stages hold a row only where stages differ") {
  // 2^20 stages: every stage but the last is the same, so the compute and memory figures stay
  // one number and only the messages (none past the last stage) get a row per stage.
  const int p = 1 << 20;
  const CostModel m = default_cost_model(p);
  CHECK(m.fwd.rows.size() == 1);
  CHECK(m.kept_activation_bytes.rows.size() == 1);
  CHECK(m.param_bytes.rows.size() == 1);
  REQUIRE(m.activation_bytes.rows.size() == static_cast<size_t>(p));
  CHECK(m.activation_bytes.at(p - 1, 0) == 0);
  CHECK(m.payload_bytes(Op::FWD_SEND, p - 2, 0) == 4096.0 * 4096 * 2);
  CHECK(m.payload_bytes(Op::BWD_SEND, p - 1, 0) == 4096.0 * 4096 * 2);  // crosses boundary p-2
  // The same figures a plan of every stage gives (3 stages: two alike, then the last).
  const CostModel three = default_cost_model(3);
  CHECK(three.activation_bytes.rows == std::vector<std::vector<double>>{{4096.0 * 4096 * 2}, {4096.0 * 4096 * 2}, {0}});
  CHECK(three.fwd.rows.size() == 1);
}

TEST_CASE("the default models a 7B-class transformer on H100-class GPUs with sane numbers") {
  const CostModel m = default_cost_model(4);  // 8 of the 32 layers per stage
  // (24 s h^2 + 4 s^2 h) FLOPs per layer at 989 TFLOP/s x 45% MFU = 4.323 ms; 8 layers = 34.6 ms.
  const double fwd = m.compute_ms(Op::FWD, 0, 0);
  CHECK(fwd > 30.0);
  CHECK(fwd < 40.0);
  CHECK(fwd == Approx(34.587).margin(0.001));
  CHECK(m.compute_ms(Op::BWD, 3, 0) == Approx(2 * fwd));
  CHECK(m.compute_ms(Op::BWD_INPUT, 1, 0) == fwd);
  CHECK(m.compute_ms(Op::BWD_WEIGHT, 2, 0) == fwd);
  // the per-stage time scales with the layers a stage holds
  CHECK(default_cost_model(8).compute_ms(Op::FWD, 0, 0) == Approx(fwd / 2).margin(0.001));
  CHECK(default_cost_model(32).compute_ms(Op::FWD, 0, 0) == Approx(4.323).margin(0.001));
  CHECK(default_cost_model(1).compute_ms(Op::FWD, 0, 0) == Approx(4 * fwd).margin(0.004));
  // one boundary message: seq x hidden x 2 bytes (bf16)
  CHECK(m.payload_bytes(Op::FWD_SEND, 0, 0) == 4096.0 * 4096 * 2);
  CHECK(m.payload_bytes(Op::BWD_RECV, 0, 0) == 4096.0 * 4096 * 2);
  // kept activations: 34 s h bytes per layer (Korthikanti et al. 2022 without stored attention scores), 8 layers
  CHECK(m.kept_activation_bytes.at(0, 0) == 8 * 4096.0 * 4096 * 34);  // FlashAttention: no stored scores
  CHECK(m.memory_model(4).activation(3) == static_cast<int64_t>(8 * 4096.0 * 4096 * 34));
  CHECK(m.memory_model(4).boundary(1) == 4096 * 4096 * 2);
  CHECK(*m.capacity_bytes == 81559 * kMiB - 4 * kGiB);  // an H100 80 GB (NVML: 81,559 MiB) less the reserve
  // NVLink inside a node of 8, InfiniBand between nodes
  CHECK(m.links.ranks_per_node == 8);
  CHECK(&m.link(0, 7) == &m.links.intra_node);
  CHECK(&m.link(7, 8) == &m.links.inter_node);
  CHECK(*m.links.intra_node.bandwidth_GBps == 450);
  CHECK(m.links.intra_node.latency_ms == 0.005);
  CHECK(*m.links.inter_node.bandwidth_GBps == 50);
  CHECK(m.links.inter_node.latency_ms == 0.010);
  // a 32 MiB activation: ~0.08 ms over NVLink, ~0.68 ms over InfiniBand, both far below a FWD
  CHECK(m.link(0, 1).transfer_ms(m.payload_bytes(Op::FWD_SEND, 0, 0)) == Approx(0.0796).margin(0.001));
  CHECK(m.link(7, 8).transfer_ms(m.payload_bytes(Op::FWD_SEND, 0, 0)) == Approx(0.681).margin(0.001));
  CHECK(m.protocol.eager_threshold_bytes == 4.0 * kMiB);
  CHECK_NOTHROW(m.check_fits(4, 16));
}

TEST_CASE("bytes.params gives each stage's parameter bytes, which the FSDP_* collectives move", "[dp]") {
  const CostModel m = read_cost_file(costs("data_parallel.json"));
  CHECK(m.param_bytes.given);
  CHECK(m.payload_bytes(Op::FSDP_UNSHARD, 0, -1) == 1e9);
  CHECK(m.payload_bytes(Op::FSDP_REDUCE_GRAD, 3, -1) == 1.25e9);
  CHECK(m.stage_count() == 4);
  CHECK_NOTHROW(m.check_fits(4, 8));
  const InputError e = expect_error([&] { m.check_fits(3, 8); });
  CHECK(e.where().field == "bytes.params");
  // compute.FSDP keeps its meaning: the fixed time of every FSDP_* step.
  CHECK(m.compute_ms(Op::FSDP_RESHARD, 1, -1) == 0.02);
  // A file without the key moves no parameter bytes (and older files read as before).
  const CostModel minimal = read_cost_file(costs("minimal.json"));
  CHECK_FALSE(minimal.param_bytes.given);
  CHECK(minimal.payload_bytes(Op::FSDP_REDUCE_GRAD, 0, -1) == 0);
  // The reader's byte rules hold: whole, >= 0, at most 1 TiB.
  for (const char* bad : {"-1", "1.5", "2e12"}) {
    INFO(bad);
    const InputError b = expect_error([&] {
      read_cost_model(std::string(R"({"format": "ppsched-costs", "version": 1, "compute": {"FWD": 1},
                                      "bytes": {"params": )") + bad + "}}",
                      "p.json");
    });
    CHECK(b.where().field == "bytes.params");
  }
}

TEST_CASE("the default's stage parameters are its layers' 12 h^2 bf16 weights", "[dp]") {
  // 8 of 32 layers x 12 x 4096^2 x 2 bytes = 3 GiB on 4 stages; 32 layers (12 GiB) on one.
  CHECK(default_cost_model(4).param_bytes.at(0, 0) == 8 * 12 * 4096.0 * 4096 * 2);
  CHECK(default_cost_model(4).param_bytes.at(0, 0) == 3 * kGiB);
  CHECK(default_cost_model(1).param_bytes.at(0, 0) == 12 * kGiB);
  CHECK(default_cost_model(8).payload_bytes(Op::FSDP_UNSHARD, 7, -1) == 1.5 * kGiB);
  CHECK(default_cost_model(4).compute_ms(Op::FSDP_REDUCE_GRAD, 0, -1) == 0);
}

TEST_CASE("the embedded default holds plans to an H100's usable memory and runs two computes one after the other") {
  // An H100 SXM 80 GB reports 81,559 MiB (NVML); less the 4 GiB reserve: 77,463 MiB.
  const CostModel m = default_cost_model(4);
  REQUIRE(m.capacity_bytes.has_value());
  CHECK(*m.capacity_bytes == 77463.0 * kMiB);
  CHECK_THAT(m.capacity_basis, Catch::Contains("79.65 GiB device less a 4.00 GiB reserve"));
  CHECK(m.overlap_efficiency == 0);
  CHECK(m.memory_margin == 0.05);
  CHECK(within_margin(0.96 * 77463.0 * kMiB, *m.capacity_bytes, m.memory_margin));
  CHECK_FALSE(within_margin(0.94 * 77463.0 * kMiB, *m.capacity_bytes, m.memory_margin));
  CHECK_FALSE(within_margin(1.01 * 77463.0 * kMiB, *m.capacity_bytes, m.memory_margin));  // over it: not tight, over
}

// sim/fsdp2_timing.hpp on two units small enough to follow by hand. Unit A (3 B gathered, 5 B
// of gradients) is resharded after its forward; unit B (1 B, 2 B) is kept gathered, as
// torchtitan's norm + head. A collective of b bytes takes b ms. Layers: A's (forward 1, input 1,
// weight 1), then B's (2, 2, 2).
TEST_CASE("FSDP2's per-unit collectives beside the compute, derived by hand", "[fsdp]") {
  const std::vector<FsdpUnit> units = {{3, false, 5}, {1, true, 2}};
  const std::vector<FsdpLayerTime> layers = {{0, 1, 1, 1}, {1, 2, 2, 2}};
  const auto ms = [](int64_t b) { return static_cast<double>(b); };
  // Forward, 3 ms of compute: gather(A) 0-3; A runs 3-4 while gather(B) runs 3-4; B 4-6.
  const Fsdp2Pass f = fsdp2_forward(units, layers, 3, ms);
  CHECK(f.span_ms == 6);
  CHECK(f.exposed_ms() == 3);
  CHECK(f.collectives == 2);
  CHECK(f.collective_ms == 4);
  // Whole backward, 6 ms (A 2, B 4): B is still gathered and runs 0-4 while gather(A) runs 0-3;
  // reduce-scatter(B) 4-6; A runs 4-6; reduce-scatter(A) 6-11.
  const Fsdp2Pass b = fsdp2_backward(units, layers, 6, Fsdp2BackwardPart::Whole, ms, ms);
  CHECK(b.span_ms == 11);
  CHECK(b.exposed_ms() == 5);
  CHECK(b.collectives == 3);
  CHECK(b.collective_ms == 10);
  // Its input half, 3 ms (A 1, B 2), gathers only: B 0-2, gather(A) 0-3, A 3-4.
  const Fsdp2Pass in = fsdp2_backward(units, layers, 3, Fsdp2BackwardPart::Input, ms, ms);
  CHECK(in.span_ms == 4);
  CHECK(in.collectives == 1);
  // Its weight half, 3 ms, reduce-scatters only: B 0-2, reduce-scatter(B) 2-4, A 2-3,
  // reduce-scatter(A) 4-9.
  const Fsdp2Pass w = fsdp2_backward(units, layers, 3, Fsdp2BackwardPart::Weight, ms, ms);
  CHECK(w.span_ms == 9);
  CHECK(w.exposed_ms() == 6);
  CHECK(w.collectives == 2);
  // Free collectives hide nothing and add nothing.
  const auto none = [](int64_t) { return 0.0; };
  CHECK(fsdp2_forward(units, layers, 3, none).exposed_ms() == 0);
  CHECK(fsdp2_backward(units, layers, 6, Fsdp2BackwardPart::Whole, none, none).exposed_ms() == 0);
}
