// The engine's slice store (sim/engine.cpp): the slices a timed run records, which of them ends
// last, and, in a run without a trace, the collection that keeps only the slices the critical
// path may still need. Private to sim/: the public API is sim/engine.hpp.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "results/recorder.hpp"
#include "results/run_record.hpp"

namespace ppsched::des {

// The slices, in blocks of 2^16 (2 MiB of 32-byte spans) instead of one array: growing never
// copies (a vector's doubling held the old array and the new one at once, and the old one's
// pages stayed with the process), and dropping slices (SliceStore::collect) frees whole
// blocks, which the next ones reuse. The first block grows as a vector up to a block, from the
// size a run expects: a small run takes what it needs.
template <class T>
class Blocks {
 public:
  static constexpr int kShift = 16;
  static constexpr size_t kBlock = size_t{1} << kShift;
  size_t size() const { return size_; }
  T& operator[](size_t k) { return blocks_[k >> kShift][k & (kBlock - 1)]; }
  const T& operator[](size_t k) const { return blocks_[k >> kShift][k & (kBlock - 1)]; }
  void first_block(size_t expected) {
    if (blocks_.empty()) blocks_.emplace_back().reserve(std::min(std::max<size_t>(expected, 1), kBlock));
  }
  void push_back(const T& v) {
    if (blocks_.empty() || blocks_.back().size() == kBlock) {
      blocks_.emplace_back();
      if (blocks_.size() > 1) blocks_.back().reserve(kBlock);
    }
    blocks_.back().push_back(v);
    ++size_;
  }
  // Keeps the first n (n <= size()); frees the blocks past them.
  void shrink(size_t n) {
    assert(n <= size_);
    const size_t keep = (n + kBlock - 1) >> kShift;
    blocks_.resize(std::max<size_t>(keep, blocks_.empty() ? 0 : 1));
    if (!blocks_.empty()) blocks_.back().resize(n - ((blocks_.size() - 1) << kShift));
    size_ = n;
  }

 private:
  std::vector<std::vector<T>> blocks_;
  size_t size_ = 0;
};

// A slice while the run goes on: TimedSlice less its bytes, which are kept apart and only
// when tracing (32 bytes a slice instead of 48: a 10^7-step run holds ~10^7 of them).
// Its cause is kept here too (the slice that let it start: the critical path follows causes
// back), so a slice costs 32 bytes in all; no slice is a sub-step's (a batch's sub-steps share
// their step's slice), so it holds no sub-step index.
struct Span {
  double start_ms, end_ms;
  int32_t rank, step_index, cause;
  Lane lane;
  bool meta;
};
static_assert(sizeof(Span) == 32, "Span: keep it at 32 bytes");

// The slices of one run, numbered in creation order (an index order is the creation order,
// which ties and the critical path's walk read). A slice's start never moves; its end may grow
// (SliceStore::set_end).
class SliceStore {
 public:
  // trace: keep every slice and its bytes. Otherwise the store drops slices once it has
  // `small_run` of them (SliceStore::collect).
  SliceStore(bool trace, size_t small_run) : trace_(trace), small_run_(small_run), collect_at_(small_run) {}

  size_t size() const { return slices_.size(); }
  Span& operator[](size_t k) { return slices_[k]; }
  const Span& operator[](size_t k) const { return slices_[k]; }

  // Sizes the first block for a run of `actions` actions (a run without a trace expects no
  // more slices than it keeps before its first collection).
  void first_block(size_t actions) {
    slices_.first_block(trace_ ? actions : std::min(actions, slice_room()));
    if (trace_) bytes_.reserve(actions);
  }

  // A new slice; its bytes are kept only in a trace. Returns its index.
  int32_t add(const Span& sp, double bytes) {
    slices_.push_back(sp);
    if (trace_) bytes_.push_back(bytes);
    const int32_t k = static_cast<int32_t>(slices_.size()) - 1;
    note_end(k, sp.end_ms);
    return k;
  }
  void set_end(int32_t k, double end) {
    slices_[static_cast<size_t>(k)].end_ms = end;
    note_end(k, end);
  }

  // The slice that ends last (the lowest index among equals; -1: none yet) and its end.
  int32_t last() const { return last_slice_; }
  double last_end() const { return last_end_; }

  // ---- slices without a trace: only what the critical path may still need ----------------
  // At the end only the critical path reads old slices: the chain of causes back from the
  // slice that ends last. A slice that no rank's state, no message in flight and no kept
  // slice's cause refers to can be on no such chain any more. So a run without a trace, each
  // time its slices reach 1.5 times what it kept (a collection's work stays in proportion to the
  // slices made since the last), keeps what those roots reach along causes, in order (an index
  // order stays the creation order, which ties and the path's walk read), renumbers every
  // reference, and drops the rest: it holds the chains still open instead of every slice.
  bool collection_due() const { return !trace_ && slices_.size() >= collect_at_; }
  // for_each_root(fn) calls fn(int32_t&) on every slice index the run's state holds (the last
  // slice is the store's own root); they are renumbered to the kept slices.
  template <class Roots>
  void collect(Roots&& for_each_root) {
    std::vector<int32_t> renumber(slices_.size(), kDropped);
    const auto keep = [&](int32_t k) {
      while (k >= 0 && renumber[static_cast<size_t>(k)] == kDropped) {
        renumber[static_cast<size_t>(k)] = kKept;
        k = slices_[static_cast<size_t>(k)].cause;
      }
    };
    for_each_root(keep);
    keep(last_slice_);
    compact(renumber);
    for_each_root([&](int32_t& k) {
      if (k >= 0) k = renumber[static_cast<size_t>(k)];
    });
  }

  // From the slice that ends last back along the causes, in time order.
  std::vector<CriticalStep> critical_path() const;
  // Every slice, into a trace's record.
  void record(RunRecorder& rec) const;

 private:
  static constexpr int32_t kDropped = -1, kKept = -2;
  // Moves the slices marked kKept to the front in order, numbers them in `renumber`, renumbers
  // their causes and the last slice, and drops the rest.
  void compact(std::vector<int32_t>& renumber);
  // The slices a run without a trace expects before its first collection: up to it, and what
  // the events before it add past it (collections come only between events).
  size_t slice_room() const { return collect_at_ + collect_at_ / 4; }
  // Keeps the slice that ends last as the run goes: the critical path starts there, and the
  // end of the run need not read every slice again. Ends only grow.
  void note_end(int32_t k, double end) {
    if (last_slice_ < 0 || end > last_end_ || (end == last_end_ && k < last_slice_)) {
      last_slice_ = k;
      last_end_ = end;
    }
  }

  const bool trace_;
  const size_t small_run_;
  size_t collect_at_;          // without a trace: drop slices when there are this many
  Blocks<Span> slices_;
  std::vector<double> bytes_;  // per slice, when tracing
  int32_t last_slice_ = -1;    // see note_end
  double last_end_ = 0;
};

}  // namespace ppsched::des
