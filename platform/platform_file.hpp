// The platform's sections of a file, read and written in one place for a cost file
// ("ppsched-costs") and a model file ("ppsched-model"), which carry the same sections:
//
//   "link": {"latency_ms": 0.005, "bandwidth_GBps": 450}           (optional; missing = free)
//     or {"intra_node": LINK, "inter_node": LINK, "ranks_per_node": 8,
//         "pairs": [{"src": 0, "dst": 9, "latency_ms": .., "bandwidth_GBps": ..}]}
//   "collectives": {"algorithm": "ring" | "tree"}
//   "protocol": {"eager_threshold_bytes", "compute_blocks_host", "background_progress",
//                "send_handoff_ms", "deferred_start_ms"}
//
// (sim/cost_file.cpp documents each field.) Errors are located by the reader's file and the
// section's JSON path.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/formats/json_fields.hpp"
#include "platform/interconnect.hpp"
#include "platform/protocol.hpp"

namespace ppsched {

// A "link" section: what it leaves out stays as in a default Links.
Links read_links(const JsonFields& f, const nlohmann::json& j);
// A "collectives" section (ring when it names no algorithm).
CollectiveAlgorithm read_collectives(const JsonFields& f, const nlohmann::json& j);
// A "protocol" section: what it leaves out stays as in a default Protocol.
Protocol read_protocol(const JsonFields& f, const nlohmann::json& j);

// The sections as a file writes them, complete (a reader reads them back equal). The comments
// (a template's) go first in the link's two objects when given.
using CommentLines = std::vector<std::string>;
nlohmann::ordered_json links_json(const Links& l, const CommentLines& intra_comment = {},
                                  const CommentLines& inter_comment = {});
nlohmann::ordered_json collectives_json(CollectiveAlgorithm a);
nlohmann::ordered_json protocol_json(const Protocol& p);

}  // namespace ppsched
