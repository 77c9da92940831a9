// A vector that costs one pointer when empty: for the rarely used lists of a Step (sub-steps
// of a composite, payload descriptors, an explicit collective group), held together behind the
// Step's one pointer (StepLists, schedule/schedule.hpp). A schedule holds up to millions of steps
// and every pass reads them, so a Step's size and the cost of copying or moving one matter:
// three std::vectors made a Step 88 bytes, three SmallVecs 40, one pointer to the three 24; and
// moving one is a pointer swap.
//
// The block it points to holds {size, capacity} and then the elements. It offers the part of
// std::vector's interface the code base uses, and converts to and from std::vector.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

namespace ppsched {

template <class T>
class SmallVec {
 public:
  using value_type = T;
  using size_type = size_t;
  using iterator = T*;
  using const_iterator = const T*;
  using reference = T&;
  using const_reference = const T&;

  SmallVec() noexcept = default;
  SmallVec(std::initializer_list<T> items) { assign(items.begin(), items.end()); }
  template <class It, class = decltype(*std::declval<It>())>
  SmallVec(It first, It last) {
    assign(first, last);
  }
  SmallVec(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit on purpose
  SmallVec(std::vector<T>&& v) {                                     // NOLINT
    reserve(v.size());
    for (auto& x : v) push_back(std::move(x));
  }
  SmallVec(const SmallVec& o) { assign(o.begin(), o.end()); }
  SmallVec(SmallVec&& o) noexcept : block_(o.block_) { o.block_ = nullptr; }
  SmallVec& operator=(const SmallVec& o) {
    if (this != &o) {
      SmallVec copy(o);
      swap(copy);
    }
    return *this;
  }
  SmallVec& operator=(SmallVec&& o) noexcept {
    if (this != &o) {
      release();
      block_ = o.block_;
      o.block_ = nullptr;
    }
    return *this;
  }
  ~SmallVec() { release(); }

  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT

  size_t size() const noexcept { return block_ ? block_->size : 0; }
  bool empty() const noexcept { return size() == 0; }
  size_t capacity() const noexcept { return block_ ? block_->capacity : 0; }

  T* data() noexcept { return block_ ? elements(block_) : nullptr; }
  const T* data() const noexcept { return block_ ? elements(block_) : nullptr; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size(); }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size(); }
  const T* cbegin() const noexcept { return begin(); }
  const T* cend() const noexcept { return end(); }

  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& at(size_t i) {
    if (i >= size()) throw std::out_of_range("SmallVec::at");
    return data()[i];
  }
  const T& at(size_t i) const {
    if (i >= size()) throw std::out_of_range("SmallVec::at");
    return data()[i];
  }
  T& front() { return data()[0]; }
  const T& front() const { return data()[0]; }
  T& back() { return data()[size() - 1]; }
  const T& back() const { return data()[size() - 1]; }

  void reserve(size_t n) {
    if (n > capacity()) grow_to(n);
  }
  void push_back(const T& x) { emplace_back(x); }
  void push_back(T&& x) { emplace_back(std::move(x)); }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size() == capacity()) {
      // x may live in this vector: build it before the elements move.
      T value(std::forward<Args>(args)...);
      grow_to(std::max<size_t>(4, capacity() * 2));
      new (elements(block_) + block_->size) T(std::move(value));
    } else {
      new (elements(block_) + block_->size) T(std::forward<Args>(args)...);
    }
    return elements(block_)[block_->size++];
  }
  void pop_back() {
    elements(block_)[--block_->size].~T();
  }
  void clear() noexcept {
    if (!block_) return;
    for (size_t i = 0; i < block_->size; ++i) elements(block_)[i].~T();
    block_->size = 0;
  }
  void resize(size_t n) {
    reserve(n);
    while (size() > n) pop_back();
    while (size() < n) emplace_back();
  }
  iterator erase(const_iterator pos) {
    T* p = begin() + (pos - cbegin());
    std::move(p + 1, end(), p);
    pop_back();
    return p;
  }
  void swap(SmallVec& o) noexcept { std::swap(block_, o.block_); }

  bool operator==(const SmallVec& o) const { return std::equal(begin(), end(), o.begin(), o.end()); }
  bool operator!=(const SmallVec& o) const { return !(*this == o); }
  bool operator==(const std::vector<T>& o) const { return std::equal(begin(), end(), o.begin(), o.end()); }
  bool operator!=(const std::vector<T>& o) const { return !(*this == o); }

 private:
  struct Block {
    uint32_t size;
    uint32_t capacity;
  };
  static constexpr size_t offset() {
    return (sizeof(Block) + alignof(T) - 1) / alignof(T) * alignof(T);
  }
  static T* elements(Block* b) { return reinterpret_cast<T*>(reinterpret_cast<char*>(b) + offset()); }
  static const T* elements(const Block* b) {
    return reinterpret_cast<const T*>(reinterpret_cast<const char*>(b) + offset());
  }

  template <class It>
  void assign(It first, It last) {
    const auto n = static_cast<size_t>(std::distance(first, last));
    if (n == 0) return;
    reserve(n);
    for (; first != last; ++first) emplace_back(*first);
  }

  void grow_to(size_t n) {
    if (n > UINT32_MAX) throw std::length_error("SmallVec: too many elements");
    static_assert(alignof(T) <= alignof(std::max_align_t), "SmallVec: over-aligned element type");
    auto* fresh = static_cast<Block*>(::operator new(offset() + n * sizeof(T)));
    fresh->size = 0;
    fresh->capacity = static_cast<uint32_t>(n);
    if (block_) {
      T* from = elements(block_);
      T* to = elements(fresh);
      for (uint32_t i = 0; i < block_->size; ++i) {
        new (to + i) T(std::move(from[i]));
        from[i].~T();
      }
      fresh->size = block_->size;
      ::operator delete(block_);
    }
    block_ = fresh;
  }

  void release() noexcept {
    if (!block_) return;
    clear();
    ::operator delete(block_);
    block_ = nullptr;
  }

  Block* block_ = nullptr;
};

}  // namespace ppsched
