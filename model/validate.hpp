// Structural validation shared by every reader and by generator output: fields each step
// type takes (from the step table), ranges of micro / stage / peer / group, composite
// shapes, program count, placement size. Throws the first InputError, located.
// Semantic problems (ordering, matching, caches) are the checkers' business, not this.
#pragma once

#include <cstdint>
#include <string>

#include "model/schedule.hpp"

namespace ppsched {

// The most ranks, stages or micro-batches a schedule may declare. Far above any real
// pipeline, and low enough that a mistyped count in a file is reported instead of sizing
// gigabytes of per-stage tables. Readers check it before they allocate anything by a count.
inline constexpr int32_t kMaxCount = 1 << 20;

void validate_structure(const Schedule& s, const std::string& file = "");

}  // namespace ppsched
