// Pipeline x data parallel: which process is which pipeline rank of which replica. Torch-free:
// the command line refuses a world that does not fit before libtorch starts.
//
// The layout is torch's 2-D DeviceMesh with mesh_dim_names ("dp", "pp"):
// mesh = arange(WORLD_SIZE).reshape(DP, PP), so global rank g is pipeline rank g % PP of
// replica g / PP, and the data-parallel group of pipeline rank r is {r, r + PP, r + 2 PP, ...}.
// --mesh-order pp,dp is reshape(PP, DP) instead: g = r * DP + d (a replica's pipeline ranks
// are DP apart; a DP group is DP consecutive ranks, e.g. one node's GPUs).
#pragma once

#include <string>
#include <vector>

#include "lowering/options.hpp"  // MeshOrder: one enum for the simulator's --mesh-order and this

namespace ppsched::exec {

struct DeviceMesh {
  int pp = 1;  // pipeline ranks (the schedule's ranks)
  int dp = 1;  // replicas of the pipeline (--dp)
  MeshOrder order = MeshOrder::DpPp;

  int world() const { return pp * dp; }
  int global_rank(int replica, int pipeline_rank) const {
    return order == MeshOrder::DpPp ? replica * pp + pipeline_rank : pipeline_rank * dp + replica;
  }
  int pipeline_rank(int global) const { return order == MeshOrder::DpPp ? global % pp : global / dp; }
  int replica(int global) const { return order == MeshOrder::DpPp ? global / pp : global % dp; }
  // Global ranks, ascending: the replicas of pipeline rank r; the pipeline ranks of replica d.
  std::vector<int> dp_group(int pipeline_rank) const;
  std::vector<int> replica_ranks(int replica) const;
  // "rank 3 (dp 1, pp 1)", or "rank 3" without data parallelism.
  std::string name(int global) const;
};

const char* to_string(MeshOrder o);  // "dp,pp" / "pp,dp"

// Why WORLD_SIZE does not fit the mesh, or "" when it does.
std::string mesh_mismatch(const DeviceMesh& mesh, int world_size);

}  // namespace ppsched::exec
