#include "lowering/moe_phases.hpp"

namespace ppsched {

void expand_phases(Op op, const MoeStage& m, std::vector<PhaseItem>& out, bool delay_wgrad) {
  const StepTypeInfo& i = info(op);
  const int part = phase_part(i.compute);
  if (m.empty() || part < 0 || i.moe_phases.empty()) return;
  // Delayed only where the step table has weight-gradient phases to move out (a whole backward).
  bool has_delayed = false;
  for (const Phase& ph : i.moe_phases) has_delayed = has_delayed || ph.delayed_wgrad;
  const bool delayed = delay_wgrad && has_delayed;
  const size_t p = static_cast<size_t>(part);
  const size_t pi = static_cast<size_t>(PhasePart::BackwardInput), pw = static_cast<size_t>(PhasePart::BackwardWeight);
  const bool forward = i.compute == ComputeKind::Forward;
  // The delayed weight-gradient phase of `work` (its index in the step table), -1 if none.
  const auto wgrad_of = [&](PhaseWork work) {
    for (size_t k = 0; k < i.moe_phases.size(); ++k)
      if (i.moe_phases[k].delayed_wgrad && i.moe_phases[k].work == work) return static_cast<int>(k);
    return -1;
  };
  // A compute phase of share `dx` (`dw`: its delayed weight gradients) of layer `l`.
  const auto compute = [&](size_t k, int32_t l, const std::array<float, kPhaseParts>& shares) {
    const Phase& ph = i.moe_phases[k];
    if (!delayed) {
      if (shares[p] > 0) out.push_back({ph, static_cast<uint8_t>(k), l, shares[p], 0});
      return;
    }
    if (shares[pi] > 0) {
      PhaseItem dx{ph, static_cast<uint8_t>(k), l, shares[pi], 0};
      dx.part = static_cast<int8_t>(pi);
      out.push_back(dx);
    }
    const int w = wgrad_of(ph.work);
    if (w >= 0 && shares[pw] > 0) {
      PhaseItem dw{i.moe_phases[static_cast<size_t>(w)], static_cast<uint8_t>(w), l, shares[pw], 0};
      dw.part = static_cast<int8_t>(pw);
      dw.beside = true;
      out.push_back(dw);
    }
  };
  // The compute past the last MoE layer, priced as an attention-side phase of no layer.
  const auto tail = [&] {
    for (size_t k = 0; k < i.moe_phases.size(); ++k)
      if (i.moe_phases[k].work == PhaseWork::Attention && !i.moe_phases[k].delayed_wgrad) {
        compute(k, -1, m.after);
        return;
      }
  };
  const auto layer = [&](size_t l) {
    const MoeLayerShare& x = m.layers[l];
    for (size_t k = 0; k < i.moe_phases.size(); ++k) {
      const Phase& ph = i.moe_phases[k];
      if (ph.delayed_wgrad) continue;  // placed by compute() after its input gradient
      if (ph.stream == Stream::Comm) {
        if (!(x.a2a_bytes > 0)) continue;
        out.push_back({ph, static_cast<uint8_t>(k), static_cast<int32_t>(l), 0, x.a2a_bytes});
      } else {
        compute(k, static_cast<int32_t>(l), ph.work == PhaseWork::Experts ? x.experts : x.before);
      }
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
