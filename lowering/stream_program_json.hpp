// The `ppsched-streams` file: a multi-stream program (lowering/stream_program.hpp) written by
// hand from a runtime's stream and event logic, or by `ppsched check --emit-streams`.
//
//   {"format": "ppsched-streams", "version": 1, "event_binding": "latest",
//    "communicators": {"EP": [0, 1], "DP": [0, 2]},
//    "ranks": [
//      {"streams": ["compute", "comm"],
//       "ops": [{"name": "attn_fwd L0", "stream": "compute", "record": ["E"]},
//               {"name": "dispatch_fwd L0", "stream": "comm", "collective": "EP", "wait": ["E"]},
//               {"name": "act 3", "stream": "compute", "send": 1},
//               {"name": "grad 3", "stream": "compute", "recv": 1}]}]}
//
// A rank's ops are listed in its host's issue order; events are named per rank. An op is compute
// unless it names a "collective" (a communicator), a "send" or a "recv" (the peer rank).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "lowering/stream_program.hpp"

namespace ppsched {

inline constexpr std::string_view kStreamProgramFormat = "ppsched-streams";

// Whether a parsed JSON document is a stream program (its "format").
bool is_stream_program(const nlohmann::json& j);

// Reads one; throws InputError naming the file and the JSON path of what is wrong.
StreamProgram read_stream_program(const nlohmann::json& j, const std::string& file);

nlohmann::json stream_program_json(const StreamProgram& p);

}  // namespace ppsched
