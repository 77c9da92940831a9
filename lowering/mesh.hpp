// The data-parallel mesh: how a job's global ranks are laid out as pipeline ranks x replicas,
// torch's 2-D DeviceMesh. ("dp", "pp") by default, mesh = arange(PP * N).reshape(N, PP), so
// global rank g is pipeline rank g % PP of replica g / PP, and pipeline rank r's DP group is
// {r, r + PP, ..., r + (N - 1) PP}; ("pp", "dp") is reshape(PP, N): g = r * N + replica. One
// type for the simulator's --dp options (lowering/options.hpp), the executor's process layout and
// a record's provenance; the orders are spelled "dp,pp" and "pp,dp" here alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ppsched {

enum class MeshOrder : uint8_t { DpPp, PpDp };

// "dp,pp" / "pp,dp", as the flags and the records spell them; and back (nullopt: neither).
const char* to_string(MeshOrder o);
std::optional<MeshOrder> mesh_order_named(std::string_view text);

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

}  // namespace ppsched
