// libFuzzer target: calibrate_trace on arbitrary bytes. A trace it accepts must give a cost
// model that the cost reader reads back unchanged (the fitted file is written by write_cost_model).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "sim/calibrate.hpp"
#include "sim/cost_model.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ppsched;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Calibration cal;
  if (!fuzz::accepts([&] { cal = calibrate_trace(text, "fuzz.trace.json"); })) return 0;
  // The fitted model is a cost file the reader takes, and reading it loses nothing: written
  // again, it is the same text.
  const std::string written = write_cost_model(cal.costs);
  CostModel back;
  std::string why;
  if (!fuzz::accepts([&] { back = read_cost_model(written, "fitted.json"); }, &why)) {
    std::fprintf(stderr, "read_cost_model: %s\n", why.c_str());
    fuzz::bug("calibrate_trace fitted a model read_cost_model rejects");
  }
  back.source = cal.costs.source;  // the reader names the file it read (x-source is a comment)
  if (write_cost_model(back) != written) fuzz::bug("the fitted model does not survive a write and a read");
  return 0;
}
