#include "checkers/effects.hpp"

namespace ppsched {

const EffectResolver::Resolved& EffectResolver::of(int rank, const Step& st) {
  const auto& inf = info(st.op);
  if (inf.effects.empty()) {
    current_ = Resolved{};
    return current_;
  }
  // conditions_of reads the rank, the stage's neighbours and, in MPipe, whether owner(micro)
  // is rank 0: the key holds exactly those.
  const bool owner_not_0 = s_.mpipe && st.micro >= 0 && s_.owner_of(st.micro) != 0;
  const uint64_t key = static_cast<uint64_t>(st.op) | (static_cast<uint64_t>(static_cast<uint32_t>(st.stage + 1) & 0xFFFFFFu) << 6) |
                       (static_cast<uint64_t>(owner_not_0) << 30) | (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 31);
  uint32_t index;
  if (const uint32_t* hit = memo_.find(key)) {
    index = *hit;
  } else {
    const uint32_t cond = conditions_of(s_, rank, st);
    Resolved r;
    const uint32_t start = static_cast<uint32_t>(pool_.size());
    for (const auto& e : inf.effects) {
      if ((e.when & cond) != e.when) continue;
      const int stage = cache_info(e.cache).per_stage ? st.stage + e.stage_offset : -1;
      const int64_t bytes = memory_.bytes_of(e.cache, stage);
      pool_.push_back({e.cache, e.effect, stage, bytes});
      if (e.effect == Effect::Consume) r.consumed_bytes += bytes;
      if (e.effect == Effect::Produce) r.produced_bytes += bytes;
      ++r.count;
    }
    index = static_cast<uint32_t>(resolved_.size());
    resolved_.push_back(r);
    first_.push_back(start);
    memo_.insert(key, index);
  }
  current_ = resolved_[index];
  current_.first = pool_.data() + first_[index];
  return current_;
}

}  // namespace ppsched
