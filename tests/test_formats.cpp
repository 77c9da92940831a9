// Tests of the schedule file formats (JSON, PyTorch CSV, action notation) and of the
// structural validation every reader ends with.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/action_notation.hpp"
#include "schedule/formats/pytorch_csv.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/formats/schedule_json.hpp"
#include "schedule/generators/generator.hpp"
#include "schedule/validate.hpp"
#include "tests/support/structure.hpp"
#include "tests/support/expect_error.hpp"

using namespace ppsched;
using namespace ppsched::testing;

namespace {

std::string data_dir() {
  const char* d = std::getenv("PPSCHED_TEST_DATA");
  REQUIRE(d != nullptr);
  return d;
}
std::string bad(const std::string& name) { return data_dir() + "/bad_input/" + name; }
std::string good(const std::string& name) { return data_dir() + "/schedules/" + name; }


// ---- schedule builders for the properties ------------------------------------------------

struct Params {
  int ranks = 1, per_rank = 1, micro = 1;
  int placement = 0;  // 0 loop, 1 v, 2 explicit (random map)
  bool split_backward = false, overlap = false, coalesce = false;
  int idle_percent = 0;
  uint32_t seed = 0;
};

Params gen_params() {
  Params p;
  p.ranks = *rc::gen::inRange(1, 7);
  p.per_rank = *rc::gen::inRange(1, 4);
  p.micro = *rc::gen::inRange(1, 13);
  p.placement = *rc::gen::inRange(0, 3);
  p.split_backward = *rc::gen::arbitrary<bool>();
  p.overlap = *rc::gen::arbitrary<bool>();
  p.coalesce = *rc::gen::arbitrary<bool>();
  p.idle_percent = *rc::gen::inRange(0, 30);
  p.seed = *rc::gen::arbitrary<uint32_t>();
  return p;
}

// A random valid compute order: a random linear extension of the (stage, micro) dependency
// graph, projected on ranks. Any such order can run, so insert_p2p(Auto) accepts it.
Schedule compute_order(const Params& p, std::mt19937& rng) {
  Schedule s;
  s.name = "prop";
  s.ranks = p.ranks;
  s.stages = p.ranks * p.per_rank;
  s.micro_batches = p.micro;
  if (p.placement == 0) s.placement = Placement::loop(s.ranks, s.stages);
  if (p.placement == 1) s.placement = Placement::v(s.ranks, s.stages);
  if (p.placement == 2) {
    std::vector<int32_t> map;
    for (int st = 0; st < s.stages; ++st)
      map.push_back(static_cast<int32_t>(rng() % static_cast<unsigned>(s.ranks)));
    s.placement = Placement::explicit_map(map);
  }
  s.programs.resize(static_cast<size_t>(s.ranks));
  const int S = s.stages, M = s.micro_batches;
  // done[k][stage * M + micro]: k = 0 forward, 1 input-side backward, 2 weight half.
  std::vector<std::vector<char>> done(3, std::vector<char>(static_cast<size_t>(S * M), 0));
  struct Task {
    Op op;
    int stage, micro;
  };
  std::vector<Task> pending;
  for (int st = 0; st < S; ++st)
    for (int m = 0; m < M; ++m) {
      pending.push_back({Op::FWD, st, m});
      pending.push_back({p.split_backward ? Op::BWD_INPUT : Op::BWD, st, m});
      if (p.split_backward) pending.push_back({Op::BWD_WEIGHT, st, m});
    }
  auto at = [&](int k, int st, int m) { return done[static_cast<size_t>(k)][static_cast<size_t>(st * M + m)]; };
  while (!pending.empty()) {
    std::vector<size_t> ready;
    for (size_t k = 0; k < pending.size(); ++k) {
      const Task& t = pending[k];
      bool ok = t.op == Op::FWD ? t.stage == 0 || at(0, t.stage - 1, t.micro)
                : t.op == Op::BWD_WEIGHT
                    ? at(1, t.stage, t.micro)
                    : at(0, t.stage, t.micro) && (t.stage == S - 1 || at(1, t.stage + 1, t.micro));
      if (ok) ready.push_back(k);
    }
    const size_t pick = ready[rng() % ready.size()];
    const Task t = pending[pick];
    pending.erase(pending.begin() + static_cast<long>(pick));
    const int k = t.op == Op::FWD ? 0 : t.op == Op::BWD_WEIGHT ? 2 : 1;
    done[static_cast<size_t>(k)][static_cast<size_t>(t.stage * M + t.micro)] = 1;
    s.programs[static_cast<size_t>(s.rank_of(t.stage))].push_back(make_step(t.op, t.micro, t.stage));
  }
  return s;
}

// Merges some adjacent forward/backward pairs into OVERLAP composites.
Schedule with_overlaps(Schedule s, std::mt19937& rng) {
  for (auto& prog : s.programs) {
    Program out;
    for (size_t i = 0; i < prog.size(); ++i) {
      if (i + 1 < prog.size() && rng() % 3 == 0) {
        const Step& a = *prog[i];
        const Step& b = *prog[i + 1];
        const bool fb = a.op == Op::FWD && is_backward_input_side(b.op);
        const bool bf = is_backward_input_side(a.op) && b.op == Op::FWD;
        if ((fb || bf) && (a.stage != b.stage || a.micro != b.micro)) {
          out.push_back(make_composite(fb ? Op::OVERLAP_F_B : Op::OVERLAP_B_F, {a, b}));
          ++i;
          continue;
        }
      }
      out.push_back(prog[i]);
    }
    prog = std::move(out);
  }
  return s;
}

// A valid schedule with communication: compute order -> insert_p2p -> random extras that
// any format can carry (FSDP steps, BATCH composites, idle slots).
Schedule build_schedule(const Params& p) {
  std::mt19937 rng(p.seed);
  Schedule order = compute_order(p, rng);
  Schedule s;
  if (p.overlap) {
    try {
      s = insert_p2p(with_overlaps(order, rng), Alignment::Auto);
    } catch (const InputError&) {
      s = insert_p2p(order, Alignment::Auto);  // this merge made a consumer share its producer's column
    }
  } else {
    s = insert_p2p(order, Alignment::Auto);
  }
  if (p.coalesce) s = coalesce_p2p(s);
  for (int r = 0; r < s.ranks; ++r) {
    auto& prog = s.programs[static_cast<size_t>(r)];
    for (int st : s.stages_of(r)) {
      if (rng() % 4 == 0) prog.insert(prog.begin(), make_step(Op::FSDP_UNSHARD, kNone, st));
      if (rng() % 4 == 0) prog.push_back(make_step(Op::FSDP_REDUCE_GRAD, kNone, st));
    }
    for (size_t i = 0; i < prog.size(); ++i)
      if (static_cast<int>(rng() % 100) < p.idle_percent)
        prog.insert(prog.begin() + static_cast<long>(i++), std::nullopt);
  }
  return s;
}

// Extras only JSON can carry: explicit peers, tensor descriptions, groups, MPipe config.
Schedule add_json_extras(Schedule s, std::mt19937& rng) {
  static const char* const dtypes[] = {"f32", "bf16", "fp8_e4m3", "bool", "i64"};
  static const char* const names[] = {"1f1b", "with \"quotes\" and \\", "tab\tnew\nline", "ünïcode €",
                                      "\x01\x1f"};
  s.name = names[rng() % 5];
  auto decorate = [&](Step& st, int rank) {
    if (!is_p2p(st.op)) return;
    if (rng() % 3 == 0) {
      const int peer = peer_of(s, rank, st);
      if (peer >= 0 && peer != rank) st.peer = peer;
    }
    const unsigned n = rng() % 3;
    for (unsigned k = 0; k < n; ++k) {
      TensorDesc t;
      for (unsigned d = rng() % 4; d > 0; --d) t.shape.push_back(static_cast<int64_t>(rng() % 5000));
      t.dtype = dtypes[rng() % 5];
      st.edit_tensors().push_back(t);
    }
  };
  for (int r = 0; r < s.ranks; ++r) {
    auto& prog = s.programs[static_cast<size_t>(r)];
    for (auto& slot : prog) {
      if (!slot) continue;
      decorate(*slot, r);
      for (auto& sub : slot->sub_steps_mut()) decorate(sub, r);
    }
    if (rng() % 2 == 0) {
      Step ar = make_step(Op::ALL_REDUCE);
      for (int g = 0; g < s.ranks; ++g)
        if (g == r || rng() % 2 == 0) ar.edit_group().push_back(g);
      std::shuffle(ar.edit_group().begin(), ar.edit_group().end(), rng);
      prog.push_back(ar);
    }
  }
  if (rng() % 2 == 0) {
    MPipeConfig m;
    m.overflow = rng() % 2 ? Overflow::Full : Overflow::Min;
    m.tower = static_cast<Tower>(rng() % 3);
    m.owner_backward = rng() % 2;
    if (rng() % 2)
      for (int k = 0; k < s.micro_batches; ++k)
        m.owners.push_back(static_cast<int32_t>(rng() % static_cast<unsigned>(s.ranks)));
    s.mpipe = m;
  }
  return s;
}

// The placement kind the CSV reader infers from a map (loop wins over v when both fit).
Placement inferred(const Schedule& s) {
  const auto& map = s.placement.stage_to_rank;
  if (map == Placement::loop(s.ranks, s.stages).stage_to_rank) return Placement::loop(s.ranks, s.stages);
  if (map == Placement::v(s.ranks, s.stages).stage_to_rank) return Placement::v(s.ranks, s.stages);
  return Placement::explicit_map(map);
}

}  // namespace

// ---- bad inputs -------------------------------------------------------------------------

namespace {
struct BadCase {
  const char* file;
  int line, rank, index;
  const char* field;
  std::vector<std::string> says;
};
}  // namespace

TEST_CASE("every bad input file is refused with a located, expected-vs-found message", "[formats][errors]") {
  // clang-format off
  const std::vector<BadCase> cases = {
      {"malformed.json", 5, -1, -1, "", {"malformed JSON at column 9", "syntax error"}},
      {"wrong_format.json", -1, -1, -1, "format",
       {"expected format \"ppsched-schedule\", got \"pytorch-schedule\""}},
      {"wrong_version.json", -1, -1, -1, "version", {"unsupported version 2", "reads version 1 only"}},
      {"missing_ranks.json", -1, -1, -1, "ranks", {"missing key 'ranks'", "expected the number of ranks"}},
      {"programs_count.json", -1, -1, -1, "programs", {"expected one program per rank (2), found 1"}},
      {"placement_length.json", -1, -1, -1, "placement", {"each of the 2 stages, found 3 entries"}},
      {"placement_rank.json", -1, -1, -1, "placement[1]",
       {"stage 1 is placed on rank 5", "expected 0..1 (ranks is 2)"}},
      {"unknown_op.json", -1, 1, 1, "programs[1][1].op", {"unknown op 'FORWARD'", "expected one of FWD, BWD"}},
      {"unknown_step_key.json", -1, 1, 1, "programs[1][1].mcro",
       {"unknown key 'mcro' in step programs[1][1]", "expected one of op, micro, stage"}},
      {"missing_micro.json", -1, 1, 1, "programs[1][1].micro", {"FWD needs a micro", "none given"}},
      {"micro_range.json", -1, 1, 1, "programs[1][1].micro",
       {"micro 9 is out of range: expected 0..7 (micro_batches is 8)"}},
      {"stage_range.json", -1, 0, 0, "programs[0][0].stage",
       {"stage 4 is out of range: expected 0..1 (stages is 2)"}},
      {"micro_on_broadcast.json", -1, 0, 1, "programs[0][1].micro",
       {"MPIPE_PARAM_BROADCAST's micro, when given, is the emitting rank as hyper-parallel writes it: expected 0",
        "found 1"}},
      {"micro_type.json", -1, 1, 1, "programs[1][1].micro",
       {"expected an integer for programs[1][1].micro, got a string"}},
      {"negative_micro.json", -1, 1, 1, "programs[1][1].micro", {"expected an integer >= 0", "got -1"}},
      {"peer_range.json", -1, 0, 1, "programs[0][1].peer",
       {"peer 7 is out of range: expected 0..1 (ranks is 2)"}},
      {"peer_self.json", -1, 0, 1, "programs[0][1].peer", {"peer 0 is the step's own rank"}},
      {"bad_composite.json", -1, 1, 1, "programs[1][1].sub_steps[0].op",
       {"OVERLAP_F_B sub-step 0 must be FWD, found BWD", "expected (FWD, BWD or BWD_INPUT)"}},
      {"nested_composite.json", -1, 0, 1, "programs[0][1].sub_steps[0].op", {"composites do not nest"}},
      {"mpipe_missing.json", -1, 1, 0, "programs[1][0].op",
       {"MPIPE_FWD_SEND is an MPipe step", "needs an \"mpipe\" object"}},
      {"bad_overflow.json", -1, -1, -1, "mpipe.overflow",
       {"unknown overflow \"half\": expected one of \"full\", \"min\""}},
      {"owners_length.json", -1, -1, -1, "mpipe.owners", {"each of the 2 micro-batches, found 1 entry"}},
      {"group_on_fwd.json", -1, 1, 1, "programs[1][1].group",
       {"only ALL_REDUCE takes a group, found one on FWD"}},
      {"group_without_self.json", -1, 1, 1, "programs[1][1].group", {"must contain the step's own rank 1"}},
      {"bad_dtype.json", -1, 0, 1, "programs[0][1].tensors[0].dtype",
       {"unknown dtype 'float32': expected one of f32, f16, bf16"}},
      {"duplicate_key.json", -1, 0, 1, "programs[0][1].micro", {"duplicate key 'micro' in programs[0][1]"}},
      {"unknown_top_key.json", -1, -1, -1, "rank", {"unknown key 'rank' in the top level", "ranks"}},
      {"action_trailing_junk.json", -1, 1, 1, "programs[1][1]",
       {"unexpected 'x' after the action", "expected <stage><ACTION><micro>", "got '1F0x'"}},
      {"bad_cell.csv", 2, 1, 2, "",
       {"unknown action 'Q'", "expected <stage><ACTION><micro> such as 0F1 or 2RECV_B0, got '1Q1'"}},
      {"stage_two_rows.csv", 2, 1, 1, "", {"stage 0 has compute actions on rows 1 and 2 (ranks 0 and 1)"}},
      {"bad_composite.csv", 2, 1, 1, "", {"missing ')'", "got '(1F1;1B0'"}},
      {"composite_wrong_token.csv", 2, 1, 1, "", {"expected a composite action after ')', found 'FWD'"}},
      {"csv_micro_on_unshard.csv", 2, 1, 0, "programs[1][0].micro",
       {"FSDP_UNSHARD takes no micro, found micro 2"}},
      {"schedule.txt", -1, -1, -1, "", {"unknown extension '.txt'", "expected .json", ".csv"}},
      {"stages_beyond_limit.json", -1, -1, -1, "stages", {"expected at most 32768 for stages, got 2000000000"}},
      {"stage_past_16_bits.json", -1, 0, 1, "programs[0][1].stage",
       {"expected an integer from 0 to 32767, or -1 for no stage for programs[0][1].stage, got 40000"}},
      {"stage_beyond_limit.csv", 2, 1, 0, "", {"stage number too large (at most 32768 stages), got '2147483647F0'"}},
  };
  // clang-format on
  for (const auto& c : cases) {
    SECTION(c.file) {
      const std::string path = bad(c.file);
      const InputError e = expect_error([&] { read_schedule_file(path); });
      INFO(e.what());
      CHECK(e.where().file == path);
      CHECK(e.where().line == c.line);
      CHECK(e.where().rank == c.rank);
      CHECK(e.where().index == c.index);
      CHECK(e.where().field == c.field);
      for (const auto& text : c.says) CHECK_THAT(e.message(), Catch::Contains(text));
    }
  }
}

TEST_CASE("a missing file is refused with its name and the system's reason", "[formats][errors]") {
  const std::string path = bad("no_such_file.json");
  const InputError e = expect_error([&] { read_schedule_file(path); });
  CHECK(e.where().file == path);
  CHECK_THAT(e.message(), Catch::Contains("cannot open the file: No such file or directory"));
  CHECK_THAT(std::string(e.what()), Catch::StartsWith(path));
}

TEST_CASE("format names and extensions", "[formats][io]") {
  CHECK(format_from_path("a/b.json") == FileFormat::Json);
  CHECK(format_from_path("B.CSV") == FileFormat::Csv);
  CHECK(format_from_name("json") == FileFormat::Json);
  CHECK(format_from_name("csv") == FileFormat::Csv);
  CHECK_THAT(expect_error([] { format_from_name("xml"); }).message(), Catch::Contains("expected json or csv"));
  CHECK_THAT(expect_error([] { format_from_path("noext"); }).message(), Catch::Contains("has no extension"));
  // An explicit format overrides the extension.
  const Schedule s = read_schedule_file(bad("schedule.txt"), FileFormat::Csv);
  CHECK(s.ranks == 1);
}

TEST_CASE("inline bad inputs: JSON shape, CSV inference and overrides", "[formats][errors]") {
  auto json_error = [](const std::string& text) {
    return expect_error([&] { read_schedule_json(text, "x.json"); });
  };
  CHECK_THAT(json_error("[1, 2]").message(),
             Catch::Contains("expected a JSON object at the top level, got an array"));
  CHECK(json_error("").where().line == 1);
  auto e = json_error(R"({"format": "ppsched-schedule", "version": 1, "ranks": 1, "stages": 1,
      "micro_batches": 1, "placement": "zigzag", "programs": [[]]})");
  CHECK(e.where().field == "placement");
  CHECK_THAT(e.message(),
             Catch::Contains("unknown placement \"zigzag\": expected \"loop\", \"v\" or an array"));
  // Deep nesting stops at the reader; it does not recurse into it.
  std::string deep = "{\"op\": \"FWD\", \"micro\": 0, \"stage\": 0}";
  for (int k = 0; k < 5000; ++k) deep = "{\"op\": \"BATCH_SEND_RECV\", \"sub_steps\": [" + deep + "]}";
  e = json_error(R"({"format": "ppsched-schedule", "version": 1, "ranks": 1, "stages": 1,
      "micro_batches": 1, "programs": [[)" +
                 deep + "]]}");
  CHECK(e.where().field == "programs[0][0].sub_steps[0].sub_steps[0].sub_steps");
  CHECK_THAT(e.message(), Catch::Contains("composites do not nest"));
  e = json_error(R"({"format": "ppsched-schedule", "version": 1, "ranks": 1, "stages": 1,
      "micro_batches": 1, "programs": [[{"op": "FWD", "micro": 0, "stage": -1}]]})");
  CHECK(e.where().field == "programs[0][0].stage");
  CHECK_THAT(e.message(), Catch::Contains("stage -1 means no stage, but FWD needs a stage"));
  e = json_error(R"({"format": "ppsched-schedule", "version": 1, "ranks": 1.5})");
  CHECK_THAT(e.message(), Catch::Contains("expected an integer for ranks, got a number with a fraction"));

  auto csv_error = [](const std::string& text, CsvReadOptions o = {}) {
    return expect_error([&] { read_pytorch_csv(text, "x.csv", o); });
  };
  CHECK_THAT(csv_error("").message(), Catch::Contains("no rows"));
  CHECK_THAT(csv_error("0UNSHARD\n").message(), Catch::Contains("micro-batch count cannot be inferred"));
  CHECK_THAT(csv_error("0F0,2F0\n").message(), Catch::Contains("stage 1 has no compute action"));
  CsvReadOptions swapped;
  swapped.placement = Placement::explicit_map({1, 0});
  e = csv_error("0F0,0B0\n1F0,1B0\n", swapped);
  CHECK(e.where().line == 1);
  CHECK(e.where().rank == 0);
  CHECK(e.where().index == 0);
  CHECK_THAT(
      e.message(),
      Catch::Contains("the given placement puts stage 0 on rank 1, but its compute actions are on row 1"));
  // A placement given by kind only gets its map from the inferred stage count.
  CsvReadOptions by_kind;
  by_kind.placement = Placement{};
  by_kind.placement->kind = PlacementKind::V;
  CHECK(read_pytorch_csv("0F0,3F0\n1F0,2F0\n", "k.csv", by_kind).placement == Placement::v(2, 4));
  e = csv_error("0F0,1F0\n2F0,3F0\n", by_kind);
  CHECK_THAT(e.message(), Catch::Contains("the given placement puts stage 1 on rank 1"));
  CsvReadOptions few;
  few.micro_batches = 1;
  e = csv_error("0F0,0F1,0B0,0B1\n", few);
  CHECK(e.where().line == 1);
  CHECK(e.where().index == 1);
  CHECK_THAT(e.message(), Catch::Contains("micro 1 is out of range: expected 0..0 (micro_batches is 1)"));
  // A compute order that cannot run: insert_p2p's error gets the file and row.
  e = csv_error("0B0,0F0\n1F0,1B0\n");
  CHECK(e.where().file == "x.csv");
  CHECK(e.where().line == 1);
  CHECK_THAT(e.message(), Catch::Contains("cannot run"));
}

TEST_CASE("validation of built schedules names the field", "[formats][validate]") {
  Schedule s;
  s.ranks = 0;
  CHECK_THAT(expect_error([&] { validate_structure(s, "g"); }).message(),
             Catch::Contains("ranks must be at least 1, got 0"));
  s.ranks = 2;
  s.stages = 2;
  s.micro_batches = 1;
  s.programs.resize(2);
  s.placement = Placement::loop(2, 2);
  s.placement.kind = PlacementKind::V;
  s.placement.stage_to_rank = {1, 0};
  CHECK_THAT(expect_error([&] { validate_structure(s); }).message(), Catch::Contains("differs from that rule"));
  s.placement = Placement::loop(2, 2);
  s.programs[1].push_back(make_composite(Op::BATCH_SEND_RECV, {}));
  const InputError e = expect_error([&] { validate_structure(s); });
  CHECK(e.where().rank == 1);
  CHECK_THAT(e.message(), Catch::Contains("at least one P2P sub-step"));
  s.programs[1][0] = make_step(Op::FWD_SEND, 0, 1);
  s.programs[1][0]->edit_sub_steps().push_back(make_step(Op::FWD, 0, 1));
  CHECK_THAT(expect_error([&] { validate_structure(s); }).message(),
             Catch::Contains("only composite steps have sub_steps"));
  s.programs[1][0] = make_step(Op::FWD, 0, 1);
  s.programs[1][0]->peer = 0;
  CHECK_THAT(expect_error([&] { validate_structure(s); }).message(), Catch::Contains("takes no peer"));
  // The lowering packs a message's sub-step and tensor positions (lowering/comm_model.hpp): a
  // step lists at most kMaxListed of each, refused with the field.
  std::vector<Step> subs(static_cast<size_t>(kMaxListed) + 1, make_step(Op::FWD_SEND, 0, 1));
  s.programs[1][0] = make_composite(Op::BATCH_SEND_RECV, subs);
  InputError big = expect_error([&] { validate_structure(s); });
  CHECK(big.where().field == "programs[1][0].sub_steps");
  CHECK_THAT(big.message(), Catch::Contains("a composite holds at most 16384 sub-steps, found 16385"));
  s.programs[1][0] = make_step(Op::FWD_RECV, 0, 1);
  s.programs[1][0]->edit_tensors().resize(static_cast<size_t>(kMaxListed) + 1);
  for (TensorDesc& t : s.programs[1][0]->edit_tensors()) t = TensorDesc{{4}, "float32"};
  big = expect_error([&] { validate_structure(s); });
  CHECK(big.where().field == "programs[1][0].tensors");
  CHECK_THAT(big.message(), Catch::Contains("a step describes at most 16384 tensors, found 16385"));
}

// ---- action notation ----------------------------------------------------------------------

TEST_CASE("action notation parses PyTorch tokens and canonical names", "[formats][actions]") {
  std::string err;
  CHECK(parse_action("0F1", &err) == make_step(Op::FWD, 1, 0));
  CHECK(parse_action(" 2RECV_B0 ", &err) == make_step(Op::BWD_RECV, 0, 2));
  CHECK(parse_action("0I2", &err) == make_step(Op::BWD_INPUT, 2, 0));
  CHECK(parse_action("3UNSHARD", &err) == make_step(Op::FSDP_UNSHARD, kNone, 3));
  CHECK(parse_action("MPIPE_FWD_SEND5", &err) == make_step(Op::MPIPE_FWD_SEND, 5, kNone));
  CHECK(parse_action("3FWD_SEND1", &err) == make_step(Op::FWD_SEND, 1, 3));
  CHECK(parse_action("(1F1;2B0)OVERLAP_F_B", &err) ==
        make_composite(Op::OVERLAP_F_B, {make_step(Op::FWD, 1, 1), make_step(Op::BWD, 0, 2)}));
  CHECK(format_action(make_step(Op::FWD_SEND, 3, 1)) == "1SEND_F3");
  CHECK(format_action(make_step(Op::MPIPE_GRAD_REDUCE)) == "MPIPE_GRAD_REDUCE");

  for (const char* text : {"0Q1", "0f1", "", "   ", "1F1x", "F1;", "(0F1;1B0", "(0F1;;1B0)OVERLAP_F_B",
                           "((0F1))BATCH_SEND_RECV", "(0F1)FWD", "OVERLAP_F_B", "0F99999999999"}) {
    INFO(text);
    CHECK_FALSE(parse_action(text, &err).has_value());
    CHECK_FALSE(err.empty());
  }
  parse_action("0Q1", &err);
  CHECK(err == "unknown action 'Q': expected <stage><ACTION><micro> such as 0F1 or 2RECV_B0, got '0Q1'");
}

TEST_CASE("action notation round-trips every step type", "[formats][actions][property]") {
  rc::prop("parse(format(step)) == step", [] {
    auto field = [](Field f) {
      if (f == Field::None) return kNone;
      if (f == Field::Optional && *rc::gen::arbitrary<bool>()) return kNone;
      return *rc::gen::inRange(0, 1000);
    };
    auto simple = [&](Op op) { return make_step(op, field(info(op).micro), field(info(op).stage)); };
    const auto& row = step_table()[static_cast<size_t>(*rc::gen::inRange(0, kOpCount))];
    Step st;
    if (is_composite(row.op)) {
      std::vector<Step> subs;
      for (int k = *rc::gen::inRange(1, 4); k > 0; --k) {
        Op op;
        do op = static_cast<Op>(*rc::gen::inRange(0, kOpCount));
        while (is_composite(op));
        subs.push_back(simple(op));
      }
      st = make_composite(row.op, subs);
    } else {
      st = simple(row.op);
    }
    std::string err;
    const auto back = parse_action(format_action(st), &err);
    RC_ASSERT(err.empty());
    RC_ASSERT(back.has_value());
    RC_ASSERT(*back == st);
  });
}

// ---- valid examples -----------------------------------------------------------------------

TEST_CASE("the README example reads and is written canonically", "[formats][json]") {
  const Schedule s = read_schedule_file(good("readme_example.json"));
  CHECK(s.name == "1f1b");
  CHECK(s.ranks == 2);
  CHECK(s.stages == 2);
  CHECK(s.micro_batches == 2);
  CHECK(s.placement == Placement::loop(2, 2));
  REQUIRE(s.mpipe.has_value());
  CHECK(*s.mpipe == MPipeConfig{});
  CHECK(s.programs[0].size() == 3);
  CHECK_FALSE(s.programs[0][2].has_value());
  CHECK(s.programs[1][0] == make_step(Op::FWD_RECV, 0, 1));
  CHECK(write_schedule_json(s) == R"({
  "format": "ppsched-schedule",
  "version": 1,
  "name": "1f1b",
  "ranks": 2,
  "stages": 2,
  "micro_batches": 2,
  "placement": "loop",
  "mpipe": {"overflow": "full", "tower": "trainable", "owner_backward": false},
  "programs": [
    [
      {"op": "FWD", "micro": 0, "stage": 0},
      {"op": "FWD_SEND", "micro": 0, "stage": 0},
      null
    ],
    [
      {"op": "FWD_RECV", "micro": 0, "stage": 1},
      {"op": "FWD", "micro": 0, "stage": 1}
    ]
  ]
}
)");
}

TEST_CASE("steps given as action strings, annotations and the optional fields", "[formats][json]") {
  const Schedule s = read_schedule_file(good("annotated_steps.json"));
  CHECK(s.placement == Placement::explicit_map({0, 1, 1, 0}));
  CHECK(s.programs[0][0] == make_step(Op::FWD, 0, 0));
  REQUIRE(s.programs[0][1]->tensors().size() == 1);
  CHECK(s.programs[0][1]->tensors()[0] == TensorDesc{{2, 16}, "bf16"});
  CHECK(s.programs[0][7]->peer == 1);
  CHECK(s.programs[0][9]->group() == std::vector<int32_t>{0, 1});
  CHECK(s.programs[1][3]->op == Op::BATCH_SEND_RECV);
  CHECK(s.programs[1][3]->sub_steps().size() == 2);
  CHECK(s.programs[1][7]->stage == kNone);  // "stage": -1 means no stage
  const std::string text = write_schedule_json(s);
  CHECK_THAT(text, Catch::Contains(R"("placement": [0, 1, 1, 0])"));
  CHECK_THAT(
      text,
      Catch::Contains(
          R"({"op": "FWD_SEND", "micro": 0, "stage": 0, "tensors": [{"shape": [2, 16], "dtype": "bf16"}]})"));
  CHECK(read_schedule_json(text, "again.json") == s);
}

TEST_CASE("a compute-only PyTorch CSV gets its sends and receives", "[formats][csv]") {
  const Schedule s = read_schedule_file(good("1f1b_2rank_compute.csv"));
  CHECK(s.name == "1f1b_2rank_compute");
  CHECK(s.ranks == 2);
  CHECK(s.stages == 2);
  CHECK(s.micro_batches == 2);
  CHECK(s.placement == Placement::loop(2, 2));
  CHECK(joined(s.programs[0], false) == "F0s0 FS0s0 F1s0 FS1s0 BR0s0 B0s0 BR1s0 B1s0");
  CHECK(joined(s.programs[1], false) == "FR0s1 F0s1 FR1s1 B0s1 BS0s1 F1s1 B1s1 BS1s1");
  CHECK(rendezvous_replay(s) == "");
  // Written back compute-only, the P2P steps are gone again (idle columns stay).
  const std::string compute = write_pytorch_csv(s, CsvKind::ComputeOnly);
  CHECK(compute.find("SEND") == std::string::npos);
  CHECK(read_pytorch_csv(compute, "1f1b_2rank_compute.csv") == s);
}

TEST_CASE("a lowered compute_comms CSV with FSDP steps is taken as is", "[formats][csv]") {
  const Schedule s = read_schedule_file(good("1f1b_2rank_comms.csv"));
  CHECK(s.ranks == 2);
  CHECK(s.stages == 2);
  CHECK(s.micro_batches == 2);
  REQUIRE(s.programs[0].size() == 11);
  CHECK(s.programs[0][0] == make_step(Op::FSDP_UNSHARD, kNone, 0));
  CHECK(s.programs[0][2] == make_step(Op::FWD_SEND, 0, 0));
  CHECK(s.programs[1][9] == make_step(Op::FSDP_REDUCE_GRAD, kNone, 1));
  CHECK(rendezvous_replay(s) == "");
  CHECK(write_pytorch_csv(s, CsvKind::ComputeComms) ==
        "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD\n"
        "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD\n");
}

TEST_CASE("a V-placed zero-bubble CSV with an overlap infers its placement", "[formats][csv]") {
  const Schedule s = read_schedule_file(good("zbv_2rank_compute.csv"));
  CHECK(s.stages == 4);
  CHECK(s.placement == Placement::v(2, 4));
  CHECK(check_compute_coverage(s) == "");
  CHECK(rendezvous_replay(s) == "");
  CsvReadOptions o;
  o.placement = Placement::v(2, 4);
  o.micro_batches = 3;
  const Schedule wider = read_schedule_file(good("zbv_2rank_compute.csv"), {}, o);
  CHECK(wider.micro_batches == 3);
}

TEST_CASE("CSV refuses what it cannot express", "[formats][csv]") {
  Schedule s = read_schedule_file(good("1f1b_2rank_comms.csv"));
  s.programs[0][2]->peer = 1;
  const InputError e = expect_error([&] { write_pytorch_csv(s, CsvKind::ComputeComms); });
  CHECK(e.where().rank == 0);
  CHECK(e.where().index == 2);
  CHECK_THAT(e.message(),
             Catch::Contains("carries an explicit peer (1), which PyTorch's action notation cannot express"));
  s.programs[0][2]->peer = kNone;
  s.mpipe = MPipeConfig{};
  CHECK_THAT(expect_error([&] { write_schedule(s, FileFormat::Csv); }).message(),
             Catch::Contains("MPipe layer"));
}

// ---- round trips --------------------------------------------------------------------------

TEST_CASE("JSON round trips over generated schedules", "[formats][json][property]") {
  rc::prop("IR -> JSON -> IR is identity and a second write is byte-identical", [] {
    const Params p = gen_params();
    std::mt19937 rng(p.seed ^ 0x9e3779b9u);
    const Schedule s = add_json_extras(build_schedule(p), rng);
    validate_structure(s);
    const std::string first = write_schedule_json(s);
    const Schedule back = read_schedule_json(first, "prop.json");
    RC_ASSERT(back == s);
    RC_ASSERT(write_schedule_json(back) == first);
  });
}

// Rewrites canonical JSON the way a person or another tool might: other key order and
// layout (nlohmann's dump), steps as action strings, annotations, a default left out.
std::string loosely_written(const Schedule& s, std::mt19937& rng) {
  nlohmann::json j = nlohmann::json::parse(write_schedule_json(s));
  if (j["placement"] == "loop" && rng() % 2) j.erase("placement");
  if (rng() % 2) j["comment"] = "rewritten";
  auto plain = [](const Step& st) {
    auto bare = [](const Step& x) { return x.peer == kNone && x.tensors().empty() && x.group().empty(); };
    return bare(st) && std::all_of(st.sub_steps().begin(), st.sub_steps().end(), bare);
  };
  for (size_t r = 0; r < s.programs.size(); ++r) {
    for (size_t i = 0; i < s.programs[r].size(); ++i) {
      const Slot& slot = s.programs[r][i];
      auto& step = j["programs"][r][i];
      if (!slot) continue;
      if (plain(*slot) && rng() % 2) {
        step = format_action(*slot);
      } else if (rng() % 8 == 0) {
        step["x-note"] = rng() % 100;
      }
    }
  }
  return j.dump(rng() % 2 ? -1 : 4);
}

TEST_CASE("JSON written loosely reads back to the same schedule and canonical text",
          "[formats][json][property]") {
  rc::prop("loose JSON -> IR -> JSON equals the canonical write", [] {
    const Params p = gen_params();
    std::mt19937 rng(p.seed ^ 0x85ebca6bu);
    const Schedule s = add_json_extras(build_schedule(p), rng);
    const std::string canonical = write_schedule_json(s);
    const Schedule back = read_schedule_json(loosely_written(s, rng), "loose.json");
    RC_ASSERT(back == s);
    RC_ASSERT(write_schedule_json(back) == canonical);
  });
}

TEST_CASE("CSV round trips over generated schedules", "[formats][csv][property]") {
  rc::prop("IR -> CSV (compute_comms) -> IR keeps every step, idle slots aside", [] {
    const Params p = gen_params();
    Schedule s = build_schedule(p);
    s.placement = inferred(s);
    s.name = "prop";
    validate_structure(s);
    const Schedule back = read_pytorch_csv(write_pytorch_csv(s, CsvKind::ComputeComms), "dir/prop.csv");
    // Every step comes back in order; idle slots are not written (PyTorch's compute_comms
    // loader refuses blank cells).
    Schedule want = s;
    for (Program& prog : want.programs) prog.erase(std::remove(prog.begin(), prog.end(), Slot{}), prog.end());
    if (!(back == want)) RC_LOG() << write_schedule_json(want) << write_schedule_json(back);
    RC_ASSERT(back == want);
  });
}

// ---- input that cannot hurt -----------------------------------------------------------------

TEST_CASE("devices, FIFOs and directories are refused before a byte is read", "[formats][errors][limits]") {
  // /dev/zero never ends and a FIFO blocks: reading either would hang or exhaust memory.
  CHECK_THAT(expect_error([] { read_input_file("/dev/zero"); }).message(), Catch::Contains("not a regular file"));
  CHECK_THAT(expect_error([] { read_schedule_file("/dev/null", FileFormat::Json); }).message(),
             Catch::Contains("not a regular file"));
  const std::string fifo = "test_formats_fifo.json";
  std::remove(fifo.c_str());
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const InputError e = expect_error([&] { read_schedule_file(fifo); });
  std::remove(fifo.c_str());
  CHECK(e.where().file == fifo);
  CHECK_THAT(e.message(), Catch::Contains("not a regular file"));
  CHECK_THAT(expect_error([] { read_input_file("."); }).message(), Catch::Contains("directory"));
}

TEST_CASE("a file over the size limit is refused by its size, unread", "[formats][errors][limits]") {
  const std::string path = "test_formats_sparse.json";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    REQUIRE(ftruncate(fileno(f), static_cast<off_t>(kMaxInputBytes) + 1) == 0);  // sparse: no disk used
    std::fclose(f);
  }
  const InputError e = expect_error([&] { read_schedule_file(path); });
  std::remove(path.c_str());
  CHECK_THAT(e.message(), Catch::Contains("over the limit of 1073741824 bytes"));
}

TEST_CASE("messages quote at most ~200 bytes of the input and no library tags", "[formats][errors][limits]") {
  const std::string huge(1000000, 'k');
  auto e = expect_error([&] {
    read_schedule_json(R"({"format": "ppsched-schedule", "version": 1, ")" + huge + R"(": 1})", "x.json");
  });
  CHECK_THAT(e.message(), Catch::Contains("unknown key 'kkkk"));
  CHECK_THAT(e.message(), Catch::Contains("(1000000 bytes)"));
  CHECK(e.message().size() < 600);
  e = expect_error([&] { read_pytorch_csv("0F0,0F" + huge + "\n", "x.csv"); });
  CHECK(e.message().size() < 800);
  e = expect_error([&] { read_schedule_json(R"({"format": "ppsched-schedule", "version": 1E432})", "x.json"); });
  CHECK_THAT(e.message(), Catch::Contains("number overflow"));
  CHECK_THAT(e.message(), !Catch::Contains("json.exception"));
  CHECK(e.where().line == 1);
}

TEST_CASE("a byte-order mark is skipped in CSV as in JSON", "[formats][limits]") {
  const std::string bom = "\xEF\xBB\xBF";
  const Schedule csv = read_pytorch_csv(bom + "0F0,0B0\n", "bom.csv");
  CHECK(csv == read_pytorch_csv("0F0,0B0\n", "bom.csv"));
  const std::string json = R"({"format": "ppsched-schedule", "version": 1, "ranks": 1, "stages": 1,
      "micro_batches": 1, "programs": [["0F0", "0B0"]]})";
  CHECK(read_schedule_json(bom + json, "bom.json") == read_schedule_json(json, "bom.json"));
}

TEST_CASE("the SAX reader locates errors in sub-steps, tensors and annotations", "[formats][errors][json]") {
  const std::string head = R"({"format": "ppsched-schedule", "version": 1, "ranks": 2, "stages": 2,
      "micro_batches": 1, "programs": [[)";
  auto e = expect_error([&] {
    read_schedule_json(head + R"({"op": "BATCH_SEND_RECV", "sub_steps": ["0SEND_F0", {"op": "FWD_SEND", "micro": "x"}]}], []]})",
                       "x.json");
  });
  CHECK(e.where().rank == 0);
  CHECK(e.where().index == 0);
  CHECK(e.where().field == "programs[0][0].sub_steps[1].micro");
  CHECK_THAT(e.message(), Catch::Contains("expected an integer for programs[0][0].sub_steps[1].micro, got a string"));
  e = expect_error([&] {
    read_schedule_json(head + R"(null, {"op": "FWD_SEND", "micro": 0, "stage": 0, "tensors": [{"shape": [1, 2.5], "dtype": "bf16"}]}], []]})",
                       "x.json");
  });
  CHECK(e.where().index == 1);
  CHECK(e.where().field == "programs[0][1].tensors[0].shape[1]");
  e = expect_error([&] {
    read_schedule_json(head + R"({"op": "FWD", "micro": 0, "stage": 0, "x-note": {"a": [1, {"b": 1, "b": 2}]}}], []]})",
                       "x.json");
  });
  CHECK(e.where().field == "programs[0][0].x-note.a[1].b");
  CHECK_THAT(e.message(), Catch::Contains("duplicate key 'b'"));
  e = expect_error([&] { read_schedule_json(head + R"({"micro": 0}], []]})", "x.json"); });
  CHECK(e.where().field == "programs[0][0].op");
  CHECK_THAT(e.message(), Catch::Contains("missing key 'op' in programs[0][0]"));
  e = expect_error([&] { read_schedule_json(head + R"(], {"op": "FWD"}]})", "x.json"); });
  CHECK(e.where().rank == 1);
  CHECK(e.where().index == -1);
  CHECK_THAT(e.message(), Catch::Contains("expected an array for programs[1], got an object"));
  // Keys in any order (nlohmann's dump sorts them): programs before ranks and stages.
  const Schedule s = read_schedule_json(R"({"micro_batches": 1, "placement": "v", "programs": [["0F0"], ["1F0"]],
      "ranks": 2, "stages": 2, "format": "ppsched-schedule", "version": 1})", "x.json");
  CHECK(s.placement == Placement::v(2, 2));
}

TEST_CASE("a step in the writer's plain shape and its near misses read as the events read them",
          "[formats][errors][json]") {
  // The reader takes {"op": ..., "micro": ..., "stage": ..., "peer": ...} in one pass over its
  // bytes and leaves everything else to the SAX events: each near miss below must still give
  // the events' value or their located message.
  const std::string head = R"({"format": "ppsched-schedule", "version": 1, "ranks": 2, "stages": 2,
      "micro_batches": 4, "programs": [[null, )";
  auto read_step = [&](const std::string& step) {
    const Schedule s = read_schedule_json(head + step + "], []]}", "x.json");
    REQUIRE(s.programs[0].size() == 2);
    REQUIRE(s.programs[0][1]);
    return *s.programs[0][1];
  };
  auto step_error = [&](const std::string& step) {
    return expect_error([&] { read_schedule_json(head + step + "], []]}", "x.json"); });
  };
  // Taken: any key order and whitespace, compact, the largest int32 (validation then judges it).
  CHECK(read_step(R"({"op": "FWD", "micro": 3, "stage": 0})") == make_step(Op::FWD, 3, 0));
  CHECK(read_step("{ \"stage\"\t:1 ,\r\n\"micro\" : 0,\"op\":\"BWD\" }") == make_step(Op::BWD, 0, 1));
  Step send = make_step(Op::FWD_SEND, 2, 0);
  send.peer = 1;
  CHECK(read_step(R"({"op":"FWD_SEND","micro":2,"stage":0,"peer":1})") == send);
  auto e = step_error(R"({"op": "FWD", "micro": 2147483647, "stage": 0})");
  CHECK(e.where().index == 1);
  CHECK_THAT(e.message(), Catch::Contains("micro 2147483647 is out of range"));
  // Declined, and read by the events to the same value.
  CHECK(read_step(R"({"op": "F\u0057D", "\u006dicro": 3, "stage": 0})") == make_step(Op::FWD, 3, 0));
  CHECK(read_step(R"({"op": "FWD", "micro": -0, "stage": 0, "x-note": 1})") == make_step(Op::FWD, 0, 0));
  // Declined, and refused by the events with their location.
  e = step_error(R"({"op": "FWD", "micro": 2147483648, "stage": 0})");
  CHECK(e.where().field == "programs[0][1].micro");
  CHECK_THAT(e.message(), Catch::Contains("expected an integer >= 0 for programs[0][1].micro, got 2147483648"));
  e = step_error(R"({"op": "FWD", "micro": 12345678901234, "stage": 0})");
  CHECK_THAT(e.message(), Catch::Contains("got 12345678901234"));
  e = step_error(R"({"op": "FWD", "micro": 1.0, "stage": 0})");
  CHECK_THAT(e.message(), Catch::Contains("expected an integer for programs[0][1].micro, got a number with a fraction"));
  e = step_error(R"({"op": "FWD", "micro": 1e0, "stage": 0})");
  CHECK_THAT(e.message(), Catch::Contains("got a number with a fraction"));
  e = step_error(R"({"op": "FWD", "micro": 01, "stage": 0})");
  CHECK(e.where().line == 2);
  CHECK_THAT(e.message(), Catch::Contains("syntax error"));
  e = step_error(R"({"op": "FWD", "micro": 1, "micro": 1, "stage": 0})");
  CHECK(e.where().field == "programs[0][1].micro");
  CHECK_THAT(e.message(), Catch::Contains("duplicate key 'micro' in programs[0][1]"));
  e = step_error(R"({"micro": 1, "stage": 0})");
  CHECK(e.where().field == "programs[0][1].op");
  CHECK_THAT(e.message(), Catch::Contains("missing key 'op' in programs[0][1]"));
  e = step_error(R"({"op": "FORWARD", "micro": 1, "stage": 0})");
  CHECK(e.where().field == "programs[0][1].op");
  CHECK_THAT(e.message(), Catch::Contains("unknown op 'FORWARD'"));
  e = step_error(R"({"op": "FWD", "micro": 1, "stage": -1})");
  CHECK(e.where().field == "programs[0][1].stage");
  CHECK_THAT(e.message(), Catch::Contains("stage -1 means no stage, but FWD needs a stage"));
  e = step_error(R"({"op": "FWD", "micro": 1, "stage": 0, "tensor": []})");
  CHECK(e.where().field == "programs[0][1].tensor");
  CHECK_THAT(e.message(), Catch::Contains("unknown key 'tensor' in step programs[0][1]"));
  e = step_error(R"({"op": "FWD", "micro": 1, "stage": 0,})");
  CHECK_THAT(e.message(), Catch::Contains("syntax error while parsing object key"));
  e = step_error(R"({"op": "FWD", "micro": 1, "stage": 0)");
  CHECK_THAT(e.message(), Catch::Contains("syntax error"));
  e = expect_error([&] { read_schedule_json(head + R"({"op": "FWD", "micro": 1)", "x.json"); });
  CHECK_THAT(e.message(), Catch::Contains("unexpected end of input"));
}

// ---- replicated stages ----------------------------------------------------------------------

TEST_CASE("replicated stages round-trip through JSON (\"pipes\", \"micro_pipe\") and are refused by PyTorch CSV",
          "[formats][replicas]") {
  for (const char* family : {"chimera", "dualpipe"}) {
    GenerateOptions g;
    g.pp = 4;
    g.micro = 8;
    const Schedule s = generate(family, g);
    REQUIRE(s.pipes == 2);
    const std::string text = write_schedule(s, FileFormat::Json);
    CHECK(text.find("\"pipes\": 2") != std::string::npos);
    CHECK(read_schedule_json(text, "x.json") == s);
    const InputError e = expect_error([&] { write_schedule(s, FileFormat::Csv); });
    CHECK(e.message().find("replicated stages") != std::string::npos);
  }
}

TEST_CASE("a replicated schedule's pipes and micro_pipe are checked with a located error", "[formats][replicas]") {
  GenerateOptions g;
  g.pp = 4;
  g.micro = 4;
  const std::string text = write_schedule(generate("chimera", g), FileFormat::Json);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    return t.replace(at, from.size(), to);
  };
  const InputError short_map = expect_error([&] { read_schedule_json(with("\"micro_pipe\": [0, 0, 1, 1]", "\"micro_pipe\": [0, 0, 1]"), "c.json"); });
  CHECK(short_map.where().field == "micro_pipe");
  CHECK(short_map.message().find("expected the pipe of each of the 4 micro-batches") != std::string::npos);
  const InputError out_of_range = expect_error([&] { read_schedule_json(with("\"micro_pipe\": [0, 0, 1, 1]", "\"micro_pipe\": [0, 0, 1, 2]"), "c.json"); });
  CHECK(out_of_range.where().field == "micro_pipe[3]");
  const InputError uneven = expect_error([&] { read_schedule_json(with("\"pipes\": 2", "\"pipes\": 3"), "c.json"); });
  CHECK(uneven.where().field == "pipes");
  const InputError word = expect_error([&] { read_schedule_json(with("\"pipes\": 2", "\"pipes\": \"two\""), "c.json"); });
  CHECK(word.where().field == "pipes");
  const InputError no_pipes = expect_error([&] { read_schedule_json(with("\"pipes\": 2,", ""), "c.json"); });
  CHECK(no_pipes.where().field == "micro_pipe");
}
