// The one Catch2 main; compiled once into a static library (it is slow to compile).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
