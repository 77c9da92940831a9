// Multi-stream programs proven safe (issue 39): the hangs of real systems, each written from its
// issue's description as a ppsched-streams file with its fix (tests/data/streams/), caught and
// passed; every published family's MoE lowering (the expert all-to-alls on a comm stream) race-
// free; and the checker against brute force (checkers/oracles.hpp: every state of a rank, random
// runs) on random programs and on the fuzzer's stream mutations.
#include <catch2/catch.hpp>
#include <rapidcheck.h>
#include <rapidcheck/catch.h>

#include <fstream>
#include <set>
#include <sstream>

#include "checkers/checks.hpp"
#include "checkers/oracles.hpp"
#include "lowering/stream_program.hpp"
#include "lowering/stream_program_json.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/json_support.hpp"
#include "schedule/generators/generator.hpp"
#include "tests/support/model_data.hpp"

using namespace ppsched;

namespace {

StreamProgram load(const std::string& name) {
  const std::string path = test_data::data("streams/" + name + ".json");
  std::ifstream f(path);
  REQUIRE(f);
  std::stringstream ss;
  ss << f.rdbuf();
  return read_stream_program(parse_json_strict(ss.str(), path, false), path);
}

std::set<std::string> kinds(const CheckReport& r) {
  std::set<std::string> out;
  for (const auto& v : r.violations) out.insert(std::string(to_string(v.kind)));
  return out;
}

// The checker's races inside a rank, as the oracle writes them ("rank R: communicator C").
std::vector<std::string> checker_races(const StreamProgram& p, const CheckReport& r) {
  std::set<std::string> out;
  for (const auto& v : r.violations) {
    if (v.kind != ViolationKind::CollectiveOrderRace || v.ops.size() != 2 || v.ops[0].rank != v.ops[1].rank) continue;
    const StreamOp& o = p.ranks[static_cast<size_t>(v.ops[0].rank)].ops[static_cast<size_t>(v.ops[0].op)];
    std::string d = o.kind == StreamOpKind::Collective ? "communicator " + p.comms[static_cast<size_t>(o.comm)].name
                    : o.kind == StreamOpKind::Send     ? "sends to " + std::to_string(o.peer)
                                                       : "receives from " + std::to_string(o.peer);
    for (int rank : v.ranks) out.insert("rank " + std::to_string(rank) + ": " + d);
  }
  return {out.begin(), out.end()};
}

// Interleaved 1F1B with its steady pairs merged ([B|F]), every stage one MoE layer, EP 2: a
// merged step's two chains share the comm stream.
StreamProgram merged_program(int micro) {
  MoeStage one;
  one.layers.push_back({{0.5f, 0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f, 0.5f}, 1e6});
  GenerateOptions g;
  g.pp = 2;
  g.vpp = 2;
  g.micro = micro;
  g.overlap_b_f = true;
  const Schedule s = generate("interleaved-1f1b", g);
  StreamLowering l;
  l.ep = 2;
  l.stages.assign(static_cast<size_t>(s.stages), one);
  return lower_streams(s, l);
}

bool intra_rank_race(const CheckReport& r) {
  for (const auto& v : r.violations)
    if (v.kind == ViolationKind::CollectiveOrderRace && v.ops.size() == 2 && v.ops[0].rank == v.ops[1].rank) return true;
  return false;
}

}  // namespace

// ---- the hangs of real systems --------------------------------------------------------------

TEST_CASE("NVIDIA/Megatron-LM#1810: one event shared by every node lets two all-to-alls go in either order",
          "[streams][hangs]") {
  const StreamProgram bug = load("megatron_1810_shared_event");
  const CheckReport r = verify_streams(bug);
  REQUIRE(kinds(r) == std::set<std::string>{"collective_order_race"});
  const Violation& v = r.violations[0];
  CHECK(v.ranks == std::vector<int>{0, 1});
  REQUIRE(v.ops.size() == 2);
  CHECK(v.ops[0].name == "combine_bwd L1 mb0");
  CHECK(v.ops[1].name == "dispatch_fwd L0 mb1");
  // Located: the event that leaves them unordered and the record that satisfies it early.
  CHECK(v.message.find("waits on event E, which op 0 (attn_fwd L0 mb1, stream compute) records without being ordered "
                       "after op 1") != std::string::npos);
  CHECK(v.interleaving.find("rank 0 issues dispatch_fwd L0 mb1 first while rank 1 issues combine_bwd L1 mb0 first") !=
        std::string::npos);
  CHECK(oracle::stream_races(bug) == checker_races(bug, r));
  const StreamProgram fixed = load("megatron_1810_shared_event_fixed");
  const CheckReport ok = verify_streams(fixed);
  CHECK(ok.ok());
  CHECK(ok.completes);
  CHECK(oracle::stream_races(fixed).empty());
  CHECK(oracle::stream_run_completes(fixed, 1));
}

TEST_CASE("NVIDIA/Megatron-LM#1852: an odd MoE layer under the shared event, and an empty stage", "[streams][hangs]") {
  const StreamProgram odd = load("megatron_1852_odd_layers");
  const CheckReport r = verify_streams(odd);
  REQUIRE(kinds(r) == std::set<std::string>{"collective_order_race"});
  CHECK(r.violations[0].ops[0].name == "combine_fwd L1 mb1");
  CHECK(r.violations[0].ops[1].name == "dispatch_fwd L2 mb1");
  CHECK(oracle::stream_races(odd) == checker_races(odd, r));
  CHECK(verify_streams(load("megatron_1852_odd_layers_fixed")).ok());

  const CheckReport empty = verify_streams(load("megatron_1852_empty_stage"));
  REQUIRE(kinds(empty) == std::set<std::string>{"collective_mismatch"});
  CHECK(empty.violations[0].message.find("rank 0 calls all_reduce grad norm and rank 1 calls all_reduce aux_loss tracker") !=
        std::string::npos);
  CHECK(!oracle::stream_run_completes(load("megatron_1852_empty_stage"), 3));
  const StreamProgram fixed = load("megatron_1852_empty_stage_fixed");
  CHECK(verify_streams(fixed).ok());
  CHECK(oracle::stream_run_completes(fixed, 3));
}

TEST_CASE("NVIDIA/Megatron-LM#5749: all-to-all and reduce-scatter on one stream in different orders", "[streams][hangs]") {
  const StreamProgram bug = load("megatron_5749_ep_dp_one_stream");
  const CheckReport r = verify_streams(bug);
  REQUIRE(kinds(r) == std::set<std::string>{"collective_order_race"});
  const Violation& v = r.violations[0];
  // A cycle between ranks 2 and 3: each waits in a collective the other has not reached.
  CHECK(std::set<int>(v.ranks.begin(), v.ranks.end()) == std::set<int>{2, 3});
  CHECK(v.message.find("conflicting orders") != std::string::npos);
  CHECK(!r.completes);
  for (unsigned seed = 0; seed < 8; ++seed) CHECK(!oracle::stream_run_completes(bug, seed));
  const StreamProgram fixed = load("megatron_5749_ep_dp_one_stream_fixed");
  CHECK(verify_streams(fixed).ok());
  for (unsigned seed = 0; seed < 8; ++seed) CHECK(oracle::stream_run_completes(fixed, seed));
}

TEST_CASE("NVIDIA/Megatron-LM#5100: a fixed-order shape exchange beside a parity-ordered data exchange", "[streams][hangs]") {
  const StreamProgram bug = load("megatron_5100_shape_exchange");
  const CheckReport r = verify_streams(bug);
  REQUIRE(kinds(r) == std::set<std::string>{"deadlock"});
  CHECK(r.violations[0].message.find("shape") != std::string::npos);
  CHECK(!oracle::stream_run_completes(bug, 5));
  const StreamProgram fixed = load("megatron_5100_shape_exchange_fixed");
  const CheckReport ok = verify_streams(fixed);
  CHECK(ok.ok());
  CHECK(ok.stats.messages == 12);
  CHECK(oracle::stream_run_completes(fixed, 5));
}

// ---- the file ----------------------------------------------------------------------------------

TEST_CASE("a ppsched-streams file round-trips and bad ones are refused with their JSON path", "[streams][format]") {
  const StreamProgram p = load("megatron_1810_shared_event");
  const nlohmann::json j = stream_program_json(p);
  const StreamProgram q = read_stream_program(j, "again");
  CHECK(stream_program_json(q) == j);
  CHECK(q.any_record);
  auto refused = [&](const char* text, const char* expected) {
    try {
      read_stream_program(parse_json_strict(text, "bad.json", false), "bad.json");
      FAIL("accepted: " << text);
    } catch (const InputError& e) {
      CHECK_THAT(e.what(), Catch::Contains(expected));
    }
  };
  refused(R"({"format":"ppsched-streams","version":2,"ranks":[]})", "\"version\": 1");
  refused(R"({"format":"ppsched-streams","version":1,"ranks":[{"streams":["a"],"ops":[{"name":"x","stream":"b"}]}]})",
          "stream \"b\" is not one of the rank's streams (a)");
  refused(R"({"format":"ppsched-streams","version":1,"ranks":[{"streams":["a"],"ops":[{"name":"x","stream":"a","send":0}]}]})",
          "does not send to itself");
  refused(R"({"format":"ppsched-streams","version":1,"communicators":{"C":[1]},"ranks":[{"streams":["a"],"ops":[]},)"
          R"({"streams":["a"],"ops":[]},{"streams":["a"],"ops":[{"name":"x","stream":"a","collective":"C"}]}]})",
          "rank 2 is not a member of communicator \"C\"");
  refused(R"({"format":"ppsched-streams","version":1,"ranks":[{"streams":["a"],"ops":[{"name":"x","stream":"a","recv":7}]}]})",
          "ranks[0].ops[0].recv");
  refused(R"({"format":"ppsched-streams","version":1,"event_binding":"first","ranks":[{"streams":["a"],"ops":[]}]})",
          "\"latest\" (CUDA, the default) or \"any\"");
}

// ---- the published families ---------------------------------------------------------------

TEST_CASE("every published family's MoE lowering issues its all-to-alls in one order", "[streams][families]") {
  MoeStage two;
  two.layers.push_back({{0.2f, 0.2f, 0.2f, 0.2f}, {0.2f, 0.2f, 0.2f, 0.2f}, 1e6});
  two.layers.push_back({{0.2f, 0.2f, 0.2f, 0.2f}, {0.1f, 0.1f, 0.1f, 0.1f}, 1e6});
  two.after = {0.1f, 0.1f, 0.1f, 0.1f};
  MoeStage three = two;
  three.layers.push_back(two.layers[0]);  // an odd count: the pairs of a merged step are uneven
  for (const auto& info : generators()) {
    GenerateOptions g;
    g.pp = 4;
    g.micro = 8;
    Schedule s;
    for (int vpp : {2, 1}) {  // two virtual stages where the family takes them
      g.vpp = vpp;
      try {
        s = generate(info.name, g);
        break;
      } catch (const InputError&) {
      }
    }
    REQUIRE(s.ranks == 4);
    StreamLowering l;
    l.ep = 2;
    for (int st = 0; st < s.stages; ++st) l.stages.push_back(st % 2 ? three : two);
    const StreamProgram p = lower_streams(s, l);
    const CheckReport r = verify_streams(p);
    INFO(info.name << " V=" << g.vpp);
    CHECK(r.ok());
    CHECK(r.completes);
    if (!r.ok()) FAIL_CHECK(r.violations[0].message);
    CHECK(r.stats.collectives > 0);
  }
  // The overlap variants too: interleaved with OVERLAP_B_F, with and without the dx/dw split.
  for (bool dxdw : {false, true}) {
    GenerateOptions g;
    g.pp = 4;
    g.vpp = 2;
    g.micro = 8;
    g.overlap_b_f = true;
    g.dxdw_split = dxdw;
    const Schedule s = generate("interleaved-1f1b", g);
    StreamLowering l;
    l.ep = 2;
    l.stages.assign(static_cast<size_t>(s.stages), three);
    const CheckReport r = verify_streams(lower_streams(s, l));
    CHECK(r.ok());
  }
}

TEST_CASE("a merged forward and backward follow Megatron-Core's per-layer stream order", "[streams][families]") {
  const StreamProgram p = merged_program(4);
  // Find the first merged step on rank 0 and read each stream's phase names in order.
  const StreamRank& r0 = p.ranks[0];
  int step = -1;
  for (const auto& o : r0.ops)
    if (o.sub >= 0) {
      step = o.step;
      break;
    }
  REQUIRE(step >= 0);
  std::vector<std::string> comm, compute;
  for (const auto& o : r0.ops) {
    if (o.step != step) continue;
    const std::string phase = o.name.substr(0, o.name.find(' '));
    (o.stream == 1 ? comm : compute).push_back(phase);
  }
  CHECK(comm == std::vector<std::string>{"combine_bwd", "dispatch_fwd", "dispatch_bwd", "combine_fwd"});
  CHECK(compute == std::vector<std::string>{"attn_fwd", "mlp_bwd", "mlp_fwd", "attn_bwd"});
}

// ---- against brute force ------------------------------------------------------------------

namespace {

// A random small program: 2 or 3 ranks, up to 3 streams and 7 ops a rank, a communicator over
// all ranks and one over ranks 0 and 1, sends and receives between neighbours, events E0..E2.
rc::Gen<StreamProgram> small_program() {
  return rc::gen::exec([] {
    StreamProgram p;
    const int R = *rc::gen::inRange(2, 4);
    p.any_record = *rc::gen::arbitrary<bool>();
    Communicator all{"all", {}};
    for (int r = 0; r < R; ++r) all.ranks.push_back(r);
    p.comms = {all, Communicator{"pair", {0, 1}}};
    p.ranks.resize(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) {
      StreamRank& rank = p.ranks[static_cast<size_t>(r)];
      const int streams = *rc::gen::inRange(1, 4);
      for (int k = 0; k < streams; ++k) rank.streams.push_back("s" + std::to_string(k));
      rank.events = {"E0", "E1", "E2"};
      const int n = *rc::gen::inRange(0, 8);
      for (int i = 0; i < n; ++i) {
        StreamOp o;
        o.stream = *rc::gen::inRange(0, streams);
        const int kind = *rc::gen::inRange(0, 5);
        if (kind == 1) {
          o.kind = StreamOpKind::Collective;
          o.comm = 0;
          o.name = "c";
        } else if (kind == 2 && r < 2) {
          o.kind = StreamOpKind::Collective;
          o.comm = 1;
          o.name = "c";
        } else if (kind == 3) {
          o.kind = StreamOpKind::Send;
          o.peer = (r + 1) % R;
          o.name = "m";
        } else if (kind == 4) {
          o.kind = StreamOpKind::Recv;
          o.peer = (r + R - 1) % R;
          o.name = "m";
        } else {
          o.name = "x" + std::to_string(i);
        }
        for (int e = 0; e < 3; ++e) {
          if (*rc::gen::inRange(0, 4) == 0) o.waits.push_back(e);
          if (*rc::gen::inRange(0, 3) == 0) o.records.push_back(e);
        }
        rank.ops.push_back(std::move(o));
      }
    }
    return p;
  });
}

}  // namespace

TEST_CASE("the checker's races and deadlocks equal brute force on random programs", "[streams][oracle]") {
  rc::prop("races: every rank's every state; completion: random runs", [] {
    const StreamProgram p = *small_program();
    const CheckReport r = verify_streams(p);
    RC_ASSERT(checker_races(p, r) == oracle::stream_races(p));
    if (r.ok()) {
      for (unsigned seed = 0; seed < 4; ++seed) RC_ASSERT(oracle::stream_run_completes(p, seed));
    } else if (!intra_rank_race(r)) {
      bool mismatch = false;
      for (const auto& v : r.violations)
        mismatch = mismatch || v.kind == ViolationKind::P2PMismatch || v.kind == ViolationKind::CollectiveMismatch;
      // Races and mismatches aside, a violation is a rendezvous cycle: no run completes.
      if (!mismatch)
        for (unsigned seed = 0; seed < 4; ++seed) RC_ASSERT(!oracle::stream_run_completes(p, seed));
    }
  });
}

TEST_CASE("stream mutations: an event dropped, an operation moved to another stream", "[streams][oracle][fuzz]") {
  // The lowering of a merged step (two chains, one comm stream) is race-free; a mutation may make
  // it racy, and the checker must say so exactly when brute force does.
  StreamProgram base = merged_program(2);
  // Keep one merged step's ops on each rank (the brute force visits every state: 20 ops at most).
  for (auto& rank : base.ranks) {
    int step = -1;
    for (const auto& o : rank.ops)
      if (o.sub >= 0) {
        step = o.step;
        break;
      }
    std::vector<StreamOp> kept;
    for (size_t i = 0; i < rank.ops.size(); ++i)
      if (rank.ops[i].step == step) kept.push_back(rank.ops[i]);
    rank.ops = kept;
  }
  REQUIRE(verify_streams(base).ok());
  REQUIRE(oracle::stream_races(base).empty());
  int racy = 0, total = 0;
  for (size_t r = 0; r < base.ranks.size(); ++r)
    for (size_t i = 0; i < base.ranks[r].ops.size(); ++i) {
      for (size_t k = 0; k < base.ranks[r].ops[i].waits.size(); ++k) {
        StreamProgram m = base;
        drop_wait(m, static_cast<int>(r), static_cast<int>(i), static_cast<int>(k));
        const CheckReport rep = verify_streams(m);
        CHECK(checker_races(m, rep) == oracle::stream_races(m));
        racy += intra_rank_race(rep);
        ++total;
      }
      StreamProgram m = base;
      move_to_stream(m, static_cast<int>(r), static_cast<int>(i), -1);
      const CheckReport rep = verify_streams(m);
      CHECK(checker_races(m, rep) == oracle::stream_races(m));
      racy += intra_rank_race(rep);
      ++total;
    }
  // Moving an all-to-all off the comm stream, or dropping the wait that orders it, races.
  CHECK(racy > 0);
  CHECK(racy < total);
}

TEST_CASE("a merged step with a dense sub-step lowers it whole on the compute stream, as the engine runs it",
          "[streams][families]") {
  // DualPipeV at P = 2: rank 0 holds stages 0 and 3; stage 0 is dense, the others one MoE layer.
  MoeStage one;
  one.layers.push_back({{0.5f, 0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f, 0.5f}, 1e6});
  GenerateOptions g;
  g.pp = 2;
  g.vpp = 2;
  g.micro = 4;
  const Schedule s = generate("dualpipev", g);
  StreamLowering l;
  l.ep = 2;
  l.stages = {MoeStage{}, one, one, one};
  const StreamProgram p = lower_streams(s, l);
  int checked = 0;
  for (size_t i = 0; i < s.programs[0].size(); ++i) {
    const auto& slot = s.programs[0][i];
    if (!slot || !is_overlap(slot->op)) continue;
    const auto& subs = slot->sub_steps();
    for (int k = 0; k < 2; ++k) {
      if (subs[static_cast<size_t>(k)].stage != 0 || subs[static_cast<size_t>(1 - k)].stage == 0) continue;
      // The dense sub-step: exactly one compute op of its own; the other: its MoE phases.
      int whole = 0, phases = 0;
      for (const auto& o : p.ranks[0].ops) {
        if (o.step != static_cast<int>(i)) continue;
        if (o.sub == k) {
          ++whole;
          CHECK(o.kind == StreamOpKind::Compute);
          CHECK(o.stream == 0);
        } else if (o.sub == 1 - k) {
          ++phases;
        }
      }
      CHECK(whole == 1);
      CHECK(phases >= 4);
      ++checked;
    }
  }
  CHECK(checked > 0);
  CHECK(verify_streams(p).ok());
}
