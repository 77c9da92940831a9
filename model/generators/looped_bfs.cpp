#include "model/generators/generator.hpp"
namespace ppsched {
Schedule generate_looped_bfs(const GenerateOptions&) { refuse("looped_bfs", "PLACEHOLDER: not written yet"); }
}  // namespace ppsched
