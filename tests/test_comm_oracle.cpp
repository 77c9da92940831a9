// The reference communication oracle (tools/fuzz/comm_oracle.hpp) on schedules built by hand:
// what each rank posts and waits in each runtime mode (derived here from the runtime semantics,
// hyper_parallel.md §3.1-3.3: a body forward transfer sends its shape meta once per stage, a
// backward none; overlap_p2p posts body sends and receives and waits them late), its matching
// verdicts, and its deadlock verdicts under rendezvous and eager. Then the planted bugs it and
// the independent oracles must catch: a replay that buffers rendezvous sends (a wrong deadlock
// verdict) and an insertion pass that names the wrong stage on its receives.
#include <catch2/catch.hpp>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "checkers/checks.hpp"
#include "checkers/oracles.hpp"
#include "schedule/comm_insertion.hpp"
#include "schedule/formats/action_notation.hpp"
#include "schedule/generators/generator.hpp"
#include "tools/fuzz/comm_oracle.hpp"
#include "tools/fuzz/properties.hpp"

using namespace ppsched;
using namespace ppsched::fuzz;

namespace {

// P ranks, one stage each (loop placement), programs in PyTorch's action notation ("0F1",
// "0SEND_F1", "1RECV_B0").
Schedule hand(int micro, const std::vector<std::vector<std::string>>& programs) {
  Schedule s;
  s.name = "hand-built";
  s.ranks = s.stages = static_cast<int>(programs.size());
  s.micro_batches = micro;
  s.placement = Placement::loop(s.ranks, s.stages);
  for (const auto& actions : programs) {
    Program p;
    for (const auto& a : actions) {
      std::string error;
      std::optional<Step> st = parse_action(a, &error);
      INFO(a << ": " << error);
      REQUIRE(st);
      p.push_back(*st);
    }
    s.programs.push_back(std::move(p));
  }
  return s;
}

std::vector<std::string> described(const oracle::RankComm& c, int rank) {
  std::vector<std::string> out;
  for (const auto& op : c.ranks[static_cast<size_t>(rank)]) out.push_back(oracle::describe(op));
  return out;
}

CheckOptions mode(bool overlap_p2p, bool dyn_shape, P2PBackend backend = P2PBackend::Nccl) {
  CheckOptions o;
  o.overlap_p2p = overlap_p2p;
  o.dyn_shape = dyn_shape;
  o.backend = backend;
  return o;
}

// 1F1B on two ranks, two micro-batches, as the generator orders it (rank 1 receives the second
// activation before it sends the first gradient, or the two blocking sends would wait for each
// other). Step indices: rank 0: F0 0, SEND_F0 1, F1 2, SEND_F1 3, RECV_B0 4, B0 5, RECV_B1 6,
// B1 7; rank 1: RECV_F0 0, F0 1, RECV_F1 2, B0 3, SEND_B0 4, F1 5, B1 6, SEND_B1 7.
Schedule one_f_one_b() {
  return hand(2, {{"0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"},
                  {"1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0", "1F1", "1B1", "1SEND_B1"}});
}

}  // namespace

TEST_CASE("the reference oracle: blocking 1F1B sends the forward meta once per stage, then one blocking call per "
          "payload; matched, and it completes under rendezvous and eager", "[fuzz][oracle]") {
  const Schedule s = one_f_one_b();
  const CheckOptions o = mode(false, false);
  const oracle::RankComm c = oracle::reference_comm(s, o);
  CHECK(c.problems.empty());
  CHECK(described(c, 0) == std::vector<std::string>{"block [send meta to 1 of step 1]", "block [send to 1 of step 1]",
                                                    "block [send to 1 of step 3]", "block [recv from 1 of step 4]",
                                                    "block [recv from 1 of step 6]"});
  CHECK(described(c, 1) == std::vector<std::string>{"block [recv meta from 0 of step 0]", "block [recv from 0 of step 0]",
                                                    "block [recv from 0 of step 2]", "block [send to 0 of step 4]",
                                                    "block [send to 0 of step 7]"});
  CHECK(oracle::matching(s, c) == "");
  CHECK(oracle::completes(s, c, CommMode::Rendezvous));
  CHECK(oracle::completes(s, c, CommMode::Eager));
  CHECK(oracle::first_difference(s, c, oracle::lowered_comm(s, build_comm_model(s, o))) == "");
}

TEST_CASE("the reference oracle: dyn_shape sends a meta before every forward payload, overlap_p2p posts body "
          "transfers, waits each receive at its consumer and drains the sends at the end", "[fuzz][oracle]") {
  const Schedule s = one_f_one_b();
  SECTION("dyn_shape") {
    const oracle::RankComm c = oracle::reference_comm(s, mode(false, true));
    CHECK(described(c, 0) == std::vector<std::string>{"block [send meta to 1 of step 1]", "block [send to 1 of step 1]",
                                                      "block [send meta to 1 of step 3]", "block [send to 1 of step 3]",
                                                      "block [recv from 1 of step 4]", "block [recv from 1 of step 6]"});
    CHECK(described(c, 1) == std::vector<std::string>{"block [recv meta from 0 of step 0]", "block [recv from 0 of step 0]",
                                                      "block [recv meta from 0 of step 2]", "block [recv from 0 of step 2]",
                                                      "block [send to 0 of step 4]", "block [send to 0 of step 7]"});
  }
  SECTION("overlap_p2p") {
    const oracle::RankComm c = oracle::reference_comm(s, mode(true, false));
    CHECK(described(c, 0) == std::vector<std::string>{"block [send meta to 1 of step 1]", "post [send to 1 of step 1]",
                                                      "post [send to 1 of step 3]", "post [recv from 1 of step 4]",
                                                      "wait [recv from 1 of step 4]", "post [recv from 1 of step 6]",
                                                      "wait [recv from 1 of step 6]",
                                                      "wait [send to 1 of step 1; send to 1 of step 3]"});
    CHECK(described(c, 1) == std::vector<std::string>{"block [recv meta from 0 of step 0]", "post [recv from 0 of step 0]",
                                                      "wait [recv from 0 of step 0]", "post [recv from 0 of step 2]",
                                                      "post [send to 0 of step 4]", "wait [recv from 0 of step 2]",
                                                      "post [send to 0 of step 7]",
                                                      "wait [send to 0 of step 4; send to 0 of step 7]"});
  }
  for (int m = 0; m < 4; ++m) {
    const CheckOptions o = mode(m & 1, m & 2);
    INFO("overlap_p2p " << o.overlap_p2p << " dyn_shape " << o.dyn_shape);
    const oracle::RankComm c = oracle::reference_comm(s, o);
    CHECK(oracle::matching(s, c) == "");
    CHECK(oracle::completes(s, c, CommMode::Rendezvous));
    CHECK(oracle::first_difference(s, c, oracle::lowered_comm(s, build_comm_model(s, o))) == "");
  }
}

TEST_CASE("the reference oracle: mpipe_batched_recv receives every micro-batch's features at the first feature "
          "receive (a meta and a posted receive each, ascending micro) and waits them all there", "[fuzz][oracle]") {
  GenerateOptions g;
  g.pp = 2;
  g.micro = 4;
  const Schedule s = generate("mpipe-transpose", g);
  CheckOptions o;
  o.mpipe_batched_recv = true;
  const oracle::RankComm c = oracle::reference_comm(s, o);
  int ranks_with_features = 0;
  for (int r = 0; r < s.ranks; ++r) {
    INFO("rank " << r);
    std::vector<int> feature_steps;
    const Program& p = s.programs[static_cast<size_t>(r)];
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] && p[i]->op == Op::MPIPE_FWD_RECV) feature_steps.push_back(static_cast<int>(i));
    if (feature_steps.empty()) continue;
    ++ranks_with_features;
    // One wait over all of them; every feature receive's payload is in it, none elsewhere.
    int waits = 0;
    for (const auto& op : c.ranks[static_cast<size_t>(r)]) {
      bool features = false;
      for (const auto& t : op.transfers)
        for (int i : feature_steps) features = features || (t.step == i && !t.send);
      if (!features) continue;
      if (op.kind == oracle::CommOpKind::Wait) {
        ++waits;
        CHECK(op.transfers.size() == feature_steps.size());
      } else {
        CHECK(op.transfers.size() == 1);
        CHECK((op.kind == oracle::CommOpKind::Post) != op.transfers[0].meta);  // a blocking meta, then a post
      }
    }
    CHECK(waits == 1);
  }
  CHECK(ranks_with_features > 0);
  CHECK(oracle::matching(s, c) == "");
  CHECK(oracle::completes(s, c, CommMode::Rendezvous));
  CHECK(oracle::first_difference(s, c, oracle::lowered_comm(s, build_comm_model(s, o))) == "");
}

TEST_CASE("the reference oracle's matching names a receive of the wrong micro-batch and a message sent but never "
          "received", "[fuzz][oracle]") {
  Schedule wrong_micro = one_f_one_b();
  wrong_micro.programs[1][2]->micro = 0;  // RECV_F1 -> RECV_F0: the third message on 0 -> 1
  CHECK_THAT(oracle::matching(wrong_micro, oracle::reference_comm(wrong_micro, {})),
             Catch::StartsWith("rank 0 -> rank 1, message 2") && Catch::EndsWith("other micro-batch"));
  Schedule unreceived = one_f_one_b();
  unreceived.programs[1].erase(unreceived.programs[1].begin() + 2);  // RECV_F1 dropped
  CHECK(oracle::matching(unreceived, oracle::reference_comm(unreceived, {})) ==
        "rank 0 -> rank 1: 3 messages sent, 2 received");
  Schedule backward = one_f_one_b();
  backward.programs[1][2]->op = Op::BWD_RECV;  // RECV_F1 -> a gradient receive from rank 0: not what it sends
  backward.programs[1][2]->peer = 0;
  CHECK_THAT(oracle::matching(backward, oracle::reference_comm(backward, {})), Catch::EndsWith("not the partner step type"));
}

TEST_CASE("the reference oracle's deadlock verdicts: two ranks waiting for each other's payload deadlock in every mode; "
          "two sending first deadlock under rendezvous unless the sends are posted and each posted operation "
          "progresses on its own (Gloo); the replay agrees in every case",
          "[fuzz][oracle]") {
  // Rank 0 waits for the gradient (at its receive, or under overlap_p2p at the backward that
  // consumes it) before it sends the activation rank 1 waits for.
  const Schedule recv_first = hand(1, {{"0F0", "0RECV_B0", "0B0", "0SEND_F0"}, {"1RECV_F0", "1F0", "1B0", "1SEND_B0"}});
  // Both send before they receive (the compute order is beside the point: communication only).
  const Schedule send_first = hand(1, {{"0F0", "0SEND_F0", "0RECV_B0", "0B0"}, {"1B0", "1SEND_B0", "1RECV_F0", "1F0"}});
  for (int m = 0; m < 8; ++m) {
    const CheckOptions o = mode(m & 1, m & 2, m & 4 ? P2PBackend::Gloo : P2PBackend::Nccl);
    INFO("overlap_p2p " << o.overlap_p2p << " dyn_shape " << o.dyn_shape << " backend " << to_string(o.backend));
    const oracle::RankComm a = oracle::reference_comm(recv_first, o), b = oracle::reference_comm(send_first, o);
    CHECK(oracle::matching(recv_first, a) == "");
    CHECK(oracle::matching(send_first, b) == "");
    CHECK_FALSE(oracle::completes(recv_first, a, CommMode::Rendezvous));
    CHECK_FALSE(oracle::completes(recv_first, a, CommMode::Eager));
    // overlap_p2p posts the payload sends (isend) and only the forward meta blocks, which
    // rank 1's receive meets on Gloo: the cycle is gone. On NCCL's stream rank 1's receive
    // meta is queued behind its posted gradient send, whose receive rank 0 queued behind its
    // activation send: the cycle stays. Blocking sends wait for their receive.
    CHECK(oracle::completes(send_first, b, CommMode::Rendezvous) == (o.overlap_p2p && o.backend == P2PBackend::Gloo));
    CHECK(oracle::completes(send_first, b, CommMode::Eager));
    for (const Schedule* s : {&recv_first, &send_first})
      for (CommMode comm : {CommMode::Rendezvous, CommMode::Eager})
        CHECK(replay(*s, build_comm_model(*s, o), comm).completed ==
              oracle::completes(*s, oracle::reference_comm(*s, o), comm));
  }
}

TEST_CASE("a planted deadlock-verdict bug (the replay buffers rendezvous sends) is caught by the reference oracle's "
          "run, on a hand-built send-first cycle and by lowering-matches-reference on random cases", "[fuzz][oracle]") {
  const Schedule send_first = hand(1, {{"0F0", "0SEND_F0", "0RECV_B0", "0B0"}, {"1B0", "1SEND_B0", "1RECV_F0", "1F0"}});
  CheckOptions planted;
  planted.testing_replay_buffers_sends = true;
  CHECK(replay(send_first, build_comm_model(send_first, planted), CommMode::Rendezvous).completed);  // the wrong verdict
  CHECK_FALSE(replay(send_first, build_comm_model(send_first, {}), CommMode::Rendezvous).completed);
  CHECK_FALSE(oracle::completes(send_first, oracle::reference_comm(send_first, planted), CommMode::Rendezvous));
  CHECK_FALSE(verify(send_first, {}).completes);
  CHECK(verify(send_first, planted).completes);

  Switches sw;
  sw.planted_deadlock_verdict = true;
  std::mt19937_64 rng(2025);
  std::optional<Case> found;
  std::optional<std::string> why;
  size_t tried = 0;
  for (; tried < 3000 && !found; ++tried) {
    Case c = random_case(Property::LoweringMatchesReference, rng, Limits{});
    Verdict v = check(Property::LoweringMatchesReference, c, sw);
    if (!v.discarded && v.failure) found = c, why = v.failure;
  }
  INFO("tried " << tried << " cases");
  REQUIRE(found);
  INFO(encode(*found) << ": " << *why);
  CHECK_THAT(*why, Catch::Contains("rendezvous the replay completes but the reference run does not"));
  CHECK_FALSE(check(Property::LoweringMatchesReference, *found).failure);  // the healthy replay agrees
}

namespace {

// Sets the comm_insertion planted bug for one scope.
struct PlantedInsertion {
  PlantedInsertion() { testing_planted_insertion_bug = true; }
  ~PlantedInsertion() { testing_planted_insertion_bug = false; }
};

}  // namespace

TEST_CASE("a planted insertion bug (receives named with the producer's stage) is caught by the checks, the "
          "independent oracles, and generated-clean on random cases", "[fuzz][oracle]") {
  Schedule compute = hand(2, {{"0F0", "0F1", "0B0", "0B1"}, {"1F0", "1B0", "1F1", "1B1"}});
  const Schedule good = insert_p2p(compute, Alignment::Auto);
  REQUIRE(verify(good).ok());
  REQUIRE(oracle::rendezvous_replay(good) == "");
  std::optional<Case> found;
  std::optional<std::string> why;
  size_t tried = 0;
  {
    PlantedInsertion planted;
    const Schedule bad = insert_p2p(compute, Alignment::Auto);
    CHECK_FALSE(verify(bad).ok());
    CHECK(oracle::check_send_recv_placement(bad) != "");
    CHECK(oracle::rendezvous_replay(bad) != "");
    CHECK(oracle::matching(bad, oracle::reference_comm(bad, {})) != "");
    std::mt19937_64 rng(77);
    for (; tried < 500 && !found; ++tried) {
      Case c = random_case(Property::GeneratedClean, rng, Limits{});
      Verdict v = check(Property::GeneratedClean, c);
      if (!v.discarded && v.failure) found = c, why = v.failure;
    }
  }
  INFO("tried " << tried << " cases");
  REQUIRE(found);
  INFO(encode(*found) << ": " << *why);
  CHECK_THAT(*why, Catch::Contains("a generated schedule has violations"));
  CHECK_FALSE(check(Property::GeneratedClean, *found).failure);  // the healthy pass writes it clean
}

TEST_CASE("the reference oracle's own P2P rows (peer rule, partner, stage delta, meta) are the step table's, for "
          "every P2P step type: a row changed in one of them fails here", "[fuzz][oracle]") {
  size_t p2p_types = 0;
  for (int k = 0; k < kOpCount; ++k) {
    const Op op = static_cast<Op>(k);
    const StepTypeInfo& t = info(op);
    const oracle::P2PRow* row = oracle::own_row(op);
    INFO(op_name(op));
    CHECK((row != nullptr) == is_p2p(op));
    if (!row) continue;
    ++p2p_types;
    CHECK(row->send == (t.kind == StepKind::P2PSend));
    CHECK(row->peer == t.peer);
    CHECK(row->partner == t.partner);
    CHECK(row->stage_delta == t.partner_stage_delta);
    CHECK(row->meta == t.meta);
  }
  CHECK(p2p_types == oracle::own_p2p_rows().size());
}

TEST_CASE("the reference oracle's own collective rows (who takes part) are the step table's, for every collective "
          "step type", "[fuzz][oracle]") {
  size_t collective_types = 0;
  for (int k = 0; k < kOpCount; ++k) {
    const Op op = static_cast<Op>(k);
    const oracle::CollectiveRow* row = oracle::own_collective_row(op);
    INFO(op_name(op));
    CHECK((row != nullptr) == (info(op).kind == StepKind::Collective));
    if (!row) continue;
    ++collective_types;
    CHECK(row->scope == info(op).collective);
  }
  CHECK(collective_types == oracle::own_collective_rows().size());
}
