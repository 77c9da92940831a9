// Families against their reference implementations' real output.
//
// tests/data/peers/ holds what the peers' own code printed, run under a stub (their code is not
// in this repository; tests/data/peers/README.md says what was run, at which commit):
//  - hyper_parallel/: hyper-parallel's scheduler.py and mpipe/schedule.py (ScheduleGPipe,
//    Schedule1F1B, ScheduleInterleaved1F1B, ScheduleMPipeTranspose built by
//    construct_exec_order), one rank per line in PyTorch's action notation (read with
//    ppsched's parse_action), idle slots as '.'; and its P2P transport passes (coalesce_p2p,
//    attach_fwd_boundary_p2p) on the interleaved orders, boundary steps marked '^';
//  - megatron/: Megatron-LM's get_schedule_table + get_pp_rank_microbatches +
//    convert_schedule_table_to_order per rank, and what forward_backward_pipelining_with_interleaving
//    refuses, with its message;
//  - chimera/: Shigangli/Chimera's chimera_pipeline_rank.py grid as its runtime walks it;
//  - deepseek/: DeepSeek's dualpipe.py (DualPipe.step) per rank, OVERLAP_F_B pairs included.
// Each case line is the ppsched command line of the same schedule.
#include <catch2/catch.hpp>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "checkers/checks.hpp"
#include "lowering/stream_program.hpp"
#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/action_notation.hpp"
#include "schedule/generators/generator.hpp"
#include "schedule/validate.hpp"

using namespace ppsched;

namespace {

std::string data_path(const std::string& rel) {
  const char* d = std::getenv("PPSCHED_TEST_DATA");
  REQUIRE(d != nullptr);
  return std::string(d) + "/" + rel;
}

std::string read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::string text;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return text;
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// A case line: "case FAMILY --pp P [--vpp V] --micro M [flags]" -> the family and its options.
struct Case {
  std::string line;
  std::string family;
  GenerateOptions options;
  std::vector<std::vector<std::string>> ranks;  // the peer's tokens per rank
  std::string refused;                          // Megatron: what it refused, with its message
  std::string transport;                        // hyper-parallel's p2p_transport pass: "", batch, boundary
};

GenerateOptions parse_flags(const std::vector<std::string>& w, size_t from) {
  GenerateOptions o;
  for (size_t k = from; k < w.size(); ++k) {
    const std::string& f = w[k];
    auto value = [&] { return std::stoi(w.at(++k)); };
    if (f == "--pp") o.pp = value();
    else if (f == "--vpp") o.vpp = value();
    else if (f == "--micro") o.micro = value();
    else if (f == "--group-size") o.group_size = value();
    else if (f == "--tower") {
      const std::string t = w.at(++k);
      o.tower = t == "frozen" ? Tower::Frozen : t == "none" ? Tower::None : Tower::Trainable;
    } else if (f == "--overflow") o.overflow = w.at(++k) == "min" ? Overflow::Min : Overflow::Full;
    else if (f == "--owner-backward") o.owner_backward = true;
    else if (f == "--less-memory") o.less_memory = true;
    else if (f == "--overlap-b-f") o.overlap_b_f = true;
    else if (f == "--dxdw-split") o.dxdw_split = true;
    else if (f == "--data-steps") o.data_steps = true;
    else FAIL("unknown flag " << f);
  }
  return o;
}

std::vector<Case> read_cases(const std::string& text) {
  std::vector<Case> cases;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("case ", 0) == 0) {
      Case c;
      c.line = line;
      const auto w = words(line);
      c.family = w.at(1);
      auto words_left = w;
      const auto t = std::find(words_left.begin(), words_left.end(), "--p2p-transport");
      if (t != words_left.end()) {
        REQUIRE(t + 1 != words_left.end());
        c.transport = *(t + 1);
        words_left.erase(t, t + 2);
      }
      c.options = parse_flags(words_left, 2);
      cases.push_back(std::move(c));
    } else if (line.rfind("refused ", 0) == 0) {
      REQUIRE(!cases.empty());
      cases.back().refused = line.substr(8);
    } else {
      REQUIRE(!cases.empty());
      auto w = words(line.substr(line.find(':') + 1));
      cases.back().ranks.push_back(std::move(w));
    }
  }
  return cases;
}

// hyper-parallel's output as a ppsched schedule, read the way ppsched reads a file: the tokens
// through parse_action, then validate_structure and the readers' drop_rank_tags (its
// MPIPE_PARAM_BROADCAST carries the emitting rank in the micro field).
Schedule peer_schedule(const Case& c, const Schedule& like) {
  Schedule s;
  s.name = "hyper-parallel";
  s.ranks = like.ranks;
  s.stages = like.stages;
  s.micro_batches = like.micro_batches;
  s.placement = like.placement;
  s.mpipe = like.mpipe;
  for (const auto& tokens : c.ranks) {
    Program p;
    for (const auto& token : tokens) {
      if (token == ".") {
        p.push_back(std::nullopt);
        continue;
      }
      // '^': a step hyper-parallel hangs on the OVERLAP_B_F before it (boundary_p2p) and issues
      // at the overlap's fwd/bwd boundary, in the order listed: ppsched lists it right after
      // the overlap, before the rest of the gap.
      const bool boundary = token.front() == '^';
      const std::string t = boundary ? token.substr(1) : token;
      std::string error;
      auto st = parse_action(t, &error);
      INFO(t << ": " << error);
      REQUIRE(st);
      if (boundary) REQUIRE((c.transport == "boundary" && is_body_p2p(st->op)));
      // Under the boundary transport hyper-parallel's runtime issues every body P2P step as a
      // batch of its own (data steps alone, unbatched); ppsched writes that batch.
      if (c.transport == "boundary" && is_body_p2p(st->op)) st = make_composite(Op::BATCH_SEND_RECV, {*st});
      p.push_back(std::move(*st));
    }
    s.programs.push_back(std::move(p));
  }
  mark_data_steps(s);
  validate_structure(s, "hyper-parallel");
  drop_rank_tags(s);
  return s;
}

// A program's steps without its idle slots; a step whose stage only tags it (the MPipe owner
// rule says where it runs; hyper-parallel writes -1, or 0 on its GRAD steps) compares without it.
std::vector<std::string> steps_of(const Program& p) {
  std::vector<std::string> out;
  for (const auto& slot : p) {
    if (!slot) continue;
    Step st = *slot;
    if (!stage_places(st.op)) st.stage = kNone;
    out.push_back(short_label(st));
  }
  return out;
}

// The program with its idle slots, trailing ones left out (they carry no timing).
std::vector<std::string> layout_of(const Program& p) {
  std::vector<std::string> out;
  for (const auto& slot : p) out.push_back(slot ? short_label(*slot) : ".");
  while (!out.empty() && out.back() == ".") out.pop_back();
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : " ") + x;
  return out;
}

struct Tally {
  int cases = 0, identical = 0, same_layout = 0, verified = 0;
  std::map<std::string, int> refused;  // transport and rule -> cases that do not verify
};

// Generates each case with ppsched and compares it step for step with the peer's output.
Tally compare_with_hyper_parallel(const std::string& file, bool compare_layout) {
  Tally t;
  for (const Case& c : read_cases(read_gz(data_path(file)))) {
    INFO(c.line);
    Schedule ours = generate(c.family, c.options);
    if (c.transport == "batch") ours = coalesce_p2p(ours);
    if (c.transport == "boundary") ours = attach_boundary_p2p(ours);
    const Schedule peer = peer_schedule(c, ours);
    REQUIRE(peer.programs.size() == ours.programs.size());
    bool same = true, layout = true;
    for (size_t r = 0; r < ours.programs.size(); ++r) {
      INFO("rank " << r);
      const std::string a = joined(steps_of(ours.programs[r])), b = joined(steps_of(peer.programs[r]));
      CHECK(a == b);
      same = same && a == b;
      if (compare_layout) {
        const std::string la = joined(layout_of(ours.programs[r])), lb = joined(layout_of(peer.programs[r]));
        CHECK(la == lb);
        layout = layout && la == lb;
      }
    }
    // The peer's own schedule verifies under ppsched, data steps included; the boundary
    // transport under the posting it relies on (every transfer a batch posted and waited later).
    const CheckReport report = verify(peer, c.transport == "boundary" ? boundary_posting() : CheckOptions{});
    // hyper-parallel's transports give some orders groups that do not face each other (its own
    // comments: "2 solos face 1 duplex -> hang", a "send-crossing hoist ... both ends
    // recv-first"): there ppsched's own --p2p-transport refuses too.
    bool transport_fits = true;
    try {
      if (c.transport == "batch") coalesce_verified(generate(c.family, c.options), c.family);
      // (boundary_verified would also refuse an order without OVERLAP_B_F, M = 1: nothing moves)
      if (c.transport == "boundary")
        transport_fits = verify(attach_boundary_p2p(generate(c.family, c.options)), boundary_posting()).ok();
    } catch (const InputError&) {
      transport_fits = false;
    }
    CHECK(report.ok() == transport_fits);
    if (!report.ok()) {
      CHECK(report.violations[0].kind == ViolationKind::P2PMismatch);
      const std::string& why = report.violations[0].message;
      CHECK((why.find("duplex batch facing split single steps") != std::string::npos ||
             why.find("are not each other's partners") != std::string::npos));
      ++t.refused[c.transport + (why.find("duplex") != std::string::npos ? " duplex" : " order")];
    }
    ++t.cases;
    t.identical += same ? 1 : 0;
    t.same_layout += layout ? 1 : 0;
    t.verified += report.ok() ? 1 : 0;
  }
  return t;
}

std::string squeezed(const std::string& s) {
  std::string out;
  for (char ch : s)
    if (!std::isspace(static_cast<unsigned char>(ch))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

}  // namespace

TEST_CASE("mpipe-transpose is hyper-parallel's ScheduleMPipeTranspose step for step, body data steps included, "
          "over P 2..5, V 1..2, M P-1..3P and every tower, overflow, owner-backward and less-memory option",
          "[peers][mpipe]") {
  const Tally t = compare_with_hyper_parallel("peers/hyper_parallel/mpipe_transpose.txt.gz", false);
  CHECK(t.cases == 1152);
  CHECK(t.identical == t.cases);
  CHECK(t.verified == t.cases);
}

TEST_CASE("interleaved-1f1b --data-steps is hyper-parallel's ScheduleInterleaved1F1B step for step and bubble for "
          "bubble, with --less-memory, --overlap-b-f and --dxdw-split, over P 2..5, V 1..2, M P-1..3P",
          "[peers][interleaved]") {
  const Tally t = compare_with_hyper_parallel("peers/hyper_parallel/interleaved_1f1b.txt.gz", true);
  CHECK(t.cases == 288);
  CHECK(t.identical == t.cases);
  CHECK(t.same_layout == t.cases);
  CHECK(t.verified == t.cases);
}

TEST_CASE("hyper-parallel's P2P transports on its interleaved orders: --p2p-transport batch is its coalesce_p2p and "
          "boundary its attach_fwd_boundary_p2p, step for step and bubble for bubble; the orders that do not verify "
          "(groups facing each other out of shape or out of turn) are those ppsched's transports refuse",
          "[peers][interleaved][transport]") {
  const Tally t = compare_with_hyper_parallel("peers/hyper_parallel/interleaved_1f1b_transports.txt.gz", true);
  CHECK(t.cases == 432);  // batch: 288, boundary: 144
  CHECK(t.identical == t.cases);
  CHECK(t.same_layout == t.cases);
  // 16 do not verify, and ppsched's --p2p-transport refuses them too. Batch, 10: --less-memory at
  // V = 2, P = 3 (M 6..9) and P = 5 (M 10..15), where coalesce_p2p leaves a rank's two lone
  // transfers toward a peer facing that peer's one duplex batch. Boundary, 6: P = 2 (V = 2, M
  // 4..6, with and without --dxdw-split), where the one rank pair carries both directions and
  // both ends hoist a receive ahead of their gradient send: both receive first.
  CHECK(t.verified == t.cases - 16);
  CHECK(t.refused == std::map<std::string, int>{{"batch duplex", 10}, {"boundary order", 6}});
}

namespace {
// Per rank and P2P op, the (micro, stage) sequence: the order each direction carries.
std::map<std::pair<size_t, Op>, std::vector<std::pair<int, int>>> fifo(const Schedule& s) {
  std::map<std::pair<size_t, Op>, std::vector<std::pair<int, int>>> out;
  for (size_t r = 0; r < s.programs.size(); ++r)
    for (const auto& slot : s.programs[r]) {
      if (!slot) continue;
      const auto add = [&](const Step& st) {
        if (is_p2p(st.op)) out[{r, st.op}].emplace_back(st.micro, st.stage);
      };
      add(*slot);
      for (const Step& sub : slot->sub_steps()) add(sub);
    }
  return out;
}
}  // namespace

TEST_CASE("the boundary transport: with hyper-parallel's data steps it keeps every direction's FIFO and verifies "
          "where each transfer progresses on its own, deadlocks on one NCCL stream per rank; without them it hoists "
          "receives over sends (both ends receive first); hoisted and coalesced, one end is duplex and the other split",
          "[transport][boundary]") {
  for (int P : {3, 4, 5}) {
    GenerateOptions o;
    o.pp = P;
    o.vpp = 2;
    o.micro = 2 * P;
    o.overlap_b_f = true;
    o.data_steps = true;
    INFO("P=" << P);
    // As hyper-parallel emits it: a DATA_SEND before each FWD_SEND ends the run, so only the
    // gap's receives move ahead of its BWD_SEND.
    const Schedule plain = generate("interleaved-1f1b", o);
    const Schedule boundary = attach_boundary_p2p(plain);
    CHECK(fifo(boundary) == fifo(plain));
    CHECK(verify(boundary, boundary_posting()).ok());
    // On one NCCL stream per rank (PyTorch's pipeline-group communicator) a hoisted receive holds
    // back the sends queued behind it: a wait-for cycle.
    CheckOptions one_stream = boundary_posting();
    one_stream.backend = P2PBackend::Nccl;
    const CheckReport nccl = verify(boundary, one_stream);
    REQUIRE(!nccl.ok());
    CHECK(nccl.violations[0].kind == ViolationKind::Deadlock);
    CHECK(nccl.violations[0].message.find("NCCL stream") != std::string::npos);
    int hoisted = 0;
    for (const Program& prog : boundary.programs)
      for (size_t i = 0; i + 1 < prog.size(); ++i)
        if (prog[i] && prog[i]->op == Op::OVERLAP_B_F && prog[i + 1] && is_batch(prog[i + 1]->op) &&
            prog[i + 1]->sub_steps()[0].op == Op::BWD_RECV)
          ++hoisted;
    CHECK(hoisted > 0);

    // Without data steps the run holds the overlap's FWD_SEND and the next forward's FWD_RECV
    // too: after each OVERLAP_B_F its own FWD_SEND comes first, then the receives, each a batch
    // of one, and no receive after a BWD_SEND of the gap.
    o.data_steps = false;
    const Schedule bare = generate("interleaved-1f1b", o);
    const Schedule moved = attach_boundary_p2p(bare);
    CHECK(fifo(moved) == fifo(bare));
    int sends_first = 0;
    for (const Program& prog : moved.programs)
      for (size_t i = 0; i < prog.size(); ++i) {
        if (!prog[i] || prog[i]->op != Op::OVERLAP_B_F) continue;
        const Step& fwd = prog[i]->sub_steps()[1];
        bool sent_grad = false;
        for (size_t k = i + 1; k < prog.size() && prog[k] && is_batch(prog[k]->op); ++k) {
          REQUIRE(prog[k]->sub_steps().size() == 1);
          const Step& x = prog[k]->sub_steps()[0];
          if (x.op == Op::FWD_SEND && x.micro == fwd.micro && x.stage == fwd.stage) {
            CHECK(k == i + 1);
            ++sends_first;
          }
          if (x.op == Op::BWD_SEND) sent_grad = true;
          if (is_recv(x.op)) CHECK(!sent_grad);
        }
      }
    CHECK(sends_first > 0);
    // The FWD_RECV hoisted ahead of the BWD_SEND its peer receives first: on the pair's one
    // communicator both ends receive first (hyper-parallel's send-crossing hoist).
    const CheckReport crossing = verify(moved, boundary_posting());
    REQUIRE(!crossing.ok());
    CHECK(crossing.violations[0].kind == ViolationKind::P2PMismatch);
    CHECK(crossing.violations[0].message.find("are not each other's partners") != std::string::npos);
    REQUIRE(crossing.violations[0].steps.size() == 2);
    for (const StepRef& ref : crossing.violations[0].steps) {
      REQUIRE(is_batch(ref.step.op));
      CHECK(is_recv(ref.step.sub_steps()[0].op));  // both receive first
    }
    CHECK_THROWS_AS(boundary_verified(bare, "interleaved-1f1b"), InputError);

    // The naive variant: the boundary group and the rest each one batch.
    const CheckReport naive = verify(attach_boundary_p2p(bare, true), boundary_posting());
    REQUIRE(!naive.ok());
    int located = 0;
    for (const Violation& v : naive.violations) {
      if (v.kind != ViolationKind::P2PMismatch) continue;
      if (v.message.find("duplex batch facing split single steps") == std::string::npos) continue;
      REQUIRE(v.ranks.size() == 2);
      const int d = std::abs(v.ranks[0] - v.ranks[1]);
      CHECK((d == 1 || d == P - 1));  // neighbours on the loop
      REQUIRE(!v.steps.empty());
      CHECK(is_batch(v.steps[0].step.op));  // the step it names is the duplex batch
      ++located;
    }
    CHECK(located > 0);
  }
}

TEST_CASE("1f1b and gpipe --data-steps are hyper-parallel's Schedule1F1B and ScheduleGPipe step for step, "
          "P 2..5, M P-1..3P",
          "[peers][1f1b]") {
  const Tally t = compare_with_hyper_parallel("peers/hyper_parallel/1f1b_gpipe.txt.gz", false);
  CHECK(t.cases == 72);
  CHECK(t.identical == t.cases);
  CHECK(t.verified == t.cases);
}

TEST_CASE("interleaved-1f1b --group-size is Megatron-LM's interleaved order per rank, and refuses what Megatron "
          "refuses with Megatron's rule",
          "[peers][megatron]") {
  int accepted = 0, refused = 0, not_multiple_of_p = 0;
  for (const Case& c : read_cases(read_gz(data_path("peers/megatron/interleaved_groups.txt.gz")))) {
    INFO(c.line);
    if (!c.refused.empty()) {
      // Megatron's message, e.g. "RuntimeError: The remainder of M ... but it is 3. Otherwise, ...":
      // ppsched's says the same rule (spacing and case aside; Megatron's ValueError lacks a space
      // in "stageshould").
      std::string ours;
      try {
        generate(c.family, c.options);
        ours = "(accepted)";
      } catch (const InputError& e) {
        ours = e.message();
      }
      const std::string theirs = c.refused.substr(c.refused.find(':') + 2);
      const std::string rule = squeezed(theirs.substr(0, theirs.find(". Otherwise")));
      INFO("Megatron: " << theirs << "\nppsched: " << ours);
      CHECK(squeezed(ours).find(rule) != std::string::npos);
      ++refused;
      continue;
    }
    const Schedule s = generate(c.family, c.options);
    REQUIRE(c.ranks.size() == s.programs.size());
    for (size_t r = 0; r < s.programs.size(); ++r) {
      std::vector<std::string> compute;
      for (const auto& slot : s.programs[r])
        if (slot && is_body_compute(slot->op)) compute.push_back(short_label(*slot));
      INFO("rank " << r);
      CHECK(joined(compute) == joined(c.ranks[r]));
    }
    CHECK(verify(s).ok());
    ++accepted;
    not_multiple_of_p += c.options.micro % c.options.pp != 0 ? 1 : 0;
  }
  CHECK(accepted == 107);
  CHECK(refused == 105);
  CHECK(not_multiple_of_p > 20);
}

namespace {

// The compute and gradient-sync steps of a program (no P2P, no idle slots): what Chimera's and
// DualPipe's code decide (their transfers follow from it).
std::string compute_and_syncs(const Program& p) {
  std::vector<std::string> out;
  for (const auto& slot : p)
    if (slot && (is_compute(slot->op) || is_composite(slot->op) || info(slot->op).kind == StepKind::Collective))
      out.push_back(short_label(*slot));
  return joined(out);
}

// A peer's rank line as ppsched steps (action notation through parse_action).
std::vector<Step> peer_steps(const std::vector<std::string>& tokens) {
  std::vector<Step> out;
  for (const auto& t : tokens) {
    std::string error;
    auto st = parse_action(t, &error);
    INFO(t << ": " << error);
    REQUIRE(st);
    out.push_back(std::move(*st));
  }
  return out;
}

std::string labels_of(const std::vector<Step>& steps, bool syncs) {
  std::vector<std::string> out;
  for (const Step& st : steps)
    if (syncs || st.op != Op::REPLICA_GRAD_SYNC) out.push_back(short_label(st));
  return joined(out);
}

// The peer's order as a ppsched schedule of the same shape, its P2P steps inserted by ppsched.
Schedule peer_as_schedule(const Case& c, const Schedule& like) {
  Schedule s = like;
  s.name = "peer";
  for (size_t r = 0; r < s.programs.size(); ++r) {
    s.programs[r].clear();
    for (Step& st : peer_steps(c.ranks[r])) s.programs[r].push_back(std::move(st));
  }
  return insert_p2p(std::move(s), Alignment::Auto);
}

}  // namespace

TEST_CASE("dualpipe is DeepSeek's dualpipe.py DualPipe step for step, OVERLAP_F_B pairs and split backwards "
          "included, at every size DualPipe.step accepts for P 2..8, M up to 4P; the copies' syncs end the step",
          "[peers][dualpipe]") {
  int cases = 0;
  for (const Case& c : read_cases(read_gz(data_path("peers/deepseek/dualpipe.txt.gz")))) {
    INFO(c.line);
    const Schedule s = generate(c.family, c.options);
    REQUIRE(c.ranks.size() == s.programs.size());
    for (size_t r = 0; r < s.programs.size(); ++r) {
      INFO("rank " << r);
      // DeepSeek's step() leaves the gradient exchange to its caller: its order, then the syncs.
      const std::string theirs = labels_of(peer_steps(c.ranks[r]), false);
      const int lower = std::min(static_cast<int>(r), c.options.pp - 1 - static_cast<int>(r));
      const int P = c.options.pp;
      auto sync = [&](int model_stage) {
        return short_label(make_step(Op::REPLICA_GRAD_SYNC, kNone, model_stage == static_cast<int>(r) ? model_stage : P + model_stage));
      };
      CHECK(compute_and_syncs(s.programs[r]) == theirs + " " + sync(lower) + " " + sync(P - 1 - lower));
    }
    CHECK(verify(s).ok());
    ++cases;
  }
  CHECK(cases == 24);
}

TEST_CASE("chimera is Shigangli/Chimera's chimera_pipeline_rank.py grid as its runtime walks it: forwards, "
          "backwards and gradient syncs for P = 4 (M 4..32) and P = 8, M = 8; at P = 8, M = 16 the same compute "
          "order, where Chimera syncs each copy twice, once before its last backward; from M = 3P at P = 8 "
          "Chimera's grid drops steps",
          "[peers][chimera]") {
  int identical = 0, compute_only = 0, peer_drops_steps = 0;
  for (const Case& c : read_cases(read_gz(data_path("peers/chimera/chimera.txt.gz")))) {
    INFO(c.line);
    const Schedule s = generate(c.family, c.options);
    CHECK(verify(s).ok());
    REQUIRE(c.ranks.size() == s.programs.size());
    const int P = c.options.pp, M = c.options.micro;
    if (P == 8 && M >= 3 * P) {
      // Chimera starts a unit for every micro-batch its first unit retires; their cells collide
      // on the grid and get overwritten: the peer's order misses micro-batches.
      size_t theirs = 0;
      for (const auto& rank : c.ranks) theirs += rank.size();
      CHECK(theirs < static_cast<size_t>(2 * P * M));
      ++peer_drops_steps;
      continue;
    }
    bool all_same = true;
    for (size_t r = 0; r < s.programs.size(); ++r) {
      INFO("rank " << r);
      const auto theirs = peer_steps(c.ranks[r]);
      CHECK(compute_and_syncs(s.programs[r]).find("RS") != std::string::npos);
      std::vector<std::string> ours_compute;
      for (const auto& slot : s.programs[r])
        if (slot && is_compute(slot->op)) ours_compute.push_back(short_label(*slot));
      CHECK(joined(ours_compute) == labels_of(theirs, false));
      all_same = all_same && compute_and_syncs(s.programs[r]) == labels_of(theirs, true);
    }
    if (all_same) {
      ++identical;
    } else {
      // P = 8, M = 16: Chimera syncs a copy after each of its units; ppsched's checker finds
      // the first sync before the copy's last backward and the second one adding gradients twice.
      CHECK((P == 8 && M == 2 * P));
      const CheckReport report = verify(peer_as_schedule(c, s));
      CHECK_FALSE(report.ok());
      bool early = false, twice = false;
      for (const auto& v : report.violations) {
        early = early || (v.kind == ViolationKind::Dependency && v.message.find("after its REPLICA_GRAD_SYNC") != std::string::npos);
        twice = twice || (v.kind == ViolationKind::CacheViolation && v.message.find("a second time") != std::string::npos);
      }
      CHECK(early);
      CHECK(twice);
      ++compute_only;
    }
  }
  CHECK(identical == 9);
  CHECK(compute_only == 1);
  CHECK(peer_drops_steps == 2);
}

// Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm), as its own schedule code
// ran under stubs (tests/data/peers/megatron/combined_1f1b_order.json.gz; README there): every
// accepted case's steps per rank, forward-only, backward-only and merged, equal combined-1f1b's,
// and every refusal ppsched can see is refused with Megatron's rule.
TEST_CASE("combined-1f1b is Megatron-Core's combined 1F1B order per rank, merged steps included", "[peers][megatron]") {
  const nlohmann::json doc = nlohmann::json::parse(read_gz(data_path("peers/megatron/combined_1f1b_order.json.gz")));
  int accepted = 0, refused = 0, p2p_overlap_only = 0, merged = 0;
  for (const auto& c : doc.at("cases")) {
    const int P = c.at("P"), V = c.at("V"), M = c.at("M");
    GenerateOptions o;
    o.pp = P;
    o.vpp = V;
    o.micro = M;
    if (P > 1 && c.at("microbatch_group_size_per_vp_stage").is_number()) o.group_size = c.at("microbatch_group_size_per_vp_stage");
    INFO("P=" << P << " V=" << V << " M=" << M << " G=" << o.group_size << " delay=" << c.at("delay_wgrad_compute")
              << " overlap_p2p=" << c.at("overlap_p2p_comm"));
    if (c.contains("refused")) {
      const std::string theirs = c.at("refused").at("message");
      // overlap_p2p_comm decides how P2P is issued, not the order: ppsched does not model it.
      if (theirs.find("p2p communication overlap is disabled") != std::string::npos) {
        ++p2p_overlap_only;
        continue;
      }
      std::string ours;
      try {
        generate("combined-1f1b", o);
        ours = "(accepted)";
      } catch (const InputError& e) {
        ours = e.message();
      }
      const std::string rule = squeezed(theirs.substr(0, theirs.find(". Otherwise")));
      INFO("Megatron: " << theirs << "\nppsched: " << ours);
      CHECK(squeezed(ours).find(rule) != std::string::npos);
      ++refused;
      continue;
    }
    const Schedule s = generate("combined-1f1b", o);
    REQUIRE(c.at("ranks").size() == s.programs.size());
    auto mc = [&](const Step& st) { return std::to_string(st.micro) + "." + std::to_string(st.stage / P); };
    for (size_t r = 0; r < s.programs.size(); ++r) {
      std::vector<std::string> ours, theirs;
      for (const auto& slot : s.programs[r]) {
        if (!slot || !(is_body_compute(slot->op) || is_overlap(slot->op))) continue;
        if (is_overlap(slot->op)) {
          const auto& sub = slot->sub_steps();
          ours.push_back("FB" + mc(sub[0]) + "/" + mc(sub[1]));
          ++merged;
        } else {
          ours.push_back((is_forward(slot->op) ? "F" : "B") + mc(*slot));
        }
      }
      for (const auto& st : c.at("ranks")[r].at("steps")) {
        auto chunk = [](const nlohmann::json& x) { return x.is_null() ? 0 : x.get<int>(); };
        const std::string kind = st[0];
        if (kind == "FB")
          theirs.push_back("FB" + std::to_string(st[1].get<int>()) + "." + std::to_string(chunk(st[2])) + "/" +
                           std::to_string(st[3].get<int>()) + "." + std::to_string(chunk(st[4])));
        else
          theirs.push_back(kind + std::to_string(st[1].get<int>()) + "." + std::to_string(chunk(st[2])));
      }
      INFO("rank " << r);
      CHECK(joined(ours) == joined(theirs));
    }
    CHECK(verify(s).ok());
    ++accepted;
  }
  CHECK(accepted == 84);
  CHECK(refused + p2p_overlap_only == 72);
  CHECK(p2p_overlap_only > 0);
  CHECK(merged > 500);
}

// Megatron-Core's per-layer phase order inside one merged step: TransformerModelChunkSchedulePlan.run
// on a forward plan and a backward plan, under stubs (combined_1f1b_layer_phases.json.gz): each
// stream's phases in issue order, with and without --delay-wgrad-compute. ppsched's stream
// lowering of the same OVERLAP_F_B (a forward chunk of f MoE layers, a backward chunk of b) must
// issue the same phases, layer for layer, on each stream.
namespace {

// Megatron's per_stream list as (phase, layer) in ppsched's names; its layer-pair markers
// ("-- layer_0f-layer_1b --") give the layers; hooks and the other chunk parts are left out.
std::vector<std::string> megatron_phases(const nlohmann::json& list) {
  static const std::map<std::string, std::pair<std::string, bool>> names = {
      // Megatron's node -> ppsched's phase, and whether it belongs to the forward layer
      {"pre_dispatch_computation forward", {"attn_fwd", true}},
      {"mlp forward", {"mlp_fwd", true}},
      {"moe_dispatch forward", {"dispatch_fwd", true}},
      {"moe_combine forward", {"combine_fwd", true}},
      {"moe_combine backward", {"combine_bwd", false}},
      {"mlp backward", {"mlp_bwd", false}},
      {"moe_dispatch backward", {"dispatch_bwd", false}},
      {"pre_dispatch_computation backward", {"attn_bwd", false}},
      {"mlp wgrad", {"mlp_wgrad", false}},
      {"pre_dispatch_computation wgrad", {"attn_wgrad", false}}};
  std::vector<std::string> out;
  int f = -1, b = -1, last_b = -1;
  for (const auto& e : list) {
    const std::string x = e.get<std::string>();
    if (x.rfind("-- ", 0) == 0) {  // "-- layer_<i>f-layer_<j>b --", "-- layer_<i>f --", "-- layer_<j>b --"
      f = b = -1;
      size_t at = 0;
      while ((at = x.find("layer_", at)) != std::string::npos) {
        at += 6;
        size_t end = at;
        while (end < x.size() && std::isdigit(static_cast<unsigned char>(x[end]))) ++end;
        const int n = std::stoi(x.substr(at, end - at));
        (x[end] == 'f' ? f : b) = n;
        if (x[end] == 'b') last_b = n;
      }
      continue;
    }
    const auto it = names.find(x);
    if (it == names.end()) continue;
    // The weight gradient listed after the last marker is the last backward layer's.
    const int layer = it->second.second ? f : (b >= 0 ? b : last_b);
    out.push_back(it->second.first + " L" + std::to_string(layer));
  }
  return out;
}

}  // namespace

TEST_CASE("combined-1f1b's merged step issues Megatron-Core's per-layer phases in Megatron's order on each stream, "
          "with and without --delay-wgrad-compute",
          "[peers][megatron][streams]") {
  const nlohmann::json doc = nlohmann::json::parse(read_gz(data_path("peers/megatron/combined_1f1b_layer_phases.json.gz")));
  int compared = 0, delayed = 0;
  for (const auto& sc : doc.at("scenarios")) {
    const std::string name = sc.at("name").get<std::string>();
    int fl = -1, bl = -1;
    if (sc.contains("f_layers")) {
      fl = sc.at("f_layers").get<int>();
      bl = sc.at("b_layers").get<int>();
    } else if (name.rfind("one MoE layer forward", 0) == 0 && !sc.at("ep_overlap_early_attn_memory_release").get<bool>()) {
      fl = bl = 1;  // (the early attention memory release, which moves attn_bwd, is not modelled)
    }
    if (fl < 0) continue;  // first / last stage, a dense layer: pre/post-process compute ppsched folds into phases
    const bool delay = sc.at("delay_wgrad_compute").get<bool>();
    INFO(name << (delay ? " (delay_wgrad_compute)" : ""));
    // One rank, two stages: the forward chunk's (fl MoE layers) and the backward chunk's (bl).
    Schedule s;
    s.name = "merged";
    s.ranks = 1;
    s.stages = 2;
    s.micro_batches = 2;
    s.placement = Placement::loop(1, 2);
    s.programs.push_back(Program{make_composite(Op::OVERLAP_F_B, {make_step(Op::FWD, 1, 0), make_step(Op::BWD, 0, 1)})});
    const auto stage = [](int layers) {
      MoeStage m;
      for (int l = 0; l < layers; ++l) m.layers.push_back({{0.1f, 0.1f, 0.1f, 0.1f}, {0.1f, 0.1f, 0.1f, 0.1f}, 1.0});
      return m;
    };
    StreamLowering low{2, {stage(fl), stage(bl)}, delay};
    const StreamProgram p = lower_streams(s, low);
    std::map<std::string, std::vector<std::string>> ours;  // "comp" / "comm" -> phases
    const StreamRank& r0 = p.ranks.at(0);
    for (const StreamOp& op : r0.ops) {
      const std::string& stream = r0.streams.at(static_cast<size_t>(op.stream));
      // "mlp_bwd L1 B0s1": the phase and its layer; a chunk without MoE layers runs whole ("B0s1").
      const auto w = words(op.name);
      if (w.size() < 3) continue;
      ours[stream == "comm" ? "comm" : "comp"].push_back(w[0] + " " + w[1]);
    }
    for (const char* st : {"comp", "comm"}) {
      INFO("stream " << st);
      CHECK(joined(ours[st]) == joined(megatron_phases(sc.at("per_stream").at(st))));
    }
    ++compared;
    delayed += delay ? 1 : 0;
  }
  CHECK(compared == 10);  // 1+1, 3+2, 2+3, 2+0, 0+2; delay off and on
  CHECK(delayed == 5);
}
