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

#include "lowering/mesh.hpp"  // DeviceMesh: one mesh for the simulator's --dp and this

namespace ppsched::exec {

// Why WORLD_SIZE does not fit the mesh, or "" when it does.
std::string mesh_mismatch(const DeviceMesh& mesh, int world_size);

}  // namespace ppsched::exec
