#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cstdlib>
#include <string>
#include <unordered_map>

#include "checkers/checks.hpp"
#include "schedule/flat_map.hpp"
#include "schedule/errors.hpp"
#include <functional>
#include "schedule/formats/pytorch_csv.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/generators/generator.hpp"
#include "schedule/validate.hpp"
#include "sim/engine.hpp"
#include "tests/support/explorer.hpp"
#include "tests/support/expect_error.hpp"

using namespace ppsched;

namespace {

// x mod n for any int x (std::abs(INT_MIN) is undefined).
int mod(int x, int n) { return static_cast<int>(static_cast<unsigned>(x) % static_cast<unsigned>(n)); }


std::string data(const std::string& rel) {
  const char* d = std::getenv("PPSCHED_TEST_DATA");
  return std::string(d ? d : "tests/data") + "/" + rel;
}

bool has(const CheckReport& r, ViolationKind kind, int rank, int index) {
  for (const auto& v : r.violations) {
    if (v.kind != kind) continue;
    for (const auto& s : v.steps)
      if (s.rank == rank && s.index == index) return true;
  }
  return false;
}

std::string dump(const CheckReport& r) {
  std::string out;
  for (const auto& v : r.violations) {
    out += "[" + std::string(to_string(v.kind)) + "]";
    for (const auto& s : v.steps) out += " r" + std::to_string(s.rank) + "@" + std::to_string(s.index);
    out += " " + v.message + "\n";
  }
  return out;
}

// One verification pass alone over `s`, lowered under `o` as verify() lowers it.
CheckReport run_pass(void (*pass)(const PassInput&, CheckReport&), const Schedule& s, const CheckOptions& o = {}) {
  const CommModel m = build_comm_model(s, o);
  CheckReport report;
  pass(PassInput{s, m, o}, report);
  return report;
}

}  // namespace

TEST_CASE("the regression catalogue is found with the right kind and location", "[checkers]") {
  struct Case {
    const char* file;
    ViolationKind kind;
    int rank, index;
    bool only;  // the only violation reported
  };
  const Case cases[] = {
      {"bad/both_send_first.json", ViolationKind::Deadlock, 0, 3, true},
      {"bad/recv_hoisted_before_send.json", ViolationKind::Deadlock, 1, 3, true},
      {"bad/mpipe_micro_major.json", ViolationKind::P2PMismatch, 1, 5, true},
      {"bad/owner_backward_inline.json", ViolationKind::Deadlock, 0, 37, true},
      {"bad/grad_order_mismatch.json", ViolationKind::P2PMismatch, 1, 25, true},
      {"bad/short_micro_bwd_before_recv.json", ViolationKind::Dependency, 3, 24, true},
      {"bad/batch_vs_singles.json", ViolationKind::P2PMismatch, 0, 3, true},
      // hyper-parallel's own boundary transport at P = 2: both ends hoist a receive over the
      // gradient send the other receives first (the k-th groups of the pair do not face).
      {"bad/hyper_parallel_boundary_p2.csv", ViolationKind::P2PMismatch, 0, 27, false},
      {"bad/trainable_without_transpose_bwd.json", ViolationKind::CacheViolation, 0, 4, false},
      {"bad/fwd_before_recv.json", ViolationKind::Dependency, 1, 4, true},
      {"bad/w_before_i.json", ViolationKind::CacheViolation, 0, 6, true},
      {"bad/collective_subset.json", ViolationKind::CollectiveMismatch, 0, 28, true},
      {"bad/duplicated_recv.json", ViolationKind::P2PMismatch, 1, 1, false},
      // hyper-parallel's body data steps: stage 0 must load what it runs and ships on; the last
      // stage's labels must arrive (and what was loaded must be used up).
      {"bad/data_steps_without_load.json", ViolationKind::Dependency, 0, 0, false},
      {"bad/labels_never_arrive.json", ViolationKind::Dependency, 1, 8, false},
      {"bad/labels_never_arrive.json", ViolationKind::CacheViolation, 0, 4, false},
  };
  for (const auto& c : cases) {
    INFO(c.file);
    Schedule s = read_schedule_file(data(c.file));
    CheckReport r = verify(s);
    INFO(dump(r));
    CHECK(!r.ok());
    CHECK(has(r, c.kind, c.rank, c.index));
    if (c.only) CHECK(r.violations.size() == 1);
  }
}

TEST_CASE("both ranks sending first deadlocks under rendezvous and passes under eager, noted as relying on buffering",
          "[checkers]") {
  Schedule s = read_schedule_file(data("bad/both_send_first.json"));
  CheckReport strict = verify(s);
  REQUIRE(strict.violations.size() == 1);
  CHECK(strict.violations[0].ranks == std::vector<int>{0, 1});
  CHECK_THAT(strict.violations[0].message, Catch::Contains("relies on buffering"));
  CheckOptions eager;
  eager.comm = CommMode::Eager;
  CheckReport loose = verify(s, eager);
  CHECK(loose.ok());
  REQUIRE(loose.notes.size() == 1);
  CHECK_THAT(loose.notes[0], Catch::Contains("relies on buffering"));
}

TEST_CASE("a deadlock carries its cause: a wait-for cycle that buffered sends would complete", "[checkers]") {
  Schedule s = read_schedule_file(data("bad/both_send_first.json"));
  CheckReport r = verify(s);
  REQUIRE(r.violations.size() == 1);
  CHECK(!r.completes);
  CHECK(r.violations[0].cause == DeadlockCause::WaitForCycle);
  CHECK(r.violations[0].completes_with_eager);
  CheckOptions eager;
  eager.comm = CommMode::Eager;
  CHECK(verify(s, eager).completes);
}

TEST_CASE("ranks stuck on a collective some members never reach are explained by that pass, not as a deadlock",
          "[checkers]") {
  Schedule s = read_schedule_file(data("bad/collective_subset.json"));
  const CommModel m = build_comm_model(s, CheckOptions{});
  ReplayResult run = replay(s, m, CommMode::Rendezvous);
  REQUIRE(!run.completed);
  // The replay's stuck set says why (structured), so verify() can leave it out ...
  bool waits_on_finished = false;
  for (const auto& d : run.deadlocks) waits_on_finished = waits_on_finished || d.cause == DeadlockCause::WaitsOnFinished;
  CHECK(waits_on_finished);
  CheckReport r = verify(s, CheckOptions{}, m);
  CHECK(!r.completes);
  CHECK(has(r, ViolationKind::CollectiveMismatch, 0, 28));
  // ... while the collectives pass reports the unmatched collective itself.
  for (const auto& v : r.violations) CHECK(v.cause != DeadlockCause::WaitsOnFinished);
}

TEST_CASE("the lowering refuses, located, a step past the positions a message holds", "[checkers][limits]") {
  // validate_structure refuses such a step in every reader (test_formats); a schedule built in
  // code skips it, and the lowering says what it cannot hold instead of wrapping the position.
  Schedule s;
  s.ranks = 2;
  s.stages = 2;
  s.micro_batches = 1;
  s.placement = Placement::loop(2, 2);
  s.programs.resize(2);
  s.programs[0].push_back(make_step(Op::FWD, 0, 0));
  Step send = make_step(Op::DATA_SEND, 0);
  send.peer = 1;
  send.edit_tensors().resize(static_cast<size_t>(kMaxListed) + 1);
  s.programs[0].push_back(send);
  const InputError e = testing::expect_error([&] { build_comm_model(s, CheckOptions{}); });
  CHECK(e.where().rank == 0);
  CHECK(e.where().index == 1);
  CHECK(e.where().field == ".tensors");
  CHECK_THAT(e.message(), Catch::Contains("at most 16384 sub-steps or tensors a step"));
  s.programs[0][1]->edit_tensors().resize(static_cast<size_t>(kMaxListed));
  CHECK(build_comm_model(s, CheckOptions{}).messages.size() == 2 * static_cast<size_t>(kMaxListed));

  // Within those positions, a batch of five such sends posts 5 x 2^14 payloads as one group:
  // more than an action lists (Action::count, 16 bits), refused at the batch.
  std::vector<Step> subs(5, *s.programs[0][1]);
  s.programs[0][1] = make_composite(Op::BATCH_SEND_RECV, subs);
  const InputError many = testing::expect_error([&] { build_comm_model(s, CheckOptions{}); });
  CHECK(many.where().rank == 0);
  CHECK(many.where().index == 1);
  CHECK_THAT(many.message(), Catch::Contains("81920 messages at once; the lowering holds at most 65535"));
  subs.resize(3);  // 49,152 payloads: one action lists them all
  s.programs[0][1] = make_composite(Op::BATCH_SEND_RECV, subs);
  const CommModel three = build_comm_model(s, CheckOptions{});
  size_t most = 0;
  for (const Action& a : three.actions[0]) most = std::max<size_t>(most, a.count);
  CHECK(most == 3 * static_cast<size_t>(kMaxListed));
}

TEST_CASE("verify() is its list of passes run over one input into one report", "[checkers]") {
  std::vector<std::string> names;
  for (const auto& p : verification_passes()) names.emplace_back(p.name);
  CHECK(names == std::vector<std::string>{"coverage", "caches", "lowering", "p2p_matching", "collectives",
                                          "data_parallel", "replicas", "deadlock"});
  for (const char* file : {"bad/grad_order_mismatch.json", "bad/w_before_i.json", "bad/both_send_first.json"}) {
    INFO(file);
    Schedule s = read_schedule_file(data(file));
    const CheckOptions o;
    const CommModel m = build_comm_model(s, o);
    CheckReport by_hand;
    for (const auto& p : verification_passes()) p.run(PassInput{s, m, o}, by_hand);
    CheckReport r = verify(s, o, m);
    CHECK(dump(by_hand) == dump(r));
    CHECK(!r.ok());
  }
}

TEST_CASE("trainable MPipe without TRANSPOSE_BWD names every stranded cache and its micro-batches", "[checkers]") {
  CheckReport r = verify(read_schedule_file(data("bad/trainable_without_transpose_bwd.json")));
  REQUIRE(r.violations.size() == 3);
  for (const auto& v : r.violations) {
    CHECK(v.kind == ViolationKind::CacheViolation);
    CHECK(v.ranks == std::vector<int>{0});
    CHECK_THAT(v.message, Catch::Contains("not empty at the end of the run: micro 0, micro 1"));
  }
  CHECK_THAT(r.violations[0].message, Catch::Contains("_inputs_for_explicit_forward"));
  CHECK_THAT(r.violations[1].message, Catch::Contains("_keep_grad"));
}

TEST_CASE("a receive posted early under overlap_p2p does not deadlock the hoisted gap on Gloo, but does on NCCL's stream", "[checkers]") {
  // Rank 0 posts RECV_B0 then SEND_F1, rank 1 RECV_F1 then SEND_B0. Each posted operation on its
  // own (Gloo), every one finds its partner. On one NCCL stream a rank, rank 0's SEND_F1 waits
  // behind its RECV_B0, whose send rank 1 queued behind the RECV_F1 that needs SEND_F1.
  Schedule s = read_schedule_file(data("bad/recv_hoisted_before_send.json"));
  CheckOptions o;
  o.overlap_p2p = true;
  o.backend = P2PBackend::Gloo;
  CheckReport gloo = verify(s, o);
  INFO(dump(gloo));
  CHECK(gloo.ok());
  CHECK_THAT(gloo.semantics, Catch::Contains("each posted operation progresses on its own"));
  o.backend = P2PBackend::Nccl;
  CheckReport nccl = verify(s, o);
  INFO(dump(nccl));
  REQUIRE(nccl.violations.size() == 1);
  const Violation& v = nccl.violations[0];
  CHECK(v.kind == ViolationKind::Deadlock);
  CHECK(v.cause == DeadlockCause::WaitForCycle);
  CHECK_THAT(v.message, Catch::Contains("queued on rank 1's NCCL stream behind") ||
                            Catch::Contains("queued on rank 0's NCCL stream behind"));
  CHECK_THAT(v.message, Catch::Contains("With each posted operation progressing on its own (Gloo"));
  CHECK_THAT(nccl.semantics, Catch::Contains("posting order on its NCCL stream"));
  // The same order waited where it is posted deadlocks under both, and the lowering keeps no
  // stream order for it: each operation starts after its rank's earlier ones completed.
  o.overlap_p2p = false;
  CHECK(build_comm_model(s, o).stream_entry.empty());
  CHECK_FALSE(verify(s, o).completes);
}

TEST_CASE("the end-of-run drain is attributed to the last step when a program ends with idle slots", "[checkers]") {
  // Found by the lowering-matches-reference property (a crash under MALLOC_PERTURB_): the
  // drain of deferred sends named the last slot, and read the step of an idle one.
  Schedule s = one_stage_per_rank("trailing-idle", 2, 1);
  s.programs = {{make_step(Op::FWD, 0, 0), make_step(Op::FWD_SEND, 0, 0), make_step(Op::BWD_RECV, 0, 0),
                 make_step(Op::BWD, 0, 0), std::nullopt, std::nullopt},
                {make_step(Op::FWD_RECV, 0, 1), make_step(Op::FWD, 0, 1), make_step(Op::BWD, 0, 1),
                 make_step(Op::BWD_SEND, 0, 1), std::nullopt}};
  CheckOptions o;
  o.overlap_p2p = true;
  CommModel m = build_comm_model(s, o);
  for (int r = 0; r < 2; ++r) {
    const Action& drain = m.actions[static_cast<size_t>(r)].back();
    REQUIRE(drain.kind == ActionKind::Wait);
    CHECK(drain.step_index == 3);
    CHECK(drain.op == (r == 0 ? Op::BWD : Op::BWD_SEND));
  }
  CHECK(verify(s, o).ok());
}

TEST_CASE("payload descriptors that disagree on one side are a p2p_mismatch", "[checkers]") {
  GenerateOptions g;
  g.pp = 2;
  g.micro = 2;
  Schedule s = generate("1f1b", g);
  for (int r = 0; r < 2; ++r)
    for (auto& slot : s.programs[static_cast<size_t>(r)])
      if (slot && is_p2p(slot->op)) slot->edit_tensors() = {{{4, 1024}, "bf16"}};
  CHECK(verify(s).ok());
  // rank 1 expects a different shape for its first activation
  for (auto& slot : s.programs[1])
    if (slot && slot->op == Op::FWD_RECV) {
      slot->edit_tensors() = {{{4, 2048}, "bf16"}};
      break;
    }
  CheckReport r = verify(s);
  REQUIRE(r.violations.size() == 1);
  CHECK(r.violations[0].kind == ViolationKind::P2PMismatch);
  CHECK_THAT(r.violations[0].message, Catch::Contains("[4,1024] bf16 is sent where [4,2048] bf16 is expected"));
}

TEST_CASE("1F1B keeps at most min(P - r, M) activations live on rank r", "[checkers]") {
  for (int P = 1; P <= 6; ++P)
    for (int M = 1; M <= 3 * P; ++M) {
      GenerateOptions g;
      g.pp = P;
      g.micro = M;
      Schedule s = generate("1f1b", g);
      CheckOptions o;
      o.memory.activation_bytes = {1000};
      o.memory.boundary_bytes = {0};
      CheckReport r = verify(s, o);
      REQUIRE(r.ok());
      for (int rank = 0; rank < P; ++rank) {
        INFO("P=" << P << " M=" << M << " rank " << rank);
        CHECK(r.stats.peak_memory_bytes[static_cast<size_t>(rank)] == 1000 * std::min(P - rank, M));
      }
    }
}

TEST_CASE("a memory budget below the peak is reported at the step where the peak occurs", "[checkers]") {
  GenerateOptions g;
  g.pp = 4;
  g.micro = 8;
  Schedule s = generate("gpipe", g);
  CheckOptions o;
  o.memory.activation_bytes = {int64_t{1} << 30};
  o.memory.boundary_bytes = {0};
  o.memory_budget = int64_t{6} << 30;
  CheckReport r = verify(s, o);
  REQUIRE(r.violations.size() == 4);  // GPipe keeps all 8 micro-batches on every rank
  for (const auto& v : r.violations) {
    CHECK(v.kind == ViolationKind::Memory);
    CHECK_THAT(v.message, Catch::Contains("8.00 GiB"));
    CHECK_THAT(v.message, Catch::Contains("8 x fwd_cache"));
    REQUIRE(v.steps.size() == 1);
    CHECK(v.steps[0].step.op == Op::FWD);
    CHECK(v.steps[0].step.micro == 7);
  }
}

namespace {

struct Family {
  const char* name;
  int vmin, vmax;  // V range
  bool mpipe;
};

void sweep(const char* name, GenerateOptions g, int max_p, const std::function<void(const Schedule&)>& fn) {
  for (int P = 1; P <= max_p; ++P)
    for (int M = 1; M <= 3 * P; ++M) {
      g.pp = P;
      g.micro = M;
      Schedule s;
      try {
        s = generate(name, g);
      } catch (const InputError&) {
        continue;  // the family refuses this combination (tested with the generators)
      }
      fn(s);
    }
}

}  // namespace

TEST_CASE("no false alarms: every family over P 1..8, V 1..4, M 1..3P verifies clean", "[checkers][sweep]") {
  size_t checked = 0;
  auto verify_clean = [&](const Schedule& s) {
    CheckReport r = verify(s);
    INFO(s.name << " P=" << s.ranks << " S=" << s.stages << " M=" << s.micro_batches << "\n" << dump(r));
    REQUIRE(r.ok());
    ++checked;
  };
  for (const char* fam : {"gpipe", "1f1b", "zb-h1", "zbv", "dualpipev", "chimera", "dualpipe"}) {
    GenerateOptions g;
    g.vpp = std::string(fam) == "zbv" || std::string(fam) == "dualpipev" ? 2 : 1;
    sweep(fam, g, 8, verify_clean);
  }
  for (int V = 1; V <= 4; ++V) {
    for (int variant = 0; variant < 4; ++variant) {
      GenerateOptions g;
      g.vpp = V;
      g.less_memory = variant == 1;
      g.overlap_b_f = variant >= 2;
      g.dxdw_split = variant == 3;
      sweep("interleaved-1f1b", g, 8, verify_clean);
    }
    GenerateOptions g;
    g.vpp = V;
    sweep("looped-bfs", g, 8, verify_clean);
    for (Overflow of : {Overflow::Full, Overflow::Min})
      for (Tower t : {Tower::Trainable, Tower::Frozen, Tower::None})
        for (bool ob : {false, true}) {
          if (ob && t != Tower::Trainable) continue;
          GenerateOptions m;
          m.vpp = V;
          m.overflow = of;
          m.tower = t;
          m.owner_backward = ob;
          sweep("mpipe-transpose", m, 8, verify_clean);
        }
  }
  CHECK(checked > 5000);
}

TEST_CASE("generated MPipe schedules also verify under the MPipe executor's batched receive", "[checkers]") {
  CheckOptions o;
  o.mpipe_batched_recv = true;
  for (bool ob : {false, true}) {
    GenerateOptions g;
    g.vpp = 2;
    g.owner_backward = ob;
    sweep("mpipe-transpose", g, 6, [&](const Schedule& s) {
      CheckReport r = verify(s, o);
      INFO(dump(r));
      REQUIRE(r.ok());
    });
  }
}

namespace {

// Deterministic mutations of a schedule (the fuzzing issue grows these into ppsched code).
Schedule mutate(Schedule s, int kind, int rank, int pos, int target) {
  auto& p = s.programs[static_cast<size_t>(rank % s.ranks)];
  if (p.empty()) return s;
  size_t i = static_cast<size_t>(pos) % p.size();
  size_t j = static_cast<size_t>(target) % p.size();
  switch (kind % 4) {
    case 0:  // swap two adjacent steps
      if (i + 1 < p.size()) std::swap(p[i], p[i + 1]);
      break;
    case 1:  // drop a step
      p.erase(p.begin() + static_cast<long>(i));
      break;
    case 2:  // duplicate a step
      p.insert(p.begin() + static_cast<long>(i), p[i]);
      break;
    default: {  // move a step elsewhere
      auto x = p[i];
      p.erase(p.begin() + static_cast<long>(i));
      p.insert(p.begin() + static_cast<long>(std::min(j, p.size())), x);
    }
  }
  return s;
}

}  // namespace

TEST_CASE("the replay, the happens-before graph and the exhaustive explorer agree on deadlock", "[checkers][explorer]") {
  rc::prop("replay == all interleavings, for small schedules and their mutations",
           [](int family_pick, int P, int M, std::vector<std::array<int, 4>> muts, bool eager) {
             const char* fams[] = {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "mpipe-transpose"};
             const char* fam = fams[static_cast<size_t>(mod(family_pick, 5))];
             GenerateOptions g;
             g.pp = 2 + mod(P, 2);
             g.micro = 1 + mod(M, 3);
             g.vpp = std::string(fam) == "interleaved-1f1b" && g.pp == 2 ? 2 : 1;
             Schedule s = generate(fam, g);
             if (muts.size() > 3) muts.resize(3);
             for (const auto& m : muts) s = mutate(s, mod(m[0], 1 << 30), mod(m[1], 1 << 30), mod(m[2], 1 << 30), mod(m[3], 1 << 30));
             RC_PRE(s.step_count() <= 44);
             CommMode mode = eager ? CommMode::Eager : CommMode::Rendezvous;
             CheckOptions o;
             CommModel model = build_comm_model(s, o);
             ReplayResult r = replay(s, model, mode);
             auto e = testing::explore(model, mode);
             RC_PRE(e.exhausted);
             RC_TAG(r.completed ? "completes" : "stuck");
             RC_ASSERT(static_deadlock_free(model, mode) == r.completed);
             RC_ASSERT(r.completed == e.some_path_completes);
             RC_ASSERT(r.completed == !e.some_state_stuck);
           });
}

TEST_CASE("NCCL's stream order: the replay and the happens-before graph agree, and blocking programs keep their verdict", "[checkers]") {
  rc::prop("replay == happens-before graph under overlap_p2p on NCCL's stream order",
           [](int family_pick, int P, int M, std::vector<std::array<int, 4>> muts, bool eager) {
             const char* fams[] = {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"};
             const char* fam = fams[static_cast<size_t>(mod(family_pick, 5))];
             GenerateOptions g;
             g.pp = 2 + mod(P, 3);
             g.micro = 1 + mod(M, 4);
             g.vpp = std::string(fam) == "interleaved-1f1b" || std::string(fam) == "zbv" ? 2 : 1;
             if (std::string(fam) == "interleaved-1f1b" && g.micro % g.pp) g.micro = g.pp;
             Schedule s = generate(fam, g);
             if (muts.size() > 3) muts.resize(3);
             for (const auto& m : muts) s = mutate(s, mod(m[0], 1 << 30), mod(m[1], 1 << 30), mod(m[2], 1 << 30), mod(m[3], 1 << 30));
             const CommMode mode = eager ? CommMode::Eager : CommMode::Rendezvous;
             CheckOptions o;
             o.comm = mode;
             o.overlap_p2p = true;
             const CommModel nccl = build_comm_model(s, o);
             RC_ASSERT(nccl.stream_ordered());
             const bool completes = replay(s, nccl, mode).completed;
             RC_TAG(completes ? "completes" : "stuck");
             RC_ASSERT(static_deadlock_free(nccl, mode) == completes);
             // The stream order only adds waits: what completes on it completes on Gloo.
             o.backend = P2PBackend::Gloo;
             const CommModel gloo = build_comm_model(s, o);
             RC_ASSERT(!gloo.stream_ordered());
             if (completes) RC_ASSERT(replay(s, gloo, mode).completed);
             // Blocking: the same lowering and verdict on both.
             o.overlap_p2p = false;
             const CommModel blocking_gloo = build_comm_model(s, o);
             o.backend = P2PBackend::Nccl;
             const CommModel blocking_nccl = build_comm_model(s, o);
             RC_ASSERT(!blocking_nccl.stream_ordered());
             RC_ASSERT(replay(s, blocking_nccl, mode).completed == replay(s, blocking_gloo, mode).completed);
           });
}

TEST_CASE("FlatMap agrees with std::unordered_map under random inserts, finds and erases", "[checkers]") {
  // The cache walk's live set. Keys come from a small range so that probe runs collide, wrap
  // around the table and get erased from the middle (the backward-shift path).
  rc::prop("same contents after every operation", [](const std::vector<std::pair<uint8_t, uint16_t>>& ops) {
    FlatMap<int> m(4);
    std::unordered_map<uint64_t, int> ref;
    int value = 0;
    for (const auto& [what, raw] : ops) {
      const uint64_t key = raw % 97 * 0x100000001ull;  // same-shaped keys, as the walk packs them
      switch (what % 3) {
        case 0: {
          auto [v, inserted] = m.insert(key, ++value);
          const bool ref_inserted = ref.emplace(key, value).second;
          RC_ASSERT(inserted == ref_inserted);
          RC_ASSERT(*v == ref.at(key));
          break;
        }
        case 1:
          RC_ASSERT(m.erase(key) == (ref.erase(key) == 1));
          break;
        default: {
          const int* v = m.find(key);
          auto it = ref.find(key);
          RC_ASSERT((v != nullptr) == (it != ref.end()));
          if (v) RC_ASSERT(*v == it->second);
        }
      }
      RC_ASSERT(m.size() == ref.size());
    }
    size_t seen = 0;
    m.for_each([&](uint64_t k, int v) {
      ++seen;
      RC_ASSERT(ref.count(k) == 1u);
      RC_ASSERT(ref.at(k) == v);
    });
    RC_ASSERT(seen == ref.size());
  });
}

TEST_CASE("tables over (stage, micro) cost memory by steps, not by declared counts", "[checkers]") {
  // A 17-byte CSV (one step "10000F09999") once made P2P insertion allocate 2.4 GB (libFuzzer).
  KeyTable<int> sparse(uint64_t{10001} * 10000, 1, -1);
  CHECK_FALSE(sparse.dense());
  CHECK(sparse.get(99'999'999) == -1);
  sparse.at(99'999'999) = 7;
  CHECK(sparse.get(99'999'999) == 7);
  sparse.reset();
  CHECK(sparse.get(99'999'999) == -1);
  KeyTable<int> dense(128 * 1024, 782'336, -1);
  CHECK(dense.dense());
  dense.at(5) = 3;
  CHECK(dense.get(5) == 3);

  // The same file, read for real: a located error, without the allocation.
  CsvReadOptions options;
  options.placement = Placement{};  // loop, filled in by the reader
  CHECK_THROWS_WITH(read_pytorch_csv("10000F09999\n\n", "big.csv", options),
                    Catch::Contains("F9999s10000 needs the FWD of micro 9999 at stage 9999"));
  // A JSON schedule declaring 3000 x 3000 (stage, micro) pairs and holding one step: the
  // coverage report names the missing work per stage, in memory proportional to the steps.
  Schedule s;
  s.name = "huge";
  s.ranks = 1;
  s.stages = 3000;
  s.micro_batches = 3000;
  s.placement = Placement::loop(1, 3000);
  s.programs = {{make_step(Op::FWD, 0, 0)}};
  const CheckReport r = run_pass(check_coverage, s);
  CHECK(r.violations.size() == 2 * 3000);  // per stage: "no FWD" (for the micros it lacks) and "no backward"
}

TEST_CASE("the cache walk's fast clean-case proof agrees with the explaining walk", "[checkers]") {
  rc::prop("same violations, peaks and peak steps, for generated schedules and their mutations",
           [](int family_pick, int P, int M, int V, std::vector<std::array<int, 4>> muts, bool budget) {
             const char* fams[] = {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev", "mpipe-transpose"};
             const char* fam = fams[static_cast<size_t>(mod(family_pick, 7))];
             GenerateOptions g;
             g.pp = 2 + mod(P, 3);
             g.micro = 1 + mod(M, 6);
             g.vpp = std::string(fam) == "interleaved-1f1b" ? 1 + mod(V, 3) : 1;
             Schedule s;
             try {
               s = generate(fam, g);
             } catch (const InputError&) {
               RC_DISCARD("not a valid generator configuration");
             }
             if (muts.size() > 4) muts.resize(4);
             for (const auto& m : muts) s = mutate(s, mod(m[0], 1 << 30), mod(m[1], 1 << 30), mod(m[2], 1 << 30), mod(m[3], 1 << 30));
             RC_TAG(muts.empty() ? "as generated" : "mutated");
             CheckOptions fast, exact;
             if (budget) fast.memory_budget = exact.memory_budget = 3 * fast.memory.activation(0);
             exact.testing_exact_cache_walk = true;
             const CheckReport rf = run_pass(check_caches, s, fast);
             const CheckReport re = run_pass(check_caches, s, exact);
             const std::vector<Violation>& vf = rf.violations;
             const std::vector<Violation>& ve = re.violations;
             const CheckStats& sf = rf.stats;
             const CheckStats& se = re.stats;
             RC_TAG(vf.empty() ? "clean" : "violations");
             RC_ASSERT(sf.peak_memory_bytes == se.peak_memory_bytes);
             RC_ASSERT(sf.peak_memory_index == se.peak_memory_index);
             RC_ASSERT(vf.size() == ve.size());
             for (size_t k = 0; k < vf.size(); ++k) {
               RC_ASSERT(vf[k].kind == ve[k].kind);
               RC_ASSERT(vf[k].message == ve[k].message);
             }
           });
}

// ---- hyper-parallel's own stage conventions on MPipe steps -----------------------------------

namespace {

// The canonical form of an MPipe schedule: every MPipe step without a stage (the owner rule,
// not a placement, says where it runs).
Schedule without_mpipe_stages(Schedule s) {
  for (Program& p : s.programs)
    for (Slot& slot : p)
      if (slot && !stage_places(slot->op)) slot->stage = kNone;
  return s;
}

int mpipe_steps_at_stage0(const Schedule& s) {
  int n = 0;
  for (const Program& p : s.programs)
    for (const Slot& slot : p)
      if (slot && !stage_places(slot->op) && slot->stage == 0) ++n;
  return n;
}

Schedule mpipe_p3(bool owner_backward, bool data_steps = true) {
  GenerateOptions g;
  g.pp = 3;
  g.micro = 3;
  g.tower = Tower::Trainable;
  g.owner_backward = owner_backward;
  g.data_steps = data_steps;
  return generate("mpipe-transpose", g);
}

// Verifies both and simulates both with the default costs: the same verdict, makespan and
// per-rank peak memory.
void expect_same_as_canonical(const Schedule& hp, const Schedule& canonical) {
  const CheckReport a = verify(hp), b = verify(canonical);
  INFO(dump(a));
  CHECK(a.ok());
  CHECK(b.ok());
  CHECK(a.violations.size() == b.violations.size());
  CHECK(a.notes == b.notes);
  const CostModel c = default_cost_model(hp.stages);
  const RunRecord x = simulate(hp, c), y = simulate(canonical, c);
  CHECK(x.completed);
  CHECK(x.makespan_ms == y.makespan_ms);
  REQUIRE(x.ranks.size() == y.ranks.size());
  for (size_t r = 0; r < x.ranks.size(); ++r) CHECK(x.ranks[r].peak_memory_bytes == y.ranks[r].peak_memory_bytes);
}

}  // namespace

TEST_CASE("hyper-parallel's stage 0 on the MPIPE_GRAD_* steps and its broadcast's emitting rank verify and simulate "
          "as the canonical form",
          "[checkers][mpipe]") {
  const Schedule hp = read_schedule_file(data("schedules/hyper_parallel_grad_stage0.json"));
  // The file is hyper-parallel's own output: GRAD_SEND, GRAD_RECV_WITH_BACKWARD (on owners 1
  // and 2) and GRAD_REDUCE (on every rank) tagged with stage 0, each MPIPE_PARAM_BROADCAST with
  // its rank as micro, which the reader takes as the tag it is (and leaves out).
  CHECK(mpipe_steps_at_stage0(hp) == 2 + 2 + 3);
  CHECK(read_input_file(data("schedules/hyper_parallel_grad_stage0.json")).find("\"MPIPE_PARAM_BROADCAST\", \"micro\": 2") !=
        std::string::npos);
  for (const Program& p : hp.programs) CHECK(p.front()->micro == kNone);
  const Schedule canonical = mpipe_p3(true);
  CHECK(without_mpipe_stages(hp).programs == canonical.programs);
  expect_same_as_canonical(hp, canonical);
}

TEST_CASE("hyper-parallel's older MPipe prefix (stage 0, no micro on the broadcast) verifies as the canonical form",
          "[checkers][mpipe]") {
  const Schedule hp = read_schedule_file(data("schedules/hyper_parallel_old_prefix.json"));
  CHECK(mpipe_steps_at_stage0(hp) > 10);
  // That version had no data steps in its body.
  const Schedule canonical = mpipe_p3(false, false);
  CHECK(without_mpipe_stages(hp).programs == canonical.programs);
  expect_same_as_canonical(hp, canonical);
}

TEST_CASE("an MPipe step on a rank the owner rule does not name is a dependency violation, stage tag or not",
          "[checkers][mpipe]") {
  // Owners swapped for micros 1 and 2: rank 1 now runs micro 1's owner steps without owning it.
  Schedule hp = read_schedule_file(data("schedules/hyper_parallel_grad_stage0.json"));
  hp.mpipe->owners = {0, 2, 1};
  const CheckReport r = verify(hp);
  bool named = false;
  for (const auto& v : r.violations)
    if (v.kind == ViolationKind::Dependency &&
        v.message.find("micro-batch 1 is owned by rank 2") != std::string::npos &&
        v.message.find("MPipe owner rule") != std::string::npos)
      named = true;
  INFO(dump(r));
  CHECK(named);
  // A body step still follows its stage's placement.
  Schedule body = mpipe_p3(true);
  for (Slot& slot : body.programs[1])
    if (slot && slot->op == Op::FWD) {
      slot->stage = 2;
      break;
    }
  const CheckReport rb = verify(body);
  bool placed = false;
  for (const auto& v : rb.violations)
    if (v.kind == ViolationKind::Dependency && v.message.find("stage 2 is placed on rank 2") != std::string::npos)
      placed = true;
  INFO(dump(rb));
  CHECK(placed);
}

TEST_CASE("a PP x DP job runs its FSDP steps as PyTorch's runtime does", "[checkers][dp]") {
  const auto options = [](int degree, bool fsdp) {
    CheckOptions o;
    o.dp.degree = degree;
    o.dp.fsdp = fsdp;
    return o;
  };
  // PyTorch's own lowered 1F1B (UNSHARD first, REDUCE_GRAD and RESHARD after the last backward).
  const Schedule good = read_schedule_file(data("schedules/1f1b_2rank_comms.csv"));
  for (bool fsdp : {false, true}) CHECK(verify(good, options(8, fsdp)).ok());
  struct Case {
    const char* file;
    bool needs_fsdp;  // a rule of sharded parameters only
    ViolationKind kind;
    int rank, index;
    const char* says;
  };
  const Case cases[] = {
      {"bad/dp_compute_before_unshard.csv", true, ViolationKind::Dependency, 0, 0, "on sharded parameters"},
      {"bad/dp_unshard_twice.csv", true, ViolationKind::CacheViolation, 1, 3, "Unsharding the same stage twice"},
      {"bad/dp_left_gathered.csv", true, ViolationKind::CacheViolation, 1, 0, "still gathered at the end"},
      {"bad/dp_reduce_before_last_backward.csv", false, ViolationKind::Dependency, 0, 9, "never reduced"},
      {"bad/dp_missing_reduce.csv", false, ViolationKind::Dependency, 1, 7, "never reduced over its DP group"},
  };
  for (const auto& c : cases) {
    INFO(c.file);
    const Schedule s = read_schedule_file(data(c.file));
    const CheckReport r = verify(s, options(2, true));
    REQUIRE(r.violations.size() == 1);
    CHECK(has(r, c.kind, c.rank, c.index));
    CHECK_THAT(r.violations[0].message, Catch::Contains(c.says));
    // Without sharding only the reduction rules apply; with one replica none does.
    CHECK(verify(s, options(2, false)).ok() == c.needs_fsdp);
    CHECK(verify(s, options(1, true)).ok());
    CHECK(verify(s).ok());
  }
  // A schedule without FSDP steps: a note under DDP, a sharded compute per stage under FSDP.
  GenerateOptions g;
  g.pp = 2;
  g.micro = 4;
  const Schedule plain = generate("1f1b", g);
  const CheckReport ddp = verify(plain, options(2, false));
  CHECK(ddp.ok());
  REQUIRE(ddp.notes.size() == 1);
  CHECK_THAT(ddp.notes[0], Catch::Contains("no FSDP_* steps"));
  const CheckReport fsdp = verify(plain, options(2, true));
  CHECK(fsdp.violations.size() == 2);
  CHECK(has(fsdp, ViolationKind::Dependency, 0, 0));
  CHECK(verify(add_fsdp_steps(plain), options(2, true)).ok());
}

// ---- replicated stages (Chimera, DualPipe) ---------------------------------------------------

namespace {

Schedule chimera(int P, int M) {
  GenerateOptions g;
  g.pp = P;
  g.micro = M;
  return generate("chimera", g);
}

// The index of the step labelled `label` on `rank` (-1 if none).
int index_of(const Schedule& s, int rank, const std::string& label) {
  const Program& p = s.programs[static_cast<size_t>(rank)];
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] && short_label(*p[i]) == label) return static_cast<int>(i);
  return -1;
}

// Moves the step at `from` so that it lands at `to` (indices of the program before the move).
void move_step(Schedule& s, int rank, int from, int to) {
  Program& p = s.programs[static_cast<size_t>(rank)];
  Slot st = p[static_cast<size_t>(from)];
  p.erase(p.begin() + from);
  p.insert(p.begin() + (to > from ? to - 1 : to), st);
}

bool mentions(const CheckReport& r, ViolationKind kind, const std::string& text) {
  for (const auto& v : r.violations)
    if (v.kind == kind && v.message.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("a replicated stage's gradient sync must follow its last weight-gradient step on its rank", "[checkers][replicas]") {
  Schedule s = chimera(4, 4);  // rank 0: ... B0s0 RSs7 BR1s0 B1s0 RSs0
  REQUIRE(verify(s).ok());
  const int sync = index_of(s, 0, "RSs0"), last_b = index_of(s, 0, "B1s0");
  REQUIRE((sync > last_b && last_b > 0));
  move_step(s, 0, sync, last_b);
  const CheckReport r = verify(s);
  INFO(dump(r));
  CHECK(has(r, ViolationKind::Dependency, 0, last_b + 1));  // B1s0, one slot later now
  CHECK(mentions(r, ViolationKind::Dependency, "after its REPLICA_GRAD_SYNC"));
  CHECK(mentions(r, ViolationKind::Dependency, "copy 0 of model stage 0"));
}

TEST_CASE("a copy that never syncs, or syncs twice, is reported, and its partner's sync is left unmatched", "[checkers][replicas]") {
  SECTION("missing") {
    Schedule s = chimera(4, 8);
    const int sync = index_of(s, 0, "RSs0");
    s.programs[0].erase(s.programs[0].begin() + sync);
    const CheckReport r = verify(s);
    INFO(dump(r));
    CHECK(mentions(r, ViolationKind::Dependency, "never synchronised with its other copies"));
    CHECK(mentions(r, ViolationKind::CollectiveMismatch, "rank 0 never reaches it"));
  }
  SECTION("twice") {
    Schedule s = chimera(4, 8);
    const int sync = index_of(s, 0, "RSs0");
    s.programs[0].push_back(s.programs[0][static_cast<size_t>(sync)]);
    const CheckReport r = verify(s);
    INFO(dump(r));
    CHECK(mentions(r, ViolationKind::CacheViolation, "a second time"));
    CHECK(mentions(r, ViolationKind::CollectiveMismatch, "never reaches it"));
  }
}

TEST_CASE("two model stages whose copies share ranks sync in one group, in the same order on both ranks",
          "[checkers][replicas]") {
  // Rank 0 holds model stages 0 (stage 0) and 3 (stage 7), rank 3 model stages 3 (stage 3) and
  // 0 (stage 4): both sync model stage 3 first. Rank 0 syncing model stage 0 first would add up
  // stage 0's gradients with stage 3's on the other side.
  Schedule s = chimera(4, 4);
  CheckOptions o;
  int pair_groups = 0;
  for (const auto& g : build_comm_model(s, o).groups) pair_groups += g.members.size() == 2 ? 1 : 0;
  CHECK(pair_groups == 2);  // {0,3} and {1,2}, each serving two model stages
  const int first = index_of(s, 0, "RSs7");
  s.programs[0].push_back(s.programs[0][static_cast<size_t>(first)]);
  s.programs[0].erase(s.programs[0].begin() + first);
  const CheckReport r = verify(s);
  INFO(dump(r));
  CHECK_FALSE(r.ok());
  CHECK(mentions(r, ViolationKind::CollectiveMismatch, "rank 0 calls REPLICA_GRAD_SYNC of model stage 0"));
  CHECK(mentions(r, ViolationKind::CollectiveMismatch, "rank 3 calls REPLICA_GRAD_SYNC of model stage 3"));
}

TEST_CASE("a REPLICA_GRAD_SYNC of a stage with no other copy is refused by the lowering", "[checkers][replicas]") {
  GenerateOptions g;
  g.pp = 2;
  g.micro = 2;
  Schedule s = generate("1f1b", g);
  s.programs[0].push_back(make_step(Op::REPLICA_GRAD_SYNC, kNone, 0));
  const CheckReport r = verify(s);
  INFO(dump(r));
  CHECK(mentions(r, ViolationKind::CollectiveMismatch, "holds no other copy of it"));
}

TEST_CASE("replicated stages: a micro-batch runs through its own copy only", "[checkers][replicas]") {
  Schedule s = chimera(4, 4);
  s.micro_pipe[0] = 1;  // micro 0 now belongs to the up pipeline, but runs on the down one
  const CheckReport r = verify(s);
  INFO(dump(r));
  CHECK(mentions(r, ViolationKind::Dependency, "never runs through this copy"));
  CHECK(mentions(r, ViolationKind::Dependency, "no FWD"));
}
