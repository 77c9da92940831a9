// The ppsched command line. Every command has --help; errors in the input are reported
// with their location and exit code 2; found problems (violations) exit 1.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule/errors.hpp"
#include "tools/cli/command.hpp"
#include "tools/process_memory.hpp"

namespace {

// Levenshtein distance (insertions, deletions, substitutions), for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The name nearest to `word` when it is near enough to be a slip (at most a third of its
// letters, at least 2), else "".
std::string nearest(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& n : names) {
    const size_t d = edit_distance(word, n);
    if (d < best_d) {
      best_d = d;
      best = n;
    }
  }
  return best;
}

// A command's one line: its description, or for a long one the words before its first
// parenthesis or colon (whole words, never cut mid-word).
std::string one_line(const std::string& description) {
  if (description.size() <= 80) return description;
  const size_t cut = std::min(description.find(" ("), description.find(':'));
  return cut == std::string::npos ? description : description.substr(0, cut);
}

// The command map: one line per command.
std::string command_map(CLI::App& app) {
  std::string out = "usage: ppsched COMMAND [ARGS...]   (ppsched COMMAND --help for its flags)\n\ncommands:\n";
  size_t width = 0;
  for (const CLI::App* sub : app.get_subcommands({})) width = std::max(width, sub->get_name().size());
  for (const CLI::App* sub : app.get_subcommands({})) {
    std::string name = sub->get_name();
    name.resize(width, ' ');
    out += "  " + name + "  " + one_line(sub->get_description()) + "\n";
  }
  return out;
}

// The long flags of a command (and the program's own), without their dashes.
std::vector<std::string> long_flags(const CLI::App* cmd) {
  std::vector<std::string> out;
  for (const CLI::App* a : {cmd, cmd->get_parent()}) {
    if (!a) continue;
    for (const CLI::Option* o : a->get_options({}))
      for (const auto& n : o->get_lnames()) out.push_back("--" + n);
  }
  return out;
}

// The parser's error as ppsched's own: "error: ...", with the nearest command or flag when a
// word looks like a slip of one.
std::string parse_error_text(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  std::string what = e.what();
  while (!what.empty() && what.back() == '\n') what.pop_back();
  CLI::App* cmd = nullptr;
  if (argc > 1) {
    try {
      cmd = app.get_subcommand(argv[1]);
    } catch (const CLI::OptionNotFound&) {
      cmd = nullptr;
    }
  }
  std::string out;
  if (!cmd && argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    const std::string near = nearest(argv[1], names);
    out = "error: unknown command '" + ppsched::clip(argv[1], 60) + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?") +
          "\n" + command_map(app);
    return out;
  }
  out = "error: " + what + "\n";
  // A word that looks like a flag but is none of this command's (or the program's): the
  // nearest one it may be a slip of.
  const CLI::App* where = cmd ? cmd : &app;
  const auto flags = long_flags(where);
  for (int k = cmd ? 2 : 1; k < argc; ++k) {
    std::string word = argv[k];
    if (word.rfind("--", 0) != 0 || word == "--") continue;
    word = word.substr(0, word.find('='));
    if (std::find(flags.begin(), flags.end(), word) != flags.end()) continue;
    const std::string near = nearest(word, flags);
    out += "error: " + (cmd ? cmd->get_name() : std::string("ppsched")) + " has no flag " + ppsched::clip(word, 60) +
           (near.empty() ? "" : "; did you mean " + near + "?") + "\n";
  }
  if (cmd) out += "(ppsched " + cmd->get_name() + " --help lists its flags)\n";
  else out += command_map(app);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ppsched;
  use_batch_memory_policy();  // freed memory kept, maybe huge pages (see the header)
  CLI::App app{"ppsched: verify, simulate and run pipeline-parallel training schedules"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ppsched 0.1.0 (memory policy ") + to_string(chosen_memory_policy()) + ")");
  std::vector<std::pair<CLI::App*, cli::Action>> commands;
  auto reg = [&](cli::Action (*add)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    cli::Action act = add(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(act));
  };
  reg(cli::add_generate);
  reg(cli::add_show);
  reg(cli::add_convert);
  reg(cli::add_check);
  reg(cli::add_simulate);
  reg(cli::add_compare);
  reg(cli::add_costs);
  reg(cli::add_calibrate);
  reg(cli::add_fuzz);
  reg(cli::add_tune);
  reg(cli::add_model);
  reg(cli::add_plan);
  // Bare `ppsched`: the command map, not a parser error.
  if (argc <= 1) {
    std::cout << command_map(app);
    return cli::kBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << parse_error_text(app, e, argc, argv);
    return cli::kBadInput;
  }
  for (auto& [sub, act] : commands) {
    if (!sub->parsed()) continue;
    // What the user ran, for errors that have no better location than the command.
    std::string where = "ppsched " + sub->get_name();
    for (int k = 2; k < argc && where.size() < 300; ++k) where += std::string(" ") + argv[k];
    where = clip(where, 300);
    int code = cli::kBadInput;
    try {
      code = act();
    } catch (const InputError& e) {
      std::cerr << "error: " << e.what() << "\n";
      code = cli::kBadInput;
    } catch (const std::bad_alloc&) {
      std::cerr << "error: " << where
                << ": out of memory: the input is too large for this machine (see \"Limits\" in the README)\n";
      code = cli::kBadInput;
    } catch (const std::length_error&) {
      std::cerr << "error: " << where << ": a table would be too large (see \"Limits\" in the README)\n";
      code = cli::kBadInput;
    } catch (const std::exception& e) {
      // An exception no reader turned into a located refusal: a bug of ppsched, said so (the
      // hostile corpus fails on it). Its text without a library's tag ("[json.exception...] ").
      std::string_view what = e.what();
      if (!what.empty() && what.front() == '[' && what.find("] ") != std::string_view::npos)
        what.remove_prefix(what.find("] ") + 2);
      std::cerr << "error: " << where << ": internal error: " << clip(what) << "\n";
      code = cli::kBadInput;
    }
    // A result that did not reach its reader is a failure (a full disk, a closed pipe).
    std::cout.flush();
    if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::cerr << "error: " << where << ": cannot write the output to stdout: " << std::strerror(errno) << "\n";
      return cli::kBadInput;
    }
    return code;
  }
  return cli::kBadInput;
}
