#include "lowering/moe_phases.hpp"

namespace ppsched {

void expand_phases(Op op, const MoeStage& m, std::vector<PhaseItem>& out) {
  const StepTypeInfo& i = info(op);
  const int part = phase_part(i.compute);
  if (m.empty() || part < 0 || i.moe_phases.empty()) return;
  const size_t p = static_cast<size_t>(part);
  const bool forward = i.compute == ComputeKind::Forward;
  // The compute past the last MoE layer, priced as an attention-side phase of no layer.
  const auto tail = [&] {
    if (!(m.after[p] > 0)) return;
    for (size_t k = 0; k < i.moe_phases.size(); ++k)
      if (i.moe_phases[k].work == PhaseWork::Attention) {
        out.push_back({i.moe_phases[k], static_cast<uint8_t>(k), -1, m.after[p], 0});
        return;
      }
  };
  const auto layer = [&](size_t l) {
    const MoeLayerShare& x = m.layers[l];
    for (size_t k = 0; k < i.moe_phases.size(); ++k) {
      const Phase& ph = i.moe_phases[k];
      PhaseItem it{ph, static_cast<uint8_t>(k), static_cast<int32_t>(l), 0, 0};
      if (ph.stream == Stream::Comm) {
        it.bytes = x.a2a_bytes;
        if (!(it.bytes > 0)) continue;
      } else {
        it.share = ph.work == PhaseWork::Experts ? x.experts[p] : x.before[p];
        if (!(it.share > 0)) continue;
      }
      out.push_back(it);
    }
  };
  if (forward) {
    for (size_t l = 0; l < m.layers.size(); ++l) layer(l);
    tail();
  } else {
    tail();
    for (size_t l = m.layers.size(); l-- > 0;) layer(l);
  }
}

}  // namespace ppsched
