#include <catch2/catch.hpp>

#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "tests/support/structure.hpp"

using namespace ppsched;
using namespace ppsched::testing;

namespace {
Schedule compute_only(int ranks, int stages, int micro, Placement placement,
                      std::vector<std::vector<std::string>> order) {
  Schedule s;
  s.name = "test";
  s.ranks = ranks;
  s.stages = stages;
  s.micro_batches = micro;
  s.placement = std::move(placement);
  for (auto& rank_order : order) {
    Program p;
    for (auto& tok : rank_order) {
      if (tok == ".") { p.push_back(std::nullopt); continue; }
      // "F3s1" / "B0s2" / "I0s1" / "W0s1"
      Op op = tok[0] == 'F' ? Op::FWD : tok[0] == 'B' ? Op::BWD : tok[0] == 'I' ? Op::BWD_INPUT : Op::BWD_WEIGHT;
      auto spos = tok.find('s');
      p.push_back(make_step(op, std::stoi(tok.substr(1, spos - 1)), std::stoi(tok.substr(spos + 1))));
    }
    s.programs.push_back(std::move(p));
  }
  return s;
}
}  // namespace

TEST_CASE("auto-aligned insertion of a 2-rank 1F1B puts sends after producers and receives before consumers",
          "[comm_insertion]") {
  auto s = compute_only(2, 2, 2, Placement::loop(2, 2),
                        {{"F0s0", "F1s0", "B0s0", "B1s0"}, {"F0s1", "B0s1", "F1s1", "B1s1"}});
  auto out = insert_p2p(s, Alignment::Auto);
  CHECK(check_compute_coverage(out) == "");
  CHECK(check_send_recv_placement(out) == "");
  CHECK(rendezvous_replay(out) == "");
  CHECK(joined(out.programs[0], false) == "F0s0 FS0s0 F1s0 FS1s0 BR0s0 B0s0 BR1s0 B1s0");
  CHECK(joined(out.programs[1], false) == "FR0s1 F0s1 FR1s1 B0s1 BS0s1 F1s1 B1s1 BS1s1");
}

TEST_CASE("no P2P is added between adjacent stages on the same rank (V placement)", "[comm_insertion]") {
  // 2 ranks, 4 stages V: 0 1 1 0
  auto s = compute_only(2, 4, 1, Placement::v(2, 4),
                        {{"F0s0", "F0s3", "B0s3", "B0s0"}, {"F0s1", "F0s2", "B0s2", "B0s1"}});
  auto out = insert_p2p(s, Alignment::Auto);
  CHECK(rendezvous_replay(out) == "");
  CHECK(joined(out.programs[0], false) == "F0s0 FS0s0 FR0s3 F0s3 B0s3 BS0s3 BR0s0 B0s0");
  CHECK(joined(out.programs[1], false) == "FR0s1 F0s1 F0s2 FS0s2 BR0s2 B0s2 B0s1 BS0s1");
}

TEST_CASE("as-given alignment refuses a consumer placed in its producer's column", "[comm_insertion]") {
  auto s = compute_only(2, 2, 1, Placement::loop(2, 2), {{"F0s0", ".", "B0s0"}, {"F0s1", "B0s1"}});
  try {
    insert_p2p(s, Alignment::AsGiven);
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(e.where().rank == 1);
    CHECK(e.where().index == 0);
    CHECK_THAT(e.message(), Catch::Contains("later column"));
  }
}

TEST_CASE("a compute order with a dependency cycle is refused with both waits named", "[comm_insertion]") {
  // rank 0 wants B0s0 (needs B0s1) before F0s0; rank 1 needs F0s0 first.
  auto s = compute_only(2, 2, 1, Placement::loop(2, 2), {{"B0s0", "F0s0"}, {"F0s1", "B0s1"}});
  try {
    insert_p2p(s, Alignment::Auto);
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK_THAT(e.message(), Catch::Contains("rank 0 at step 0 (B0s0) waits for"));
    CHECK_THAT(e.message(), Catch::Contains("rank 1 at step 0 (F0s1) waits for F0s0"));
  }
}

TEST_CASE("a step on a rank that does not own its stage is refused", "[comm_insertion]") {
  auto s = compute_only(2, 2, 1, Placement::loop(2, 2), {{"F0s0", "F0s1"}, {"B0s1", "B0s0"}});
  CHECK_THROWS_WITH(insert_p2p(s, Alignment::Auto), Catch::Contains("placed on rank 1"));
}

TEST_CASE("coalescing turns runs of P2P steps into batches and keeps single ones", "[comm_insertion]") {
  auto s = compute_only(2, 2, 2, Placement::loop(2, 2),
                        {{"F0s0", "F1s0", "B0s0", "B1s0"}, {"F0s1", "B0s1", "F1s1", "B1s1"}});
  auto out = coalesce_p2p(insert_p2p(s, Alignment::Auto));
  CHECK(joined(out.programs[1], false) == "FR0s1 F0s1 FR1s1 B0s1 BS0s1 F1s1 B1s1 BS1s1");
  auto stripped = strip_p2p(out);
  CHECK(joined(stripped.programs[1], false) == "F0s1 B0s1 F1s1 B1s1");
}

TEST_CASE("a compute-only pipeline of 5000 ranks is laid out without ranks^2 idle padding",
          "[comm_insertion][limits]") {
  // One micro-batch through 5000 one-stage ranks: the time-column layout would pad to about
  // 1.5 * 5000^2 idle slots; past the padding limit the same order comes without them.
  const int P = 5000;
  std::vector<std::vector<std::string>> order(P);
  for (int r = 0; r < P; ++r) order[r] = {"F0s" + std::to_string(r), "B0s" + std::to_string(r)};
  const Schedule s = compute_only(P, P, 1, Placement::loop(P, P), order);
  const Schedule out = insert_p2p(s, Alignment::Auto);
  size_t steps = 0, idle = 0;
  for (const auto& prog : out.programs)
    for (const auto& slot : prog) (slot ? steps : idle)++;
  CHECK(idle == 0);
  CHECK(steps == size_t{6} * P - 4);  // F, B, and a send and a receive per boundary each way
  // Rank 1: receive F, F, send F, receive B, B, send B (the ordinary 1F1B-with-P2P order).
  const Program& r1 = out.programs[1];
  REQUIRE(r1.size() == 6);
  CHECK(r1[0]->op == Op::FWD_RECV);
  CHECK(r1[1]->op == Op::FWD);
  CHECK(r1[2]->op == Op::FWD_SEND);
  CHECK(r1[3]->op == Op::BWD_RECV);
  CHECK(r1[4]->op == Op::BWD);
  CHECK(r1[5]->op == Op::BWD_SEND);
  // A small layout keeps its idle columns for display, and the order without them is the same.
  std::vector<std::vector<std::string>> small(4);
  for (int r = 0; r < 4; ++r) small[r] = {"F0s" + std::to_string(r), "B0s" + std::to_string(r)};
  const Schedule padded = insert_p2p(compute_only(4, 4, 1, Placement::loop(4, 4), small), Alignment::Auto);
  size_t padded_idle = 0;
  for (const auto& prog : padded.programs)
    for (const auto& slot : prog) padded_idle += !slot;
  CHECK(padded_idle > 0);
}

TEST_CASE("insert_p2p_if_compute_only: one rule for a hand-written file, JSON or CSV", "[comm_insertion]") {
  // No P2P step at all and a hand-over between ranks: the column scan inserts them.
  auto s = compute_only(2, 2, 2, Placement::loop(2, 2),
                        {{"F0s0", "F1s0", "B0s0", "B1s0"}, {"F0s1", "B0s1", "F1s1", "B1s1"}});
  Schedule expected = insert_p2p(s, Alignment::Auto);
  CHECK(insert_p2p_if_compute_only(s) == 8);
  CHECK(s.step_count() == expected.step_count());
  CHECK(check_send_recv_placement(s) == "");
  // Any P2P step: taken as written, even when others are missing (the checkers judge it).
  auto mixed = compute_only(2, 2, 2, Placement::loop(2, 2),
                            {{"F0s0", "F1s0", "B0s0", "B1s0"}, {"F0s1", "B0s1", "F1s1", "B1s1"}});
  mixed.programs[0].insert(mixed.programs[0].begin() + 1, make_step(Op::FWD_SEND, 0, 0));
  const size_t before = mixed.step_count();
  CHECK(insert_p2p_if_compute_only(mixed) == 0);
  CHECK(mixed.step_count() == before);
  // Every stage on one rank: nothing to hand over, nothing inserted.
  auto one = compute_only(1, 2, 1, Placement::explicit_map({0, 0}), {{"F0s0", "F0s1", "B0s1", "B0s0"}});
  CHECK(insert_p2p_if_compute_only(one) == 0);
  CHECK(one.step_count() == 4);
}
