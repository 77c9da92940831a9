#include "exec/caches.hpp"

#include <stdexcept>

namespace ppsched::exec {

std::pair<int, int> CacheStore::key(Cache c, int stage, int micro) {
  return {cache_info(c).per_stage ? stage : -1, micro};
}

std::string CacheStore::entry_name(Cache c, int stage, int micro) {
  const auto& ci = cache_info(c);
  std::string out(ci.name);
  out += "[";
  if (ci.per_stage) out += "stage " + std::to_string(stage) + ", ";
  return out + "micro " + std::to_string(micro) + "]";
}

void CacheStore::put(Cache c, int stage, int micro, CacheEntry e, const std::string& who) {
  auto& m = maps_[static_cast<size_t>(c)];
  auto [it, inserted] = m.emplace(key(c, stage, micro), std::move(e));
  (void)it;
  if (!inserted) throw std::runtime_error(who + " would produce " + entry_name(c, stage, micro) + ", which already exists");
}

CacheEntry CacheStore::take(Cache c, int stage, int micro, const std::string& who) {
  auto& m = maps_[static_cast<size_t>(c)];
  auto it = m.find(key(c, stage, micro));
  if (it == m.end()) throw std::runtime_error(who + " needs " + entry_name(c, stage, micro) + ", which no step produced");
  CacheEntry e = std::move(it->second);
  m.erase(it);
  return e;
}

CacheEntry& CacheStore::read(Cache c, int stage, int micro, const std::string& who) {
  auto& m = maps_[static_cast<size_t>(c)];
  auto it = m.find(key(c, stage, micro));
  if (it == m.end()) throw std::runtime_error(who + " needs " + entry_name(c, stage, micro) + ", which no step produced");
  return it->second;
}

bool CacheStore::has(Cache c, int stage, int micro) const {
  const auto& m = maps_[static_cast<size_t>(c)];
  return m.count(key(c, stage, micro)) > 0;
}

std::vector<std::string> CacheStore::leftovers(const std::vector<Cache>& caches) const {
  std::vector<std::string> out;
  for (int c = 0; c < kCacheCount; ++c) {
    Cache cache = static_cast<Cache>(c);
    bool wanted = caches.empty();
    for (Cache w : caches) wanted = wanted || w == cache;
    if (!wanted) continue;
    for (const auto& [k, e] : maps_[static_cast<size_t>(c)]) out.push_back(entry_name(cache, k.first, k.second));
  }
  return out;
}

void CacheStore::clear() {
  for (auto& m : maps_) m.clear();
}

void refuse_leftovers(const CacheStore& store) {
  auto left = store.leftovers();
  if (left.empty()) return;
  std::string names;
  for (const auto& n : left) names += (names.empty() ? "" : ", ") + n;
  throw std::runtime_error("reset() refuses to start: entries left from the previous run: " + names);
}

namespace {

// The effects of `step` that apply under `cond`, with the entry's stage resolved.
template <class F>
void for_each_effect(const Step& step, uint32_t cond, F&& f) {
  for (const auto& e : info(step.op).effects) {
    if ((e.when & cond) != e.when) continue;
    f(e, step.stage + e.stage_offset);
  }
}

std::string row(const Step& step, const CacheEffect& e, int stage) {
  static const char* verbs[] = {"produces", "reads", "consumes"};
  return "the step table says " + std::string(op_name(step.op)) + " " + verbs[static_cast<int>(e.effect)] + " " +
         CacheStore::entry_name(e.cache, stage, step.micro);
}

}  // namespace

void audit_before(const CacheStore& store, const Step& step, uint32_t cond) {
  for_each_effect(step, cond, [&](const CacheEffect& e, int stage) {
    bool present = store.has(e.cache, stage, step.micro);
    if (e.effect == Effect::Produce && present)
      throw std::logic_error(row(step, e, stage) + ", but it already exists before " + short_label(step));
    if (e.effect != Effect::Produce && !present)
      throw std::logic_error(row(step, e, stage) + ", but no earlier step produced it");
  });
}

void audit_after(const CacheStore& store, const Step& step, uint32_t cond) {
  for_each_effect(step, cond, [&](const CacheEffect& e, int stage) {
    bool present = store.has(e.cache, stage, step.micro);
    if (e.effect == Effect::Consume && present)
      throw std::logic_error(row(step, e, stage) + ", but the executor's handler left it");
    if (e.effect != Effect::Consume && !present)
      throw std::logic_error(row(step, e, stage) + ", but the executor's handler did not keep it");
  });
}

}  // namespace ppsched::exec
