#include "model/generators/generator.hpp"
namespace ppsched {
Schedule generate_dualpipev(const GenerateOptions&) { refuse("dualpipev", "PLACEHOLDER: not written yet"); }
}  // namespace ppsched
