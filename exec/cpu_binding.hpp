// Which CPUs a rank's process runs on (--cpu-bind). Torch-free.
//
// Why: the cost model gives every rank a processor of its own, and calibrate fits one time per
// (step kind, stage), that is per rank. Unbound, Linux moves a rank between cores and at times
// runs both ranks of a 2-core machine on one (a rank that waits wakes up on the core of the
// thread that woke it; `ps -o psr` caught both compute threads on CPU 1). On the project's
// 2-core VM the two cores do not even run at one speed (a Python loop: 0.40 s on CPU 0,
// 0.70-0.85 s on CPU 1 at one moment; the other way round in other hours), so an unbound rank's
// step times change within a run: PP=2 --overlap-p2p, mpipe min, tower none took 731-903 ms, one
// rank's backward went from 18-20 to 35-37 ms for a third of an iteration, and the prediction
// from that run's own trace was 15 % short. Bound, each rank keeps its core's speed for the whole
// run, which the per-stage fit captures: over the PP=2 matrix (380 runs each) a (step, stage)'s
// mean time changed by more than 20 % between the halves of a run in 3 bound runs and 20 unbound
// ones, and 9 bound runs against 50 unbound were predicted more than 3 % off (README).
//
// The plan is a pure function of the launcher's view and the CPUs this process may use, so it
// is tested without starting processes; apply_cpu_binding() sets it on every thread of the
// process (those started later, Gloo's and the store's, inherit it).
#pragma once

#include <string>
#include <vector>

namespace ppsched::exec {

enum class CpuBindMode {
  Auto,    // bind a CPU run's local ranks to blocks of their own when nobody bound them yet
  None,    // leave the process where the launcher put it
  Blocks,  // always split the CPUs this process may use into LOCAL_WORLD_SIZE blocks
};

const char* to_string(CpuBindMode m);

struct CpuBindPlan {
  std::vector<int> cpus;  // the CPUs to bind to, ascending; empty: do not bind
  std::string reason;     // why (not) bound, for the run's report and trace
};

// `allowed`: the CPUs this process may use now (sched_getaffinity), ascending; `online`: the
// CPUs the machine has online. `cpu_compute`: the rank computes on the CPU (the Gloo transport);
// a GPU rank's host threads are left alone under Auto. Local rank r of L takes, over the n
// allowed CPUs (in their order), block [floor(r n / L), floor((r+1) n / L)) when L <= n, and the
// single CPU floor(r n / L) when L > n (Blocks only: then ranks share cores, two or more each).
// Auto binds only when every condition for one core per rank holds: a CPU run, L known, L <= n,
// and `allowed` is every online CPU (a launcher that bound the process already, like Slurm's
// --cpu-bind or taskset, is left alone).
CpuBindPlan plan_cpu_binding(CpuBindMode mode, bool cpu_compute, int local_rank, int local_world_size,
                             const std::vector<int>& allowed, int online);

// The CPUs this process's calling thread may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();
// The CPUs online (sysconf(_SC_NPROCESSORS_ONLN)).
int online_cpus();
// Binds every thread of this process to `cpus`. Throws std::runtime_error naming the failure.
void apply_cpu_binding(const std::vector<int>& cpus);
// "0-3,8" for {0,1,2,3,8}; "" for none.
std::string cpu_list(const std::vector<int>& cpus);

}  // namespace ppsched::exec
