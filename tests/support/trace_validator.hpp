// A strict reader of Chrome Trace Event Format files, for the tests: it checks what a viewer
// (Perfetto's JSON importer, chrome://tracing) relies on, counting each kind of problem, so a
// test can require zero of each and a report can quote the counts before and after a change.
//
// The rules it applies (Trace Event Format document; Perfetto's flow tracker):
//  - every event has ph, name, cat and pid; tid where the event lives on a thread (all phases
//    but "C"); X has ts and dur, s/t/f have id and ts, C has ts and an args object of numbers,
//    i has ts;
//  - ts and dur are exact: a decimal of whole nanoseconds (at most three decimals of a
//    microsecond, no exponent), so the comparisons below are made on integers, as a viewer
//    that reads the decimal exactly would make them;
//  - per (pid, tid) the X slices nest: two slices either are disjoint (touching ends are fine)
//    or one holds the other;
//  - flows: per (id, cat, name) exactly one "s" and one "f", the "f" with "bp":"e"; each end
//    lies strictly inside a slice of its own thread, with no slice of that thread starting or
//    ending at that instant (so the innermost enclosing slice is unambiguous); the start's ts
//    is not after the end's (Perfetto drops an end it sees before its start);
//  - metadata: a process_name for every pid with slices, a thread_name for every thread with
//    slices.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ppsched::testing {

struct TraceCheck {
  bool parsed = false;
  size_t events = 0, slices = 0, flows = 0, counters = 0, metadata = 0;
  // Problems, by kind.
  size_t missing_fields = 0;    // an event lacks a field its phase needs (cat counted apart)
  size_t missing_cat = 0;       // an event without "cat"
  size_t inexact_times = 0;     // a ts or dur that is not a decimal of whole nanoseconds
  size_t slice_overlaps = 0;    // two slices of one thread that partly overlap
  size_t flows_unpaired = 0;    // a flow id without exactly one s and one f (with bp:e)
  size_t flows_unbound = 0;     // a flow end not strictly inside one slice of its thread
  size_t flows_backwards = 0;   // a flow whose end's ts precedes its start's
  size_t missing_metadata = 0;  // a pid or thread with slices but no process_name/thread_name
  std::vector<std::string> problems;  // the first few, described

  size_t problem_count() const {
    return missing_fields + missing_cat + inexact_times + slice_overlaps + flows_unpaired + flows_unbound +
           flows_backwards + missing_metadata + (parsed ? 0 : 1);
  }
  // One line: the counts of every kind.
  std::string summary() const;
};

TraceCheck validate_trace(const std::string& json_text);

}  // namespace ppsched::testing
