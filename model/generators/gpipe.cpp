#include "model/generators/generator.hpp"
namespace ppsched {
Schedule generate_gpipe(const GenerateOptions&) { refuse("gpipe", "PLACEHOLDER: not written yet"); }
}  // namespace ppsched
