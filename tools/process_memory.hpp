// The memory policy of the ppsched processes (the CLI and the benchmarks), not of the library.
//
// A simulation writes its big arrays (programs, the lowered communication model, messages,
// slices) once and reads them in bulk. With glibc's defaults every array over 32 MiB is a
// fresh mmap, given back when freed, and every page of it is faulted in 4 KiB at a time: a
// 782k-step `ppsched simulate` took ~25,000 page faults, a fifth of its time in the kernel.
// So, at start-up:
//  - malloc takes everything from the heap (no per-allocation mmap) and keeps what is freed,
//    so one phase reuses the pages of the phase before it;
//  - the heap is grown once by a large virtual reserve (no memory is used until touched) and
//    that range is marked for transparent huge pages, which the kernel then backs with 2 MiB
//    pages in THP "madvise" mode (Debian's default): a few hundred faults instead.
// Only a hint: at the first call that fails it stops (malloc works either way). Skipped
// under the sanitizers, which have their own allocators. PPSCHED_MALLOC=glibc|heap|huge picks
// one of the policies below (PPSCHED_DEFAULT_MALLOC=1: glibc), to compare them;
// bench/cold_paired.py measures them the way a user meets them (right after another process).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
#define PPSCHED_OWN_ALLOCATOR 1  // clang does not define __SANITIZE_ADDRESS__
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PPSCHED_OWN_ALLOCATOR 1
#endif

#if defined(__linux__) && defined(__GLIBC__) && !defined(PPSCHED_OWN_ALLOCATOR)
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#endif

namespace ppsched {

// How the process takes memory (PPSCHED_MALLOC=glibc|heap|huge picks one, to measure;
// PPSCHED_DEFAULT_MALLOC=1 is glibc):
//  - glibc: malloc's defaults;
//  - heap: everything from the heap, freed memory kept (no per-array mmap, no trim);
//  - huge: heap, and its reserve marked for transparent huge pages.
enum class MemoryPolicy { Glibc, Heap, Huge };
inline constexpr MemoryPolicy kDefaultMemoryPolicy = MemoryPolicy::Huge;

inline const char* to_string(MemoryPolicy p) {
  return p == MemoryPolicy::Glibc ? "glibc" : p == MemoryPolicy::Heap ? "heap" : "huge";
}

// The policy this process uses: the environment's, else the default (see the header).
inline MemoryPolicy chosen_memory_policy() {
  if (const char* m = std::getenv("PPSCHED_MALLOC")) {
    const std::string v = m;
    if (v == "glibc") return MemoryPolicy::Glibc;
    if (v == "heap") return MemoryPolicy::Heap;
    if (v == "huge") return MemoryPolicy::Huge;
  }
  if (std::getenv("PPSCHED_DEFAULT_MALLOC")) return MemoryPolicy::Glibc;
  return kDefaultMemoryPolicy;
}

// Applies chosen_memory_policy(); returns the bytes of heap marked for huge pages (0: none).
inline size_t use_batch_memory_policy() {
#if defined(__linux__) && defined(__GLIBC__) && !defined(PPSCHED_OWN_ALLOCATOR)
  const MemoryPolicy policy = chosen_memory_policy();
  if (policy == MemoryPolicy::Glibc) return 0;
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  // Half the machine's memory, at most 2 GiB (M_TOP_PAD is an int): virtual until touched.
  const size_t reserve = std::min<size_t>((size_t{2} << 30) - (size_t{2} << 20), static_cast<size_t>(pages) * static_cast<size_t>(page) / 2);
  if (mallopt(M_MMAP_MAX, 0) != 1 || mallopt(M_TRIM_THRESHOLD, -1) != 1) return 0;
  if (policy == MemoryPolicy::Heap) {
    mallopt(M_TOP_PAD, 64 << 20);  // growth in 64 MiB steps
    return 0;
  }
  // The start-up heap has far less than 2 MiB free, so this block grows it by itself plus
  // the top pad: the reserve. (Not malloc(reserve): MALLOC_PERTURB_ would fill all of it.)
  if (mallopt(M_TOP_PAD, static_cast<int>(reserve)) != 1) return 0;
  const uintptr_t before = reinterpret_cast<uintptr_t>(sbrk(0));
  void* volatile block = std::malloc(kHuge);  // volatile: the pair must not be elided
  const uintptr_t after = reinterpret_cast<uintptr_t>(sbrk(0));
  std::free(block);
  mallopt(M_TOP_PAD, 64 << 20);  // later growth in 64 MiB steps
  if (!block || after <= before) return 0;
  const uintptr_t b = (before + kHuge - 1) & ~(kHuge - 1), e = after & ~(kHuge - 1);
  if (e <= b || madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE) != 0) return 0;
  return e - b;
#else
  return 0;
#endif
}

}  // namespace ppsched
