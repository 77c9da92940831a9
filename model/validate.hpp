// Structural validation shared by every reader and by generator output: fields each step
// type takes (from the step table), ranges of micro / stage / peer / group, composite
// shapes, program count, placement size. Throws the first InputError, located.
// Semantic problems (ordering, matching, caches) are the checkers' business, not this.
#pragma once

#include <string>

#include "model/schedule.hpp"

namespace ppsched {

void validate_structure(const Schedule& s, const std::string& file = "");

}  // namespace ppsched
