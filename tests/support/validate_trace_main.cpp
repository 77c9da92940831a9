// validate_trace FILE...: the strict trace validator of tests/support/trace_validator.hpp as a
// command, for the tests that write traces through the command-line tools (ppsched simulate
// --trace, ppsched-exec --trace). Prints one summary line per file (and the first problems);
// exit 0 when every file is clean, 1 when one has problems, 2 when one cannot be read.
#include <fstream>
#include <iostream>
#include <sstream>

#include "tests/support/trace_validator.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: validate_trace FILE...\n";
    return 2;
  }
  int rc = 0;
  for (int k = 1; k < argc; ++k) {
    std::ifstream in(argv[k], std::ios::binary);
    if (!in) {
      std::cerr << argv[k] << ": cannot read\n";
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    const auto c = ppsched::testing::validate_trace(text.str());
    std::cout << argv[k] << ": " << c.summary() << "\n";
    for (const auto& p : c.problems) std::cout << "  " << p << "\n";
    if (c.problem_count()) rc = 1;
  }
  return rc;
}
