// libFuzzer target: every schedule the JSON reader accepts is structurally valid, and the
// checkers promise to handle any such schedule (they report violations; they must not crash,
// hang or throw). So: read, then verify() under the options chosen by a header byte.
//
// An input that starts with a byte 0x00..0x07 (no JSON text does) chooses the options:
//   bit 0: eager sends (else rendezvous), bit 1: overlap_p2p, bit 2: mpipe_batched_recv
// and the rest is the schedule. dyn_shape and a memory budget follow from bit 0 and 1 too,
// so that every option is exercised.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string_view>
#include <typeinfo>

#include "checkers/checks.hpp"
#include "schedule/formats/schedule_json.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

// Structurally valid is not the same as small: a file may declare 10^9 micro-batches with
// no steps. The checkers scale with ranks x stages x micro-batches, so the target skips
// schedules beyond what a fuzz iteration should cost.
bool small_enough(const ppsched::Schedule& s) {
  return s.ranks <= 64 && s.stages <= 256 && s.micro_batches <= 256 && s.step_count() <= 20000;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ppsched;
  size_t skip = 0;
  CheckOptions options;
  if (size > 0 && data[0] < 0x08) {
    const int flags = data[0];
    skip = 1;
    options.comm = (flags & 1) ? CommMode::Eager : CommMode::Rendezvous;
    options.overlap_p2p = (flags & 2) != 0;
    options.mpipe_batched_recv = (flags & 4) != 0;
    options.dyn_shape = (flags & 3) == 3;
    if (flags & 2) options.memory_budget = int64_t{1} << 32;
  }
  const std::string_view text(reinterpret_cast<const char*>(data) + skip, size - skip);
  Schedule s;
  if (!fuzz::accepts([&] { s = read_schedule_json(text, "fuzz.json"); })) return 0;
  if (!small_enough(s)) return 0;
  try {
    verify(s, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ppsched fuzz: verify threw %s: %s\n", typeid(e).name(), e.what());
    fuzz::bug("verify() threw on a structurally valid schedule");
  }
  return 0;
}
