#include "platform/platform_file.hpp"

#include <limits>

namespace ppsched {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Keys = JsonFields::Keys;

const Keys kLinkKeys = {"latency_ms", "bandwidth_GBps", "intra_node", "inter_node", "ranks_per_node", "pairs"};
const Keys kLinkValueKeys = {"latency_ms", "bandwidth_GBps"};
const Keys kPairKeys = {"src", "dst", "latency_ms", "bandwidth_GBps"};
const Keys kCollectiveKeys = {"algorithm"};
const Keys kProtocolKeys = {"eager_threshold_bytes", "compute_blocks_host", "background_progress",
                            "send_handoff_ms", "deferred_start_ms"};
// Pairs are looked up linearly (a handful in practice); the limit keeps that bounded.
constexpr size_t kMaxLinkPairs = 1024;

// Latency and bandwidth of one link; what is missing stays as in `base`.
Link link_value(const JsonFields& f, const json& j, const std::string& path, Link base, const Keys& known) {
  f.object(j, path, known);
  if (j.contains("latency_ms")) base.latency_ms = f.quantity(j["latency_ms"], path + ".latency_ms", Quantity::Time);
  if (j.contains("bandwidth_GBps")) {
    const json& b = j["bandwidth_GBps"];
    if (b.is_null()) base.bandwidth_GBps.reset();
    else base.bandwidth_GBps = f.quantity(b, path + ".bandwidth_GBps", Quantity::Bandwidth);
  }
  return base;
}

// A rank of a pair, or ranks_per_node: a whole number within int.
int whole_rank(const JsonFields& f, const json& r, const std::string& path, int64_t lo, const std::string& what) {
  if (!r.is_number_integer() || r.get<int64_t>() < lo || r.get<int64_t>() > std::numeric_limits<int>::max())
    f.fail(path, "expected " + what + ", got " + (r.is_number() ? r.dump() : JsonFields::type_of(r)));
  return r.get<int>();
}

void read_pairs(const JsonFields& f, const json& pairs, Links& l) {
  if (!pairs.is_array())
    f.fail("link.pairs", "expected an array of {src, dst, latency_ms, bandwidth_GBps}, got " + JsonFields::type_of(pairs));
  if (pairs.size() > kMaxLinkPairs)
    f.fail("link.pairs", std::to_string(pairs.size()) + " pairs is over the limit of " + std::to_string(kMaxLinkPairs));
  for (size_t k = 0; k < pairs.size(); ++k) {
    const std::string path = "link.pairs[" + std::to_string(k) + "]";
    f.object(pairs[k], path, kPairKeys);
    LinkOverride o;
    for (auto [key, rank] : {std::pair<const char*, int*>{"src", &o.src}, {"dst", &o.dst}}) {
      if (!pairs[k].contains(key)) f.fail(path + "." + key, std::string("missing key '") + key + "': expected a rank >= 0");
      *rank = whole_rank(f, pairs[k][key], path + "." + key, 0, "a rank >= 0");
    }
    if (o.src == o.dst) f.fail(path, "src and dst are both rank " + std::to_string(o.src) + ": a pair needs two ranks");
    for (const auto& seen : l.pairs)
      if (seen.src == o.src && seen.dst == o.dst)
        f.fail(path, "the pair " + std::to_string(o.src) + " -> " + std::to_string(o.dst) + " is listed twice");
    // Its missing fields come from the link it replaces.
    o.link = link_value(f, pairs[k], path, l.link(o.src, o.dst), kPairKeys);
    l.pairs.push_back(o);
  }
}

ordered_json link_json(const Link& l) {
  ordered_json j;
  j["latency_ms"] = l.latency_ms;
  j["bandwidth_GBps"] = l.bandwidth_GBps ? ordered_json(*l.bandwidth_GBps) : ordered_json(nullptr);
  return j;
}

}  // namespace

Links read_links(const JsonFields& f, const json& j) {
  Links l;
  f.object(j, "link", kLinkKeys);
  const bool flat = j.contains("latency_ms") || j.contains("bandwidth_GBps");
  const bool split = j.contains("intra_node") || j.contains("inter_node");
  if (flat && split)
    f.fail("link", "give either latency_ms and bandwidth_GBps (every link) or intra_node and inter_node, not both");
  if (flat) {
    l.intra_node = l.inter_node = link_value(f, j, "link", Link{}, kLinkKeys);
  } else if (split) {
    for (const char* key : {"intra_node", "inter_node"})
      if (!j.contains(key))
        f.fail(std::string("link.") + key, std::string("missing key '") + key +
                                               "': with a split link give both intra_node and inter_node");
    l.intra_node = link_value(f, j["intra_node"], "link.intra_node", Link{}, kLinkValueKeys);
    l.inter_node = link_value(f, j["inter_node"], "link.inter_node", Link{}, kLinkValueKeys);
  }
  if (j.contains("ranks_per_node"))
    l.ranks_per_node = whole_rank(f, j["ranks_per_node"], "link.ranks_per_node", 1, "a whole number of ranks >= 1");
  if (j.contains("pairs")) read_pairs(f, j["pairs"], l);
  return l;
}

CollectiveAlgorithm read_collectives(const JsonFields& f, const json& j) {
  f.object(j, "collectives", kCollectiveKeys);
  if (!j.contains("algorithm")) return CollectiveAlgorithm::Ring;
  const json& a = j["algorithm"];
  if (a == "ring") return CollectiveAlgorithm::Ring;
  if (a == "tree") return CollectiveAlgorithm::Tree;
  f.fail("collectives.algorithm", "expected \"ring\" or \"tree\", got " + (a.is_string() ? a.dump() : JsonFields::type_of(a)));
}

Protocol read_protocol(const JsonFields& f, const json& j) {
  Protocol p;
  f.object(j, "protocol", kProtocolKeys);
  if (j.contains("eager_threshold_bytes"))
    p.eager_threshold_bytes = f.quantity(j["eager_threshold_bytes"], "protocol.eager_threshold_bytes", Quantity::Bytes);
  if (j.contains("compute_blocks_host")) p.compute_blocks_host = f.boolean(j["compute_blocks_host"], "protocol.compute_blocks_host");
  if (j.contains("background_progress")) p.background_progress = f.boolean(j["background_progress"], "protocol.background_progress");
  if (j.contains("deferred_start_ms"))
    p.deferred_start_ms = f.quantity(j["deferred_start_ms"], "protocol.deferred_start_ms", Quantity::Time);
  if (j.contains("send_handoff_ms") && !j["send_handoff_ms"].is_null())
    p.send_handoff_ms = f.quantity(j["send_handoff_ms"], "protocol.send_handoff_ms", Quantity::Time);
  return p;
}

ordered_json links_json(const Links& l, const CommentLines& intra_comment, const CommentLines& inter_comment) {
  ordered_json link, intra, inter;
  if (!intra_comment.empty()) intra["comment"] = intra_comment;
  if (!inter_comment.empty()) inter["comment"] = inter_comment;
  intra.update(link_json(l.intra_node));
  inter.update(link_json(l.inter_node));
  link["intra_node"] = std::move(intra);
  link["inter_node"] = std::move(inter);
  link["ranks_per_node"] = l.ranks_per_node;
  link["pairs"] = ordered_json::array();
  for (const auto& p : l.pairs) {
    ordered_json pj;
    pj["src"] = p.src;
    pj["dst"] = p.dst;
    pj.update(link_json(p.link));
    link["pairs"].push_back(std::move(pj));
  }
  return link;
}

ordered_json collectives_json(CollectiveAlgorithm a) {
  ordered_json j;
  j["algorithm"] = a == CollectiveAlgorithm::Ring ? "ring" : "tree";
  return j;
}

ordered_json protocol_json(const Protocol& p) {
  ordered_json j;
  j["eager_threshold_bytes"] = json_number(p.eager_threshold_bytes);
  j["compute_blocks_host"] = p.compute_blocks_host;
  j["background_progress"] = p.background_progress;
  j["send_handoff_ms"] = p.send_handoff_ms ? json_number(*p.send_handoff_ms) : ordered_json(nullptr);
  j["deferred_start_ms"] = json_number(p.deferred_start_ms);
  return j;
}

}  // namespace ppsched
