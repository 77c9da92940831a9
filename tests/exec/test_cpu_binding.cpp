// --cpu-bind (exec/cpu_binding.hpp): which CPUs each local rank takes, when auto binds and when
// it leaves the launcher's placement alone, and the binding's trip through a rank's trace record
// to otherData.cpu_binding. The processes themselves: exec_cases.py cpu_binding_pp2.
#include <catch2/catch.hpp>

#include <sched.h>

#include <nlohmann/json.hpp>

#include "exec/cpu_binding.hpp"
#include "exec/measured_trace.hpp"
#include "schedule/generators/generator.hpp"
#include "traces/chrome_trace.hpp"

using namespace ppsched;
using namespace ppsched::exec;

namespace {
std::vector<int> range(int lo, int hi) {
  std::vector<int> v;
  for (int c = lo; c < hi; ++c) v.push_back(c);
  return v;
}
}  // namespace

TEST_CASE("auto gives each of L local CPU ranks the r-th of L equal blocks of the machine's CPUs", "[exec]") {
  // Two ranks on two cores: one core each (the bench's PP=2 runs).
  CHECK(plan_cpu_binding(CpuBindMode::Auto, true, 0, 2, range(0, 2), 2).cpus == std::vector<int>{0});
  CHECK(plan_cpu_binding(CpuBindMode::Auto, true, 1, 2, range(0, 2), 2).cpus == std::vector<int>{1});
  // Three ranks on 16 CPUs: blocks of 5, 5 and 6, covering every CPU once.
  std::vector<int> seen;
  for (int r = 0; r < 3; ++r) {
    const auto p = plan_cpu_binding(CpuBindMode::Auto, true, r, 3, range(0, 16), 16);
    CHECK(p.cpus.size() >= 5);
    CHECK(p.cpus.size() <= 6);
    seen.insert(seen.end(), p.cpus.begin(), p.cpus.end());
    CHECK(p.reason.find("bound to CPUs") != std::string::npos);
  }
  CHECK(seen == range(0, 16));
  CHECK(cpu_list(plan_cpu_binding(CpuBindMode::Auto, true, 2, 3, range(0, 16), 16).cpus) == "10-15");
}

TEST_CASE("auto leaves a rank where it is when one core per rank cannot or need not be had", "[exec]") {
  // More ranks than CPUs: they share cores whatever the binding.
  auto p = plan_cpu_binding(CpuBindMode::Auto, true, 3, 4, range(0, 2), 2);
  CHECK(p.cpus.empty());
  CHECK(p.reason.find("4 ranks on 2 CPUs") != std::string::npos);
  // The launcher bound the process already (taskset, Slurm --cpu-bind): respected.
  p = plan_cpu_binding(CpuBindMode::Auto, true, 0, 2, {4, 5, 6, 7}, 16);
  CHECK(p.cpus.empty());
  CHECK(p.reason.find("already restricted this process to CPUs 4-7 of 16") != std::string::npos);
  // GPU ranks: their host threads are not ours to place under auto.
  p = plan_cpu_binding(CpuBindMode::Auto, false, 0, 2, range(0, 16), 16);
  CHECK(p.cpus.empty());
  CHECK(p.reason.find("GPUs") != std::string::npos);
  // Slurm's srun sets no LOCAL_WORLD_SIZE: nobody says how many ranks share the node.
  p = plan_cpu_binding(CpuBindMode::Auto, true, 0, -1, range(0, 16), 16);
  CHECK(p.cpus.empty());
  CHECK(p.reason.find("LOCAL_WORLD_SIZE") != std::string::npos);
  // none: never.
  p = plan_cpu_binding(CpuBindMode::None, true, 0, 2, range(0, 2), 2);
  CHECK(p.cpus.empty());
  CHECK(p.reason == "--cpu-bind none");
}

TEST_CASE("blocks splits whatever CPUs the process has, also with more ranks than CPUs", "[exec]") {
  // Four ranks on two CPUs: ranks 0 and 1 on the first, 2 and 3 on the second.
  std::vector<std::vector<int>> got;
  for (int r = 0; r < 4; ++r) got.push_back(plan_cpu_binding(CpuBindMode::Blocks, true, r, 4, {2, 9}, 16).cpus);
  CHECK(got == std::vector<std::vector<int>>{{2}, {2}, {9}, {9}});
  CHECK(plan_cpu_binding(CpuBindMode::Blocks, true, 0, 4, {2, 9}, 16).reason.find("shared") != std::string::npos);
  // GPU ranks and a restricted process too: in the order the CPUs were given.
  CHECK(plan_cpu_binding(CpuBindMode::Blocks, false, 1, 2, {4, 5, 6, 7}, 16).cpus == std::vector<int>{6, 7});
  // A huge rank count cannot wrap the block arithmetic.
  const auto p = plan_cpu_binding(CpuBindMode::Blocks, true, (1 << 30) - 1, 1 << 30, range(0, 4), 4);
  CHECK(p.cpus == std::vector<int>{3});
}

TEST_CASE("cpu_list writes ranges as the kernel does", "[exec]") {
  CHECK(cpu_list({}).empty());
  CHECK(cpu_list({3}) == "3");
  CHECK(cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
}

TEST_CASE("this process's CPUs are read back, and binding to them changes nothing", "[exec]") {
  const std::vector<int> before = allowed_cpus();
  REQUIRE(!before.empty());
  CHECK(static_cast<int>(before.size()) <= online_cpus());
  apply_cpu_binding(before);  // the same set: harmless for the rest of the test binary
  CHECK(allowed_cpus() == before);
  apply_cpu_binding({});      // nothing planned: nothing done
  CHECK(allowed_cpus() == before);
}

TEST_CASE("a rank's CPUs travel in its trace record to otherData.cpu_binding", "[exec]") {
  RankTrace a, b;
  a.rank = 0;
  a.host = "node-a";
  a.cpus = {0};
  a.cpu_bound = true;
  b.rank = 1;
  b.host = "node-a";
  b.cpus = {1, 2, 3};
  const RankTrace a2 = parse_rank_trace(serialize(a)), b2 = parse_rank_trace(serialize(b));
  CHECK(a2.cpus == a.cpus);
  CHECK(a2.cpu_bound);
  CHECK(b2.cpus == b.cpus);
  CHECK(!b2.cpu_bound);
  CHECK(parse_rank_trace(serialize(RankTrace{})).cpus.empty());
  CHECK_THROWS_WITH(parse_rank_trace(R"({"rank": 0, "host": "h", "epoch_ns": 5, "cpus": [1, )"),
                    Catch::Contains("malformed trace record"));
  CHECK_THROWS_WITH(parse_rank_trace(R"({"rank": 0, "host": "h", "epoch_ns": 5, "cpus": [-4], "cpu_bound": true,
                                         "intervals": [], "messages": []})"),
                    Catch::Contains("malformed CPU list"));
  // Rank 0 puts them in the run's provenance; the trace writes them and reads them back.
  GenerateOptions g;
  g.pp = 2;
  g.micro = 2;
  const Schedule s = generate("1f1b", g);
  MeasuredRunInfo info;
  info.transport = RunTransport::Gloo;
  info.cpu_bind = CpuBindMode::Auto;
  const RunRecord run = assemble_measured_run(s, {a2, b2}, info);
  const auto j = nlohmann::json::parse(chrome_trace_json(s, run))["otherData"]["cpu_binding"];
  CHECK(j["mode"] == "auto");
  REQUIRE(j["ranks"].size() == 2);
  CHECK(j["ranks"][0]["cpus"] == nlohmann::json::array({0}));
  CHECK(j["ranks"][0]["bound"] == true);
  CHECK(j["ranks"][1]["host"] == "node-a");
  CHECK(j["ranks"][1]["bound"] == false);
}
