#include "exec/cpu_binding.hpp"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace ppsched::exec {

const char* to_string(CpuBindMode m) {
  switch (m) {
    case CpuBindMode::Auto: return "auto";
    case CpuBindMode::None: return "none";
    case CpuBindMode::Blocks: return "blocks";
  }
  return "auto";
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t k = 0; k < cpus.size();) {
    size_t end = k;
    while (end + 1 < cpus.size() && cpus[end + 1] == cpus[end] + 1) ++end;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[k]);
    if (end > k) out += "-" + std::to_string(cpus[end]);
    k = end + 1;
  }
  return out;
}

CpuBindPlan plan_cpu_binding(CpuBindMode mode, bool cpu_compute, int local_rank, int local_world_size,
                             const std::vector<int>& allowed, int online) {
  const int n = static_cast<int>(allowed.size());
  const int L = local_world_size;
  if (mode == CpuBindMode::None) return {{}, "--cpu-bind none"};
  if (L <= 0) return {{}, "not bound: the launcher did not say how many ranks share this node (LOCAL_WORLD_SIZE)"};
  if (n == 0) return {{}, "not bound: this process may use no CPU the kernel reported"};
  if (local_rank < 0 || local_rank >= L) return {{}, "not bound: the local rank is outside LOCAL_WORLD_SIZE"};
  if (mode == CpuBindMode::Auto) {
    if (!cpu_compute) return {{}, "not bound: the ranks compute on GPUs (--cpu-bind blocks binds them anyway)"};
    if (n < online)
      return {{}, "not bound: the launcher already restricted this process to CPUs " + cpu_list(allowed) + " of " +
                      std::to_string(online)};
    if (L > n)
      return {{}, "not bound: " + std::to_string(L) + " ranks on " + std::to_string(n) +
                      " CPUs share cores whatever the binding (--cpu-bind blocks binds them anyway)"};
  }
  // 64-bit products: a rank times a CPU count cannot wrap.
  const auto lo = static_cast<int64_t>(local_rank) * n / L;
  auto hi = (static_cast<int64_t>(local_rank) + 1) * n / L;
  if (hi <= lo) hi = lo + 1;  // L > n: one CPU, shared with the ranks that map to it
  CpuBindPlan plan;
  for (int64_t k = lo; k < hi; ++k) plan.cpus.push_back(allowed[static_cast<size_t>(k)]);
  plan.reason = "local rank " + std::to_string(local_rank) + " of " + std::to_string(L) + " bound to CPUs " +
                cpu_list(plan.cpus) + (L > n ? " (shared: more ranks than CPUs)" : "");
  return plan;
}

namespace {
struct CpuSet {
  size_t count;  // CPUs the set can hold
  cpu_set_t* set;
  explicit CpuSet(size_t n) : count(n), set(CPU_ALLOC(n)) {
    if (!set) throw std::runtime_error("cannot allocate a CPU set");
    CPU_ZERO_S(bytes(), set);
  }
  ~CpuSet() { CPU_FREE(set); }
  CpuSet(const CpuSet&) = delete;
  CpuSet& operator=(const CpuSet&) = delete;
  size_t bytes() const { return CPU_ALLOC_SIZE(count); }
};
}  // namespace

std::vector<int> allowed_cpus() {
  // The kernel refuses (EINVAL) a set smaller than its own CPU mask: grow until it fits.
  for (size_t n = 1024; n <= (size_t{1} << 20); n *= 2) {
    CpuSet s(n);
    if (sched_getaffinity(0, s.bytes(), s.set) == 0) {
      std::vector<int> out;
      for (size_t c = 0; c < n; ++c)
        if (CPU_ISSET_S(c, s.bytes(), s.set)) out.push_back(static_cast<int>(c));
      return out;
    }
    if (errno != EINVAL) break;
  }
  return {};
}

int online_cpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 0;
}

void apply_cpu_binding(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  CpuSet s(static_cast<size_t>(cpus.back()) + 1);
  for (int c : cpus) CPU_SET_S(static_cast<size_t>(c), s.bytes(), s.set);
  // Every thread the process has now (libtorch may have started some); threads started later
  // inherit the binding of the thread that starts them.
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/proc/self/task"), closedir);
  std::vector<pid_t> tids;
  if (dir) {
    while (const dirent* e = readdir(dir.get()))
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') tids.push_back(static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10)));
  }
  if (tids.empty()) tids.push_back(0);  // no /proc: the calling thread
  for (pid_t tid : tids) {
    if (sched_setaffinity(tid, s.bytes(), s.set) == 0) continue;
    if (errno == ESRCH) continue;  // the thread ended meanwhile
    throw std::runtime_error("cannot bind to CPUs " + cpu_list(cpus) + ": sched_setaffinity: " + std::strerror(errno));
  }
}

}  // namespace ppsched::exec
