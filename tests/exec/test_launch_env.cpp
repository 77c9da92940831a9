// The launchers' contracts, without libtorch: which variables each launcher sets and what
// ppsched-exec makes of them (exec/launch_env.hpp), Slurm's compressed host lists, the
// messages of a store that cannot be opened, torchrun's error-file JSON (exec/error_file.hpp)
// and the flag limits (exec/flag_limits.hpp). The processes themselves: launcher_cases.py.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "exec/error_file.hpp"
#include "exec/flag_limits.hpp"
#include "exec/launch_env.hpp"
#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"

using namespace ppsched;
using namespace ppsched::exec;

namespace {

GetEnv env_of(std::map<std::string, std::string> vars) {
  auto owned = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [owned](const char* name) -> const char* {
    auto it = owned->find(name);
    return it == owned->end() ? nullptr : it->second.c_str();
  };
}

std::string refusal(const std::map<std::string, std::string>& vars) {
  try {
    read_launch_env(env_of(vars));
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::map<std::string, std::string> torchrun_worker(int rank, const std::string& use_agent_store) {
  return {{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", std::to_string(rank % 2)},
          {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", std::to_string(rank / 2)}, {"ROLE_RANK", std::to_string(rank)},
          {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "none"},
          {"TORCHELASTIC_USE_AGENT_STORE", use_agent_store}, {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_ERROR_FILE", "/tmp/x/error.json"}};
}

}  // namespace

// ---- RANK/WORLD_SIZE and torchrun --------------------------------------------------------------

TEST_CASE("RANK/WORLD_SIZE by hand: every variable is read, MASTER_* and LOCAL_RANK are required", "[launch]") {
  LaunchEnv e = read_launch_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"},
                                        {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29511"}}));
  CHECK(e.rank == 2);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 2);
  CHECK(e.master_addr == "10.0.0.1");
  CHECK(e.master_port == 29511);
  CHECK(e.source == "RANK/WORLD_SIZE");
  CHECK(e.hosts_store() == false);  // rank 2 is a client
  CHECK(e.store_prefix == "ppsched");

  // Missing MASTER_PORT was silently 29500 once; now the variable is named.
  CHECK_THAT(refusal({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "h"}}),
             Catch::Contains("MASTER_PORT is not set"));
  CHECK_THAT(refusal({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_PORT", "1234"}}),
             Catch::Contains("MASTER_ADDR is not set"));
  CHECK_THAT(refusal({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}}),
             Catch::Contains("LOCAL_RANK is not set"));
  CHECK_THAT(refusal({{"RANK", "0"}}), Catch::Contains("WORLD_SIZE is not set"));
  CHECK_THAT(refusal({{"WORLD_SIZE", "2"}}), Catch::Contains("WORLD_SIZE is set but RANK is not"));
}

TEST_CASE("a malformed or out-of-range launcher variable is refused, naming it", "[launch]") {
  auto base = std::map<std::string, std::string>{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                                                 {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}};
  auto with = [&](const std::string& k, const std::string& v) {
    auto m = base;
    m[k] = v;
    return refusal(m);
  };
  CHECK_THAT(with("RANK", "x"), Catch::Contains("RANK='x' is not an integer"));
  CHECK_THAT(with("RANK", "2"), Catch::Contains("rank 2 is not below the world size 2"));
  CHECK_THAT(with("MASTER_PORT", "70000"), Catch::Contains("MASTER_PORT='70000' is not an integer in 1..65535"));
  CHECK_THAT(with("MASTER_PORT", "0"), Catch::Contains("MASTER_PORT='0'"));
  CHECK_THAT(with("WORLD_SIZE", "99999999999999999999"), Catch::Contains("WORLD_SIZE="));
  CHECK_THAT(with("LOCAL_WORLD_SIZE", "1"), Catch::Contains("LOCAL_RANK=1 is not below LOCAL_WORLD_SIZE=1"));
  CHECK_THAT(with("LOCAL_WORLD_SIZE", "3"), Catch::Contains("LOCAL_WORLD_SIZE=3 exceeds WORLD_SIZE=2"));
  CHECK_THAT(with("ROLE_RANK", "0"), Catch::Contains("ROLE_RANK=0 differs from RANK=1"));
}

TEST_CASE("one process without launcher variables hosts its store on a free port", "[launch]") {
  LaunchEnv one = read_launch_env(env_of({}));
  CHECK(one.rank == 0);
  CHECK(one.world_size == 1);
  CHECK(one.master_port == 0);
  CHECK(one.hosts_store());
  CHECK(one.source == "defaults (single process)");
}

TEST_CASE("torchrun: the agent's store under the static rendezvous, rank 0's otherwise; node and local size read", "[launch]") {
  LaunchEnv agent = read_launch_env(env_of(torchrun_worker(0, "True")));
  CHECK(agent.source == "torchrun");
  CHECK(agent.use_agent_store);
  CHECK_FALSE(agent.hosts_store());  // rank 0 too is a client: the agent holds MASTER_PORT
  CHECK(agent.store_prefix == "ppsched/attempt_0");
  CHECK(agent.local_world_size == 2);
  CHECK(agent.node_rank == 0);

  LaunchEnv c10d = read_launch_env(env_of(torchrun_worker(0, "False")));
  CHECK_FALSE(c10d.use_agent_store);
  CHECK(c10d.hosts_store());

  LaunchEnv r3 = read_launch_env(env_of(torchrun_worker(3, "True")));
  CHECK(r3.node_rank == 1);
  CHECK(r3.local_rank == 1);

  auto restarted = torchrun_worker(1, "True");
  restarted["TORCHELASTIC_RESTART_COUNT"] = "2";
  CHECK(read_launch_env(env_of(restarted)).store_prefix == "ppsched/attempt_2");

  auto bad = torchrun_worker(1, "yes");
  CHECK_THAT(refusal(bad), Catch::Contains("TORCHELASTIC_USE_AGENT_STORE='yes' is neither True nor False"));
}

// ---- Slurm ------------------------------------------------------------------------------------

TEST_CASE("Slurm host lists expand as Slurm's hostlist does", "[launch][slurm]") {
  using V = std::vector<std::string>;
  CHECK(expand_slurm_hostlist("gpu[01-04,07],cpu3", "L") == V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3"});
  CHECK(expand_slurm_hostlist("n1", "L") == V{"n1"});
  CHECK(expand_slurm_hostlist("a[1-2]b[3-4]", "L") == V{"a1b3", "a1b4", "a2b3", "a2b4"});
  // Three groups: the last varies fastest, the middle one slowest (Slurm's _push_range_list
  // expands the prefix from its rightmost bracket).
  CHECK(expand_slurm_hostlist("x[1-2]y[1-2]z[5-6]", "L") ==
        V{"x1y1z5", "x1y1z6", "x2y1z5", "x2y1z6", "x1y2z5", "x1y2z6", "x2y2z5", "x2y2z6"});
  CHECK(expand_slurm_hostlist("node[098-101]", "L") == V{"node098", "node099", "node100", "node101"});
  CHECK(expand_slurm_hostlist("node[9-10]", "L") == V{"node9", "node10"});  // width of lo: no padding
  CHECK(expand_slurm_hostlist("rack-a[1,3] rack-b2\tc[7]", "L") == V{"rack-a1", "rack-a3", "rack-b2", "c7"});
  CHECK(expand_slurm_hostlist("h1,,h2,", "L") == V{"h1", "h2"});
  CHECK_THROWS_WITH(expand_slurm_hostlist("n[1-70000]", "L"), Catch::Contains("more than 65536 hosts"));
  CHECK_THROWS_WITH(expand_slurm_hostlist("a[1-300]b[1-300]", "L", 1000), Catch::Contains("more than 1000 hosts"));
}

TEST_CASE("the first host of a Slurm list is MASTER_ADDR, zero padding and bracket groups kept", "[launch][slurm]") {
  CHECK(first_slurm_host("gpu[01-04,07],cpu3", "L") == "gpu01");
  CHECK(first_slurm_host("gpu[07,01-04]", "L") == "gpu07");  // the list's order, not sorted
  CHECK(first_slurm_host("cpu3,gpu[01-04]", "L") == "cpu3");
  CHECK(first_slurm_host("a[1-2]b[3-4]", "L") == "a1b3");
  CHECK(first_slurm_host("r[00-99]n[0000-4095]", "L") == "r00n0000");  // not expanded to find it
  CHECK(first_slurm_host("  n[5-6]", "L") == "n5");
}

TEST_CASE("a malformed Slurm host list is refused at the character where it goes wrong", "[launch][slurm]") {
  auto msg = [](const std::string& list) {
    try {
      first_slurm_host(list, "SLURM_JOB_NODELIST");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK_THAT(msg("gpu[01-04"), Catch::Contains("SLURM_JOB_NODELIST='gpu[01-04' at character 4: '[' has no matching ']'"));
  CHECK_THAT(msg("gpu01]"), Catch::Contains("at character 6: ']' without '['"));
  CHECK_THAT(msg("gpu[04-01]"), Catch::Contains("at character 5: range 04-01 runs backwards"));
  CHECK_THAT(msg("gpu[1-]"), Catch::Contains("at character 7: a range needs a number after '-'"));
  CHECK_THAT(msg("gpu[]"), Catch::Contains("at character 5: expected a number, found ']'"));
  CHECK_THAT(msg("gpu[1,,2]"), Catch::Contains("at character 7: expected a number, found ','"));
  CHECK_THAT(msg("gpu[a-b]"), Catch::Contains("at character 5: expected a number, found 'a'"));
  CHECK_THAT(msg("gpu[1-2[3]]"), Catch::Contains("at character 8: expected ',', '-' or ']' in a bracket, found '['"));
  CHECK_THAT(msg("gpu[1-2]-ib"), Catch::Contains("at character 9: text after the last ']'"));
  CHECK_THAT(msg("gpu[1--2]"), Catch::Contains("at character 7: a range needs a number after '-'"));
  CHECK_THAT(msg(" , "), Catch::Contains("names no host"));
  // The whole list is checked, not only its first host.
  CHECK_THAT(msg("gpu01,cpu[3"), Catch::Contains("at character 10: '[' has no matching ']'"));
}

TEST_CASE("Slurm: ranks from SLURM_*, MASTER_ADDR from the first host, MASTER_PORT from the job id", "[launch][slurm]") {
  std::map<std::string, std::string> task{{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                                          {"SLURM_NODEID", "2"}, {"SLURM_JOB_NODELIST", "gpu[01-04,07],cpu3"},
                                          {"SLURM_JOB_ID", "123456"}};
  LaunchEnv s = read_launch_env(env_of(task));
  CHECK(s.source == "SLURM_*");
  CHECK(s.rank == 5);
  CHECK(s.world_size == 8);
  CHECK(s.local_rank == 1);
  CHECK(s.node_rank == 2);
  CHECK(s.master_addr == "gpu01");
  CHECK(s.master_port == 10000 + 123456 % 20000);
  CHECK(s.master_port == 13456);
  CHECK(slurm_master_port(0) == 10000);
  CHECK(slurm_master_port(19999) == 29999);
  CHECK(slurm_master_port(20000) == 10000);

  // The step's list first (task 0 runs on its first node), then the job's, then SLURM_NODELIST.
  auto step = task;
  step["SLURM_STEP_NODELIST"] = "gpu[03-04]";
  CHECK(read_launch_env(env_of(step)).master_addr == "gpu03");
  auto old = task;
  old.erase("SLURM_JOB_NODELIST");
  old["SLURM_NODELIST"] = "cpu[7-8]";
  CHECK(read_launch_env(env_of(old)).master_addr == "cpu7");
  // The user's MASTER_ADDR / MASTER_PORT win.
  auto mine = task;
  mine["MASTER_ADDR"] = "10.1.1.1";
  mine["MASTER_PORT"] = "40000";
  CHECK(read_launch_env(env_of(mine)).master_addr == "10.1.1.1");
  CHECK(read_launch_env(env_of(mine)).master_port == 40000);
  // RANK wins over Slurm (torchrun started inside an allocation).
  auto nested = torchrun_worker(1, "True");
  nested.insert(task.begin(), task.end());
  CHECK(read_launch_env(env_of(nested)).source == "torchrun");
}

TEST_CASE("Slurm: a missing or malformed variable is named", "[launch][slurm]") {
  std::map<std::string, std::string> task{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"},
                                          {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_JOB_ID", "77"}};
  auto without = [&](const std::string& k) {
    auto m = task;
    m.erase(k);
    return refusal(m);
  };
  CHECK_THAT(without("SLURM_NTASKS"), Catch::Contains("SLURM_NTASKS is not set"));
  CHECK_THAT(without("SLURM_LOCALID"), Catch::Contains("SLURM_LOCALID is not set"));
  CHECK_THAT(without("SLURM_JOB_NODELIST"), Catch::Contains("MASTER_ADDR is not set and neither is SLURM_STEP_NODELIST"));
  CHECK_THAT(without("SLURM_JOB_ID"), Catch::Contains("MASTER_PORT is not set and neither is SLURM_JOB_ID"));
  auto bad = task;
  bad["SLURM_JOB_NODELIST"] = "n[1-2";
  CHECK_THAT(refusal(bad), Catch::Contains("SLURM_JOB_NODELIST='n[1-2' at character 2"));
  bad = task;
  bad["SLURM_JOB_ID"] = "12x";
  CHECK_THAT(refusal(bad), Catch::Contains("SLURM_JOB_ID='12x' is not an integer"));
}

// ---- the store's failure messages ---------------------------------------------------------------

TEST_CASE("a store that cannot bind says so at once; a store out of reach names the timeout", "[launch]") {
  LaunchEnv host = read_launch_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"},
                                           {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}}));
  const std::string bind = "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).";
  std::string m = store_failure_message(host, 0.02, 30, bind);
  CHECK_THAT(m, Catch::Contains("rank 0 cannot host the rendezvous store on 127.0.0.1:29500 (failed after 0.0 s)"));
  CHECK_THAT(m, Catch::Contains("another process already listens on port 29500: choose a free MASTER_PORT"));
  CHECK_THAT(m, !Catch::Contains("within"));

  LaunchEnv client = read_launch_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                                             {"MASTER_ADDR", "10.0.0.9"}, {"MASTER_PORT", "29500"}}));
  m = store_failure_message(client, 30.1, 30, "The client socket has timed out");
  CHECK_THAT(m, Catch::Contains("rank 1 cannot reach the rendezvous store at 10.0.0.9:29500 within 30 s (--timeout)"));
  CHECK_THAT(m, Catch::Contains("is rank 0 running there?"));
  m = store_failure_message(client, 0.3, 30, "connection refused");
  CHECK_THAT(m, Catch::Contains("(failed after 0.3 s)"));
  CHECK_THAT(m, !Catch::Contains("within"));

  LaunchEnv agent = read_launch_env(env_of(torchrun_worker(0, "True")));
  CHECK_THAT(store_failure_message(agent, 31, 30, "timed out"), Catch::Contains("is torchrun's agent running there?"));
}

// ---- torchrun's error file ----------------------------------------------------------------------

TEST_CASE("the error file is the JSON torchrun's ProcessFailure reads", "[launch][torchrun]") {
  auto j = nlohmann::json::parse(torchelastic_error_json("rank 2 failed: \"x\"\nsecond", "tb\tline", 1700000000));
  REQUIRE(j["message"].is_object());
  CHECK(j["message"]["message"] == "rank 2 failed: \"x\"\nsecond");
  CHECK(j["message"]["extraInfo"]["py_callstack"] == "tb\tline");
  // torchrun parses int(message["extraInfo"]["timestamp"]): a string of whole seconds.
  CHECK(j["message"]["extraInfo"]["timestamp"] == "1700000000");
  CHECK_NOTHROW(nlohmann::json::parse(torchelastic_error_json(std::string("ctl\x01\x1f"), "", 0)));
}

TEST_CASE("the error report is the rank's error lines, or its last stderr lines without any", "[launch][torchrun]") {
  FailureReport r = failure_report({"warning: slow", "error: rank 2 failed at iteration 0, step 6 (FWD): injected fault",
                                    "note"},
                                   1);
  CHECK(r.message == "rank 2 failed at iteration 0, step 6 (FWD): injected fault");
  CHECK_THAT(r.traceback, Catch::StartsWith(r.message) && Catch::Contains("exited with status 1 (the run failed)"));
  FailureReport usage = failure_report({"--timeout: 'nan' is out of range: it must be a number of seconds in 0.001..86400",
                                        "Run with --help for more information."},
                                       2);
  CHECK_THAT(usage.message, Catch::StartsWith("--timeout: 'nan' is out of range"));
  CHECK_THAT(usage.traceback, Catch::Contains("status 2 (refused before any communication)"));
}

// ---- flag limits --------------------------------------------------------------------------------

TEST_CASE("numeric flags are checked on the text typed, stating the limit", "[launch][flags]") {
  CHECK(check_seconds("30", kMinTimeoutS, kMaxTimeoutS).empty());
  CHECK(check_seconds("0.5", kMinHeartbeatS, kMaxTimeoutS).empty());
  for (const char* bad : {"nan", "inf", "1e300", "0", "-1", "86401"})
    CHECK_THAT(check_seconds(bad, kMinTimeoutS, kMaxTimeoutS), Catch::Contains("must be a number of seconds in 0.001..86400"));
  CHECK_THAT(check_seconds("ten", kMinTimeoutS, kMaxTimeoutS), Catch::Contains("wants a number of seconds in 0.001..86400, got 'ten'"));
  CHECK_THAT(check_seconds("-1", kMinHeartbeatS, kMaxTimeoutS), Catch::Contains("0.5..86400"));
  CHECK(check_learning_rate("0").empty());
  CHECK(check_learning_rate("0.01").empty());
  for (const char* bad : {"nan", "-0.1", "inf", "1e999", "x"})
    CHECK_THAT(check_learning_rate(bad), Catch::Contains("a finite number >= 0"));
  CHECK(check_seed("0").empty());
  CHECK(check_seed("18446744073709551615").empty());
  CHECK_THAT(check_seed("-1"), Catch::Contains("wants an integer in 0..18446744073709551615, got '-1'"));
  CHECK_THAT(check_seed("18446744073709551616"), Catch::Contains("out of range"));
  CHECK_THAT(check_seed("1e3"), Catch::Contains("got '1e3'"));
  CHECK(check_count("2", 0, 1 << 20).empty());
  CHECK_THAT(check_count("-3", 0, 1 << 20), Catch::Contains("'-3' is out of range: it must be an integer in 0..1048576"));
}

TEST_CASE("--fail-at must name a step that runs", "[launch][flags]") {
  GenerateOptions o;
  o.pp = 2;
  o.micro = 4;
  Schedule s = generate("1f1b", o);
  const int steps = static_cast<int>(s.programs[1].size());
  auto errors = [&](int rank, int step, int iteration, int iterations) {
    FaultInjection f;
    f.rank = rank;
    f.step = step;
    f.iteration = iteration;
    std::string all;
    for (const auto& e : check_fault(f, s, iterations)) all += e + "\n";
    return all;
  };
  CHECK(errors(1, 0, 0, 1).empty());
  CHECK_THAT(errors(2, 0, 0, 1), Catch::Contains("--fail-at 2:0: rank 2 is not one of the schedule's ranks 0..1"));
  CHECK_THAT(errors(-1, 0, 0, 1), Catch::Contains("rank -1 is not one of"));
  CHECK_THAT(errors(1, steps, 0, 1), Catch::Contains("rank 1's program has steps 0.." + std::to_string(steps - 1) +
                                                     ", not step " + std::to_string(steps)));
  CHECK_THAT(errors(1, 0, 3, 2), Catch::Contains("iteration 3 is not run (--iterations 2: iterations 0..1)"));
  // An idle slot: a step index where the rank does nothing.
  for (size_t k = 0; k < s.programs[1].size(); ++k)
    if (!s.programs[1][k]) {
      CHECK_THAT(errors(1, static_cast<int>(k), 0, 1), Catch::Contains("is an idle slot"));
      break;
    }
}

TEST_CASE("a failing exit writes what the rank printed to TORCHELASTIC_ERROR_FILE, once", "[launch][torchrun]") {
  // The only test that calls report_failure_to_launcher: it acts once per process.
  const std::string path = (std::filesystem::temp_directory_path() / ("ppsched-error-" + std::to_string(::getpid()) + ".json")).string();
  std::filesystem::remove(path);
  ::setenv("TORCHELASTIC_ERROR_FILE", path.c_str(), 1);
  {
    StderrRecorder recorder;
    std::cerr << "warning: not part of the message\n";
    std::cerr << "error: rank 1 failed at iteration 0, step 3 (FR0s1): boom\n";
  }
  std::cerr << "error: printed after the recorder is gone\n";
  report_failure_to_launcher(0);  // success: nothing written
  CHECK_FALSE(std::filesystem::exists(path));
  report_failure_to_launcher(1);
  report_failure_to_launcher(2);  // the first failing exit path wins
  std::ifstream in(path);
  REQUIRE(in);
  auto j = nlohmann::json::parse(in);
  CHECK(j["message"]["message"] == "rank 1 failed at iteration 0, step 3 (FR0s1): boom");
  CHECK_THAT(j["message"]["extraInfo"]["py_callstack"].get<std::string>(), Catch::Contains("exited with status 1"));
  std::filesystem::remove(path);
  ::unsetenv("TORCHELASTIC_ERROR_FILE");
}
