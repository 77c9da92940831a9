// The limits of ppsched-exec's flags, checked before anything talks to anyone. Numbers are
// checked on the text typed: CLI11 turns "-1" into 18446744073709551615 for an unsigned seed
// and takes "nan", "inf" and 1e300 as seconds, which would become a wrapped or undefined
// millisecond count further on. Each check returns "" when the value is acceptable, else a
// sentence stating the limit (CLI11 prints it after the flag's name; exit 2).
#pragma once

#include <string>
#include <vector>

#include "exec/config.hpp"
#include "schedule/schedule.hpp"

namespace ppsched::exec {

// Every blocking operation's limit: above a day a hang is not worth waiting for, and below a
// millisecond the timeout would round to 0 ("no timeout" for c10d).
inline constexpr double kMinTimeoutS = 0.001, kMaxTimeoutS = 86400;
// The watchdog beats every 100 ms: a rank must miss five beats before it is declared dead.
inline constexpr double kMinHeartbeatS = 0.5;

std::string check_seconds(const std::string& text, double min_s, double max_s);  // --timeout, --heartbeat-timeout
std::string check_learning_rate(const std::string& text);                        // --lr: finite, >= 0
std::string check_seed(const std::string& text);                                 // --seed: 0 .. 2^64-1
std::string check_count(const std::string& text, long long min_value, long long max_value);  // --tower-layers

// --fail-at against the schedule and the run: the rank exists, the step is one of its
// program's steps (not an idle slot), the iteration is run. Empty when it can fire.
std::vector<std::string> check_fault(const FaultInjection& f, const Schedule& s, int iterations,
                                     const DeviceMesh& mesh = {});

}  // namespace ppsched::exec
