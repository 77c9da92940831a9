// PLACEHOLDER: tests for this area are being written.
#include <catch2/catch.hpp>
