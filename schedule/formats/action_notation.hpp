// PyTorch pipelining's compact action notation: "0F1" (stage 0, FWD, micro 1), "1SEND_F3",
// "2RECV_B0", "0I2", "0W2", "0B2", "(0F1;1B0)OVERLAP_F_B", "0UNSHARD", "0REDUCE_GRAD".
// Canonical op names are accepted as tokens too ("3FWD_SEND1", "MPIPE_FWD_SEND5").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "schedule/schedule.hpp"

namespace ppsched {

// Returns the step, or nullopt with *error saying what was expected.
std::optional<Step> parse_action(std::string_view text, std::string* error);
std::string format_action(const Step& step);

}  // namespace ppsched
