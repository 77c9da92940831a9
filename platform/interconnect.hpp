// The interconnect a job runs on: the links between its ranks, by locality (two ranks of one
// node, two nodes, or a pair measured apart), and the algorithm its collectives take over
// them. Part of the platform (SimGrid's word): what the hardware does, apart from what the
// workload asks of it. A cost file's "link" and "collectives" sections and a model file's
// (platform/platform_file.hpp) read into these; the cost model carries them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ppsched {

struct Link {
  double latency_ms = 0.0;
  std::optional<double> bandwidth_GBps;  // nullopt = infinite
  // Milliseconds to move `bytes` over this link.
  double transfer_ms(double bytes) const {
    return latency_ms + (bandwidth_GBps && *bandwidth_GBps > 0 ? bytes / (*bandwidth_GBps * 1e9) * 1e3 : 0.0);
  }
};

struct LinkOverride {
  int src = -1, dst = -1;  // a pair (applies to both directions when symmetric)
  Link link;
};

// The links by locality: ranks r and q share a node when r / ranks_per_node == q / ranks_per_node.
struct Links {
  Link intra_node, inter_node;
  int ranks_per_node = 8;
  std::vector<LinkOverride> pairs;  // measured apart: a pair, both directions unless the reverse is listed

  // The link between two ranks (per-pair override, else intra/inter node by ranks_per_node).
  const Link& link(int src, int dst) const;
};

enum class CollectiveAlgorithm : uint8_t { Ring, Tree };

}  // namespace ppsched
