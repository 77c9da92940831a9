// Text renderings of a schedule for terminals: the per-rank grid of `ppsched show` and the
// small excerpts the CLI prints around a violation.
#pragma once

#include <string>
#include <vector>

#include "schedule/schedule.hpp"
#include "results/run_record.hpp"

namespace ppsched {

struct GridOptions {
  int width = 120;          // columns (at least 20): rows wrap into blocks of aligned columns, the
                            // header and legend at item boundaries; only a single step label
                            // wider than a line can exceed it
  bool keep_idle = true;    // draw idle slots as "."
  int max_steps = -1;       // per rank; -1 = all
  bool legend = true;
  // Compute steps only (FWD, BWD, BWD_INPUT, BWD_WEIGHT, the MPipe transposes and OVERLAP
  // composites of them), in program order: communication, collectives, local steps and idle
  // slots are left out, and max_steps counts compute steps (`show --compute`).
  bool compute_only = false;
};

// The whole schedule: a header line, then blocks of columns "r0 | F0s0 FS0s0 ...", then a
// legend of the short names that appear.
std::string render_grid(const Schedule& s, const GridOptions& options = {});

// A step `show --compute` keeps: a compute step or an OVERLAP composite of compute steps.
bool shown_as_compute(const Step& step);

// A time-aligned view of a run (`show --timeline`, after PyTorch's schedule visualizer): one
// column per `unit_ms` of the run, a row per rank; a cell names the compute step running at the
// middle of its time unit, "" where none runs. Every compute step at least unit_ms long covers
// at least one middle, so with the shortest step as the unit none is hidden.
struct TimelineGrid {
  double unit_ms = 0;
  double makespan_ms = 0;
  bool completed = true;
  bool rank_stage_in_label = false;        // a rank holds several stages: cells say "F3s1", else "F3"
  std::vector<std::vector<std::string>> cells;  // [rank][column]
  int64_t hidden_steps = 0;                // compute steps that cover no column's middle (unit too coarse)
  int64_t compute_steps = 0;               // compute slices of the run
};

// The shortest compute step of the run (shown_as_compute; 0 when none ran). A local step on the
// compute stream (DATA_LOAD, a swap) is not one: it shows as "." and sets no unit.
double shortest_compute_ms(const Schedule& s, const RunRecord& r);
// How many columns a unit gives the run: ceil(makespan / unit), at least 1 when anything ran.
int64_t timeline_columns(const RunRecord& r, double unit_ms);
// The grid at `unit_ms` (> 0; the caller bounds the column count with timeline_columns).
TimelineGrid timeline_grid(const Schedule& s, const RunRecord& r, double unit_ms);

struct TimelineOptions {
  int width = 120;          // columns of text (at least 20); blocks of time columns wrap like render_grid's
  bool legend = true;
  std::string unit_note;    // why the unit is what it is ("the shortest compute step"), for the header
  std::string costs;        // the cost model's source, for the header
};
// "1f1b: 4 ranks, timeline of the simulated run ..." then blocks "r0 | F0 F1 . ..." and a legend.
std::string render_timeline(const Schedule& s, const TimelineGrid& g, const TimelineOptions& options = {});

// Steps [index - context, index + context] of `rank`, the step at `index` marked with >..<.
std::string render_excerpt(const Schedule& s, int rank, int index, int context = 3);

// One line per rank: step counts by kind (compute, p2p, collectives, idle).
std::string render_summary(const Schedule& s);

}  // namespace ppsched
