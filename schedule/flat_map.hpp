// A small open-addressing hash map from 64-bit keys to trivially copyable values, for the
// passes' hot loops: the live sets they keep (cache entries, pending messages) are small and
// churn once per step, where a node-based std::unordered_map pays an allocation per insert.
// Linear probing over a power-of-two table, backward-shift deletion (no tombstones), grown at
// half load. Keys are arbitrary except kEmpty (all ones), which marks a free slot.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace ppsched {

template <class V>
class FlatMap {
 public:
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  explicit FlatMap(size_t capacity = 64) { rehash(round_up(capacity * 2)); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Pointer to the value of `key`, or nullptr.
  V* find(uint64_t key) { return const_cast<V*>(static_cast<const FlatMap*>(this)->find(key)); }
  const V* find(uint64_t key) const {
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

  // Inserts (key, value) when the key is absent; returns the value stored under the key and
  // whether it was inserted.
  std::pair<V*, bool> insert(uint64_t key, const V& value) {
    if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size() * 2);
    size_t i = slot(key);
    for (; keys_[i] != kEmpty; i = (i + 1) & mask_)
      if (keys_[i] == key) return {&values_[i], false};
    keys_[i] = key;
    values_[i] = value;
    ++size_;
    return {&values_[i], true};
  }

  // Removes `key`; returns whether it was there.
  bool erase(uint64_t key) {
    size_t i = slot(key);
    for (;; i = (i + 1) & mask_) {
      if (keys_[i] == key) break;
      if (keys_[i] == kEmpty) return false;
    }
    // Backward shift: move later members of the probe run into the hole where that keeps
    // them reachable from their home slot.
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; keys_[j] != kEmpty; j = (j + 1) & mask_) {
      const size_t home = slot(keys_[j]);
      const bool reachable_past_hole = ((j - home) & mask_) >= ((j - hole) & mask_);
      if (reachable_past_hole) {
        keys_[hole] = keys_[j];
        values_[hole] = values_[j];
        hole = j;
      }
    }
    keys_[hole] = kEmpty;
    --size_;
    return true;
  }

  void clear() {
    if (size_ == 0) return;
    std::fill(keys_.begin(), keys_.end(), kEmpty);
    size_ = 0;
  }

  // Calls fn(key, value) for every entry (unspecified order).
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] != kEmpty) fn(keys_[i], values_[i]);
  }

 private:
  static size_t round_up(size_t n) {
    size_t p = 16;
    while (p < n) p *= 2;
    return p;
  }
  size_t slot(uint64_t key) const {
    // Fibonacci hashing: the packed keys differ mostly in their low bits.
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  void rehash(size_t n) {
    std::vector<uint64_t> old_keys(n, kEmpty);
    std::vector<V> old_values(n);
    old_keys.swap(keys_);
    old_values.swap(values_);
    mask_ = n - 1;
    shift_ = 64;
    for (size_t p = n; p > 1; p >>= 1) --shift_;
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != kEmpty) insert(old_keys[i], old_values[i]);
  }

  std::vector<uint64_t> keys_;
  std::vector<V> values_;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t size_ = 0;
};

// A table over the keys 0 .. keys-1: a plain array when the key space is not much larger than
// what will be stored, a FlatMap otherwise. Tables indexed by (stage, micro) use it, so that a
// file declaring huge counts with few steps costs memory in proportion to its steps, not to
// stages x micro-batches (found by libFuzzer: a 17-byte CSV asked for 2.4 GB).
// Whether a dense array over `keys` keys stays in proportion to `entries` entries.
inline bool dense_fits(uint64_t keys, size_t entries) { return keys <= 4 * static_cast<uint64_t>(entries) + 4096; }

template <class V>
class KeyTable {
 public:
  KeyTable(uint64_t keys, size_t expected_entries, V empty) : empty_(empty) {
    dense_ = dense_fits(keys, expected_entries);
    if (dense_) dense_values_.assign(static_cast<size_t>(keys), empty);
  }
  // The value at `key` (the empty value when nothing was stored there).
  V get(uint64_t key) const {
    if (dense_) return dense_values_[static_cast<size_t>(key)];
    const V* v = sparse_.find(key);
    return v ? *v : empty_;
  }
  // The value at `key`, created empty when absent. Valid until the next call.
  V& at(uint64_t key) {
    if (dense_) return dense_values_[static_cast<size_t>(key)];
    return *sparse_.insert(key, empty_).first;
  }
  void reset() {
    if (dense_) {
      std::fill(dense_values_.begin(), dense_values_.end(), empty_);
    } else {
      sparse_.clear();
    }
  }
  bool dense() const { return dense_; }

 private:
  V empty_;
  bool dense_ = true;
  std::vector<V> dense_values_;
  FlatMap<V> sparse_;
};

}  // namespace ppsched
