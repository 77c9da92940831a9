// The ppsched command line (filled in below by each command).
#include <CLI/CLI.hpp>
#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"ppsched: verify, simulate and run pipeline-parallel training schedules"};
  CLI11_PARSE(app, argc, argv);
  return 0;
}
