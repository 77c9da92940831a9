#include "platform/interconnect.hpp"

#include <algorithm>

namespace ppsched {

const Link& Links::link(int src, int dst) const {
  // A pair applies to both directions unless the reverse is listed too.
  const LinkOverride* reverse = nullptr;
  for (const auto& p : pairs) {
    if (p.src == src && p.dst == dst) return p.link;
    if (!reverse && p.src == dst && p.dst == src) reverse = &p;
  }
  if (reverse) return reverse->link;
  const int per_node = std::max(ranks_per_node, 1);
  return src / per_node == dst / per_node ? intra_node : inter_node;
}

}  // namespace ppsched
