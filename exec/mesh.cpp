#include "exec/mesh.hpp"

namespace ppsched::exec {

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
