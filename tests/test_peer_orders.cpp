// Families against their reference implementations' real output.
//
// tests/data/peers/ holds what the peers' own code printed, run under a stub (their code is not
// in this repository; tests/data/peers/README.md says what was run, at which commit):
//  - hyper_parallel/: hyper-parallel's scheduler.py and mpipe/schedule.py (ScheduleGPipe,
//    Schedule1F1B, ScheduleInterleaved1F1B, ScheduleMPipeTranspose built by
//    construct_exec_order), one rank per line in PyTorch's action notation (read with
//    ppsched's parse_action), idle slots as '.';
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
#include <sstream>
#include <string>
#include <vector>

#include "checkers/checks.hpp"
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
      c.options = parse_flags(w, 2);
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
    for (const auto& t : tokens) {
      if (t == ".") {
        p.push_back(std::nullopt);
        continue;
      }
      std::string error;
      auto st = parse_action(t, &error);
      INFO(t << ": " << error);
      REQUIRE(st);
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
};

// Generates each case with ppsched and compares it step for step with the peer's output.
Tally compare_with_hyper_parallel(const std::string& file, bool compare_layout) {
  Tally t;
  for (const Case& c : read_cases(read_gz(data_path(file)))) {
    INFO(c.line);
    const Schedule ours = generate(c.family, c.options);
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
    // The peer's own schedule verifies under ppsched, data steps included.
    const CheckReport report = verify(peer);
    CHECK(report.ok());
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
