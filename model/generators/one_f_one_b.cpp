#include "model/generators/generator.hpp"
namespace ppsched {
Schedule generate_1f1b(const GenerateOptions&) { refuse("one_f_one_b", "PLACEHOLDER: not written yet"); }
}  // namespace ppsched
