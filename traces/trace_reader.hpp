// Reading a Chrome trace back into a RunRecord: the inverse of chrome_trace_json
// (traces/chrome_trace.hpp) for what a record holds, so that `ppsched calibrate` fits from a
// record, not from text.
//
// The trace is read through its documented layout: X slices with args {micro, stage,
// step_index, [sub], bytes, meta, op}, thread_name metadata naming each thread's lane
// ("compute", "send #2", ...), v1 flow events ("s"/"f", cat "p2p") whose ends lie inside the
// send and the receive slice of one message, and otherData (the provenance). Only the lane
// names are taken from metadata, so the reader does not depend on the writer's thread
// numbering. Traces written before otherData said "source" and "transport" read their label
// ("measured (gloo)" is a measured Gloo run).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "schedule/step_types.hpp"
#include "results/run_record.hpp"

namespace ppsched {

// What a slice ran, as the trace names it (args.op, args.stage, args.micro), and where it is
// in the file (for a located error).
struct SliceStep {
  Op op = Op::FWD;
  int32_t stage = -1, micro = -1;
  int32_t event = -1;  // index in traceEvents
};

struct ReadTrace {
  RunRecord record;              // provenance from otherData; slices (rank = pid) in file order
  std::vector<SliceStep> steps;  // one per record.slices entry
  // Flow ends bound to each slice (a batch's group slice carries several).
  std::vector<int> flows_of_slice;
};

// Throws InputError (file, "traceEvents[i]" or the otherData field, what was expected) when
// `text` is not a readable trace: not JSON, no traceEvents, a slice without the args a record
// needs, an unknown op, a flow end that lies in no slice, a pid beyond the trace's ranks.
ReadTrace read_chrome_trace(std::string_view text, const std::string& file);

}  // namespace ppsched
