#include "network/network.hpp"

#include <algorithm>

namespace ppsched {

std::vector<Layer> transformer_layers(const Architecture& m, const Training& tr, int64_t seq_len);  // architecture.cpp

std::vector<Layer> Network::layers(int64_t seq_len) const {
  if (arch) return transformer_layers(*arch, training, seq_len);
  // Listed figures describe the whole layer; a tensor-parallel rank holds 1/t of each.
  std::vector<Layer> out = explicit_layers;
  const int64_t t = std::max(training.tp, 1);
  if (t == 1) return out;
  const double dt = static_cast<double>(t);
  for (Layer& l : out) {
    for (int64_t* b : {&l.params, &l.activation_bytes, &l.weight_grad_bytes, &l.workspace_bytes, &l.output_bytes,
                       &l.uses_embedding_params, &l.uses_head_params})
      *b = (*b + t - 1) / t;
    l.fwd_flops /= dt;
    l.bwd_input_flops /= dt;
    l.bwd_weight_flops /= dt;
  }
  return out;
}

size_t Network::layer_count() const {
  if (!arch) return explicit_layers.size();
  return static_cast<size_t>(arch->layers + arch->mtp_layers + 4);
}

int64_t Network::total_params() const {
  int64_t total = 0;
  if (arch) {
    Training whole = training;
    whole.tp = 1;
    for (const Layer& l : transformer_layers(*arch, whole, training.seq_lens.front())) total += l.params;
    return total;
  }
  for (const Layer& l : explicit_layers) total += l.params;
  return total;
}

}  // namespace ppsched
