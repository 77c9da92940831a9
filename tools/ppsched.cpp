// The ppsched command line. Every command has --help; errors in the input are reported
// with their location and exit code 2; found problems (violations) exit 1.
#include <iostream>  // first: it defines __GLIBC__ on glibc systems
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "model/errors.hpp"
#include "tools/cli/command.hpp"

int main(int argc, char** argv) {
  using namespace ppsched;
#if defined(__GLIBC__)
  // A million-step schedule is built from arrays of tens of MB that live briefly (the
  // compute-only order, the insertion's units, the lowering). Served from the heap instead of
  // fresh mmaps, freed arrays are reused rather than returned and page-faulted in again;
  // measured: a third less system time for `simulate --generate` at 782k steps.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
#endif
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
    try {
      return act();
    } catch (const InputError& e) {
      std::cerr << "error: " << e.what() << "\n";
      return cli::kBadInput;
    }
  }
  return cli::kBadInput;
}
