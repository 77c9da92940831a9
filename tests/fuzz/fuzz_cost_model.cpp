// libFuzzer target: read_cost_model on arbitrary bytes. A model it accepts must also be
// readable again after write_cost_model (the writer is documented to round-trip).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sim/cost_model.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ppsched;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CostModel model;
  if (!fuzz::accepts([&] { model = read_cost_model(text, "fuzz.json"); })) return 0;
  const std::string written = write_cost_model(model);
  if (!fuzz::accepts([&] { read_cost_model(written, "rewritten.json"); }))
    fuzz::bug("write_cost_model produced a file read_cost_model rejects");
  return 0;
}
