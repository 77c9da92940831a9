// Text renderings of a schedule for terminals: the per-rank grid of `ppsched show` and the
// small excerpts the CLI prints around a violation.
#pragma once

#include <string>
#include <vector>

#include "model/schedule.hpp"

namespace ppsched {

struct GridOptions {
  int width = 120;          // columns (at least 20): rows wrap into blocks of aligned columns, the
                            // header and legend at item boundaries; only a single step label
                            // wider than a line can exceed it
  bool keep_idle = true;    // draw idle slots as "."
  int max_steps = -1;       // per rank; -1 = all
  bool legend = true;
};

// The whole schedule: a header line, then blocks of columns "r0 | F0s0 FS0s0 ...", then a
// legend of the short names that appear.
std::string render_grid(const Schedule& s, const GridOptions& options = {});

// Steps [index - context, index + context] of `rank`, the step at `index` marked with >..<.
std::string render_excerpt(const Schedule& s, int rank, int index, int context = 3);

// One line per rank: step counts by kind (compute, p2p, collectives, idle).
std::string render_summary(const Schedule& s);

}  // namespace ppsched
