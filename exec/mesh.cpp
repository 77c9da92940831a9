#include "exec/mesh.hpp"

namespace ppsched::exec {

std::vector<int> DeviceMesh::dp_group(int pipeline_rank) const {
  std::vector<int> out;
  for (int d = 0; d < dp; ++d) out.push_back(global_rank(d, pipeline_rank));
  return out;  // ascending in both orders
}

std::vector<int> DeviceMesh::replica_ranks(int replica) const {
  std::vector<int> out;
  for (int r = 0; r < pp; ++r) out.push_back(global_rank(replica, r));
  return out;
}

std::string DeviceMesh::name(int global) const {
  std::string out = "rank " + std::to_string(global);
  if (dp > 1) out += " (dp " + std::to_string(replica(global)) + ", pp " + std::to_string(pipeline_rank(global)) + ")";
  return out;
}

const char* to_string(MeshOrder o) { return o == MeshOrder::DpPp ? "dp,pp" : "pp,dp"; }

std::string mesh_mismatch(const DeviceMesh& mesh, int world_size) {
  if (world_size == mesh.world()) return "";
  if (mesh.dp == 1)
    return "WORLD_SIZE is " + std::to_string(world_size) + " but the schedule has " + std::to_string(mesh.pp) +
           " ranks: start exactly one process per pipeline rank (or --dp N replicas of the pipeline: WORLD_SIZE = " +
           std::to_string(mesh.pp) + " x N)";
  return "WORLD_SIZE is " + std::to_string(world_size) + " but --dp " + std::to_string(mesh.dp) + " replicas of the " +
         std::to_string(mesh.pp) + "-rank pipeline need " + std::to_string(mesh.pp) + " x " + std::to_string(mesh.dp) +
         " = " + std::to_string(mesh.world()) + " processes";
}

}  // namespace ppsched::exec
