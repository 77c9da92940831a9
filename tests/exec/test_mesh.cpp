// Pipeline x data parallel without libtorch: the rank layout of the 2-D mesh (exec/mesh.hpp),
// the world-size refusal, and what the agreement requires of a schedule at --dp N
// (exec/agreement.hpp). The processes themselves: exec_cases.py's parity_dp_* cases.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "checkers/checks.hpp"
#include "exec/agreement.hpp"
#include "exec/flag_limits.hpp"
#include "exec/mesh.hpp"
#include "schedule/generators/generator.hpp"

using namespace ppsched;
using namespace ppsched::exec;

namespace {

Schedule one_f_one_b(int pp, int micro) {
  GenerateOptions o;
  o.pp = pp;
  o.micro = micro;
  return generate("1f1b", o);
}

// PyTorch's placement of the FSDP steps (_add_unshard_reshard, _add_reduce_grad) on a schedule
// with one stage per rank: UNSHARD first, REDUCE_GRAD after the M-th BWD, RESHARD last.
Schedule with_fsdp_steps(Schedule s, bool unshard = true) {
  for (int r = 0; r < s.ranks; ++r) {
    Program out;
    int bwd = 0;
    if (unshard) out.push_back(make_step(Op::FSDP_UNSHARD, kNone, r));
    for (const auto& slot : s.programs[static_cast<size_t>(r)]) {
      out.push_back(slot);
      if (slot && slot->op == Op::BWD && ++bwd == s.micro_batches) out.push_back(make_step(Op::FSDP_REDUCE_GRAD, kNone, r));
    }
    if (unshard) out.push_back(make_step(Op::FSDP_RESHARD, kNone, r));
    s.programs[static_cast<size_t>(r)] = out;
  }
  return s;
}

std::string all_errors(const Schedule& s, int world, DataParallelOptions dp) {
  ModelConfig m;
  m.layers = 4;
  std::string out;
  for (const auto& e : check_agreement(s, world, m, [](Op) { return true; }, dp).errors) out += e + "\n";
  return out;
}

}  // namespace

TEST_CASE("the default mesh is torch's DeviceMesh (dp, pp): rank g is pipeline rank g % PP of replica g / PP", "[mesh]") {
  DeviceMesh m{4, 2, MeshOrder::DpPp};
  CHECK(m.world() == 8);
  for (int g = 0; g < 8; ++g) {
    CHECK(m.pipeline_rank(g) == g % 4);
    CHECK(m.replica(g) == g / 4);
    CHECK(m.global_rank(m.replica(g), m.pipeline_rank(g)) == g);
  }
  CHECK(m.dp_group(1) == std::vector<int>{1, 5});
  CHECK(m.replica_ranks(1) == std::vector<int>{4, 5, 6, 7});
  CHECK(m.name(5) == "rank 5 (dp 1, pp 1)");
  CHECK(DeviceMesh{4, 1, MeshOrder::DpPp}.name(3) == "rank 3");
}

TEST_CASE("--mesh-order pp,dp is reshape(PP, DP): a DP group is DP consecutive ranks", "[mesh]") {
  DeviceMesh m{2, 3, MeshOrder::PpDp};
  for (int g = 0; g < 6; ++g) {
    CHECK(m.global_rank(m.replica(g), m.pipeline_rank(g)) == g);
    CHECK(g == m.pipeline_rank(g) * 3 + m.replica(g));
  }
  CHECK(m.dp_group(1) == std::vector<int>{3, 4, 5});
  CHECK(m.replica_ranks(2) == std::vector<int>{2, 5});
}

TEST_CASE("WORLD_SIZE must be pipeline ranks x DP, refused with both numbers", "[mesh]") {
  CHECK(mesh_mismatch(DeviceMesh{2, 2, MeshOrder::DpPp}, 4).empty());
  CHECK(mesh_mismatch(DeviceMesh{2, 2, MeshOrder::DpPp}, 3) ==
        "WORLD_SIZE is 3 but --dp 2 replicas of the 2-rank pipeline need 2 x 2 = 4 processes");
  CHECK_THAT(mesh_mismatch(DeviceMesh{2, 1, MeshOrder::DpPp}, 4),
             Catch::StartsWith("WORLD_SIZE is 4 but the schedule has 2 ranks: start exactly one process per pipeline rank"));
}

std::string violations(const Schedule& s, int dp, bool fsdp) {
  CheckOptions o;
  o.dp.degree = dp;
  o.dp.fsdp = fsdp;
  std::string out;
  for (const auto& v : verify(s, o).violations) out += v.message + "\n";
  return out;
}

TEST_CASE("at --dp 2 the executor needs the schedule's FSDP steps; where they go is the verifier's rule",
          "[mesh][agreement]") {
  DataParallelOptions dp2;
  dp2.degree = 2;
  const Schedule plain = one_f_one_b(2, 4);
  const std::string e = all_errors(plain, 4, dp2);
  CHECK_THAT(e, Catch::Contains("--dp 2: the schedule has no FSDP_* steps"));
  CHECK_THAT(e, Catch::Contains("--fsdp-steps"));
  // At --dp 1 nothing is needed, and PyTorch's placement is accepted at --dp 2.
  CHECK(all_errors(plain, 2, DataParallelOptions{}).empty());
  CHECK(all_errors(with_fsdp_steps(plain), 4, dp2).empty());
  CHECK(violations(with_fsdp_steps(plain), 2, false).empty());
  // A REDUCE_GRAD before a backward of its stage leaves that backward unreduced: the
  // verifier's data-parallel pass (ppsched-exec runs it under the same --dp) says so.
  Schedule early = with_fsdp_steps(plain);
  auto& prog = early.programs[1];
  auto rg = std::find_if(prog.begin(), prog.end(), [](const Slot& x) { return x && x->op == Op::FSDP_REDUCE_GRAD; });
  REQUIRE(rg != prog.end());
  Slot moved = *rg;
  prog.erase(rg);
  prog.insert(prog.begin() + 1, moved);
  CHECK(all_errors(early, 4, dp2).empty());
  CHECK_THAT(violations(early, 2, false), Catch::Contains("after its FSDP_REDUCE_GRAD at step 1"));
}

TEST_CASE("--fsdp needs each stage gathered (FSDP_UNSHARD) before it computes: the verifier's rule", "[mesh][agreement]") {
  DataParallelOptions fsdp;
  fsdp.degree = 2;
  fsdp.fsdp = true;
  const Schedule plain = one_f_one_b(2, 4);
  CHECK(all_errors(with_fsdp_steps(plain), 4, fsdp).empty());
  CHECK(violations(with_fsdp_steps(plain), 2, true).empty());
  CHECK_THAT(violations(with_fsdp_steps(plain, false), 2, true), Catch::Contains("F0s0 computes stage 0 on sharded parameters"));
  // --fsdp at --dp 1: nothing is sharded, nothing is required.
  fsdp.degree = 1;
  CHECK(all_errors(plain, 2, fsdp).empty());
  CHECK(violations(plain, 1, true).empty());
}

TEST_CASE("--fail-at takes a global rank with --dp", "[mesh][flags]") {
  const Schedule s = one_f_one_b(2, 4);
  FaultInjection f;
  f.rank = 3;
  f.step = 0;
  CHECK(check_fault(f, s, 1, DeviceMesh{2, 2, MeshOrder::DpPp}).empty());
  f.rank = 4;
  CHECK_THAT(check_fault(f, s, 1, DeviceMesh{2, 2, MeshOrder::DpPp}).at(0),
             Catch::Contains("rank 4 is not one of the job's ranks 0..3"));
}
