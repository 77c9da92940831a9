// PyTorch pipelining CSV schedules (pytorch_csv.hpp).
//
// PyTorch's _dump_csv writes one row per rank and one action string per cell, with an empty
// cell for an idle slot; the file says nothing else. So the facts a schedule needs are
// inferred the way PyTorch's _validate_schedule does: ranks = rows, stages = max stage + 1,
// each stage's rank = the row its compute actions sit in, micro_batches = max micro + 1.
// A file with any SEND/RECV is a compute_comms file and is taken as is; otherwise it is
// compute_only and gets its sends and receives from insert_p2p (unless no stage hands over
// to another rank, so that there is nothing to insert).
#include "schedule/formats/pytorch_csv.hpp"

#include <algorithm>
#include <filesystem>

#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/action_notation.hpp"
#include "schedule/validate.hpp"

namespace ppsched {
namespace {

// Rows of the file: split on '\n', a trailing '\r' dropped (Python's csv module writes
// "\r\n"), the empty piece after a final newline ignored. An empty row is a rank with an
// empty program.
std::vector<std::string_view> split_rows(std::string_view text) {
  std::vector<std::string_view> rows;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view row = text.substr(begin, end - begin);
    if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
    rows.push_back(row);
    begin = end + 1;
  }
  return rows;
}

// A cell may be quoted by a CSV writer; actions never contain quotes or commas.
std::string_view unquote(std::string_view cell) {
  size_t a = cell.find_first_not_of(" \t");
  size_t b = cell.find_last_not_of(" \t");
  if (a == std::string_view::npos) return {};
  cell = cell.substr(a, b - a + 1);
  if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') cell = cell.substr(1, cell.size() - 2);
  return cell;
}

bool has_p2p(const Step& st) {
  if (is_p2p(st.op) || is_batch(st.op)) return true;
  return std::any_of(st.sub_steps().begin(), st.sub_steps().end(), has_p2p);
}

// Calls fn(step) for a step and each of its sub-steps.
template <class Fn>
void for_each_part(const Step& st, Fn&& fn) {
  fn(st);
  for (const Step& sub : st.sub_steps()) for_each_part(sub, fn);
}

class CsvReader {
 public:
  CsvReader(const std::string& file, const CsvReadOptions& options) : file_(file), options_(options) {}

  bool had_comms() const { return comms_; }

  Schedule read(std::string_view text) {
    Schedule s;
    s.name = std::filesystem::path(file_).stem().string();
    const auto rows = split_rows(text);
    if (rows.empty()) fail(-1, -1, "the file has no rows: expected one row of actions per rank");
    s.ranks = static_cast<int32_t>(rows.size());
    // Every cell is a slot (an empty one idle): counted before any is held, since an empty
    // cell is one byte of the file and a held slot tens (schedule/validate.hpp, kMaxSlots).
    int64_t cells = 0;
    for (std::string_view row : rows)
      if (!row.empty()) cells += 1 + static_cast<int64_t>(std::count(row.begin(), row.end(), ','));
    if (cells > kMaxSlots)
      fail(-1, -1, "the file has " + std::to_string(cells) + " cells (steps and idle slots), over the limit of " +
                       std::to_string(kMaxSlots) + " slots (docs/verification.md \"Limits\")");
    for (size_t r = 0; r < rows.size(); ++r) s.programs.push_back(read_row(rows[r], static_cast<int>(r)));

    infer(s);
    mark_data_steps(s);
    relocated([&] { validate_structure(s, file_); });
    drop_rank_tags(s);
    // The rule JSON files follow too (insert_p2p_if_compute_only): no P2P step at all, and a
    // stage hands over to another rank, then the column scan inserts them; else as written.
    relocated([&] { inserted_ = insert_p2p_if_compute_only(s); });
    if (inserted_ > 0) relocated([&] { validate_structure(s, file_); });
    return s;
  }

  int64_t inserted() const { return inserted_; }

 private:
  [[noreturn]] void fail(int rank, int index, std::string msg) const {
    Location loc;
    loc.file = file_;
    loc.rank = rank;
    loc.index = index;
    loc.line = rank >= 0 ? rank + 1 : -1;
    throw InputError(std::move(loc), std::move(msg));
  }

  // Errors from validation and insertion know rank and step index; add file and row.
  template <class Fn>
  void relocated(Fn&& fn) const {
    try {
      fn();
    } catch (const InputError& e) {
      Location loc = e.where();
      loc.file = file_;
      if (loc.rank >= 0) loc.line = loc.rank + 1;
      throw InputError(std::move(loc), e.message());
    }
  }

  Program read_row(std::string_view row, int rank) {
    Program prog;
    if (row.empty()) return prog;
    size_t begin = 0;
    while (true) {
      const size_t end = row.find(',', begin);
      const std::string_view cell =
          unquote(row.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
      if (cell.empty()) {
        prog.push_back(std::nullopt);
      } else {
        std::string error;
        auto step = parse_action(cell, &error);
        if (!step) fail(rank, static_cast<int>(prog.size()), error);
        note(*step, rank, static_cast<int>(prog.size()));
        prog.push_back(std::move(*step));
      }
      if (end == std::string_view::npos) break;
      begin = end + 1;
    }
    return prog;
  }

  // Records what the inference needs: extents, P2P presence, where compute stages sit.
  void note(const Step& top, int rank, int index) {
    comms_ = comms_ || has_p2p(top);
    for_each_part(top, [&](const Step& st) {
      // The notation's reader refused a stage past kMaxStages; micro before max + 1 could overflow.
      if (st.micro >= kMaxCount)
        fail(rank, index, "micro " + std::to_string(st.micro) + " is beyond the limit of " +
                              std::to_string(kMaxCount) + " micro-batches");
      max_stage_ = std::max<int32_t>(max_stage_, st.stage);
      max_micro_ = std::max(max_micro_, st.micro);
      if (!is_compute(st.op) || !stage_places(st.op) || st.stage < 0) return;
      if (static_cast<size_t>(st.stage) >= stage_row_.size())
        stage_row_.resize(static_cast<size_t>(st.stage) + 1, -1);
      int& row = stage_row_[static_cast<size_t>(st.stage)];
      if (row < 0) {
        row = rank;
      } else if (row != rank) {
        fail(rank, index,
             "stage " + std::to_string(st.stage) + " has compute actions on rows " + std::to_string(row + 1) +
                 " and " + std::to_string(rank + 1) + " (ranks " + std::to_string(row) + " and " +
                 std::to_string(rank) + "): a stage lives on one rank");
      }
    });
  }

  void infer(Schedule& s) const {
    if (options_.micro_batches) {
      s.micro_batches = *options_.micro_batches;
    } else {
      if (max_micro_ < 0)
        fail(-1, -1, "no action names a micro-batch, so the micro-batch count cannot be inferred");
      s.micro_batches = max_micro_ + 1;
    }
    const Placement* given = options_.placement ? &*options_.placement : nullptr;
    // A loop or v placement given by kind only (empty map) gets its map once the stage
    // count is known.
    if (given && !(given->stage_to_rank.empty() && given->kind != PlacementKind::Explicit)) {
      s.placement = *given;
      s.stages = static_cast<int32_t>(s.placement.stage_to_rank.size());
      check_given_placement(s);
      return;
    }
    if (max_stage_ < 0) fail(-1, -1, "no action names a stage, so the stage count cannot be inferred");
    if (given) {
      s.stages = max_stage_ + 1;
      s.placement = given->kind == PlacementKind::Loop ? Placement::loop(s.ranks, s.stages)
                                                       : Placement::v(s.ranks, s.stages);
      check_given_placement(s);
      return;
    }
    s.stages = max_stage_ + 1;
    std::vector<int32_t> map(static_cast<size_t>(s.stages), -1);
    for (int st = 0; st < s.stages; ++st) {
      const int row = static_cast<size_t>(st) < stage_row_.size() ? stage_row_[static_cast<size_t>(st)] : -1;
      if (row < 0)
        fail(-1, -1,
             "stage " + std::to_string(st) +
                 " has no compute action (F, B, I or W) in any row, so its rank "
                 "cannot be inferred; give the placement explicitly");
      map[static_cast<size_t>(st)] = row;
    }
    if (map == Placement::loop(s.ranks, s.stages).stage_to_rank) {
      s.placement = Placement::loop(s.ranks, s.stages);
    } else if (map == Placement::v(s.ranks, s.stages).stage_to_rank) {
      s.placement = Placement::v(s.ranks, s.stages);
    } else {
      s.placement = Placement::explicit_map(std::move(map));
    }
  }

  // A given placement must agree with the rows the compute actions sit in.
  void check_given_placement(const Schedule& s) const {
    const auto& map = s.placement.stage_to_rank;
    for (size_t st = 0; st < stage_row_.size() && st < map.size(); ++st) {
      const int row = stage_row_[st];
      if (row < 0 || map[st] == row) continue;
      const Program& prog = s.programs[static_cast<size_t>(row)];
      int index = -1;
      for (size_t i = 0; i < prog.size() && index < 0; ++i) {
        if (!prog[i]) continue;
        for_each_part(*prog[i], [&](const Step& p) {
          if (is_compute(p.op) && p.stage == static_cast<int>(st)) index = static_cast<int>(i);
        });
      }
      fail(row, index,
           "the given placement puts stage " + std::to_string(st) + " on rank " + std::to_string(map[st]) +
               ", but its compute actions are on row " + std::to_string(row + 1) + " (rank " +
               std::to_string(row) + ")");
    }
  }

  const std::string& file_;
  const CsvReadOptions& options_;
  bool comms_ = false;
  int64_t inserted_ = 0;  // P2P steps the column scan added
  int max_stage_ = -1;
  int max_micro_ = -1;
  std::vector<int> stage_row_;  // stage -> row of its compute actions, -1 if none seen
};

// Why a step cannot be written as an action string, or "".
std::string inexpressible(const Step& st) {
  std::string why;
  for_each_part(st, [&](const Step& p) {
    if (!why.empty()) return;
    if (p.peer != kNone)
      why = "an explicit peer (" + std::to_string(p.peer) + ")";
    else if (!p.tensors().empty())
      why = "tensor descriptions";
    else if (!p.group().empty())
      why = "a rank group";
  });
  return why;
}

// Whether a step belongs in a compute_only file: PyTorch's loader takes only compute actions
// there (_Action.is_compute_op: F, I, W, B, OVERLAP_F_B), so P2P, batches and the FSDP steps
// (which its lowering adds back) are left out.
bool compute_only_action(const Step& st) {
  if (has_p2p(st)) return false;
  return info(st.op).kind != StepKind::Collective;
}

}  // namespace

Schedule read_pytorch_csv(std::string_view text, const std::string& file_name, const CsvReadOptions& options,
                          CsvKind* kind, int64_t* inserted_p2p) {
  // A UTF-8 byte-order mark (Excel writes one) is skipped, as the JSON reader skips it.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  CsvReader reader(file_name, options);
  Schedule s = reader.read(text);
  if (kind) *kind = reader.had_comms() ? CsvKind::ComputeComms : CsvKind::ComputeOnly;
  if (inserted_p2p) *inserted_p2p = reader.inserted();
  return s;
}

std::string write_pytorch_csv(const Schedule& s, CsvKind kind) {
  if (s.mpipe)
    throw InputError({},
                     "the MPipe layer (the \"mpipe\" object) cannot be expressed in PyTorch CSV; write JSON");
  if (s.pipes > 1)
    throw InputError({}, "replicated stages (\"pipes\": " + std::to_string(s.pipes) +
                             ", each micro-batch in one copy of the pipeline) cannot be expressed in PyTorch CSV: "
                             "its stages form one chain; write JSON");
  std::string out;
  out.reserve(s.step_count() * 8 + s.programs.size());
  for (size_t r = 0; r < s.programs.size(); ++r) {
    const Program& prog = s.programs[r];
    bool first = true;
    for (size_t i = 0; i < prog.size(); ++i) {
      const Slot& slot = prog[i];
      // A compute_comms loader refuses blank cells; an idle slot is display only, so it goes.
      if (!slot && kind == CsvKind::ComputeComms) continue;
      if (slot && kind == CsvKind::ComputeOnly && !compute_only_action(*slot)) continue;
      if (!first) out += ',';
      first = false;
      if (!slot) continue;
      const std::string why = inexpressible(*slot);
      if (!why.empty()) {
        Location loc;
        loc.rank = static_cast<int>(r);
        loc.index = static_cast<int>(i);
        throw InputError(loc, short_label(*slot) + " carries " + why +
                                  ", which PyTorch's action notation cannot express; write JSON");
      }
      out += format_action(*slot);
    }
    out += '\n';
  }
  return out;
}

}  // namespace ppsched
