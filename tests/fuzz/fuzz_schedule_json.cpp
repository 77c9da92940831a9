// libFuzzer target: read_schedule_json on arbitrary bytes. A schedule it accepts must also
// survive the canonical writer and read back equal (the round trip the CLI's convert relies on).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "schedule/formats/schedule_json.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ppsched;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Schedule s;
  if (!fuzz::accepts([&] { s = read_schedule_json(text, "fuzz.json"); })) return 0;
  const std::string written = write_schedule_json(s);
  Schedule back;
  if (!fuzz::accepts([&] { back = read_schedule_json(written, "rewritten.json"); }))
    fuzz::bug("the JSON writer produced a file the reader rejects");
  if (!(back == s)) fuzz::bug("the JSON round trip changed the schedule");
  return 0;
}
