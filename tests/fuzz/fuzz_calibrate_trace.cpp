// libFuzzer target: calibrate_trace on arbitrary bytes. A trace it accepts must give a cost
// model that the cost reader reads back (the fitted file is written by write_cost_model).
#include <cstddef>
#include <cstdint>
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
  const std::string written = write_cost_model(cal.costs);
  if (!fuzz::accepts([&] { read_cost_model(written, "fitted.json"); }))
    fuzz::bug("calibrate_trace fitted a model read_cost_model rejects");
  return 0;
}
