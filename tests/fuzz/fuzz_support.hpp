// What every fuzz target asserts: a reader turns any bytes into a value or an InputError.
// Any other exception is a bug; it is reported with its type and message and then aborts,
// so that libFuzzer records the input as a crash (as it does for sanitizer reports).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

#include "schedule/errors.hpp"

namespace ppsched::fuzz {

[[noreturn]] inline void bug(const char* what) {
  std::fprintf(stderr, "ppsched fuzz: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// Runs `read`; returns false when it threw an InputError (the input was rejected), whose
// message goes to `why` when given.
template <class Fn>
bool accepts(Fn&& read, std::string* why = nullptr) {
  try {
    read();
    return true;
  } catch (const InputError& e) {
    if (why) *why = e.what();
    return false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ppsched fuzz: unexpected %s: %s\n", typeid(e).name(), e.what());
    bug("a reader threw something other than ppsched::InputError");
  } catch (...) {
    bug("a reader threw a non-std exception");
  }
}

}  // namespace ppsched::fuzz
