// A standalone SVG timeline of a simulation: one row per rank, slices coloured by step kind,
// micro-batch labels, P2P arrows when they stay readable, the memory curve under each row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "schedule/schedule.hpp"
#include "results/run_record.hpp"

namespace ppsched {

struct SvgOptions {
  int width = 1600;       // pixels of the time axis
  int max_arrows = 400;   // more flows than this: arrows are left out (unreadable)
  bool memory = true;     // draw the memory curve under each rank's row
  int max_tooltips = 5000;  // slices up to this count get a <title> tooltip (file size)
  // The usable capacity the run was held to (bytes per rank): a line on every rank's memory strip.
  std::optional<int64_t> memory_budget;
};

std::string svg_timeline(const Schedule& s, const RunRecord& r, const SvgOptions& options = {});

}  // namespace ppsched
