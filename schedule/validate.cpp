// Structural validation (validate.hpp). Every rule is stated in terms of the step table, so
// a new step type is validated by its row alone. Errors name the field as a JSON-style path
// ("programs[1][3].micro") so that the same message reads well for JSON, CSV and generators.
#include "schedule/validate.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "schedule/errors.hpp"

namespace ppsched {
namespace {

constexpr std::array<std::string_view, 11> kDtypes = {"f32", "f16", "bf16", "f64",      "i64",     "i32",
                                                      "i8",  "u8",  "bool", "fp8_e4m3", "fp8_e5m2"};

std::string dtype_list() {
  std::string out;
  for (auto d : kDtypes) out += (out.empty() ? "" : ", ") + std::string(d);
  return out;
}

// "0..7 (micro_batches is 8)"; for an empty range says so.
std::string range_text(int count, const char* what) {
  std::string n = std::to_string(count);
  if (count <= 0) return "none (" + std::string(what) + " is " + n + ")";
  return "0.." + std::to_string(count - 1) + " (" + what + " is " + n + ")";
}

std::string entries(size_t n) { return std::to_string(n) + (n == 1 ? " entry" : " entries"); }

class Validator {
 public:
  Validator(const Schedule& s, const std::string& file) : s_(s), file_(file) {}

  void run() {
    check_counts();
    if (const size_t n = s_.slot_count(); n > static_cast<size_t>(kMaxSlots))
      fail_top("programs", "the schedule holds " + std::to_string(n) + " slots (steps and idle slots), over the limit of " +
                               std::to_string(kMaxSlots) + " (docs/verification.md \"Limits\"): checking and simulating hold "
                               "about 200 bytes a step, so a larger schedule would need more memory than it is worth; "
                               "split it or simulate fewer micro-batches");
    check_placement();
    check_mpipe();
    check_pipes();
    check_planned_for();
    if (s_.data_steps != has_body_data_steps(s_))
      fail_top("programs", std::string("internal: the schedule's data_steps flag says ") +
                               (s_.data_steps ? "it has" : "it has no") +
                               " body data steps, its programs say otherwise (mark_data_steps was not called)");
    for (int r = 0; r < s_.ranks; ++r) {
      const Program& prog = s_.programs[static_cast<size_t>(r)];
      for (size_t i = 0; i < prog.size(); ++i) {
        if (!prog[i]) continue;
        check_step(*prog[i], r, static_cast<int>(i), /*sub=*/-1, /*inside=*/nullptr);
      }
    }
  }

 private:
  [[noreturn]] void fail_top(std::string field, std::string msg) const {
    Location loc;
    loc.file = file_;
    loc.field = std::move(field);
    throw InputError(std::move(loc), std::move(msg));
  }
  // A step's error: field "programs[r][i]" (+ ".sub_steps[sub]" for a sub-step) + suffix.
  // The path is built here only, so that valid schedules cost no string work per step.
  [[noreturn]] void fail(int r, int i, int sub, const std::string& suffix, std::string msg) const {
    Location loc;
    loc.file = file_;
    loc.rank = r;
    loc.index = i;
    loc.field = "programs[" + std::to_string(r) + "][" + std::to_string(i) + "]" +
                (sub >= 0 ? ".sub_steps[" + std::to_string(sub) + "]" : std::string()) + suffix;
    throw InputError(std::move(loc), std::move(msg));
  }

  void check_counts() const {
    auto in_range = [&](int v, const char* name, int most) {
      if (v < 1) fail_top(name, std::string(name) + " must be at least 1, got " + std::to_string(v));
      if (v > most)
        fail_top(name, std::string(name) + " must be at most " + std::to_string(most) + ", got " +
                           std::to_string(v));
    };
    in_range(s_.ranks, "ranks", kMaxRanks);
    in_range(s_.stages, "stages", kMaxStages);
    in_range(s_.micro_batches, "micro_batches", kMaxCount);
    if (s_.programs.size() != static_cast<size_t>(s_.ranks))
      fail_top("programs", "expected one program per rank (" + std::to_string(s_.ranks) + "), found " +
                               std::to_string(s_.programs.size()));
  }

  void check_placement() const {
    const auto& map = s_.placement.stage_to_rank;
    if (map.size() != static_cast<size_t>(s_.stages))
      fail_top("placement", "expected the rank of each of the " + std::to_string(s_.stages) +
                                " stages, found " + entries(map.size()));
    for (size_t st = 0; st < map.size(); ++st) {
      if (map[st] < 0 || map[st] >= s_.ranks)
        fail_top("placement[" + std::to_string(st) + "]",
                 "stage " + std::to_string(st) + " is placed on rank " + std::to_string(map[st]) +
                     ", out of range: expected " + range_text(s_.ranks, "ranks"));
    }
    // A named placement must be what its name says, or writing it back would change it.
    if (s_.placement.kind == PlacementKind::Explicit) return;
    const Placement rule = s_.placement.kind == PlacementKind::Loop ? Placement::loop(s_.ranks, s_.stages)
                                                                    : Placement::v(s_.ranks, s_.stages);
    if (rule.stage_to_rank != map)
      fail_top("placement", "placement is '" + std::string(to_string(s_.placement.kind)) +
                                "' but its stage-to-rank map differs from that rule; use an explicit map");
  }

  void check_mpipe() const {
    if (!s_.mpipe || s_.mpipe->owners.empty()) return;
    const auto& owners = s_.mpipe->owners;
    if (owners.size() != static_cast<size_t>(s_.micro_batches))
      fail_top("mpipe.owners", "expected the owner rank of each of the " + std::to_string(s_.micro_batches) +
                                   " micro-batches, found " + entries(owners.size()));
    for (size_t m = 0; m < owners.size(); ++m) {
      if (owners[m] < 0 || owners[m] >= s_.ranks)
        fail_top("mpipe.owners[" + std::to_string(m) + "]",
                 "owner " + std::to_string(owners[m]) + " of micro " + std::to_string(m) +
                     " is out of range: expected " + range_text(s_.ranks, "ranks"));
    }
  }

  // A planned schedule's layout holds the body layers of each of its model stages.
  void check_planned_for() const {
    if (!s_.planned_for) return;
    const size_t n = s_.planned_for->layout.size();
    if (n != static_cast<size_t>(s_.model_stages()))
      fail_top("planned_for.layout", "expected the body layers of each of the " + std::to_string(s_.model_stages()) +
                                         " stages, found " + entries(n));
    if (s_.planned_for->model.empty()) fail_top("planned_for.model", "expected the model file, got an empty string");
  }

  // Replicated stages: the copies divide the stages evenly, every micro-batch names its copy.
  void check_pipes() const {
    if (s_.pipes < 1 || s_.pipes > s_.stages || s_.stages % s_.pipes != 0)
      fail_top("pipes", "pipes must divide the " + std::to_string(s_.stages) + " stages into equal copies, got " +
                            std::to_string(s_.pipes));
    if (s_.pipes == 1) {
      if (!s_.micro_pipe.empty()) fail_top("micro_pipe", "micro_pipe needs \"pipes\" > 1 (replicated stages)");
      return;
    }
    if (s_.mpipe) fail_top("pipes", "replicated stages (pipes > 1) and an MPipe layer do not combine");
    if (s_.micro_pipe.size() != static_cast<size_t>(s_.micro_batches))
      fail_top("micro_pipe", "expected the pipe of each of the " + std::to_string(s_.micro_batches) +
                                 " micro-batches, found " + entries(s_.micro_pipe.size()));
    for (size_t m = 0; m < s_.micro_pipe.size(); ++m)
      if (s_.micro_pipe[m] < 0 || s_.micro_pipe[m] >= s_.pipes)
        fail_top("micro_pipe[" + std::to_string(m) + "]",
                 "pipe " + std::to_string(s_.micro_pipe[m]) + " of micro " + std::to_string(m) +
                     " is out of range: expected " + range_text(s_.pipes, "pipes"));
  }

  // `inside` is the composite holding this step, if any; sub-steps are located at the
  // composite's rank and index, with the field path telling which sub-step.
  void check_step(const Step& st, int r, int i, int sub, const Step* inside) const {
    const auto& row = info(st.op);
    const std::string_view name = row.name;

    // micro
    if (row.micro == Field::None && st.micro != kNone)
      fail(r, i, sub, ".micro", std::string(name) + " takes no micro, found micro " + std::to_string(st.micro));
    if (row.micro == Field::Required && st.micro == kNone)
      fail(r, i, sub, ".micro",
           std::string(name) + " needs a micro: expected " + range_text(s_.micro_batches, "micro_batches") +
               ", none given");
    // A rank tag (hyper-parallel's MPIPE_PARAM_BROADCAST names the emitting rank there) is
    // no micro-batch: it must name the rank whose program holds the step.
    if (row.micro == Field::RankTag && st.micro != kNone && st.micro != r)
      fail(r, i, sub, ".micro",
           std::string(name) + "'s micro, when given, is the emitting rank as hyper-parallel writes it: expected " +
               std::to_string(r) + " (the rank whose program holds it), found " + std::to_string(st.micro));
    if (row.micro != Field::RankTag && st.micro != kNone && (st.micro < 0 || st.micro >= s_.micro_batches))
      fail(r, i, sub, ".micro",
           "micro " + std::to_string(st.micro) + " is out of range: expected " +
               range_text(s_.micro_batches, "micro_batches"));

    // stage (kNone on an Optional stage means the MPipe prefix / no stage)
    if (row.stage == Field::None && st.stage != kNone)
      fail(r, i, sub, ".stage", std::string(name) + " takes no stage, found stage " + std::to_string(st.stage));
    if (row.stage == Field::Required && st.stage == kNone)
      fail(r, i, sub, ".stage",
           std::string(name) + " needs a stage: expected " + range_text(s_.stages, "stages") + ", none given");
    if (st.stage != kNone && (st.stage < 0 || st.stage >= s_.stages))
      fail(r, i, sub, ".stage",
           "stage " + std::to_string(st.stage) + " is out of range: expected " +
               range_text(s_.stages, "stages") + (row.stage == Field::Optional ? " or -1 for no stage" : ""));

    // peer: an explicit override of the P2P peer rule
    if (st.peer != kNone) {
      if (!is_p2p(st.op))
        fail(r, i, sub, ".peer",
             std::string(name) + " is not a P2P step and takes no peer, found peer " + std::to_string(st.peer));
      if (st.peer < 0 || st.peer >= s_.ranks)
        fail(r, i, sub, ".peer",
             "peer " + std::to_string(st.peer) + " is out of range: expected " + range_text(s_.ranks, "ranks"));
      if (st.peer == r)
        fail(r, i, sub, ".peer",
             "peer " + std::to_string(st.peer) +
                 " is the step's own rank; a P2P step "
                 "talks to another rank");
    }

    check_group(st, r, i, sub);
    check_tensors(st, r, i, sub);
    if (info(st.op).mpipe && !s_.mpipe)
      fail(r, i, sub, ".op", std::string(name) + " is an MPipe step: the schedule needs an \"mpipe\" object");
    check_sub_steps(st, r, i, sub, inside);
  }

  void check_group(const Step& st, int r, int i, int sub) const {
    const std::string field = ".group";
    if (info(st.op).collective != CollectiveScope::ExplicitGroup) {
      if (!st.group().empty())
        fail(r, i, sub, field, "only ALL_REDUCE takes a group, found one on " + std::string(op_name(st.op)));
      return;
    }
    if (st.group().empty()) fail(r, i, sub, field, "ALL_REDUCE needs a non-empty group of ranks, none given");
    for (size_t k = 0; k < st.group().size(); ++k) {
      const int g = st.group()[k];
      if (g < 0 || g >= s_.ranks)
        fail(r, i, sub, field + "[" + std::to_string(k) + "]",
             "group rank " + std::to_string(g) + " is out of range: expected " + range_text(s_.ranks, "ranks"));
      if (std::find(st.group().begin(), st.group().begin() + static_cast<long>(k), g) !=
          st.group().begin() + static_cast<long>(k))
        fail(r, i, sub, field + "[" + std::to_string(k) + "]",
             "rank " + std::to_string(g) + " appears twice in the group");
    }
    if (std::find(st.group().begin(), st.group().end(), r) == st.group().end())
      fail(r, i, sub, field, "the group must contain the step's own rank " + std::to_string(r));
  }

  void check_tensors(const Step& st, int r, int i, int sub) const {
    if (st.tensors().empty()) return;
    if (!is_p2p(st.op))
      fail(r, i, sub, ".tensors",
           "only P2P steps describe tensors, found tensors on " + std::string(op_name(st.op)));
    if (st.tensors().size() > static_cast<size_t>(kMaxListed))
      fail(r, i, sub, ".tensors",
           "a step describes at most " + std::to_string(kMaxListed) + " tensors, found " + std::to_string(st.tensors().size()));
    for (size_t k = 0; k < st.tensors().size(); ++k) {
      const auto& t = st.tensors()[k];
      const std::string tp = ".tensors[" + std::to_string(k) + "]";
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if (t.shape[d] < 0)
          fail(r, i, sub, tp + ".shape[" + std::to_string(d) + "]",
               "expected a non-negative dimension, got " + std::to_string(t.shape[d]));
      }
      if (std::find(kDtypes.begin(), kDtypes.end(), t.dtype) == kDtypes.end())
        fail(r, i, sub, tp + ".dtype", "unknown dtype '" + clip(t.dtype) + "': expected one of " + dtype_list());
    }
  }

  void check_sub_steps(const Step& st, int r, int i, int sub, const Step* inside) const {
    const std::string field = ".sub_steps";
    if (!is_composite(st.op)) {
      if (!st.sub_steps().empty())
        fail(r, i, sub, field,
             "only composite steps have sub_steps, found " + std::to_string(st.sub_steps().size()) + " on " +
                 std::string(op_name(st.op)));
      return;
    }
    if (inside)
      fail(r, i, sub, ".op",
           "composites do not nest: " + std::string(op_name(st.op)) + " inside " +
               std::string(op_name(inside->op)));
    const auto& subs = st.sub_steps();
    if (subs.size() > static_cast<size_t>(kMaxListed))
      fail(r, i, sub, field,
           "a composite holds at most " + std::to_string(kMaxListed) + " sub-steps, found " + std::to_string(subs.size()));
    if (is_batch(st.op)) {
      if (subs.empty()) fail(r, i, sub, field, "BATCH_SEND_RECV needs at least one P2P sub-step, found none");
      for (size_t k = 0; k < subs.size(); ++k) {
        if (!is_p2p(subs[k].op) && !is_composite(subs[k].op))
          fail(r, i, static_cast<int>(k), ".op",
               "BATCH_SEND_RECV holds only P2P sub-steps, found " + std::string(op_name(subs[k].op)));
      }
    } else {
      // OVERLAP_F_B = (FWD, backward); OVERLAP_B_F = (backward, FWD).
      const bool f_first = info(st.op).forward_first;
      const char* expected = f_first ? "(FWD, BWD or BWD_INPUT)" : "(BWD or BWD_INPUT, FWD)";
      if (subs.size() != 2)
        fail(r, i, sub, field,
             std::string(op_name(st.op)) + " needs exactly 2 sub-steps " + expected + ", found " +
                 std::to_string(subs.size()));
      for (size_t k = 0; k < 2; ++k) {
        const bool want_fwd = (k == 0) == f_first;
        const Op op = subs[k].op;
        const bool ok = want_fwd ? is_forward(op) : is_backward_input_side(op);
        if (!ok && !is_composite(op))
          fail(r, i, static_cast<int>(k), ".op",
               std::string(op_name(st.op)) + " sub-step " + std::to_string(k) + " must be " +
                   (want_fwd ? "FWD" : "BWD or BWD_INPUT") + ", found " + std::string(op_name(op)) +
                   "; expected " + expected);
      }
    }
    // Nested composites fall through to here and are reported by the recursive check.
    for (size_t k = 0; k < subs.size(); ++k) check_step(subs[k], r, i, static_cast<int>(k), &st);
  }

  const Schedule& s_;
  const std::string& file_;
};

}  // namespace

void validate_structure(const Schedule& s, const std::string& file) { Validator(s, file).run(); }

void drop_rank_tags(Schedule& s) {
  auto drop = [](Step& st) {
    if (info(st.op).micro == Field::RankTag) st.micro = kNone;
  };
  for (auto& prog : s.programs)
    for (auto& slot : prog) {
      if (!slot) continue;
      drop(*slot);
      for (Step& sub : slot->sub_steps_mut()) drop(sub);
    }
}

}  // namespace ppsched
