// Unit tests of the executor's single-process parts: how a model is cut, the model/schedule
// agreement, and the cache store with its audit against the step table.
// The multi-process behaviour (parity, faults, refusals) is in exec_cases.py; the launchers'
// variables in test_launch_env.cpp.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "exec/agreement.hpp"
#include "exec/caches.hpp"
#include "lowering/comm_model.hpp"
#include "exec/launch_env.hpp"
#include "exec/measured_trace.hpp"
#include "exec/model_description.hpp"
#include "exec/model_layout.hpp"
#include "exec/moe_streams.hpp"
#include "checkers/checks.hpp"
#include "exec/stage_manifest.hpp"
#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"
#include "workload/layout.hpp"
#include "workload/model_file.hpp"
#include "tests/support/trace_validator.hpp"
#include "traces/chrome_trace.hpp"

// After the exec headers: c10's logging header (through ATen) defines and undefines CHECK.
#undef CHECK
#include <catch2/catch.hpp>

using namespace ppsched;
using namespace ppsched::exec;

namespace {

bool mentions(const std::vector<std::string>& errors, const std::string& needle) {
  for (const auto& e : errors)
    if (e.find(needle) != std::string::npos) return true;
  return false;
}

Schedule generated(const std::string& family, int pp, int vpp, int micro, Tower tower = Tower::Trainable) {
  GenerateOptions o;
  o.pp = pp;
  o.vpp = vpp;
  o.micro = micro;
  o.tower = tower;
  return generate(family, o);
}

bool every_handler(Op) { return true; }

}  // namespace

TEST_CASE("gpt blocks are split by torchtitan's rule, as the planner splits them, and the tower is the first T units of stage 0",
          "[exec]") {
  ModelConfig m;
  m.kind = ModelKind::Gpt;
  m.layers = 6;
  ModelLayout l = make_layout(m, 4, 0);
  // units: 0 embedding, 1..6 blocks, 7 head. torchtitan's generate_llm_fqn_per_model_part(4, 6)
  // with its input and output weights 1: 8 effective layers, 2 per stage, the embedding and the
  // head taking one each of the first and the last stage's: blocks 1,2,2,1 (was 2,2,1,1 here,
  // against 1,2,2,1 in the simulator and calibrate).
  CHECK(l.stage_units[0] == std::vector<int>{0, 1});
  CHECK(l.stage_units[1] == std::vector<int>{2, 3});
  CHECK(l.stage_units[2] == std::vector<int>{4, 5});
  CHECK(l.stage_units[3] == std::vector<int>{6, 7});
  ModelLayout t = make_layout(m, 4, 1);
  CHECK(t.tower_units == std::vector<int>{0});
  CHECK(t.stage_units[0] == std::vector<int>{1});
  CHECK_THROWS_WITH(make_layout(m, 4, 2), Catch::Contains("stage 0 must keep at least one"));
  CHECK_THROWS_WITH(make_layout(m, 7, 0), Catch::Contains("cannot be split over 7"));
  // 7 blocks on 4 stages: 9 effective, 3,2,2,2: blocks 2,2,2,1.
  m.layers = 7;
  l = make_layout(m, 4, 0);
  CHECK(l.stage_units[0] == std::vector<int>{0, 1, 2});
  CHECK(l.stage_units[3] == std::vector<int>{7, 8});
}

TEST_CASE("the executor's split is the planner's: every built-in model and stage count gets network's even layout",
          "[exec]") {
  for (ModelKind kind : {ModelKind::Gpt, ModelKind::Mlp})
    for (int stages = 1; stages <= 9; ++stages)
      for (int blocks = stages; blocks <= stages + 11; ++blocks) {
        ModelConfig m;
        m.kind = kind;
        m.layers = blocks;
        const Layout want = even_layout(builtin_layers(m, blocks), stages);
        bool runnable = true;
        for (const auto& st : want.stages) runnable = runnable && !st.empty();
        if (!runnable) continue;
        const ModelLayout got = make_layout(m, stages, 0);
        REQUIRE(got.stage_units.size() == want.stages.size());
        for (size_t s = 0; s < want.stages.size(); ++s)
          CHECK(got.stage_units[s] == std::vector<int>(want.stages[s].begin(), want.stages[s].end()));
      }
}

TEST_CASE("the built-in model is a model description: --model-out's file reads back as the network the executor lays out",
          "[exec]") {
  for (ModelKind kind : {ModelKind::Gpt, ModelKind::Mlp}) {
    ModelConfig m;
    m.kind = kind;
    m.hidden = 64;
    m.seq = 16;
    m.vocab = 128;
    const Workload net = builtin_workload(m, 5);
    const Workload back = read_model(describe_model(m, 5), "model.json");
    CHECK(back.name == net.name);
    CHECK(back.training.precision == Precision::Fp32);
    CHECK(back.training.optimizer == Optimizer::Sgd);
    CHECK(back.device.mfu == net.device.mfu);
    const std::vector<Layer> a = net.layers(), b = back.layers();
    REQUIRE(a.size() == b.size());
    REQUIRE(a.size() == (kind == ModelKind::Gpt ? 7u : 5u));
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].name == b[i].name);
      CHECK(a[i].kind == b[i].kind);
      CHECK(a[i].params == b[i].params);
      CHECK(a[i].fwd_flops == b[i].fwd_flops);
      CHECK(a[i].bwd_input_flops == b[i].bwd_input_flops);
      CHECK(a[i].bwd_weight_flops == b[i].bwd_weight_flops);
      CHECK(a[i].activation_bytes == b[i].activation_bytes);
      // What a model file's reader gives a layer without the key: half the kept activation.
      CHECK(a[i].weight_grad_bytes == a[i].activation_bytes / 2);
      CHECK(a[i].weight_grad_bytes == b[i].weight_grad_bytes);
      CHECK(a[i].output_bytes == b[i].output_bytes);
    }
    // Laid out by the same function the planner uses.
    m.layers = 5;
    const Layout planned = workload_layout(back, b, 3, "", "--layout");
    const ModelLayout got = make_layout(m, 3, 0);
    REQUIRE(got.stage_units.size() == planned.stages.size());
    for (size_t s = 0; s < planned.stages.size(); ++s)
      CHECK(got.stage_units[s] == std::vector<int>(planned.stages[s].begin(), planned.stages[s].end()));
  }
}

TEST_CASE("--layout puts the given blocks on each stage, and is refused when it does not fit the model or the schedule",
          "[exec]") {
  ModelConfig m;
  m.kind = ModelKind::Gpt;
  m.layers = 8;
  m.layout = "3,5";
  ModelLayout l = make_layout(m, 2, 0);
  CHECK(l.stage_units[0] == std::vector<int>{0, 1, 2, 3});        // embedding + blocks 0..2
  CHECK(l.stage_units[1] == std::vector<int>{4, 5, 6, 7, 8, 9});  // blocks 3..7 + head
  // Megatron's spelling, as ppsched simulate --layout reads it: the same split.
  m.layout = "Et*3|t*5L";
  CHECK(make_layout(m, 2, 0).stage_units == l.stage_units);
  m.layers = 0;  // the layout's blocks are the model's
  CHECK(make_layout(m, 2, 0).units == 10);
  m.layout = "3,5";
  CHECK(make_layout(m, 2, 0).units == 10);
  m.layers = 9;
  CHECK_THROWS_WITH(make_layout(m, 2, 0), Catch::Contains("puts 8 blocks on the stages, but --layers is 9"));
  m.layers = 8;
  CHECK_THROWS_WITH(make_layout(m, 4, 0), Catch::Contains("the layout has 2 stages but the schedule has 4"));
  m.layout = "3,x";
  CHECK_THROWS_WITH(make_layout(m, 2, 0), Catch::Contains("entry 1 of \"3,x\" is not a whole number"));
  // A stage may hold the embedding alone; one holding nothing cannot run.
  m.layout = "0,8";
  CHECK(make_layout(m, 2, 0).stage_units[0] == std::vector<int>{0});
  ModelConfig mlp;
  mlp.kind = ModelKind::Mlp;
  mlp.layout = "4,0";
  CHECK_THROWS_WITH(make_layout(mlp, 2, 0), Catch::Contains("stage 1 holds no layer"));
  // The MLP's stages hold its blocks only; the tower still comes out of stage 0.
  mlp.layout = "1,2,1";
  ModelLayout t = make_layout(mlp, 3, 0);
  CHECK(t.stage_units[1] == std::vector<int>{1, 2});
  mlp.layout = "2,1,1";
  CHECK(make_layout(mlp, 3, 1).tower_units == std::vector<int>{0});
}

TEST_CASE("without --layers a built-in model gets one block per stage (at least 4), and room for its tower", "[exec]") {
  CHECK(default_layers(ModelKind::Mlp, 2, 0) == 4);
  CHECK(default_layers(ModelKind::Gpt, 4, 1) == 4);  // the tower is the embedding
  CHECK(default_layers(ModelKind::Mlp, 8, 0) == 8);
  CHECK(default_layers(ModelKind::Gpt, 16, 0) == 16);
  // Stage 0 gets ceil((L + 2) / 8) units under the even split; the tower takes 2 and leaves
  // one: L + 2 >= 17.
  CHECK(default_layers(ModelKind::Gpt, 8, 2) == 15);
  CHECK(default_layers(ModelKind::Mlp, 6, 1) == 7);   // stage 0: 2 blocks
  for (ModelKind kind : {ModelKind::Mlp, ModelKind::Gpt})
    for (int stages : {1, 3, 4, 5, 8, 12, 32})
      for (int tower : {0, 1, 2, 3}) {
        INFO("kind " << static_cast<int>(kind) << " stages " << stages << " tower " << tower);
        ModelConfig m;
        m.kind = kind;
        m.layers = 0;
        ModelLayout l = make_layout(m, stages, tower);
        REQUIRE(static_cast<int>(l.stage_units.size()) == stages);
        for (const auto& units : l.stage_units) CHECK_FALSE(units.empty());
        CHECK(static_cast<int>(l.tower_units.size()) == tower);
        if (tower == 0 || (kind == ModelKind::Gpt && tower == 1)) {
          // exactly one block per stage beyond the default 4 (gpt adds embedding and head)
          CHECK(l.units == std::max(4, stages) + (kind == ModelKind::Gpt ? 2 : 0));
        }
      }
  // check_agreement resolves it, so every rank and the parity reference build the same model.
  GenerateOptions g;
  g.pp = 2;
  g.vpp = 4;
  g.micro = 4;
  const Schedule s = generate("interleaved-1f1b", g);
  ModelConfig m;
  m.kind = ModelKind::Mlp;
  m.layers = 0;
  Agreement a = check_agreement(s, 2, m, [](Op) { return true; });
  CHECK(a.errors.empty());
  CHECK(m.layers == 8);
  CHECK(a.layout.stage_units.size() == 8);
}

TEST_CASE("agreement reports every model/schedule mismatch at once", "[exec]") {
  Schedule s = generated("1f1b", 2, 1, 4);
  ModelConfig m;
  m.layers = 4;
  m.stages = 3;
  m.global_batch_size = 9;
  m.tower_layers = 1;
  m.tie_embeddings = true;
  Agreement a = check_agreement(s, 3, m, every_handler);
  CHECK(mentions(a.errors, "WORLD_SIZE is 3"));
  CHECK(mentions(a.errors, "cut into 3 virtual stages"));
  CHECK(mentions(a.errors, "--global-batch-size 9"));
  CHECK(mentions(a.errors, "no step would run it"));
  CHECK(mentions(a.errors, "has no ALL_REDUCE"));
}

TEST_CASE("agreement: MPipe steps need a tower of the schedule's kind; defaults come from the schedule", "[exec]") {
  Schedule s = generated("mpipe-transpose", 2, 1, 4, Tower::Frozen);
  ModelConfig m;
  m.layers = 4;
  Agreement ok = check_agreement(s, 2, m, every_handler);
  CHECK(ok.ok());
  CHECK(m.tower == Tower::Frozen);
  CHECK(m.tower_layers == 1);
  CHECK(ok.layout.tower_units == std::vector<int>{0});

  ModelConfig none;
  none.layers = 4;
  none.tower_layers = 0;
  CHECK(mentions(check_agreement(s, 2, none, every_handler).errors, "the model has none"));
  ModelConfig trainable;
  trainable.layers = 4;
  trainable.tower = Tower::Trainable;
  CHECK(mentions(check_agreement(s, 2, trainable, every_handler).errors, "disagrees with the schedule"));
}

TEST_CASE("agreement: a step type without an executor handler is refused with its first location", "[exec]") {
  Schedule s = generated("1f1b", 2, 1, 2);
  ModelConfig m;
  m.layers = 2;
  Agreement a = check_agreement(s, 2, m, [](Op op) { return op != Op::BWD_SEND; });
  CHECK(mentions(a.errors, "no handler for BWD_SEND (first at rank 1 step"));
}

TEST_CASE("the cache store names the step-table cache on a double produce or a missing consume", "[exec]") {
  CacheStore c;
  c.put(Cache::keep_grad, -1, 3, {}, "TF3");
  CHECK_THROWS_WITH(c.put(Cache::keep_grad, -1, 3, {}, "MFR3"), Catch::Contains("_keep_grad[micro 3], which already exists"));
  CHECK_THROWS_WITH(c.take(Cache::fwd_cache, 2, 1, "B1s2"), Catch::Contains("fwd_cache[stage 2, micro 1]"));
  // Rank caches ignore the stage; stage caches do not.
  CHECK(c.has(Cache::keep_grad, 7, 3));
  c.put(Cache::fwd_cache, 1, 0, {}, "F0s1");
  CHECK_FALSE(c.has(Cache::fwd_cache, 2, 0));
}

TEST_CASE("reset() refuses to start while entries are left, naming them; abort() clears them", "[exec]") {
  CacheStore c;
  CHECK_NOTHROW(refuse_leftovers(c));
  c.put(Cache::outputs_for_bwd, -1, 5, {}, "TF5");
  c.put(Cache::inputs_for_explicit_forward, -1, 2, {}, "GR2");
  CHECK_THROWS_WITH(refuse_leftovers(c), Catch::Contains("_inputs_for_explicit_forward[micro 2]") &&
                                             Catch::Contains("_outputs_for_bwd[micro 5]"));
  c.clear();
  CHECK_NOTHROW(refuse_leftovers(c));
}

TEST_CASE("the audit catches a handler that drifts from the step table", "[exec]") {
  Schedule s = generated("1f1b", 2, 1, 2);
  Step f = make_step(Op::FWD, 0, 1);  // stage 1 on rank 1: its input was received
  uint32_t cond = conditions_of(s, 1, f);
  CacheStore c;
  CHECK_THROWS_WITH(audit_before(c, f, cond), Catch::Contains("FWD consumes fwd_recv_buffer[stage 1, micro 0]"));
  c.put(Cache::fwd_recv_buffer, 1, 0, {}, "FR0s1");
  CHECK_NOTHROW(audit_before(c, f, cond));
  // A "handler" that keeps its graph but forgets to consume the received buffer:
  c.put(Cache::fwd_cache, 1, 0, {}, "F0s1");
  CHECK_THROWS_WITH(audit_after(c, f, cond), Catch::Contains("the executor's handler left it"));
  c.take(Cache::fwd_recv_buffer, 1, 0, "F0s1");
  CHECK_NOTHROW(audit_after(c, f, cond));  // last stage: no fwd_outputs_cache to produce
}

namespace {

// Each rank's records as a traced later iteration would give them: every compute step and
// every message of the comm model's lowering, one interval each, except the body FWD metas
// (exchanged once per process, in iteration 0 only). Times are made up and increasing.
std::vector<RankTrace> later_iteration_records(const Schedule& s) {
  const CommModel m = build_comm_model(s, CheckOptions{});
  std::vector<RankTrace> out;
  for (int r = 0; r < s.ranks; ++r) {
    RankTrace t;
    t.rank = r;
    double now = 0;
    for (const Action& a : m.actions[static_cast<size_t>(r)]) {
      const Step& st = *s.programs[static_cast<size_t>(r)][static_cast<size_t>(a.step_index)];
      if (a.kind == ActionKind::Local) {
        TracedInterval iv;
        iv.step_index = a.step_index;
        iv.start_ms = now;
        iv.end_ms = now += 1;
        t.intervals.push_back(iv);
        continue;
      }
      for (int k = 0; k < a.count; ++k) {
        const Message& msg = m.messages[static_cast<size_t>(m.message_of(a, k))];
        const bool body_fwd = st.op == Op::FWD_SEND || st.op == Op::FWD_RECV;
        if (msg.meta && body_fwd) continue;
        const Channel& ch = m.channels[static_cast<size_t>(msg.channel)];
        t.messages.push_back({msg.send ? ch.dst : ch.src, msg.send, msg.meta, static_cast<int>(msg.step_index), msg.sub,
                              static_cast<int>(msg.tensor)});
        TracedInterval iv;
        iv.step_index = a.step_index;
        iv.sub = msg.sub;
        iv.lane = msg.send ? Lane::Send : Lane::Recv;
        iv.start_ms = now;
        iv.end_ms = now += 0.5;
        iv.bytes = msg.meta ? 128 : 4096;
        iv.meta = msg.meta;
        iv.first_message = static_cast<int>(t.messages.size()) - 1;
        iv.messages = 1;
        t.intervals.push_back(iv);
      }
    }
    out.push_back(parse_rank_trace(serialize(t)));  // through the store's text form
  }
  return out;
}

}  // namespace

TEST_CASE("measured records of a later iteration pair with the comm model: one flow per message exchanged", "[exec]") {
  for (const char* family : {"1f1b", "mpipe-transpose"}) {
    INFO(family);
    const Schedule s = generated(family, 4, 1, 8);
    const auto records = later_iteration_records(s);
    const RunRecord run = assemble_measured_run(s, records);
    CHECK(run.provenance.notes.empty());
    size_t sends = 0, slices = 0;
    for (const auto& t : records) {
      slices += t.intervals.size();
      for (const auto& msg : t.messages) sends += msg.send ? 1 : 0;
    }
    CHECK(run.slices.size() == slices);
    CHECK(run.flows.size() == sends);
    for (const auto& f : run.flows) {
      const TimedSlice& a = run.slices[static_cast<size_t>(f.send_slice)];
      const TimedSlice& b = run.slices[static_cast<size_t>(f.recv_slice)];
      CHECK(a.lane == Lane::Send);
      CHECK(b.lane == Lane::Recv);
      CHECK(a.meta == b.meta);
      // The executor times calls, not the wire: the payload leaves when the send begins and
      // has arrived when the receive returns.
      CHECK(f.leave_ms == a.start_ms);
      CHECK(f.arrive_ms == b.end_ms);
    }
    CHECK(run.ranks.size() == static_cast<size_t>(s.ranks));
    // These made-up clocks disagree between ranks: a flow whose receive returned before its
    // send began is left out (and counted); every other one binds and runs forward.
    const std::string text = chrome_trace_json(s, run);
    const ppsched::testing::TraceCheck c = ppsched::testing::validate_trace(text);
    INFO(c.summary());
    CHECK(c.problem_count() == 0);
    size_t impossible = 0;
    for (const auto& f : run.flows)
      impossible += run.slices[static_cast<size_t>(f.recv_slice)].end_ms * 1e6 -
                                run.slices[static_cast<size_t>(f.send_slice)].start_ms * 1e6 < 2
                        ? 1
                        : 0;
    CHECK(c.flows + impossible == run.flows.size());
    CHECK(nlohmann::json::parse(text)["otherData"]["flows_left_out"] == impossible);
  }
}

TEST_CASE("a record that strays from the comm model keeps its slices and loses its flows, with a note", "[exec]") {
  const Schedule s = generated("1f1b", 2, 1, 4);
  auto records = later_iteration_records(s);
  REQUIRE(records[1].messages.size() > 2);
  records[1].messages[1].tensor = 7;  // not what the comm model has there
  const RunRecord run = assemble_measured_run(s, records);
  REQUIRE(run.provenance.notes.size() == 1);
  CHECK(run.provenance.notes[0].find("rank 1: message 1") != std::string::npos);
  // Rank 1's first message still pairs; nothing after it on rank 1 does.
  CHECK(run.flows.size() == 1);
}

TEST_CASE("ranks on one host are aligned on its monotonic clock, others at their barrier epoch", "[exec]") {
  const Schedule s = generated("1f1b", 2, 1, 4);
  auto records = later_iteration_records(s);
  for (auto& t : records) {
    t.host = "node0";
    t.epoch_ns = 5'000'000 + t.rank * 1'500'000;  // rank 1 took its epoch 1.5 ms later
  }
  const RunRecord shared = assemble_measured_run(s, records);
  CHECK(shared.provenance.shared_clock);
  records[1].host = "node1";
  const RunRecord apart = assemble_measured_run(s, records);
  CHECK_FALSE(apart.provenance.shared_clock);
  REQUIRE(shared.slices.size() == apart.slices.size());
  for (size_t k = 0; k < shared.slices.size(); ++k) {
    const double shift = shared.slices[k].rank == 1 ? 1.5 : 0.0;
    CHECK(shared.slices[k].start_ms == Approx(apart.slices[k].start_ms + shift));
  }
}

TEST_CASE("a stages.json that is not JSON, or holds a number JSON cannot hold, is refused as input", "[exec]") {
  const auto dir = std::filesystem::temp_directory_path() / ("ppsched-manifest-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const char* text : {"{\"stages\": ", "{\"format\": \"ppsched-stage-modules\", \"stages\": 1E999}"}) {
    std::ofstream(dir / "stages.json") << text;
    INFO(text);
    try {
      read_stage_modules(dir.string());
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK_THAT(e.what(), Catch::Contains("not valid JSON"));
    }
  }
  std::filesystem::remove_all(dir);
}

// --model moe --ep 2 (issue 39): the program the executor verifies and its comm thread follows.
// The lowered order is race-free for every family run with the MoE model; the ready order (each
// chain of an overlapped step issuing on its own) is a collective_order_race exactly where an
// overlapped step has two communicating chains; the per-step lists hold 2 all-to-alls per MoE
// block of every FWD / BWD / BWD_INPUT (none for BWD_WEIGHT).
TEST_CASE("moe stream program: lowered order verifies, ready order races only where steps overlap", "[exec][moe]") {
  ModelConfig m;
  m.kind = ModelKind::Gpt;
  m.layers = 6;
  m.experts = 4;
  m.topk = 2;
  m.ep = 2;
  struct Family {
    const char* name;
    int vpp;
    bool overlaps;
  };
  for (const Family& f : {Family{"1f1b", 1, false}, Family{"dualpipev", 2, true}, Family{"combined-1f1b", 2, true}}) {
    INFO(f.name);
    GenerateOptions g;
    g.pp = 2;
    g.vpp = f.vpp;
    g.micro = 4;
    const Schedule s = generate(f.name, g);
    ModelConfig mm = m;
    DataParallelOptions dp;
    dp.degree = 2;
    Agreement a = check_agreement(s, 4, mm, [](Op) { return true; }, dp);
    // The generated order has no FSDP steps: the agreement asks for them and nothing else.
    REQUIRE(a.errors.size() == 1);
    CHECK(a.errors[0].find("FSDP_") != std::string::npos);
    const StreamProgram lowered = moe_stream_program(s, mm, a.layout, false);
    CHECK(lowered.ranks.size() == 4);
    CHECK(verify_streams(lowered).ok());
    const CheckReport ready = verify_streams(moe_stream_program(s, mm, a.layout, true));
    CHECK(ready.ok() == !f.overlaps);
    if (f.overlaps) CHECK(ready.violations.front().kind == ViolationKind::CollectiveOrderRace);
    // Two all-to-alls per block per FWD / BWD / BWD_INPUT leaf, none in BWD_WEIGHT.
    std::vector<int> blocks;
    for (const auto& units : a.layout.stage_units) {
      int b = 0;
      for (int u : units) b += u != a.layout.embedding_unit && u != a.layout.head_unit;
      blocks.push_back(b);
    }
    for (int r = 0; r < s.ranks; ++r) {
      size_t want = 0;
      for (const auto& slot : s.programs[static_cast<size_t>(r)]) {
        if (!slot) continue;
        std::vector<const Step*> leaves;
        if (slot->sub_steps().empty()) leaves.push_back(&*slot);
        for (const auto& sub : slot->sub_steps()) leaves.push_back(&sub);
        for (const Step* l : leaves)
          if (l->op == Op::FWD || l->op == Op::BWD || l->op == Op::BWD_INPUT) want += 2 * static_cast<size_t>(blocks[static_cast<size_t>(l->stage)]);
      }
      size_t got = 0;
      for (const auto& [step, list] : moe_all_to_alls(lowered, r)) got += list.size();
      CHECK(got == want);
    }
  }
}

TEST_CASE("moe agreement: --ep equals --dp, no FSDP sharding, top-k within the experts", "[exec][moe]") {
  GenerateOptions g;
  g.pp = 2;
  g.micro = 4;
  const Schedule s = add_fsdp_steps(generate("1f1b", g));
  ModelConfig m;
  m.kind = ModelKind::Gpt;
  m.experts = 2;
  m.topk = 3;
  m.ep = 3;
  DataParallelOptions dp;
  dp.degree = 2;
  dp.fsdp = true;
  Agreement a = check_agreement(s, 4, m, [](Op) { return true; }, dp);
  CHECK(mentions(a.errors, "--topk 3 must be between 1 and --experts 2"));
  CHECK(mentions(a.errors, "--ep 3 must equal --dp 2"));
  CHECK(mentions(a.errors, "--ep 3 is more than --experts 2"));
  CHECK(mentions(a.errors, "--fsdp with --model moe"));
}
