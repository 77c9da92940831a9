#include "lowering/effects.hpp"

namespace ppsched {

const EffectResolver::Resolved& EffectResolver::resolve(uint64_t key, int rank, const Step& st) {
  const uint32_t cond = conditions_of(s_, rank, st);
  Resolved r;
  r.effects.reserve(info(st.op).effects.size());
  for (const auto& e : info(st.op).effects) {
    if ((e.when & cond) != e.when) continue;
    const int stage = cache_info(e.cache).per_stage ? st.stage + e.stage_offset : -1;
    const int64_t bytes = memory_.bytes_of(e.cache, stage);
    r.effects.push_back({e.cache, e.effect, stage, bytes});
    const bool activation = cache_info(e.cache).memory == MemoryClass::Activation;
    if (e.effect == Effect::Consume) {
      r.consumed_bytes += bytes;
      if (activation) r.consumed_activation += bytes;
    }
    if (e.effect == Effect::Produce) {
      r.produced_bytes += bytes;
      if (activation) r.produced_activation += bytes;
    }
  }
  memo_.insert(key, static_cast<uint32_t>(resolved_.size()));
  resolved_.push_back(std::move(r));
  return resolved_.back();
}

}  // namespace ppsched
