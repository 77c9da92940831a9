// libFuzzer target: read_pytorch_csv on arbitrary bytes, with and without the caller's
// overrides (convert --placement / --micro).
//
// An input that starts with a byte 0x00..0x07 (which no CSV text starts with) carries the
// overrides in a small header, so that the seed CSVs are read as they are and the fuzzer
// reaches the override paths by inserting one byte:
//   flags             bit 0: micro_batches given, bit 1: placement given,
//                     bit 2: the placement is an explicit map (else "loop" or "v" by name)
//   [micro]           int8, when bit 0 (<= 0 too: the reader must refuse it)
//   [kind]            low bit: loop or v, when bit 1 and not bit 2
//   [n, rank * n]     n % 9 stages, each an int8 rank, when bits 1 and 2
// Header bytes that are missing read as 0. A schedule the reader accepts must also pass
// through the JSON writer and read back equal.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "schedule/formats/pytorch_csv.hpp"
#include "schedule/formats/schedule_json.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

struct Input {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  int8_t next() { return pos < size ? static_cast<int8_t>(data[pos++]) : 0; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ppsched;
  Input in{data, size};
  CsvReadOptions options;
  if (size > 0 && data[0] < 0x08) {
    const int flags = in.next();
    if (flags & 1) options.micro_batches = in.next();
    if ((flags & 2) && !(flags & 4)) {
      Placement named;  // a kind with an empty map: the reader fills it in (as convert does)
      named.kind = (in.next() & 1) ? PlacementKind::V : PlacementKind::Loop;
      options.placement = named;
    } else if (flags & 2) {
      std::vector<int32_t> map(static_cast<uint8_t>(in.next()) % 9);
      for (auto& rank : map) rank = in.next();
      options.placement = Placement::explicit_map(std::move(map));
    }
  }
  const std::string_view text(reinterpret_cast<const char*>(data) + in.pos, size - in.pos);
  Schedule s;
  if (!fuzz::accepts([&] { s = read_pytorch_csv(text, "fuzz.csv", options); })) return 0;
  const std::string written = write_schedule_json(s);
  Schedule back;
  if (!fuzz::accepts([&] { back = read_schedule_json(written, "rewritten.json"); }))
    fuzz::bug("a schedule read from CSV was written as JSON the reader rejects");
  if (!(back == s)) fuzz::bug("a schedule read from CSV changed in the JSON round trip");
  return 0;
}
