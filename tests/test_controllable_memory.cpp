// v-half and v-min (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS'24)
// against the authors' own generator, and `tune --pareto`'s frontier against their
// v_auto_schedule.py.
//
// tests/data/controllable_memory/zbv_greedy_{half,min}.txt hold what sail-sg's
// megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py (commit 39f2c186) outputs
// for P 1..8, M 1..4P: per rank its order in the reference's letters (F f: forward of chunk 0, 1;
// B b: input backward of chunk 1, 0; W w: weight backward of chunk 1, 0; the k-th letter of a
// kind is micro-batch k) and the bubble rate create_schedule prints for unit costs. The files'
// headers say how they were made.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "checkers/checks.hpp"
#include "schedule/generators/generator.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine.hpp"
#include "sim/search/building_blocks.hpp"
#include "sim/search/problem.hpp"
#include "tests/support/structure.hpp"

using namespace ppsched;
using namespace ppsched::testing;

namespace {

std::string data_dir() {
  const char* d = std::getenv("PPSCHED_TEST_DATA");
  return d ? d : "tests/data";
}

struct Reference {
  double bubble_rate = -1;
  std::vector<std::string> ranks;  // letters per rank
};

// (P, M) -> the reference's output.
std::map<std::pair<int, int>, Reference> read_reference(const std::string& name) {
  std::ifstream in(data_dir() + "/controllable_memory/" + name);
  REQUIRE(in.good());
  std::map<std::pair<int, int>, Reference> out;
  Reference* cur = nullptr;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    int P = 0, M = 0;
    double rate = 0;
    if (std::sscanf(line.c_str(), "P=%d M=%d bubble_rate=%lf", &P, &M, &rate) == 3) {
      cur = &out[{P, M}];
      cur->bubble_rate = rate;
    } else if (line[0] == 'r' && cur) {
      const auto colon = line.find(": ");
      REQUIRE(colon != std::string::npos);
      REQUIRE(std::stoi(line.substr(1, colon - 1)) == static_cast<int>(cur->ranks.size()));
      cur->ranks.push_back(line.substr(colon + 2));
    } else {
      FAIL("unexpected line in " << name << ": " << line);
    }
  }
  return out;
}

Schedule gen(const char* name, int P, int M, int V = 2) {
  GenerateOptions o;
  o.pp = P;
  o.vpp = V;
  o.micro = M;
  return generate(name, o);
}

// A rank's compute order in zbv_greedy.py's letters; '?' for a step that is not one of its six
// kinds, sits on another stage, or breaks its kind's micro order (the letters imply it).
std::string letters(const Schedule& s, int r) {
  const int P = s.ranks;
  std::map<char, int> next;
  std::string out;
  for (const auto& slot : s.programs[static_cast<size_t>(r)]) {
    if (!slot || is_p2p(slot->op)) continue;
    const Step& st = *slot;
    const bool chunk0 = st.stage == r, chunk1 = st.stage == 2 * P - 1 - r;
    char c = '?';
    if (chunk0 || chunk1) {
      if (st.op == Op::FWD) c = chunk1 ? 'f' : 'F';
      if (st.op == Op::BWD_INPUT) c = chunk1 ? 'B' : 'b';
      if (st.op == Op::BWD_WEIGHT) c = chunk1 ? 'W' : 'w';
    }
    if (c != '?' && st.micro != next[c]++) c = '?';
    out += c;
  }
  return out;
}

// Peak live chunk activations by the reference's accounting (F and f +1, W and w -1).
int reference_peak(const std::string& order) {
  int live = 0, peak = 0;
  for (char c : order) {
    if (c == 'F' || c == 'f') peak = std::max(peak, ++live);
    if (c == 'W' || c == 'w') --live;
  }
  return peak;
}

void check_identity(const char* family, const char* file) {
  const auto ref = read_reference(file);
  int cases = 0, identical = 0;
  for (int P = 1; P <= 8; ++P)
    for (int M = 1; M <= 4 * P; ++M) {
      INFO(family << " P=" << P << " M=" << M);
      const auto it = ref.find({P, M});
      REQUIRE(it != ref.end());  // the reference accepted every (P, M) of the grid
      REQUIRE(it->second.ranks.size() == static_cast<size_t>(P));
      const Schedule s = gen(family, P, M);
      bool same = true;
      for (int r = 0; r < P; ++r) {
        INFO("rank " << r);
        CHECK(letters(s, r) == it->second.ranks[static_cast<size_t>(r)]);
        same = same && letters(s, r) == it->second.ranks[static_cast<size_t>(r)];
      }
      ++cases;
      identical += same ? 1 : 0;
    }
  CHECK(cases == 144);  // 4P values of M for each P = 1..8
  CHECK(identical == cases);
  CHECK(ref.size() == 144);
}

CostModel unit_costs() { return read_cost_file(data_dir() + "/costs/unit_fiw.json"); }

RunRecord simulate_with(const Schedule& s, const CostModel& costs) {
  SimOptions o;
  o.check.memory = costs.memory_model(s.stages);
  return simulate(s, costs, o);
}

// The reference's "longest stage time": over ranks, last compute end - first compute start.
double longest_rank_span(const RunRecord& r, int ranks) {
  std::vector<double> first(static_cast<size_t>(ranks), -1), last(static_cast<size_t>(ranks), 0);
  for (const auto& sl : r.slices) {
    if (sl.lane != Lane::Compute) continue;
    auto& f = first[static_cast<size_t>(sl.rank)];
    if (f < 0 || sl.start_ms < f) f = sl.start_ms;
    last[static_cast<size_t>(sl.rank)] = std::max(last[static_cast<size_t>(sl.rank)], sl.end_ms);
  }
  double span = 0;
  for (int q = 0; q < ranks; ++q) span = std::max(span, last[static_cast<size_t>(q)] - first[static_cast<size_t>(q)]);
  return span;
}

}  // namespace

TEST_CASE("v-half's per-rank compute order equals sail-sg zbv_greedy.py ('half') for P 1..8, M 1..4P",
          "[controllable_memory][v-half]") {
  check_identity("v-half", "zbv_greedy_half.txt");
}

TEST_CASE("v-min's per-rank compute order equals sail-sg zbv_greedy.py ('min') for P 1..8, M 1..4P",
          "[controllable_memory][v-min]") {
  check_identity("v-min", "zbv_greedy_min.txt");
}

TEST_CASE("v-half and v-min verify on V placement over the reference's grid", "[controllable_memory]") {
  for (const char* family : {"v-half", "v-min"})
    for (int P = 1; P <= 8; ++P)
      for (int M = 1; M <= 4 * P; ++M) {
        INFO(family << " P=" << P << " M=" << M);
        const Schedule s = gen(family, P, M);
        CHECK(s.name == family);
        CHECK(s.stages == 2 * P);
        CHECK(s.placement == Placement::v(P, 2 * P));
        CHECK(check_compute_coverage(s) == "");
        CHECK(check_send_recv_placement(s) == "");
        CHECK(rendezvous_replay(s) == "");
        const CheckReport report = verify(s);
        CHECK(report.ok());
      }
}

TEST_CASE("ppsched simulate reproduces the reference's bubble rate with its unit costs (F = I = W = 1, c = 0)",
          "[controllable_memory][simulate]") {
  // create_schedule prints (longest rank span - 6M) / longest rank span, to 4 decimals.
  const CostModel costs = unit_costs();
  int cases = 0;
  for (const auto& [family, file] : {std::pair<const char*, const char*>{"v-half", "zbv_greedy_half.txt"}, {"v-min", "zbv_greedy_min.txt"}}) {
    const auto ref = read_reference(file);
    for (const auto& [pm, want] : ref) {
      const auto [P, M] = pm;
      INFO(family << " P=" << P << " M=" << M);
      const Schedule s = gen(family, P, M);
      const RunRecord r = simulate_with(s, costs);
      REQUIRE(r.completed);
      CHECK(r.check.ok());
      const double span = longest_rank_span(r, P);
      const double rate = (span - 6.0 * M) / span;
      CHECK(std::abs(rate - want.bubble_rate) <= 0.5e-4 + 1e-12);
      ++cases;
    }
  }
  CHECK(cases == 2 * 144);
}

TEST_CASE("activation peaks: v-half keeps (P+2)/2 and v-min (P+4)/3 stage activations where 1F1B keeps P "
          "(the paper's 1/2 and 1/3 of 1F1B), by the reference's count and by ppsched simulate",
          "[controllable_memory][simulate][memory]") {
  // The authors' table (their Hugging Face space for the paper): activation memory in micro-batches
  // of a stage, 1F1B p, V-Min (p+4)//3, V-Half (p+2)//2. With V placement a stage of 1F1B is two
  // chunks: unit_fiw.json keeps 1 MiB per chunk forward, so 1F1B gets 2 MiB per stage.
  const CostModel chunk = unit_costs();
  CostModel stage = chunk;
  stage.kept_activation_bytes = StageValue::scalar(2.0 * (1 << 20));
  const auto half = read_reference("zbv_greedy_half.txt"), min = read_reference("zbv_greedy_min.txt");
  auto peak_mib = [](const RunRecord& r) {
    int64_t p = 0;
    for (const auto& x : r.ranks) p = std::max(p, x.peak_memory_bytes);
    return static_cast<double>(p) / (1 << 20);
  };
  for (int P = 1; P <= 8; ++P)
    for (int M = P; M <= 4 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      const double one_f_one_b = peak_mib(simulate_with(gen("1f1b", P, M, 1), stage));
      CHECK(one_f_one_b == 2.0 * P);  // P stage activations on rank 0
      const int want_half = 2 * ((P + 2) / 2), want_min = 2 * ((P + 4) / 3);  // in chunk activations
      // The reference's own accounting (F, f +1; W, w -1) on its stored orders.
      int ref_half = 0, ref_min = 0;
      for (const auto& o : half.at({P, M}).ranks) ref_half = std::max(ref_half, reference_peak(o));
      for (const auto& o : min.at({P, M}).ranks) ref_min = std::max(ref_min, reference_peak(o));
      CHECK(ref_half == want_half);
      CHECK(ref_min == want_min);
      // ppsched's cache model frees half an activation at BWD_INPUT, so it never counts more.
      const double v_half = peak_mib(simulate_with(gen("v-half", P, M), chunk));
      const double v_min = peak_mib(simulate_with(gen("v-min", P, M), chunk));
      CHECK(v_half == want_half);
      CHECK(v_min <= want_min);
      if (P != 2) CHECK(v_min == want_min);  // P=2: 3 MiB on rank 1, whose peak waits on a W
      CHECK(v_half / one_f_one_b == Approx(static_cast<double>((P + 2) / 2) / P));
    }
}

TEST_CASE("v-half and v-min use only the steps zbv uses, which the executor runs on V placement",
          "[controllable_memory]") {
  for (int P : {2, 4, 8})
    for (int M : {P, 2 * P, 4 * P}) {
      INFO("P=" << P << " M=" << M);
      std::set<Op> zbv;
      for (const auto& prog : gen("zbv", P, M).programs)
        for (const auto& slot : prog)
          if (slot) zbv.insert(slot->op);
      for (const char* family : {"v-half", "v-min"})
        for (const auto& prog : gen(family, P, M).programs)
          for (const auto& slot : prog)
            if (slot) CHECK(zbv.count(slot->op) == 1);
    }
}

// ------------------------------------------------------------ v_auto_schedule.py ---

namespace {

struct FrontierRow {
  int bubble = 0, grid_span = 0, asap_span = 0, asap_makespan = 0;
};
struct Frontier {
  std::map<int, int> printed;          // peak -> bubble, as schedule() prints it
  std::map<int, FrontierRow> by_peak;  // the "peak=" lines
};

// tests/data/controllable_memory/v_auto_schedule_frontier.txt, (P, M) -> what it holds.
std::map<std::pair<int, int>, Frontier> read_frontiers() {
  std::ifstream in(data_dir() + "/controllable_memory/v_auto_schedule_frontier.txt");
  REQUIRE(in.good());
  std::map<std::pair<int, int>, Frontier> out;
  Frontier* cur = nullptr;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    int P = 0, M = 0, a = 0, b = 0, c = 0, d = 0, e = 0;
    if (std::sscanf(line.c_str(), "P=%d M=%d", &P, &M) == 2) {
      cur = &out[{P, M}];
    } else if (cur && std::sscanf(line.c_str(), " printed: %d %d %d | %d", &a, &b, &c, &d) == 4) {
      cur->printed[a] = b;
    } else if (cur && std::sscanf(line.c_str(), " peak=%d bubble=%d grid_span=%d asap_span=%d asap_makespan=%d", &a, &b, &c, &d,
                                  &e) == 5) {
      cur->by_peak[a] = {b, c, d, e};
    } else {
      REQUIRE(line.find("printed: {") != std::string::npos);  // the dict schedule() prints last
    }
  }
  return out;
}

}  // namespace

TEST_CASE("the building blocks behind tune's V seeds give v_auto_schedule.py's own frontier (peak -> bubble, "
          "makespan, span)", "[controllable_memory][v_auto]") {
  const auto frontiers = read_frontiers();
  REQUIRE(frontiers.size() == 8);
  for (const auto& [pm, ref] : frontiers) {
    const auto [P, M] = pm;
    INFO("P=" << P << " M=" << M);
    const search::Problem unit = search::zbv_problem(P, M, 1, 1, 1, 0, search::kNoCap);
    std::map<int, FrontierRow> ours;
    for (const auto& s : search::controllable_memory_schedules(P, M)) {
      const search::Evaluation e = search::evaluate(unit, s.order);
      REQUIRE(e.ok);
      auto [it, fresh] = ours.try_emplace(s.peak, FrontierRow{s.bubble, 6 * M + s.bubble, static_cast<int>(e.span), static_cast<int>(e.makespan)});
      FrontierRow& r = it->second;
      r.bubble = std::min(r.bubble, s.bubble);
      r.grid_span = 6 * M + r.bubble;
      r.asap_span = std::min(r.asap_span, static_cast<int>(std::lround(e.span)));
      r.asap_makespan = std::min(r.asap_makespan, static_cast<int>(std::lround(e.makespan)));
    }
    REQUIRE(ours.size() == ref.by_peak.size());
    for (const auto& [peak, want] : ref.by_peak) {
      INFO("peak " << peak);
      REQUIRE(ours.count(peak) == 1);
      CHECK(ref.printed.at(peak) == want.bubble);
      CHECK(ours[peak].bubble == want.bubble);
      CHECK(ours[peak].asap_span == want.asap_span);
      CHECK(ours[peak].asap_makespan == want.asap_makespan);
    }
  }
}
