// Each `ppsched` command registers a CLI11 subcommand and the action that runs it.
// Commands return an exit code: 0 ok, 1 problems found (violations), 2 bad input or usage.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <iosfwd>
#include <string>

#include "model/generators/generator.hpp"
#include "checkers/options.hpp"
#include "model/schedule.hpp"
#include <nlohmann/json.hpp>

namespace ppsched::cli {

inline constexpr int kOk = 0;
inline constexpr int kFound = 1;
inline constexpr int kBadInput = 2;

using Action = std::function<int()>;

Action add_generate(CLI::App& app);
Action add_show(CLI::App& app);
Action add_convert(CLI::App& app);
Action add_check(CLI::App& app);
Action add_costs(CLI::App& app);
Action add_simulate(CLI::App& app);
Action add_compare(CLI::App& app);
Action add_fuzz(CLI::App& app);
Action add_calibrate(CLI::App& app);
Action add_tune(CLI::App& app);

// `check --suggest`: searches and prints (or adds to `json`) the smallest move edit that makes
// `s` verify, writing the fixed schedule to fix_out when given (tools/cli/check_suggest.cpp).
void suggest_fix(const std::string& name, const Schedule& s, const CheckOptions& o, const std::string& fix_out,
                 nlohmann::json* json);

// Generator options shared by `generate` and `check --generate`.
struct GeneratorFlags {
  std::string family;
  GenerateOptions options;
  std::string overflow = "full";
  std::string tower = "trainable";
  bool batch = false;  // coalesce P2P runs into BATCH_SEND_RECV
};
void add_generator_flags(CLI::App& cmd, GeneratorFlags& flags, bool family_required);
// Builds the schedule the flags describe (throws InputError on bad parameters).
Schedule build_generated(GeneratorFlags& flags);

// Writes `text` to `path`, or to stdout when path is empty or "-". Throws InputError when
// the file cannot be written.
void write_output(const std::string& path, const std::string& text);

}  // namespace ppsched::cli
