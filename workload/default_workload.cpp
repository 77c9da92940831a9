// The embedded default network (model_file.hpp): the 7B-class transformer the embedded cost
// model has always described, now as a network of listed layers.
//  - 32 layers, hidden h = 4096, 32 heads, sequence s = 4096, micro-batch b = 1, bf16. A layer
//    holds 12 h^2 parameters (4 h^2 attention, 8 h^2 MLP; LLaMA-7B's 3 x h x 11008 MLP is the
//    same within 1%).
//  - Its forward costs 24 b s h^2 + 4 b s^2 h = 1.924 TFLOP (Narayanan et al. 2021, without the
//    logit layer); the backward twice that, split evenly: BWD_INPUT = BWD_WEIGHT = FWD (the
//    usual 1:2 rule; ZB-H1 assumes the same).
//  - It keeps 34 s b h bytes from forward to backward (Korthikanti et al. 2022 with
//    FlashAttention: no s x s scores; with them it would be s b h (34 + 5 a s / h) = 3.03 GiB per
//    layer and a 4-stage 1F1B would not fit 80 GiB), and 32 s b h from the input-gradient to the
//    weight-gradient backward (every matmul's input and output gradient: the Zero Bubble
//    runtime's analytic unit). It hands s b h x 2 bytes (32 MiB) of hidden states on.
//  - H100 SXM: 989 TFLOP/s dense bf16 at 45% MFU (445 TFLOP/s): 4.323 ms per layer forward;
//    80 GiB. Mixed precision with Adam: 18 bytes per parameter (Megatron).
// The embedding and the LM head are left out, so that every stage of any stage count gets the
// same share of the 32 layers (plan_fraction).
#include "workload/model_file.hpp"

namespace ppsched {

Workload default_workload() {
  constexpr double h = 4096, s = 4096, b = 1, layers = 32;
  Workload net;
  net.name = "default 7B-class transformer";
  Layer l;
  l.kind = LayerKind::Generic;
  l.params = static_cast<int64_t>(12 * h * h);
  l.fwd_flops = 24 * b * s * h * h + 4 * b * s * s * h;
  l.bwd_input_flops = l.fwd_flops;
  l.bwd_weight_flops = l.fwd_flops;
  l.activation_bytes = static_cast<int64_t>(34 * s * b * h);
  l.weight_grad_bytes = static_cast<int64_t>(32 * s * b * h);
  l.output_bytes = static_cast<int64_t>(2 * s * b * h);
  for (int i = 0; i < static_cast<int>(layers); ++i) {
    l.name = "layers." + std::to_string(i);
    net.explicit_layers.push_back(l);
  }
  net.training.seq_lens = {static_cast<int64_t>(s)};
  net.device.flops_per_s = 989e12;
  net.device.mfu = 0.45;
  net.device.memory_bytes = kH100MemoryBytes;
  net.device.memory_reserve_bytes = kDefaultMemoryReserveBytes;
  return net;
}

}  // namespace ppsched
