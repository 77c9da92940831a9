// The CSV ppsched writes loads in PyTorch's own loader, both kinds.
//
// The checker below restates the loader's rules from PyTorch's source
// (torch/distributed/pipelining/schedules.py; reference pytorch_and_peers.md §1.3, §1.4):
//   - one CSV row per rank (row index = rank), one action string per cell;
//   - a cell is stripped; "" is None; "(a;b)TYPE" is a composite whose TYPE is a computation
//     type and whose parts are actions; anything else must match
//     (\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*) — here the
//     whole cell must match: PyTorch's re.match would silently drop trailing text (a ppsched
//     name such as "0BWD_INPUT3" would read as a full backward "0B" without a micro);
//   - _validate_schedule: as many rows as ranks; per (stage, micro) B and I only after F, W only
//     after I; each stage on one rank (every action counts, SEND/RECV included); per stage
//     #F = M, #I = #W, #B + (#I + #W) / 2 = M;
//   - compute_comms (_prepare_schedule_with_comms): no None at all ("Expected action to be not
//     None"); the runtime then needs each receive posted (once) before the compute that
//     consumes it, except between adjacent stages on the same rank;
//   - compute_only: only compute actions (F, I, W, B, OVERLAP_F_B; "Expected compute-only
//     schedule but found communication action"), then _add_send_recv must place every
//     send/receive ("Malformed compute schedule, can't schedule sends/recvs").
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "model/formats/pytorch_csv.hpp"
#include "model/generators/generator.hpp"

using namespace ppsched;

namespace {

struct TorchAction {
  int stage = -1;
  std::string type;             // F, I, W, B, SEND_F, ..., OVERLAP_F_B
  std::optional<int> micro;
  std::vector<TorchAction> subs;
  bool operator<(const TorchAction& o) const {
    return std::tie(stage, type, micro) < std::tie(o.stage, o.type, o.micro);
  }
};

const std::vector<std::string> kTypes = {"F",      "I",      "B",      "W",      "UNSHARD",     "RESHARD",
                                         "REDUCE_GRAD", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
const std::set<std::string> kComputationTypes = {"F",      "I",      "W",      "UNSHARD", "RESHARD",    "SEND_F",
                                                 "RECV_F", "SEND_B", "RECV_B", "B",       "OVERLAP_F_B", "REDUCE_GRAD"};

std::string strip(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool all_digits(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

// _Action.from_str; nullopt for None; throws std::string for what PyTorch refuses.
std::optional<TorchAction> parse_action(const std::string& raw) {
  const std::string s = strip(raw);
  if (s.empty()) return std::nullopt;
  if (s[0] == '(' && s.find(')') != std::string::npos) {
    const size_t close = s.find(')');
    TorchAction a;
    a.type = s.substr(close + 1);
    if (!kComputationTypes.count(a.type)) throw "Invalid computation type " + a.type;
    std::string inner = s.substr(1, close - 1);
    size_t begin = 0;
    while (true) {
      const size_t semi = inner.find(';', begin);
      if (auto sub = parse_action(inner.substr(begin, semi == std::string::npos ? std::string::npos : semi - begin)))
        a.subs.push_back(*sub);
      if (semi == std::string::npos) break;
      begin = semi + 1;
    }
    return a;
  }
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  if (digits == 0) throw "Invalid action string: " + s;
  for (const std::string& t : kTypes) {
    if (s.compare(digits, t.size(), t) != 0) continue;
    const std::string rest = s.substr(digits + t.size());
    if (!all_digits(rest)) continue;
    TorchAction a;
    a.stage = std::stoi(s.substr(0, digits));
    a.type = t;
    if (!rest.empty()) a.micro = std::stoi(rest);
    return a;
  }
  throw "Invalid action string: " + s + " (the whole cell must be one action)";
}

std::vector<std::vector<std::optional<TorchAction>>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::optional<TorchAction>>> rows;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::optional<TorchAction>> row;
    if (!line.empty()) {  // Python's csv.reader gives [] for an empty line
      size_t c = 0;
      while (true) {
        const size_t comma = line.find(',', c);
        row.push_back(parse_action(line.substr(c, comma == std::string::npos ? std::string::npos : comma - c)));
        if (comma == std::string::npos) break;
        c = comma + 1;
      }
    }
    rows.push_back(std::move(row));
    begin = end + 1;
  }
  return rows;
}

bool is_compute_op(const TorchAction& a) {
  return a.type == "F" || a.type == "B" || a.type == "I" || a.type == "W" || a.type == "OVERLAP_F_B";
}

// _validate_schedule: the stage -> rank map, or throws.
std::map<int, int> validate(const std::vector<std::vector<std::optional<TorchAction>>>& rows, int ranks, int stages,
                            int micro) {
  if (static_cast<int>(rows.size()) != ranks)
    throw "Schedule has incorrect number of ranks - expected " + std::to_string(ranks) + ", actual " +
        std::to_string(rows.size());
  std::map<int, std::map<std::string, std::set<int>>> seen;
  std::map<int, int> stage_rank;
  auto process = [&](const TorchAction& a, int rank, int step) {
    const std::string where = "rank " + std::to_string(rank) + " step " + std::to_string(step) + ": ";
    if (a.type == "F" || a.type == "B" || a.type == "I" || a.type == "W") {
      if (a.stage < 0 || a.stage >= stages) throw where + "stage " + std::to_string(a.stage) + " out of range";
      const int m = a.micro.value_or(-1);
      auto& st = seen[a.stage];
      if ((a.type == "B" || a.type == "I") && !st["F"].count(m)) throw where + a.type + " without first running Forward";
      if (a.type == "W" && !st["I"].count(m)) throw where + "W without first running Backward Input";
      st[a.type].insert(m);
    }
    auto [it, fresh] = stage_rank.emplace(a.stage, rank);
    if (!fresh && it->second != rank) throw where + "stage " + std::to_string(a.stage) + " is assigned to two ranks";
  };
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < rows[static_cast<size_t>(r)].size(); ++i) {
      const auto& a = rows[static_cast<size_t>(r)][i];
      if (!a) continue;
      if (!a->subs.empty()) {
        for (const TorchAction& sub : a->subs) process(sub, r, static_cast<int>(i));
      } else {
        process(*a, r, static_cast<int>(i));
      }
    }
  for (int s = 0; s < stages; ++s) {
    auto& st = seen[s];
    const size_t f = st["F"].size(), b = st["B"].size(), in = st["I"].size(), w = st["W"].size();
    if (static_cast<int>(f) != micro) throw "stage " + std::to_string(s) + ": " + std::to_string(f) + " F microbatches";
    if (in != w) throw "stage " + std::to_string(s) + ": I and W must have equal counts";
    if (static_cast<int>(b + (in + w) / 2) != micro) throw "stage " + std::to_string(s) + ": wrong backward count";
  }
  return stage_rank;
}

int rank_of(const std::map<int, int>& stage_rank, int stage) {
  auto it = stage_rank.find(stage);
  return it == stage_rank.end() ? -1 : it->second;
}

// compute_comms: no None, and each receive posted before the compute that waits for it.
void check_compute_comms(const std::vector<std::vector<std::optional<TorchAction>>>& rows,
                         const std::map<int, int>& stage_rank, int stages) {
  for (size_t r = 0; r < rows.size(); ++r) {
    std::set<std::pair<int, int>> fwd_recv, bwd_recv;
    for (size_t i = 0; i < rows[r].size(); ++i) {
      const auto& a = rows[r][i];
      const std::string where = "rank " + std::to_string(r) + " step " + std::to_string(i) + ": ";
      if (!a) throw where + "Expected action to be not None";
      std::vector<TorchAction> parts = a->subs.empty() ? std::vector<TorchAction>{*a} : a->subs;
      for (const TorchAction& p : parts) {
        const std::pair<int, int> key{p.stage, p.micro.value_or(-1)};
        const bool prev_local = p.stage > 0 && rank_of(stage_rank, p.stage - 1) == static_cast<int>(r);
        const bool next_local = p.stage + 1 < stages && rank_of(stage_rank, p.stage + 1) == static_cast<int>(r);
        if (p.type == "RECV_F" && !fwd_recv.insert(key).second) throw where + "Recv twice (forward)";
        if (p.type == "RECV_B" && !bwd_recv.insert(key).second) throw where + "Recv twice (backward)";
        if (p.type == "F" && p.stage > 0 && !prev_local && !fwd_recv.erase(key))
          throw where + "Computing F before receiving input";
        if ((p.type == "B" || p.type == "I") && p.stage < stages - 1 && !next_local && !bwd_recv.erase(key))
          throw where + "Attempted to run compute " + p.type + " before receiving input";
      }
    }
  }
}

// compute_only: only compute actions, then _add_send_recv's sweep must place every transfer.
void check_compute_only(const std::vector<std::vector<std::optional<TorchAction>>>& rows,
                        const std::map<int, int>& stage_rank, int stages) {
  std::map<int, std::vector<TorchAction>> todo;
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t i = 0; i < rows[r].size(); ++i) {
      const auto& a = rows[r][i];
      if (!a) continue;
      if (!is_compute_op(*a))
        throw "Expected compute-only schedule but found communication action " + a->type + " at rank " +
            std::to_string(r) + ", position " + std::to_string(i);
      todo[static_cast<int>(r)].push_back(*a);
    }
  std::map<int, std::set<TorchAction>> prev;
  auto act = [](int stage, const char* type, std::optional<int> micro) {
    TorchAction a;
    a.stage = stage;
    a.type = type;
    a.micro = micro;
    return a;
  };
  auto has_comms = [&](const TorchAction& a) {
    if (a.type == "F") return a.stage != stages - 1 && rank_of(stage_rank, a.stage + 1) != rank_of(stage_rank, a.stage);
    if (a.type == "I" || a.type == "B") return a.stage != 0 && rank_of(stage_rank, a.stage - 1) != rank_of(stage_rank, a.stage);
    return false;
  };
  auto ready = [&](const TorchAction& a, const std::set<TorchAction>& done) {
    if (a.type == "F" && a.stage != 0)
      return done.count(act(a.stage, "RECV_F", a.micro)) || done.count(act(a.stage - 1, "F", a.micro));
    if ((a.type == "I" || a.type == "B") && a.stage != stages - 1)
      return done.count(act(a.stage, "RECV_B", a.micro)) || done.count(act(a.stage + 1, "I", a.micro)) ||
             done.count(act(a.stage + 1, "B", a.micro));
    return true;
  };
  while (!todo.empty()) {
    bool progress = false;
    for (auto it = todo.begin(); it != todo.end();) {
      const int r = it->first;
      const TorchAction head = it->second.front();
      const std::vector<TorchAction> parts = head.subs.empty() ? std::vector<TorchAction>{head} : head.subs;
      if (!std::all_of(parts.begin(), parts.end(), [&](const TorchAction& p) { return ready(p, prev[r]); })) {
        ++it;
        continue;
      }
      for (const TorchAction& p : parts) {
        prev[r].insert(p);
        if (!has_comms(p)) continue;
        const bool fwd = p.type == "F";
        prev[r].insert(act(p.stage, fwd ? "SEND_F" : "SEND_B", p.micro));
        const int recv_stage = fwd ? p.stage + 1 : p.stage - 1;
        prev[rank_of(stage_rank, recv_stage)].insert(act(recv_stage, fwd ? "RECV_F" : "RECV_B", p.micro));
      }
      it->second.erase(it->second.begin());
      progress = true;
      it = it->second.empty() ? todo.erase(it) : std::next(it);
    }
    if (!progress) throw std::string("Malformed compute schedule, can't schedule sends/recvs");
  }
}

// "" when PyTorch's loader takes the file as `kind`, else what it says.
std::string torch_loader_verdict(const std::string& csv, CsvKind kind, int ranks, int stages, int micro) {
  try {
    const auto rows = parse_csv(csv);
    const auto stage_rank = validate(rows, ranks, stages, micro);
    if (kind == CsvKind::ComputeComms) check_compute_comms(rows, stage_rank, stages);
    else check_compute_only(rows, stage_rank, stages);
    return "";
  } catch (const std::string& why) {
    return why;
  }
}

struct Family {
  const char* name;
  int vpp_min, vpp_max;
  bool less_memory = false;
};

}  // namespace

TEST_CASE("the loader-rule checker refuses what PyTorch's loader refuses", "[formats][csv][torch]") {
  // 1F1B on two ranks, M = 1, written by hand.
  const std::string comms = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n";
  CHECK(torch_loader_verdict(comms, CsvKind::ComputeComms, 2, 2, 1) == "");
  CHECK(torch_loader_verdict("0F0,,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", CsvKind::ComputeComms, 2, 2, 1) ==
        "rank 0 step 1: Expected action to be not None");
  CHECK(torch_loader_verdict("0F0,0SEND_F0,0B0,0RECV_B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", CsvKind::ComputeComms, 2, 2, 1) ==
        "rank 0 step 2: Attempted to run compute B before receiving input");
  CHECK_THAT(torch_loader_verdict(comms, CsvKind::ComputeOnly, 2, 2, 1),
             Catch::StartsWith("Expected compute-only schedule but found communication action SEND_F"));
  CHECK(torch_loader_verdict("0F0,,0B0\n1F0,1B0\n", CsvKind::ComputeOnly, 2, 2, 1) == "");
  CHECK(torch_loader_verdict("0B0,0F0\n1F0,1B0\n", CsvKind::ComputeOnly, 2, 2, 1) ==
        "rank 0 step 0: B without first running Forward");
  CHECK(torch_loader_verdict("0F0,0B0\n1B0,1F0\n", CsvKind::ComputeOnly, 2, 2, 1) ==
        "rank 1 step 0: B without first running Forward");
  // Rank 1 runs F1 before B0, rank 0 runs B0 before F1: a cycle the lowering cannot place.
  CHECK(torch_loader_verdict("0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n", CsvKind::ComputeOnly, 2, 2, 2) ==
        "Malformed compute schedule, can't schedule sends/recvs");
  CHECK_THAT(torch_loader_verdict("0BWD_INPUT0\n", CsvKind::ComputeOnly, 1, 1, 1), Catch::StartsWith("Invalid action string"));
  CHECK_THAT(torch_loader_verdict("(0F0;0B0)OVERLAP_B_F\n", CsvKind::ComputeOnly, 1, 1, 1),
             Catch::StartsWith("Invalid computation type OVERLAP_B_F"));
  CHECK_THAT(torch_loader_verdict(comms, CsvKind::ComputeComms, 3, 2, 1), Catch::StartsWith("Schedule has incorrect number of ranks"));
}

TEST_CASE("every CSV ppsched writes for a family PyTorch can express loads in PyTorch's loader, both kinds",
          "[formats][csv][torch]") {
  // The families whose steps PyTorch's notation holds (no OVERLAP_B_F, no BATCH_SEND_RECV, no
  // MPipe layer).
  const std::vector<Family> families = {{"gpipe", 1, 1},           {"1f1b", 1, 1},
                                        {"interleaved-1f1b", 1, 3}, {"interleaved-1f1b", 2, 3, true},
                                        {"looped-bfs", 1, 3},       {"zb-h1", 1, 1},
                                        {"zbv", 2, 2},              {"zbv-greedy", 2, 2},
                                        {"dualpipev", 2, 2}};
  int files = 0;
  for (const Family& f : families)
    for (int P = 2; P <= 6; ++P)
      for (int V = f.vpp_min; V <= f.vpp_max; ++V)
        for (int M : {1, 2, P, 2 * P, 2 * P + 1, 3 * P}) {
          if (std::string(f.name) == "dualpipev" && M < 2 * P) continue;  // its own limit
          GenerateOptions o;
          o.pp = P;
          o.vpp = V;
          o.micro = M;
          o.less_memory = f.less_memory;
          const Schedule s = generate(f.name, o);
          for (CsvKind kind : {CsvKind::ComputeComms, CsvKind::ComputeOnly}) {
            INFO(f.name << (f.less_memory ? " --less-memory" : "") << " P=" << P << " V=" << V << " M=" << M << " "
                        << (kind == CsvKind::ComputeComms ? "compute_comms" : "compute_only"));
            const std::string csv = write_pytorch_csv(s, kind);
            CHECK(torch_loader_verdict(csv, kind, s.ranks, s.stages, s.micro_batches) == "");
            ++files;
          }
        }
  CHECK(files > 500);
}

TEST_CASE("PyTorch's loader takes zbv and looped-bfs at every P 2..8 and M 1..4P (it refuses no micro-batch count)",
          "[formats][csv][torch]") {
  // ScheduleZBVZeroBubble and ScheduleLoopedBFS check no micro-batch count themselves; what
  // could refuse one is their lowering (_add_send_recv), which the compute-only load runs.
  int files = 0;
  for (int P = 2; P <= 8; ++P)
    for (int M = 1; M <= 4 * P; ++M)
      for (const char* family : {"zbv", "looped-bfs"}) {
        GenerateOptions o;
        o.pp = P;
        o.vpp = 2;
        o.micro = M;
        const Schedule s = generate(family, o);
        for (CsvKind kind : {CsvKind::ComputeOnly, CsvKind::ComputeComms}) {
          INFO(family << " P=" << P << " M=" << M << (kind == CsvKind::ComputeOnly ? " compute_only" : " compute_comms"));
          CHECK(torch_loader_verdict(write_pytorch_csv(s, kind), kind, s.ranks, s.stages, s.micro_batches) == "");
          ++files;
        }
      }
  CHECK(files == 2 * 2 * 140);
}
