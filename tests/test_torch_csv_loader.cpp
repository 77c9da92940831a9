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
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "checkers/checks.hpp"
#include "schedule/formats/pytorch_csv.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/formats/torch_lowering.hpp"
#include "schedule/generators/generator.hpp"

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

TorchAction torch_act(int stage, const std::string& type, std::optional<int> micro = std::nullopt) {
  TorchAction a;
  a.stage = stage;
  a.type = type;
  a.micro = micro;
  return a;
}

// _add_send_recv's two tests, shared by the loader's compute_only check and the direct
// restatement of the lowering: whether an action's output crosses to another rank (so it needs
// a send), and whether its input is there (received, or computed on this rank).
bool needs_transfer(const TorchAction& a, const std::map<int, int>& stage_rank, int stages) {
  if (a.type == "F") return a.stage != stages - 1 && rank_of(stage_rank, a.stage + 1) != rank_of(stage_rank, a.stage);
  if (a.type == "I" || a.type == "B") return a.stage != 0 && rank_of(stage_rank, a.stage - 1) != rank_of(stage_rank, a.stage);
  return false;
}
bool inputs_ready(const TorchAction& a, const std::set<TorchAction>& done, int stages) {
  if (a.type == "F" && a.stage != 0)
    return done.count(torch_act(a.stage, "RECV_F", a.micro)) || done.count(torch_act(a.stage - 1, "F", a.micro));
  if ((a.type == "I" || a.type == "B") && a.stage != stages - 1)
    return done.count(torch_act(a.stage, "RECV_B", a.micro)) || done.count(torch_act(a.stage + 1, "I", a.micro)) ||
           done.count(torch_act(a.stage + 1, "B", a.micro));
  return true;
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
  auto has_comms = [&](const TorchAction& a) { return needs_transfer(a, stage_rank, stages); };
  auto ready = [&](const TorchAction& a, const std::set<TorchAction>& done) { return inputs_ready(a, done, stages); };
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
        prev[r].insert(torch_act(p.stage, fwd ? "SEND_F" : "SEND_B", p.micro));
        const int recv_stage = fwd ? p.stage + 1 : p.stage - 1;
        prev[rank_of(stage_rank, recv_stage)].insert(torch_act(recv_stage, fwd ? "RECV_F" : "RECV_B", p.micro));
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

// ---- PyTorch's lowering (schedule/formats/torch_lowering.hpp) -----------------------------------

namespace {

std::string repr(const TorchAction& a) {  // _Action.__repr__
  if (!a.subs.empty()) {
    std::string s = "(";
    for (size_t k = 0; k < a.subs.size(); ++k) s += (k ? ";" : "") + repr(a.subs[k]);
    return s + ")" + a.type;
  }
  return std::to_string(a.stage) + a.type + (a.micro ? std::to_string(*a.micro) : "");
}

std::vector<TorchAction> leaves(const TorchAction& a) { return a.subs.empty() ? std::vector<TorchAction>{a} : a.subs; }

// An independent oracle: PyTorch's _prepare_schedule_with_comms(format="compute_only") restated
// as directly as its source reads (rescanning the rest of the list at every action, visiting
// every rank in every sweep), over the actions of a compute-only CSV. Returns the
// compute_comms CSV _dump_csv writes (rows joined by "\n").
std::string naive_pytorch_lowering(const std::string& compute_only_csv, int stages, int micro) {
  const auto rows = parse_csv(compute_only_csv);
  const auto stage_rank = validate(rows, static_cast<int>(rows.size()), stages, micro);
  std::map<int, std::vector<TorchAction>> lists;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<TorchAction> compute;
    for (const auto& a : rows[r])
      if (a) compute.push_back(*a);
    // _add_unshard_reshard (max_active_stages = 3)
    std::vector<TorchAction> fsdp;
    std::set<int> active;
    for (size_t i = 0; i < compute.size(); ++i) {
      std::vector<int> next;
      for (size_t j = i; j < compute.size(); ++j) {
        bool stop = false;
        if (!compute[j].subs.empty()) {
          for (const auto& sub : compute[j].subs)
            if (std::find(next.begin(), next.end(), sub.stage) == next.end()) next.push_back(sub.stage);
          stop = next.size() >= 3;
        } else if (std::find(next.begin(), next.end(), compute[j].stage) == next.end()) {
          next.push_back(compute[j].stage);
          stop = next.size() == 3;
        }
        if (stop) break;
      }
      std::vector<int> evict;
      for (int s : active)
        if (std::find(next.begin(), next.end(), s) == next.end()) evict.push_back(s);
      for (int s : evict) {
        active.erase(s);
        fsdp.push_back(torch_act(s, "RESHARD"));
      }
      for (int s : next)
        if (active.insert(s).second) fsdp.push_back(torch_act(s, "UNSHARD"));
      fsdp.push_back(compute[i]);
    }
    for (int s : active) fsdp.push_back(torch_act(s, "RESHARD"));
    // _add_reduce_grad
    std::vector<TorchAction> with_rg;
    std::map<int, int> count;
    for (const auto& a : fsdp) {
      with_rg.push_back(a);
      for (const auto& l : leaves(a))
        if ((l.type == "B" || l.type == "W") && ++count[l.stage] == micro) with_rg.push_back(torch_act(l.stage, "REDUCE_GRAD"));
    }
    lists[static_cast<int>(r)] = with_rg;
  }
  // _add_send_recv
  std::map<int, std::vector<TorchAction>> out;
  std::map<int, std::set<TorchAction>> prev;
  for (const auto& [r, list] : lists) out[r];
  auto has_comms = [&](const TorchAction& a) { return needs_transfer(a, stage_rank, stages); };
  auto ready = [&](const TorchAction& a, const std::set<TorchAction>& done) { return inputs_ready(a, done, stages); };
  for (auto it = lists.begin(); it != lists.end();) it = it->second.empty() ? lists.erase(it) : std::next(it);
  while (!lists.empty()) {
    bool progress = false;
    for (auto it = lists.begin(); it != lists.end();) {
      const int r = it->first;
      const TorchAction head = it->second.front();
      const auto parts = leaves(head);
      if (!std::all_of(parts.begin(), parts.end(), [&](const TorchAction& p) { return ready(p, prev[r]); })) {
        ++it;
        continue;
      }
      out[r].push_back(head);
      for (const auto& p : parts) {
        prev[r].insert(p);
        if (!has_comms(p)) continue;
        const bool fwd = p.type == "F";
        const TorchAction send = torch_act(p.stage, fwd ? "SEND_F" : "SEND_B", p.micro);
        const TorchAction recv = torch_act(fwd ? p.stage + 1 : p.stage - 1, fwd ? "RECV_F" : "RECV_B", p.micro);
        out[r].push_back(send);
        prev[r].insert(send);
        out[rank_of(stage_rank, recv.stage)].push_back(recv);
        prev[rank_of(stage_rank, recv.stage)].insert(recv);
      }
      it->second.erase(it->second.begin());
      progress = true;
      it = it->second.empty() ? lists.erase(it) : std::next(it);
    }
    if (!progress) throw std::string("Malformed compute schedule, can't schedule sends/recvs");
  }
  std::string csv;
  for (const auto& [r, list] : out) {
    for (size_t k = 0; k < list.size(); ++k) csv += (k ? "," : "") + repr(list[k]);
    csv += "\n";
  }
  return csv;
}

// What PyTorch's runtime asserts of a lowered schedule's FSDP actions when its stages are FSDP
// modules (_PipelineScheduleRuntime._step_microbatches, _assert_unsharded), plus what
// _add_reduce_grad promises: "" or the first problem.
std::string fsdp_discipline(const std::string& csv, int micro) {
  const auto rows = parse_csv(csv);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::set<int> unsharded;
    std::map<int, int> backwards, reduced;
    for (size_t i = 0; i < rows[r].size(); ++i) {
      const std::string where = "rank " + std::to_string(r) + " step " + std::to_string(i) + ": ";
      for (const auto& p : leaves(*rows[r][i])) {
        if (p.type == "UNSHARD" && !unsharded.insert(p.stage).second) return where + "Unsharding the same stage twice";
        if (p.type == "RESHARD" && !unsharded.erase(p.stage)) return where + "Resharding without unsharding";
        if ((p.type == "F" || p.type == "B" || p.type == "I" || p.type == "W") && !unsharded.count(p.stage))
          return where + "Attempted to compute on sharded stage " + std::to_string(p.stage);
        if (p.type == "B" || p.type == "W") ++backwards[p.stage];
        if (p.type == "REDUCE_GRAD" && (backwards[p.stage] != micro || reduced[p.stage]++))
          return where + "REDUCE_GRAD of stage " + std::to_string(p.stage) + " not right after its last backward";
      }
    }
    if (!unsharded.empty()) return "rank " + std::to_string(r) + " ends with unsharded stages";
    for (const auto& [stage, n] : backwards)
      if (!reduced[stage]) return "stage " + std::to_string(stage) + " has no REDUCE_GRAD";
  }
  return "";
}

// A compute-only CSV without its blank cells (idle slots, which the lowering drops).
std::string without_idle(const std::string& csv) {
  std::string out;
  for (const auto& row : parse_csv(csv)) {
    bool first = true;
    for (const auto& a : row)
      if (a) {
        out += (first ? "" : ",") + repr(*a);
        first = false;
      }
    out += "\n";
  }
  return out;
}

Schedule gen_shape(const char* family, int P, int V, int M) {
  GenerateOptions o;
  o.pp = P;
  o.vpp = V;
  o.micro = M;
  return generate(family, o);
}

// The five PyTorch classes that lower their order with _PipelineScheduleRuntime, and the ppsched
// family with the same compute order.
struct TorchClass {
  const char* torch_name;
  const char* family;
  int vpp_min, vpp_max;
};
const std::vector<TorchClass> kTorchClasses = {{"Interleaved1F1B", "interleaved-1f1b", 1, 3},
                                               {"LoopedBFS", "looped-bfs", 1, 3},
                                               {"InterleavedZeroBubble", "interleaved-zb", 1, 3},
                                               {"ZBVZeroBubble", "zbv", 2, 2},
                                               {"DualPipeV", "dualpipev", 2, 2}};

// The micro-batch counts a class accepts: DualPipeV M >= 2P (ours; PyTorch's M >= stages is
// the same at V = 2), the interleaved classes M a multiple of max(1, M / P).
bool torch_accepts(const TorchClass& c, int P, int M) {
  const std::string f = c.family;
  if (f == "dualpipev") return M >= 2 * P;
  if (f == "interleaved-1f1b" || f == "interleaved-zb") return M % std::max(1, M / P) == 0;
  return true;
}

}  // namespace

TEST_CASE("PyTorch's lowering of Interleaved1F1B P=2 V=2 M=4, derived by hand from its passes",
          "[formats][csv][torch][lowering]") {
  // ScheduleInterleaved1F1B's order (rounds = 2, 2 micro-batches per round; warmup 4 on rank 0,
  // 2 on rank 1), stages 0, 2 on rank 0 and 1, 3 on rank 1.
  const std::string compute =
      "0F0,0F1,2F0,2F1,0F2,2B0,0F3,2B1,2F2,0B0,2F3,0B1,2B2,2B3,0B2,0B3\n"
      "1F0,1F1,3F0,3B0,3F1,3B1,1F2,1B0,1F3,1B1,3F2,3B2,3F3,3B3,1B2,1B3\n";
  CHECK(without_idle(write_pytorch_csv(gen_shape("interleaved-1f1b", 2, 2, 4), CsvKind::ComputeOnly)) == compute);
  // Each rank computes both its stages from its first action on: both unsharded up front; a
  // stage is resharded right after its last backward and its REDUCE_GRAD. The sweep: rank 0's
  // F0 places 1RECV_F0 before rank 1's turn in the same sweep, so rank 1 runs 1F0 at once; a
  // receive lands where its sender computed (2RECV_B0 on rank 0 in sweep 6, when rank 1 ran 3B0);
  // rank 0's 2B3 waits a sweep for 2RECV_B3, which rank 1 places after rank 0's turn.
  const std::string expected =
      "0UNSHARD,2UNSHARD,0F0,0SEND_F0,2RECV_F0,0F1,0SEND_F1,2RECV_F1,2F0,2SEND_F0,2F1,2SEND_F1,2RECV_B0,0F2,0SEND_F2,"
      "2B0,2SEND_B0,2RECV_B1,0F3,0SEND_F3,2RECV_F2,2B1,2SEND_B1,0RECV_B0,2F2,2SEND_F2,2RECV_F3,0B0,0RECV_B1,2F3,"
      "2SEND_F3,0B1,2RECV_B2,2B2,2SEND_B2,2RECV_B3,2B3,2SEND_B3,2REDUCE_GRAD,2RESHARD,0RECV_B2,0B2,0RECV_B3,0B3,"
      "0REDUCE_GRAD,0RESHARD\n"
      "1UNSHARD,3UNSHARD,1RECV_F0,1F0,1SEND_F0,1RECV_F1,1F1,1SEND_F1,3RECV_F0,3F0,3RECV_F1,3B0,3SEND_B0,1RECV_F2,3F1,"
      "1RECV_B0,3B1,3SEND_B1,1RECV_F3,1F2,1SEND_F2,1RECV_B1,1B0,1SEND_B0,3RECV_F2,1F3,1SEND_F3,1B1,1SEND_B1,3RECV_F3,"
      "3F2,3B2,3SEND_B2,1RECV_B2,3F3,3B3,3SEND_B3,1RECV_B3,3REDUCE_GRAD,3RESHARD,1B2,1SEND_B2,1B3,1SEND_B3,"
      "1REDUCE_GRAD,1RESHARD\n";
  const Schedule lowered = lower_like_pytorch(read_pytorch_csv(compute, "hand.csv"));
  CHECK(write_pytorch_csv(lowered, CsvKind::ComputeComms) == expected);
  CHECK(naive_pytorch_lowering(compute, 4, 4) == expected);
  // The lowered file reads back as the same schedule (a compute_comms file is taken as is).
  CsvKind kind = CsvKind::ComputeOnly;
  CHECK(read_pytorch_csv(expected, "lowered.csv", {}, &kind).programs == lowered.programs);
  CHECK(kind == CsvKind::ComputeComms);
}

TEST_CASE("an OVERLAP_F_B counts both its stages among the next three to unshard (DualPipeV P=2 M=4)",
          "[formats][csv][torch][lowering]") {
  // Rank 0 holds stages 0 and 3; DualPipeV's main loop overlaps a forward of one with a backward
  // of the other. Both stages are unsharded before the first action and stay so until the last
  // action of stage 3; the OVERLAP_F_B keeps its sends after it, one per sub-action.
  const Schedule s = lower_like_pytorch(gen_shape("dualpipev", 2, 2, 4));
  const std::string csv = write_pytorch_csv(s, CsvKind::ComputeComms);
  CHECK(csv.rfind("0UNSHARD,3UNSHARD,0F0,0SEND_F0,", 0) == 0);
  CHECK(csv.find("OVERLAP_F_B,") != std::string::npos);
  CHECK(naive_pytorch_lowering(write_pytorch_csv(gen_shape("dualpipev", 2, 2, 4), CsvKind::ComputeOnly), 4, 4) == csv);
  CHECK(fsdp_discipline(csv, 4) == "");
}

TEST_CASE("the lowering of every PyTorch _PipelineScheduleRuntime class at P 2..6 equals the direct restatement, "
          "loads in PyTorch's compute_comms loader and verifies under --overlap-p2p",
          "[formats][csv][torch][lowering]") {
  int files = 0;
  for (const TorchClass& c : kTorchClasses)
    for (int P = 2; P <= 6; ++P)
      for (int V = c.vpp_min; V <= c.vpp_max; ++V)
        for (int M : {1, 2, P, P + 1, 2 * P, 2 * P + 2, 3 * P}) {
          if (!torch_accepts(c, P, M)) continue;
          INFO(c.torch_name << " (" << c.family << ") P=" << P << " V=" << V << " M=" << M);
          const Schedule s = gen_shape(c.family, P, V, M);
          const Schedule lowered = lower_like_pytorch(s);
          const std::string csv = write_pytorch_csv(lowered, CsvKind::ComputeComms);
          std::string naive;
          try {
            naive = naive_pytorch_lowering(write_pytorch_csv(s, CsvKind::ComputeOnly), s.stages, M);
          } catch (const std::string& why) {
            naive = why;
          }
          CHECK(csv == naive);
          CHECK(torch_loader_verdict(csv, CsvKind::ComputeComms, s.ranks, s.stages, M) == "");
          CHECK(fsdp_discipline(csv, M) == "");
          CheckOptions o;
          o.overlap_p2p = true;
          const CheckReport report = verify(read_pytorch_csv(csv, "lowered.csv"), o);
          CHECK(report.ok());
          ++files;
        }
  CHECK(files > 250);
}

TEST_CASE("ppsched's interleaved-1f1b has PyTorch's ScheduleInterleaved1F1B compute order where PyTorch accepts M",
          "[formats][csv][torch][lowering]") {
  int cases = 0, identical = 0;
  for (int P = 2; P <= 8; ++P)
    for (int V = 1; V <= 3; ++V)
      for (int M = 1; M <= 4 * P; ++M) {
        if (M % std::max(1, M / P) != 0) continue;  // PyTorch raises ValueError
        INFO("P=" << P << " V=" << V << " M=" << M);
        const Schedule s = gen_shape("interleaved-1f1b", P, V, M);
        const auto want = pytorch_interleaved_order(P, V, M, false);
        bool same = true;
        for (int r = 0; r < P; ++r) {
          std::string got, expect;
          for (const auto& slot : s.programs[static_cast<size_t>(r)])
            if (slot && is_compute(slot->op)) got += short_label(*slot) + " ";
          for (const Step& st : want[static_cast<size_t>(r)]) expect += short_label(st) + " ";
          CHECK(got == expect);
          same = same && got == expect;
        }
        ++cases;
        identical += same ? 1 : 0;
      }
  CHECK(cases > 300);
  CHECK(identical == cases);
}

TEST_CASE("interleaved-zb P=2 V=1 M=4 is PyTorch's ScheduleInterleavedZeroBubble order, derived by hand",
          "[formats][csv][torch][lowering]") {
  // rounds 2, 2 micro-batches per round; warmup min(0 + (P-1-r), 4): 1 on rank 0, 0 on rank 1.
  // From backward op r on, each backward op is followed by the W of the oldest backward.
  const Schedule s = gen_shape("interleaved-zb", 2, 1, 4);
  CHECK(without_idle(write_pytorch_csv(s, CsvKind::ComputeOnly)) ==
        "0F0,0F1,0I0,0W0,0F2,0I1,0W1,0F3,0I2,0W2,0I3,0W3\n"
        "1F0,1I0,1F1,1I1,1W0,1F2,1I2,1W1,1F3,1I3,1W2,1W3\n");
  CHECK_THROWS_WITH(gen_shape("interleaved-zb", 4, 2, 10 + 1),
                    Catch::Contains("--micro 11 is not a multiple of the 2 rounds"));
}

TEST_CASE("PyTorch's lowering refuses what its compute-only format cannot hold, and an order it cannot place",
          "[formats][csv][torch][lowering]") {
  GenerateOptions o;
  o.pp = 2;
  o.vpp = 2;
  o.micro = 4;
  o.overlap_b_f = true;
  CHECK_THROWS_WITH(lower_like_pytorch(generate("interleaved-1f1b", o)), Catch::Contains("has no place in PyTorch's compute-only schedule"));
  o.overlap_b_f = false;
  CHECK_THROWS_WITH(lower_like_pytorch(generate("mpipe-transpose", o)), Catch::Contains("MPipe layer"));
  // Rank 1 runs F1 before F0's backward came back, rank 0 B0 before F1: no sweep can place it.
  Schedule s;
  s.name = "cycle";
  s.ranks = 2;
  s.stages = 2;
  s.micro_batches = 2;
  s.placement = Placement::loop(2, 2);
  s.programs = {{make_step(Op::FWD, 0, 0), make_step(Op::BWD, 0, 0), make_step(Op::FWD, 1, 0), make_step(Op::BWD, 1, 0)},
                {make_step(Op::FWD, 1, 1), make_step(Op::FWD, 0, 1), make_step(Op::BWD, 0, 1), make_step(Op::BWD, 1, 1)}};
  CHECK_THROWS_WITH(lower_like_pytorch(s), Catch::Contains("Malformed compute schedule, can't schedule sends/recvs"));
}

TEST_CASE("tests/data/schedules/pytorch_comms holds ppsched's PyTorch-style lowering of each class at P 2..4, M = 2P",
          "[formats][csv][torch][lowering]") {
  // The files are ppsched's own earlier output (generate --torch-comms; their README.md); this pins
  // the lowering against change. tests/pytorch_own_comms_cli.py holds them to PyTorch's own dump
  // (tests/data/peers/pytorch_comms): the same bytes. Written as
  // _dump_csv(format="compute_comms") would: Python's csv.writer ends each row with "\r\n".
  // The files are the exec cases' input (tests/exec/exec_cases.py).
  const char* dir = std::getenv("PPSCHED_TEST_DATA");
  REQUIRE(dir != nullptr);
  int files = 0;
  for (const TorchClass& c : kTorchClasses)
    for (int P = 2; P <= 4; ++P) {
      const int M = 2 * P;
      const std::string path = std::string(dir) + "/schedules/pytorch_comms/" + c.torch_name + "_pp" +
                               std::to_string(P) + "_m" + std::to_string(M) + ".csv";
      INFO(path);
      const std::string text = read_input_file(path);
      std::string want;
      for (char ch : write_pytorch_csv(lower_like_pytorch(gen_shape(c.family, P, 2, M)), CsvKind::ComputeComms))
        want += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
      CHECK(text == want);
      CHECK(torch_loader_verdict(text, CsvKind::ComputeComms, P, 2 * P, M) == "");
      std::optional<CsvKind> kind;
      const Schedule s = read_schedule_file(path, {}, {}, &kind);
      CHECK(selects_overlap_p2p(kind));
      CHECK(s.micro_batches == M);
      ++files;
    }
  CHECK(files == 15);
}
