// The tests' data folder (PPSCHED_TEST_DATA, as meson sets it; tests/data from the source root
// otherwise) and its Hugging Face configs as workloads.
#pragma once

#include <cstdlib>
#include <string>

#include "workload/model_file.hpp"

namespace ppsched::test_data {

inline std::string data(const std::string& rel) {
  const char* dir = std::getenv("PPSCHED_TEST_DATA");
  return std::string(dir ? dir : "tests/data") + "/" + rel;
}
// tests/data/models/hf/NAME.json read as --model reads it.
inline Workload hf(const std::string& name) { return read_model_file(data("models/hf/" + name + ".json")); }

}  // namespace ppsched::test_data
