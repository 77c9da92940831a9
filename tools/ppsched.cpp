// The ppsched command line. Every command has --help; errors in the input are reported
// with their location and exit code 2; found problems (violations) exit 1.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <stdexcept>

#include "model/errors.hpp"
#include "tools/cli/command.hpp"
#include "tools/process_memory.hpp"

int main(int argc, char** argv) {
  using namespace ppsched;
  use_batch_memory_policy();  // heap with huge pages, freed memory kept (see the header)
  CLI::App app{"ppsched: verify, simulate and run pipeline-parallel training schedules"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ppsched 0.1.0"));
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
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
