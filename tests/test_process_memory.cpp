// The CLI's memory policy (tools/process_memory.hpp): big arrays come from a heap range the
// kernel may back with 2 MiB pages, and freed memory stays in the process.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/weakened.hpp"
#include "tools/process_memory.hpp"

namespace {

// The VmFlags of the mapping that holds `p`, from /proc/self/smaps ("" if none). Unused where
// the test below is compiled out (a sanitized build has its own allocator).
[[maybe_unused]] std::string vm_flags_of(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8);
  }
  return "";
}

}  // namespace

TEST_CASE("the batch memory policy serves big arrays from a huge-page heap range", "[process]") {
  const size_t marked = ppsched::use_batch_memory_policy();
#if defined(__linux__) && defined(__GLIBC__) && !defined(PPSCHED_OWN_ALLOCATOR)
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    CHECK(marked == 0);  // a kernel without transparent huge pages refuses the advice
    PPSCHED_WEAKENED("this kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage/enabled): "
                     "the huge-page range and the reuse of freed memory are not checked");
    return;
  }
  REQUIRE(marked >= (size_t{64} << 20));
  // A 64 MiB array: with glibc's defaults a fresh mmap of its own; here from the heap, in the
  // range marked for transparent huge pages ("hg"; its first bytes may lie below the range's
  // first 2 MiB boundary).
  std::vector<char> big(size_t{64} << 20, 1);
  const char* middle = big.data() + big.size() / 2;
  INFO("VmFlags:" << vm_flags_of(middle));
  CHECK(vm_flags_of(middle).find(" hg") != std::string::npos);
  // Freed memory stays in the process: the next array of that size reuses it.
  const char* first = big.data();
  big = std::vector<char>();
  std::vector<char> again(size_t{64} << 20, 2);
  CHECK(again.data() == first);
#else
  CHECK(marked == 0);  // sanitizers keep their own allocator; other systems keep malloc's
#endif
}
