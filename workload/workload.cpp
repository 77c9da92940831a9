#include "workload/workload.hpp"

#include <algorithm>

#include "schedule/errors.hpp"
#include "schedule/text_format.hpp"

namespace ppsched {

std::vector<Layer> transformer_layers(const Architecture& m, const Training& tr, int64_t seq_len);  // architecture.cpp

std::vector<Layer> Workload::layers(int64_t seq_len) const {
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

size_t Workload::layer_count() const {
  if (!arch) return explicit_layers.size();
  return static_cast<size_t>(arch->layers + arch->mtp_layers + 4);
}

int64_t Workload::total_params() const {
  int64_t total = 0;
  if (arch) {
    Training whole = training;
    whole.tp = 1;
    whole.ep = 1;
    whole.etp = 1;
    for (const Layer& l : transformer_layers(*arch, whole, training.seq_lens.front())) total += l.params;
    return total;
  }
  for (const Layer& l : explicit_layers) total += l.params;
  return total;
}

std::string attention_core_problem(const Training& t) {
  if (t.core() == AttentionCore::Causal && !t.flash_attention)
    return "a causal attention core (half the s x s matrix) needs FlashAttention: eager attention computes the whole "
           "score matrix and masks it (attention_core \"full\")";
  return {};
}

std::string expert_parallel_problem(const Training& t, int64_t experts) {
  const int64_t ep = std::max(t.ep, 1), etp = t.expert_tp(), ranks = int64_t{std::max(t.dp, 1)} * std::max(t.tp, 1);
  if (ep > 1 && experts == 0) return "expert parallelism " + std::to_string(ep) + " needs a model with routed experts";
  if (experts > 0 && experts % ep != 0)
    return "expert parallelism " + std::to_string(ep) + " does not divide the " + std::to_string(experts) + " routed experts";
  if ((ep * etp) > ranks || ranks % (ep * etp) != 0)
    return "expert parallelism " + std::to_string(ep) + " x expert tensor parallelism " + std::to_string(etp) +
           " does not divide the " + std::to_string(ranks) + " ranks of a stage (data parallelism " + std::to_string(t.dp) +
           " x tensor parallelism " + std::to_string(t.tp) + "): the expert ranks tile the same ranks as the dense ones";
  return "";
}

std::string tensor_parallel_problem(const Training& t, const Architecture* arch) {
  const int64_t tp = std::max(t.tp, 1);
  if (tp == 1 || !arch || arch->heads <= 0) return "";
  if (arch->heads % tp != 0)
    return "tensor parallelism " + std::to_string(tp) + " does not divide the " + std::to_string(arch->heads) +
           " attention heads (Megatron-LM requires num_attention_heads divisible by the tensor-parallel size)";
  if (arch->kv_lora_rank == 0 && arch->kv_heads > 0 && arch->kv_heads % tp != 0)
    return "tensor parallelism " + std::to_string(tp) + " does not divide the " + std::to_string(arch->kv_heads) +
           " key/value heads (Megatron-LM requires num_query_groups divisible by the tensor-parallel size)";
  return "";
}

std::vector<std::string> check_positions(const Workload& net, const std::string& given_by) {
  if (!net.arch || net.training.seq_lens.empty()) return {};
  const Architecture& a = *net.arch;
  const int64_t s = *std::max_element(net.training.seq_lens.begin(), net.training.seq_lens.end());
  const std::string& in = a.positions_key;
  if (a.learned_positions > 0) {
    if (s <= a.learned_positions) return {};
    throw InputError({}, given_by + " " + std::to_string(s) + " is over the model's learned positions: " + in + " is " +
                             std::to_string(a.learned_positions) + " (its position embedding has one row per position, none past " +
                             std::to_string(a.learned_positions - 1) + "); give a sequence length of at most " +
                             std::to_string(a.learned_positions));
  }
  if (a.max_positions == 0 || s <= a.max_positions) return {};
  const std::string over = "sequence length " + std::to_string(s) + " is over " + in + " " + std::to_string(a.max_positions);
  if (a.rope_scaling.empty())
    return {over + ": RoPE runs at any length, but the model was not trained on sequences this long (its config has no "
                   "rope_scaling); priced all the same"};
  // rope_scaling's factor stretches the original positions (original_max_position_embeddings,
  // else max_position_embeddings) to factor x as many.
  const double base = static_cast<double>(a.rope_original_positions > 0 ? a.rope_original_positions : a.max_positions);
  const double reach = a.rope_factor * base;
  const std::string scaling = "rope_scaling " + a.rope_scaling + (a.rope_factor > 0 ? ", factor " + general(a.rope_factor, 6) : "") +
                              (a.rope_original_positions > 0 ? " over original_max_position_embeddings " + std::to_string(a.rope_original_positions)
                                                              : "");
  if (a.rope_factor > 0 && static_cast<double>(s) <= reach)
    return {over + ": its " + scaling + " extends RoPE to " + general(reach, 12) + " positions, which cover it"};
  return {over + (a.rope_factor > 0 ? " and over the " + general(reach, 12) + " positions its " + scaling + " extends RoPE to"
                                    : " (its " + scaling + " gives no factor)") +
          ": RoPE runs at any length, but the model was not trained or scaled for sequences this long; priced all the same"};
}

}  // namespace ppsched
