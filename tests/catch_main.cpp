// The one Catch2 main; compiled once into a static library (it is slow to compile).
//
// RapidCheck reads RC_PARAMS when its first property runs, so the default budget is set
// here, at run time, and only when RC_PARAMS is not set: `RC_PARAMS=max_success=5000 meson
// test` raises it without reconfiguring.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

int main(int argc, char* argv[]) {
  setenv("RC_PARAMS", "max_success=300", /*overwrite=*/0);
  return Catch::Session().run(argc, argv);
}
