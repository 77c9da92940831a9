#include "exec/launch_env.hpp"

#include <cerrno>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#include "schedule/errors.hpp"
#include "schedule/text_format.hpp"

namespace ppsched::exec {
namespace {

[[noreturn]] void refuse(const std::string& msg) { throw InputError({}, msg); }

std::optional<std::string> value_of(const GetEnv& get, const char* name) {
  const char* v = get(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

long long parse_integer(const char* name, const std::string& v, long long min_value, long long max_value) {
  errno = 0;
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || errno == ERANGE || n < min_value || n > max_value)
    refuse(std::string("environment variable ") + name + "='" + v + "' is not an integer in " +
           std::to_string(min_value) + ".." + std::to_string(max_value));
  return n;
}

constexpr long long kMaxRanks = 1 << 24;

std::optional<int> optional_int(const GetEnv& get, const char* name, long long min_value, long long max_value = kMaxRanks) {
  auto v = value_of(get, name);
  if (!v) return std::nullopt;
  return static_cast<int>(parse_integer(name, *v, min_value, max_value));
}

int required_int(const GetEnv& get, const char* name, long long min_value, const std::string& why) {
  auto n = optional_int(get, name, min_value);
  if (!n) refuse(name + std::string(" is not set: ") + why);
  return *n;
}

bool parse_bool(const char* name, const std::string& v) {
  // torchrun writes Python's str(bool): "True" / "False".
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0") return false;
  refuse(std::string("environment variable ") + name + "='" + v + "' is neither True nor False");
}

int port_of(const char* name, const std::string& v) { return static_cast<int>(parse_integer(name, v, 1, 65535)); }

// ---- Slurm's host lists ---------------------------------------------------------------------

struct Range {
  unsigned long long lo = 0, hi = 0;
  size_t width = 0;  // digits of lo as written: the zero padding of every host of the range
};

// One host expression: literal text and bracket groups, alternating.
struct Piece {
  std::string text;           // literal when ranges is empty
  std::vector<Range> ranges;  // a bracket group
};
using HostExpr = std::vector<Piece>;

struct HostlistParser {
  const std::string& list;
  const std::string& variable;

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    refuse(variable + "='" + list + "' at character " + std::to_string(at + 1) + ": " + what +
           " (Slurm host lists look like gpu[01-04,07],cpu3)");
  }

  static bool separator(char c) { return c == ',' || c == ' ' || c == '\t'; }

  // The bracket group whose '[' is at `open`; returns the index after its ']'.
  size_t group(size_t open, Piece& piece) const {
    size_t i = open + 1;
    for (;;) {
      Range r;
      const size_t lo_at = i;
      while (i < list.size() && std::isdigit(static_cast<unsigned char>(list[i]))) ++i;
      if (i == lo_at) fail(i, i < list.size() ? std::string("expected a number, found '") + list[i] + "'" : "expected a number");
      r.width = i - lo_at;
      if (r.width > 18) fail(lo_at, "number too long");
      r.lo = r.hi = std::stoull(list.substr(lo_at, r.width));
      if (i < list.size() && list[i] == '-') {
        const size_t hi_at = ++i;
        while (i < list.size() && std::isdigit(static_cast<unsigned char>(list[i]))) ++i;
        if (i == hi_at) fail(i, "a range needs a number after '-'");
        if (i - hi_at > 18) fail(hi_at, "number too long");
        r.hi = std::stoull(list.substr(hi_at, i - hi_at));
        if (r.hi < r.lo) fail(lo_at, "range " + list.substr(lo_at, i - lo_at) + " runs backwards");
        if (r.hi - r.lo >= 65536) fail(lo_at, "range " + list.substr(lo_at, i - lo_at) + " has more than 65536 hosts");
      }
      piece.ranges.push_back(r);
      if (i >= list.size()) fail(open, "'[' has no matching ']'");
      if (list[i] == ']') return i + 1;
      if (list[i] != ',') fail(i, std::string("expected ',', '-' or ']' in a bracket, found '") + list[i] + "'");
      ++i;
    }
  }

  std::vector<HostExpr> parse() const {
    std::vector<HostExpr> hosts;
    size_t i = 0;
    while (i < list.size()) {
      if (separator(list[i])) {
        ++i;
        continue;
      }
      HostExpr host;
      size_t last_close = std::string::npos;
      while (i < list.size() && !separator(list[i])) {
        if (list[i] == '[') {
          Piece g;
          i = group(i, g);
          host.push_back(std::move(g));
          last_close = i - 1;
        } else if (list[i] == ']') {
          fail(i, "']' without '['");
        } else {
          if (host.empty() || !host.back().ranges.empty()) host.push_back({});
          host.back().text += list[i++];
        }
      }
      // Slurm's parser takes the last bracket as the host number: nothing may follow it.
      if (last_close != std::string::npos && host.back().ranges.empty())
        fail(last_close + 1, "text after the last ']' (Slurm allows none: write " +
                                 std::string("the suffix inside every name or list the hosts)"));
      hosts.push_back(std::move(host));
    }
    if (hosts.empty()) refuse(variable + "='" + list + "' names no host");
    return hosts;
  }
};

std::string number(unsigned long long n, size_t width) {
  std::string s = std::to_string(n);
  return s.size() < width ? std::string(width - s.size(), '0') + s : s;
}

// Slurm's order (hostlist.c's _push_range_list): the last group varies fastest; the groups
// before it form the prefix, expanded with the rightmost of them outermost.
void expand_all(const HostExpr& host, std::vector<std::string>& out, size_t max_hosts, const std::string& variable) {
  std::vector<size_t> groups;
  std::vector<std::string> chosen(host.size());
  for (size_t k = 0; k < host.size(); ++k) {
    if (host[k].ranges.empty()) chosen[k] = host[k].text;
    else groups.push_back(k);
  }
  auto emit = [&] {
    if (out.size() >= max_hosts) refuse(variable + " expands to more than " + std::to_string(max_hosts) + " hosts");
    std::string h;
    for (const auto& c : chosen) h += c;
    out.push_back(std::move(h));
  };
  if (groups.empty()) {
    emit();
    return;
  }
  const size_t n = groups.size();
  // depth 0 .. n-2: the prefix groups from the right; depth n-1: the last group.
  std::function<void(size_t)> loop = [&](size_t depth) {
    const size_t g = depth + 1 < n ? groups[n - 2 - depth] : groups[n - 1];
    for (const Range& r : host[g].ranges)
      for (unsigned long long v = r.lo; v <= r.hi; ++v) {
        chosen[g] = number(v, r.width);
        if (depth + 1 < n) loop(depth + 1);
        else emit();
      }
  };
  loop(0);
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& nodelist, const std::string& variable, size_t max_hosts) {
  std::vector<std::string> out;
  for (const auto& host : HostlistParser{nodelist, variable}.parse()) expand_all(host, out, max_hosts, variable);
  return out;
}

std::string first_slurm_host(const std::string& nodelist, const std::string& variable) {
  // The whole list is checked; only its first host is built.
  auto hosts = HostlistParser{nodelist, variable}.parse();
  std::string first;
  for (const Piece& p : hosts.front()) first += p.ranges.empty() ? p.text : number(p.ranges.front().lo, p.ranges.front().width);
  return first;
}

int slurm_master_port(long long job_id) { return static_cast<int>(10000 + job_id % 20000); }

LaunchEnv read_launch_env(const GetEnv& get) {
  LaunchEnv e;
  const bool have_rank = value_of(get, "RANK").has_value();
  const bool have_slurm = !have_rank && value_of(get, "SLURM_PROCID").has_value();
  const bool torchrun = have_rank && value_of(get, "TORCHELASTIC_RUN_ID").has_value();
  if (have_rank) {
    e.source = torchrun ? "torchrun" : "RANK/WORLD_SIZE";
    e.rank = *optional_int(get, "RANK", 0);
    e.world_size = required_int(get, "WORLD_SIZE", 1, "RANK is set, so WORLD_SIZE must say how many ranks there are");
    e.local_rank = required_int(get, "LOCAL_RANK", 0,
                                "RANK is set, so LOCAL_RANK must say which rank this is on its node (it picks the GPU)");
    e.local_world_size = optional_int(get, "LOCAL_WORLD_SIZE", 1).value_or(-1);
    e.node_rank = optional_int(get, "GROUP_RANK", 0).value_or(-1);
    // torchrun numbers the workers of each role; ppsched-exec is one role, every worker a
    // pipeline rank, so its rank within the role is its rank.
    if (auto role = optional_int(get, "ROLE_RANK", 0); role && *role != e.rank)
      refuse("ROLE_RANK=" + std::to_string(*role) + " differs from RANK=" + std::to_string(e.rank) +
             ": the launcher started several roles; every ppsched-exec worker must be one role's rank");
    if (auto agent = value_of(get, "TORCHELASTIC_USE_AGENT_STORE")) e.use_agent_store = parse_bool("TORCHELASTIC_USE_AGENT_STORE", *agent);
    if (auto attempt = optional_int(get, "TORCHELASTIC_RESTART_COUNT", 0))
      e.store_prefix = "ppsched/attempt_" + std::to_string(*attempt);  // a restart never reads the last attempt's keys
    if (auto f = value_of(get, "TORCHELASTIC_ERROR_FILE")) e.error_file = *f;
  } else if (have_slurm) {
    // srun starts one task per rank and sets these for every task.
    e.source = "SLURM_*";
    e.rank = *optional_int(get, "SLURM_PROCID", 0);
    e.world_size = required_int(get, "SLURM_NTASKS", 1, "SLURM_PROCID is set, so SLURM_NTASKS must be too (start ranks with srun)");
    e.local_rank = required_int(get, "SLURM_LOCALID", 0, "SLURM_PROCID is set, so SLURM_LOCALID must be too (start ranks with srun)");
    e.node_rank = optional_int(get, "SLURM_NODEID", 0).value_or(-1);
  } else {
    if (value_of(get, "WORLD_SIZE")) refuse("WORLD_SIZE is set but RANK is not: set both (or neither, for one process)");
    e.source = "defaults (single process)";
  }
  if (e.rank >= e.world_size)
    refuse("rank " + std::to_string(e.rank) + " is not below the world size " + std::to_string(e.world_size));
  if (e.local_world_size > 0 && e.local_rank >= e.local_world_size)
    refuse("LOCAL_RANK=" + std::to_string(e.local_rank) + " is not below LOCAL_WORLD_SIZE=" + std::to_string(e.local_world_size));
  if (e.local_world_size > e.world_size)
    refuse("LOCAL_WORLD_SIZE=" + std::to_string(e.local_world_size) + " exceeds WORLD_SIZE=" + std::to_string(e.world_size));

  // Where the ranks meet. One process needs nobody: its store takes a free port.
  const bool meets_others = e.world_size > 1 || e.use_agent_store;
  const auto addr = value_of(get, "MASTER_ADDR");
  const auto port = value_of(get, "MASTER_PORT");
  if (addr) e.master_addr = *addr;
  if (port) e.master_port = port_of("MASTER_PORT", *port);
  if (have_slurm) {
    if (!addr) {
      const char* lists[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
      bool found = false;
      for (const char* name : lists)
        if (auto l = value_of(get, name)) {
          // srun places task 0 on the first node of the step (block and cyclic distributions).
          e.master_addr = first_slurm_host(*l, name);
          found = true;
          break;
        }
      if (!found && meets_others)
        refuse("MASTER_ADDR is not set and neither is SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or SLURM_NODELIST: "
               "set MASTER_ADDR to the host of rank 0");
    }
    if (!port) {
      auto job = value_of(get, "SLURM_JOB_ID");
      if (!job) job = value_of(get, "SLURM_JOBID");
      if (job) {
        e.master_port = slurm_master_port(parse_integer("SLURM_JOB_ID", *job, 0, (1LL << 62)));
      } else if (meets_others) {
        refuse("MASTER_PORT is not set and neither is SLURM_JOB_ID to derive it from: set MASTER_PORT");
      }
    }
  } else if (meets_others) {
    const std::string who = torchrun ? "torchrun sets it for every worker" : "no launcher default is assumed";
    if (!addr) refuse("MASTER_ADDR is not set: with " + std::to_string(e.world_size) +
                      " ranks set MASTER_ADDR to the host of rank 0 (" + who + ")");
    if (!port) refuse("MASTER_PORT is not set: with " + std::to_string(e.world_size) +
                      " ranks set MASTER_PORT to a free TCP port on MASTER_ADDR, where rank 0 hosts the rendezvous store (" +
                      who + ")");
  }
  return e;
}

std::string store_failure_message(const LaunchEnv& env, double waited_s, double timeout_s, const std::string& what) {
  const std::string after = fixed(waited_s, 1);
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  const std::string rank = "rank " + std::to_string(env.rank);
  const bool in_use = what.find("Address already in use") != std::string::npos || what.find("errno: 98") != std::string::npos;
  if (env.hosts_store()) {
    std::string m = rank + " cannot host the rendezvous store on " + where + " (failed after " + after + " s): " + what;
    if (in_use)
      m += "; another process already listens on port " + std::to_string(env.master_port) +
           (env.source == "torchrun" ? std::string(" (torchrun's agent hosts its own store there only when "
                                                   "TORCHELASTIC_USE_AGENT_STORE=True)")
                                     : std::string(": choose a free MASTER_PORT"));
    return m;
  }
  const std::string host = env.use_agent_store ? "torchrun's agent" : "rank 0";
  if (waited_s >= 0.9 * timeout_s)
    return rank + " cannot reach the rendezvous store at " + where + " within " + general(timeout_s) + " s (--timeout): " +
           what + "; is " + host + " running there?";
  return rank + " cannot reach the rendezvous store at " + where + " (failed after " + after + " s): " + what;
}

LaunchEnv read_launch_env() {
  return read_launch_env([](const char* n) -> const char* { return std::getenv(n); });
}

}  // namespace ppsched::exec
