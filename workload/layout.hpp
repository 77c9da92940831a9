// Which layers each pipeline stage holds (stage order: the schedule's stage index, whatever
// rank a placement puts it on).
//
// Two spellings (`--layout`, a model file's "layout"):
//  - counts, "4,2,1,1": the number of body layers (decoder, MTP or listed layers) of each
//    stage; the embedding goes on the first stage, the final norm, head and loss on the last;
//  - Megatron-LM's --pipeline-model-parallel-layout, "Et*3|(tt|)*29,m|L": E the embedding,
//    t a decoder layer, m an MTP layer, L the loss (final norm, head and loss), | a stage
//    boundary, x*n and (...)*n repetition, commas cosmetic; stages may be empty. Read and
//    validated by Megatron's rules (PipelineParallelLayerLayout: parse_str_to_list,
//    validate_layer_layout), except that the stage count must equal the schedule's.
// Without one, torchtitan's even split (generate_llm_fqn_per_model_part with its default
// weights): the embedding and the norm + head each count as one layer, the body layers are
// spread evenly, the first stages taking the remainder.
// Every layer appears exactly once: a layout that loses or duplicates a layer, or does not
// have the schedule's stage count, is refused saying what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workload/workload.hpp"

namespace ppsched {

struct Layout {
  std::vector<std::vector<int32_t>> stages;  // per stage: indices into the network's layers, ascending
  std::string how;                           // where it came from, for reports
};

// `where`: how a message names the source ("--layout", "model.json (layout)").
Layout parse_layout(const std::string& text, const std::vector<Layer>& layers, int stages, const std::string& where);
Layout even_layout(const std::vector<Layer>& layers, int stages);
// The one choice of a network's layout over `stages` stages, for the planner, calibrate and the
// executor alike: `text` (a --layout, `where`) when given, else the model file's "layout", else
// the even split. `layers` are net.layers(). Refuses (InputError) a stage count far past the
// layers without a layout.
Layout workload_layout(const Workload& net, const std::vector<Layer>& layers, int stages, const std::string& text,
                      const std::string& where);
// Body-layer counts per stage, in stage order (what "8,9,8,7" says): the embedding on the first
// stage, the norm, head and loss on the last. Refused (InputError, `where`) when the counts do
// not give each of the `stages` stages its count or do not add up to the body layers.
Layout counts_layout(const std::vector<int64_t>& counts, const std::vector<Layer>& layers, int stages, const std::string& where);
// The body layers a layout text places (counts: their sum; Megatron's: its t and m), for a
// model whose size the layout gives (ppsched-exec --layout without --layers). Refuses text
// that parse_layout would refuse for its spelling, and a sum above `limit`.
int64_t layout_body_layers(const std::string& text, int64_t limit, const std::string& where);
// The layout a run had, from the layer names each stage held (a measured trace's
// otherData.layers, in stage order): every layer of `layers` once, in model order. Throws
// InputError (`where`) naming the first layer that differs.
Layout named_layout(const std::vector<std::vector<std::string>>& stage_layers, const std::vector<Layer>& layers,
                    const std::string& where);
// The layout's body-layer counts per stage ("8,9,8,7") and the same as Megatron's string
// ("Et*8|t*9|t*8|t*7L"), each accepted back by parse_layout.
std::vector<int64_t> body_counts(const Layout& layout, const std::vector<Layer>& layers);
std::string counts_text(const Layout& layout, const std::vector<Layer>& layers);
std::string counts_text(const std::vector<int64_t>& counts);
std::string megatron_text(const Layout& layout, const std::vector<Layer>& layers);

// The longest string a Megatron layout may unroll to (README "Limits").
inline constexpr size_t kMaxLayoutChars = size_t{1} << 22;

}  // namespace ppsched
