#include "model/generators/generator.hpp"
namespace ppsched {
Schedule generate_zb_h1(const GenerateOptions&) { refuse("zb-h1", "PLACEHOLDER: not written yet"); }
Schedule generate_zbv(const GenerateOptions&) { refuse("zbv", "PLACEHOLDER: not written yet"); }
}  // namespace ppsched
