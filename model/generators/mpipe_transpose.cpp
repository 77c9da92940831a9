#include "model/generators/generator.hpp"
namespace ppsched {
Schedule generate_mpipe_transpose(const GenerateOptions&) { refuse("mpipe_transpose", "PLACEHOLDER: not written yet"); }
}  // namespace ppsched
