#include "model/generators/generator.hpp"
namespace ppsched {
Schedule generate_interleaved_1f1b(const GenerateOptions&) { refuse("interleaved_1f1b", "PLACEHOLDER: not written yet"); }
}  // namespace ppsched
