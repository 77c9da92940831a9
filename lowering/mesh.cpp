#include "lowering/mesh.hpp"

namespace ppsched {

const char* to_string(MeshOrder o) { return o == MeshOrder::DpPp ? "dp,pp" : "pp,dp"; }

std::optional<MeshOrder> mesh_order_named(std::string_view text) {
  for (MeshOrder o : {MeshOrder::DpPp, MeshOrder::PpDp})
    if (text == to_string(o)) return o;
  return std::nullopt;
}

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

}  // namespace ppsched
