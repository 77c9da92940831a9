// Runs fn, which must throw an InputError, and returns it (so that a test can check where the
// error points and what it says). Fails the test when nothing is thrown.
#pragma once

#include <catch2/catch.hpp>
#include <stdexcept>

#include "schedule/errors.hpp"

namespace ppsched::testing {

template <class Fn>
InputError expect_error(Fn&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e;
  }
  FAIL("expected an InputError");
  throw std::logic_error("unreachable");
}

}  // namespace ppsched::testing
