#include "schedule/comm_insertion.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "schedule/errors.hpp"
#include "schedule/flat_map.hpp"

namespace ppsched {
namespace {

// One time column of a rank during the scan. A composite spreads over as many columns as it
// has sub-steps; only its first column emits it.
struct Column {
  const Step* emit = nullptr;     // the step written to the output at this column
  const Step* compute = nullptr;  // the (sub-)step whose outputs are sent at this column
  bool idle = false;              // an idle slot of the input (AsGiven) kept in the output
  int input_index = -1;           // index of the emitted step in the input program
};

// Identifies "the unit that produces X" for dependency lookups.
enum class Produces { Forward, BackwardInput, InputHalf };

struct Unit {
  int rank;
  int first_column_unit;  // for composites: index of the composite's first unit on its rank
  int sub;                // sub-step position within a composite, 0 for simple steps
};

// The most slots (idle ones included) the time-column layout is padded to (~500 MB of IR);
// a larger layout is emitted without its idle slots.
constexpr uint64_t kMaxLaidOutSlots = uint64_t{1} << 23;

class Scan {
 public:
  // `owned`: the same schedule, given up by the caller, whose steps emit() may move out.
  explicit Scan(const Schedule& s, Schedule* owned = nullptr)
      : s_(s),
        owned_(owned),
        units_(static_cast<size_t>(s.ranks)),
        producer_{table(s), table(s), table(s)} {}

  Schedule run(Alignment alignment) {
    collect_units();
    if (alignment == Alignment::AsGiven) {
      columns_as_given();
      check_consumers_after_producers();
    } else {
      columns_auto();  // places every step after its inputs: nothing to check
    }
    return emit();
  }

 private:
  struct Ref {
    int rank;
    int unit;
  };
  // 24 bytes a unit. Its step in the input program is top(u), found by rank and index; the
  // (sub-)step is held by address, which stays valid when emit() moves an owned composite out
  // (SmallVec moves its block).
  struct U {
    const Step* sub;   // the compute (sub-)step this unit stands for, null for idle
    int sub_pos;       // 0 for the first unit of a step
    int input_index;   // index in the input program
    int rank;          // the rank whose program holds it
    int column = -1;
  };
  static_assert(sizeof(U) == 24, "U: keep it at 24 bytes");
  // The unit's step in the input program (not idle; before emit() moved it, or not owned).
  const Step& top(const U& u) const {
    return *s_.programs[static_cast<size_t>(u.rank)][static_cast<size_t>(u.input_index)];
  }

  size_t key(int stage, int micro) const {
    return static_cast<size_t>(stage) * static_cast<size_t>(std::max(s_.micro_batches, 1)) +
           static_cast<size_t>(micro);
  }

  [[noreturn]] void fail(int rank, int index, const std::string& msg) const {
    Location loc;
    loc.rank = rank;
    loc.index = index;
    throw InputError(loc, msg);
  }

  void register_producer(const Step& st, int rank, int unit, int index) {
    if (!is_body_compute(st.op)) return;
    if (st.stage < 0 || st.stage >= s_.stages || st.micro < 0 || st.micro >= s_.micro_batches)
      fail(rank, index, short_label(st) + ": stage or micro out of range");
    if (s_.rank_of(st.stage) != rank)
      fail(rank, index, short_label(st) + " runs on rank " + std::to_string(rank) + " but stage " +
                            std::to_string(st.stage) + " is placed on rank " +
                            std::to_string(s_.rank_of(st.stage)));
    auto put = [&](Produces p) {
      auto& slot = producer_[static_cast<int>(p)].at(key(st.stage, st.micro));
      if (slot.rank >= 0)
        fail(rank, index, short_label(st) + " appears twice (also on rank " + std::to_string(slot.rank) + ")");
      slot = {rank, unit};
    };
    const ComputeKind k = info(st.op).compute;
    if (k == ComputeKind::Forward) put(Produces::Forward);
    if (is_backward_input_side(st.op)) put(Produces::BackwardInput);
    if (k == ComputeKind::BackwardInput) put(Produces::InputHalf);
  }

  void collect_units() {
    for (int r = 0; r < s_.ranks; ++r) {
      const Program& prog = s_.programs[static_cast<size_t>(r)];
      auto& us = units_[static_cast<size_t>(r)];
      us.reserve(prog.size());
      for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
        const Slot& slot = prog[static_cast<size_t>(i)];
        if (!slot) {
          us.push_back({nullptr, 0, i, r});
          continue;
        }
        const Step& st = *slot;
        if (is_p2p(st.op) || is_batch(st.op))
          fail(r, i, "P2P insertion needs a compute-only order, found " + short_label(st));
        if (is_composite(st.op)) {
          for (size_t k = 0; k < st.sub_steps().size(); ++k) {
            const Step& sub = st.sub_steps()[k];
            if (is_p2p(sub.op) || is_composite(sub.op))
              fail(r, i, "a compute composite may hold only compute sub-steps, found " + short_label(sub));
            register_producer(sub, r, static_cast<int>(us.size()), i);
            us.push_back({&sub, static_cast<int>(k), i, r});
          }
        } else {
          register_producer(st, r, static_cast<int>(us.size()), i);
          us.push_back({&st, 0, i, r});
        }
      }
    }
  }

  // The units a compute (sub-)step needs before it can start (reference §4: F needs the
  // previous stage's output; a backward needs the next stage's input gradient and its own
  // forward; W needs its I).
  template <class Fn>
  void for_each_dependency(const Step& st, int rank, int index, Fn&& fn) const {
    auto need = [&](Produces p, int stage, int micro, const char* what) {
      const Ref ref = producer_[static_cast<int>(p)].get(key(stage, micro));
      if (ref.rank < 0) {
        std::string want = what + std::string(" of micro ") + std::to_string(micro) + " at stage " +
                           std::to_string(stage);
        fail(rank, index, short_label(st) + " needs the " + want + ", which no rank runs");
      }
      fn(ref);
    };
    switch (info(st.op).compute) {
      case ComputeKind::Forward:
        if (const int prev = s_.chain_neighbour(st.stage, -1); prev >= 0) need(Produces::Forward, prev, st.micro, "FWD");
        break;
      case ComputeKind::Backward:
      case ComputeKind::BackwardInput:
        need(Produces::Forward, st.stage, st.micro, "FWD");
        if (const int next = s_.chain_neighbour(st.stage, +1); next >= 0)
          need(Produces::BackwardInput, next, st.micro, "backward");
        break;
      case ComputeKind::BackwardWeight:
        need(Produces::InputHalf, st.stage, st.micro, "BWD_INPUT");
        break;
      default:
        break;
    }
  }

  void columns_as_given() {
    for (auto& us : units_) {
      int col = 0;
      for (auto& u : us) u.column = col++;
    }
  }

  // Earliest columns: each unit starts after the previous unit of its rank and after every
  // unit it depends on; a composite's units sit in consecutive columns and the composite
  // waits for the inputs of all its sub-steps. Repeated sweeps; a sweep without progress
  // means a dependency cycle (or an order that waits on a later step of the same rank).
  void columns_auto() {
    // Idle slots carry no meaning in Auto mode.
    bool dropped = false;
    for (auto& us : units_) {
      const size_t before = us.size();
      us.erase(std::remove_if(us.begin(), us.end(), [](const U& u) { return u.sub == nullptr; }), us.end());
      dropped = dropped || us.size() != before;
    }
    // Unit indices changed: rebuild the producer table.
    if (dropped) {
      for (auto& v : producer_) v.reset();
      for (int r = 0; r < s_.ranks; ++r) {
        auto& us = units_[static_cast<size_t>(r)];
        for (int k = 0; k < static_cast<int>(us.size()); ++k)
          register_producer(*us[static_cast<size_t>(k)].sub, r, k, us[static_cast<size_t>(k)].input_index);
      }
    }
    std::vector<size_t> head(static_cast<size_t>(s_.ranks), 0);
    size_t remaining = 0;
    for (auto& us : units_) remaining += us.size();
    // A unit's column depends only on columns already final, so the sweep order does not
    // change the result; it changes the rounds: forward chains run up the ranks, backward
    // chains down, and alternating the direction places a P-rank pipeline in a few rounds
    // instead of P (P^2 work: 20,000 rows took 20 s).
    bool descending = false;
    while (remaining > 0) {
      bool progress = false;
      for (int k = 0; k < s_.ranks; ++k) {
        const int r = descending ? s_.ranks - 1 - k : k;
        auto& us = units_[static_cast<size_t>(r)];
        size_t& h = head[static_cast<size_t>(r)];
        while (h < us.size()) {
          // The whole step (all its units) is placed at once.
          size_t end = h + 1;
          while (end < us.size() && us[end].input_index == us[h].input_index && us[end].sub_pos > 0) ++end;
          int start = h == 0 ? 0 : us[h - 1].column + 1;
          bool ready = true;
          for (size_t k = h; k < end && ready; ++k) {
            for_each_dependency(*us[k].sub, r, us[k].input_index, [&](const Ref& ref) {
              const U& dep = units_[static_cast<size_t>(ref.rank)][static_cast<size_t>(ref.unit)];
              if (dep.column < 0) {
                ready = false;
                return;
              }
              start = std::max(start, dep.column + 1);
            });
          }
          if (!ready) break;
          for (size_t k = h; k < end; ++k) us[k].column = start + static_cast<int>(k - h);
          remaining -= end - h;
          h = end;
          progress = true;
        }
      }
      if (!progress) report_stuck(head);
      descending = !descending;
    }
  }

  [[noreturn]] void report_stuck(const std::vector<size_t>& head) const {
    std::string msg = "the compute order cannot run: every rank waits on a step that never comes first;";
    int first_rank = -1, first_index = -1;
    for (int r = 0; r < s_.ranks; ++r) {
      const auto& us = units_[static_cast<size_t>(r)];
      size_t h = head[static_cast<size_t>(r)];
      if (h >= us.size()) continue;
      if (first_rank < 0) {
        first_rank = r;
        first_index = us[h].input_index;
      }
      msg += " rank " + std::to_string(r) + " at step " + std::to_string(us[h].input_index) + " (" +
             short_label(top(us[h])) + ") waits for";
      for_each_dependency(*us[h].sub, r, us[h].input_index, [&](const Ref& ref) {
        const U& dep = units_[static_cast<size_t>(ref.rank)][static_cast<size_t>(ref.unit)];
        if (dep.column < 0)
          msg += " " + short_label(*dep.sub) + " (rank " + std::to_string(ref.rank) + ", step " +
                 std::to_string(dep.input_index) + ")";
      });
      msg += ";";
    }
    msg.pop_back();
    fail(first_rank, first_index, msg);
  }

  // Each receive lands at its producer's column; its consumer must come strictly later, and
  // a composite must come after the inputs of all of its sub-steps.
  void check_consumers_after_producers() const {
    for (int r = 0; r < s_.ranks; ++r) {
      const auto& us = units_[static_cast<size_t>(r)];
      for (size_t k = 0; k < us.size(); ++k) {
        const U& u = us[k];
        if (!u.sub) continue;
        const int first_col = u.column - u.sub_pos;
        for_each_dependency(*u.sub, r, u.input_index, [&](const Ref& ref) {
          const U& dep = units_[static_cast<size_t>(ref.rank)][static_cast<size_t>(ref.unit)];
          if (dep.column >= first_col) {
            fail(r, u.input_index,
                 short_label(top(u)) + " at column " + std::to_string(first_col) + " needs " +
                     short_label(*dep.sub) + " (rank " + std::to_string(ref.rank) + ") which runs at column " +
                     std::to_string(dep.column) + "; a consumer must sit in a later column than its producer");
          }
        });
      }
    }
  }

  Schedule emit() {
    Schedule out;
    out.name = s_.name;
    out.ranks = s_.ranks;
    out.stages = s_.stages;
    out.micro_batches = s_.micro_batches;
    out.placement = s_.placement;
    out.mpipe = s_.mpipe;
    out.pipes = s_.pipes;
    out.micro_pipe = s_.micro_pipe;
    out.data_steps = s_.data_steps;
    // The time-column layout pads each rank with idle slots up to its last column: for a
    // pipeline of P one-micro stages that is about 1.5 P^2 slots, in proportion to ranks^2
    // rather than to the input. The padding is only for display (`show` draws it as a time
    // grid; every checker and the simulator skip idle slots), so it is kept only within a
    // limit; beyond it the same order is emitted without idle slots, and nothing here is
    // sized by columns: memory stays in proportion to the steps.
    uint64_t laid_out = 0;
    for (const auto& us : units_) laid_out += us.empty() ? 0 : static_cast<uint64_t>(us.back().column) + 1;
    const bool pad = laid_out <= kMaxLaidOutSlots;
    const size_t ranks = static_cast<size_t>(s_.ranks);
    out.programs.resize(ranks);
    // The units in (column, rank) order, by a counting sort over the columns in use. A unit's
    // column is at most the units before it (on its rank, as given, or along the chain of
    // units it waits for), so the count array is sized by the units too (4 bytes a unit at
    // most) and no (column, unit) pairs are held.
    std::vector<const U*> by_column;
    std::vector<int> column_of;  // distinct columns, ascending
    std::vector<size_t> column_start;
    {
      size_t total = 0;
      int lo = std::numeric_limits<int>::max(), hi = std::numeric_limits<int>::min();
      for (const auto& us : units_) {
        total += us.size();
        for (const U& u : us) {
          lo = std::min(lo, u.column);
          hi = std::max(hi, u.column);
        }
      }
      const size_t span = total == 0 ? 0 : static_cast<size_t>(int64_t{hi} - lo) + 1;
      if (span > total) throw std::logic_error("insert_p2p: a column past the units before it (a scan bug)");
      std::vector<uint32_t> at(span + 1, 0);  // units per column, then where each column starts
      for (const auto& us : units_)
        for (const U& u : us) at[static_cast<size_t>(u.column - lo) + 1]++;
      for (size_t c = 1; c < at.size(); ++c) {
        if (at[c] != 0) {
          column_of.push_back(static_cast<int>(c - 1) + lo);
          column_start.push_back(at[c - 1]);
        }
        at[c] += at[c - 1];
      }
      column_start.push_back(total);
      // Within a column, ranks stay ascending: they are placed in rank order.
      by_column.resize(total);
      for (const auto& us : units_)
        for (const U& u : us) by_column[at[static_cast<size_t>(u.column - lo)]++] = &u;
    }
    // Exact sizes: every emitted step (and, when padded, every column up to the rank's last),
    // plus the transfers it sends and receives.
    std::vector<int> last(ranks, -1);
    std::vector<size_t> sizes(ranks, 0);
    for (size_t r = 0; r < ranks; ++r) {
      const auto& us = units_[r];
      last[r] = us.empty() ? -1 : us.back().column;
      if (pad) sizes[r] += static_cast<size_t>(last[r] + 1);
      for (const U& u : us) {
        if (!u.sub) continue;
        if (!pad && u.sub_pos == 0) sizes[r]++;
        if (pad && u.sub_pos > 0) sizes[r]--;  // a composite's later columns emit nothing
        const int to = hand_over_rank(*u.sub, static_cast<int>(r));
        if (to >= 0) {
          sizes[r]++;
          sizes[static_cast<size_t>(to)]++;
        }
      }
    }
    // Only now: a later rank adds the receives it causes on an earlier one.
    for (size_t r = 0; r < ranks; ++r) out.programs[r].reserve(sizes[r]);
    // Padding is written lazily: before anything lands on rank r at column t, its idle
    // columns up to t (never past its own last column) are filled.
    std::vector<int> filled(ranks, 0);  // the next column of rank r without its slot
    auto pad_to = [&](size_t r, int t) {
      if (!pad) return;
      const int upto = std::min(t, last[r]);
      for (; filled[r] <= upto; ++filled[r]) out.programs[r].push_back(std::nullopt);
    };
    std::vector<const U*> even, odd;  // even ranks first, then odd (reference §2.0)
    for (size_t c = 0; c < column_of.size(); ++c) {
      const int t = column_of[c];
      for (size_t k = column_start[c]; k < column_start[c + 1]; ++k) {
        const U* u = by_column[k];
        const size_t r = static_cast<size_t>(u->rank);
        pad_to(r, t - 1);
        if (pad) filled[r] = t + 1;
        if (!u->sub) {
          if (pad) out.programs[r].push_back(std::nullopt);  // an idle slot of the input (AsGiven)
        } else if (u->sub_pos == 0 && owned_) {
          // The units still point at the moved-from step: its op, micro and stage stay, and a
          // composite's sub-steps keep their addresses (SmallVec moves its block).
          out.programs[r].push_back(std::move(owned_->programs[r][static_cast<size_t>(u->input_index)]));
        } else if (u->sub_pos == 0) {
          out.programs[r].push_back(top(*u));
        }
      }
      even.clear();
      odd.clear();
      for (size_t k = column_start[c]; k < column_start[c + 1]; ++k)
        (by_column[k]->rank % 2 == 0 ? even : odd).push_back(by_column[k]);
      for (const auto* list : {&even, &odd}) {
        for (const U* u : *list) {
          if (!u->sub) continue;
          const size_t r = static_cast<size_t>(u->rank);
          const Step& st = *u->sub;
          const int to = hand_over_rank(st, u->rank);
          if (to < 0) continue;
          const Op send = *info(st.op).hands_over;
          const auto& send_info = info(send);
          out.programs[r].push_back(make_step(send, st.micro, st.stage));
          pad_to(static_cast<size_t>(to), t);
          out.programs[static_cast<size_t>(to)].push_back(make_step(
              send_info.partner, st.micro, st.stage + (testing_planted_insertion_bug ? 0 : send_info.partner_stage_delta)));
        }
      }
    }
    for (size_t r = 0; r < ranks; ++r) pad_to(r, last[r]);
    return out;
  }

  // The rank a compute step's output is sent to (its step type's hands_over send, to the stage
  // partner_stage_delta away), or -1 when it has none or that stage lives on rank `r` itself.
  int hand_over_rank(const Step& st, int r) const {
    const std::optional<Op> send = info(st.op).hands_over;
    if (!send) return -1;
    const int to = s_.chain_neighbour(st.stage, info(*send).partner_stage_delta);
    if (to < 0 || s_.rank_of(to) == r) return -1;
    return s_.rank_of(to);
  }

  // One producer per (stage, micro) and kind; keyed like key().
  static KeyTable<Ref> table(const Schedule& s) {
    const uint64_t keys = static_cast<uint64_t>(std::max(s.stages, 0)) * static_cast<uint64_t>(std::max(s.micro_batches, 1));
    return KeyTable<Ref>(keys, s.slot_count(), Ref{-1, -1});
  }

  const Schedule& s_;
  Schedule* owned_;
  std::vector<std::vector<U>> units_;
  KeyTable<Ref> producer_[3];
};

}  // namespace

namespace {
void check_shape(const Schedule& compute_only) {
  if (static_cast<int>(compute_only.programs.size()) != compute_only.ranks)
    throw InputError({}, "schedule has " + std::to_string(compute_only.programs.size()) +
                             " programs for " + std::to_string(compute_only.ranks) + " ranks");
  if (static_cast<int>(compute_only.placement.stage_to_rank.size()) != compute_only.stages)
    throw InputError({}, "placement gives " + std::to_string(compute_only.placement.stage_to_rank.size()) +
                             " ranks for " + std::to_string(compute_only.stages) + " stages");
}
}  // namespace

Schedule insert_p2p(const Schedule& compute_only, Alignment alignment) {
  check_shape(compute_only);
  return Scan(compute_only).run(alignment);
}

Schedule insert_p2p(Schedule&& compute_only, Alignment alignment) {
  check_shape(compute_only);
  return Scan(compute_only, &compute_only).run(alignment);
}

bool has_p2p_step(const Step& st) {
  if (is_p2p(st.op) || is_batch(st.op)) return true;
  return std::any_of(st.sub_steps().begin(), st.sub_steps().end(), [](const Step& sub) { return has_p2p_step(sub); });
}

int64_t insert_p2p_if_compute_only(Schedule& s) {
  if (s.pipes > 1 || s.mpipe) return 0;
  for (const auto& prog : s.programs)
    for (const auto& slot : prog)
      if (slot && has_p2p_step(*slot)) return 0;
  bool crosses = false;
  for (int st = 0; st + 1 < s.stages && !crosses; ++st) crosses = s.rank_of(st) != s.rank_of(st + 1);
  if (!crosses) return 0;  // nothing to hand over: both readings coincide
  const size_t before = s.step_count();
  Schedule out = insert_p2p(s, Alignment::Auto);
  const auto inserted = static_cast<int64_t>(out.step_count() - before);
  s = std::move(out);
  return inserted;
}

Schedule strip_p2p(const Schedule& s) {
  Schedule out = s;
  for (auto& prog : out.programs) {
    Program kept;
    kept.reserve(prog.size());
    for (auto& slot : prog) {
      if (!slot || is_p2p(slot->op) || is_batch(slot->op)) continue;
      kept.push_back(std::move(slot));
    }
    prog = std::move(kept);
  }
  return out;
}

namespace {

// The run of body P2P steps of `prog` starting at `from`: [from, end).
size_t p2p_run_end(const Program& prog, size_t from) {
  size_t j = from;
  while (j < prog.size() && prog[j] && is_body_p2p(prog[j]->op)) ++j;
  return j;
}

// An OVERLAP_B_F composite (backward first): where hyper-parallel's boundary transport splits
// the P2P run that follows.
bool is_overlap_b_f(const Slot& slot) { return slot && is_overlap(slot->op) && !info(slot->op).forward_first; }

}  // namespace

Schedule coalesce_p2p(const Schedule& s) {
  Schedule out = s;
  for (auto& prog : out.programs) {
    Program result;
    result.reserve(prog.size());
    size_t i = 0;
    while (i < prog.size()) {
      const size_t j = p2p_run_end(prog, i);
      if (j - i >= 2) {
        std::vector<Step> run;
        for (size_t k = i; k < j; ++k) run.push_back(*prog[k]);
        result.push_back(make_composite(Op::BATCH_SEND_RECV, std::move(run)));
        i = j;
      } else {
        result.push_back(prog[i]);
        ++i;
      }
    }
    prog = std::move(result);
  }
  return out;
}

bool has_overlap_b_f(const Schedule& s) {
  for (const auto& prog : s.programs)
    for (const auto& slot : prog)
      if (is_overlap_b_f(slot)) return true;
  return false;
}

Schedule attach_boundary_p2p(const Schedule& s, bool coalesce) {
  Schedule out = s;
  const auto solo = [](const Step& st) { return make_composite(Op::BATCH_SEND_RECV, {st}); };
  // A group of transfers as the transport issues it: each alone, or (coalesce) one batch.
  const auto emit = [&](Program& to, const std::vector<Step>& group) {
    if (coalesce && group.size() >= 2) {
      to.push_back(make_composite(Op::BATCH_SEND_RECV, group));
      return;
    }
    for (const Step& st : group) to.push_back(coalesce ? st : solo(st));
  };
  for (auto& prog : out.programs) {
    Program result;
    result.reserve(prog.size());
    size_t i = 0;
    while (i < prog.size()) {
      const auto& slot = prog[i];
      if (is_overlap_b_f(slot) && !slot->sub_steps().empty()) {
        result.push_back(slot);
        const Step* fwd = nullptr;
        for (const Step& sub : slot->sub_steps())
          if (is_forward(sub.op)) fwd = &sub;
        // The boundary group: the overlap's own forward send first, then the run's receives.
        const auto own_send = [&](const Step& st) {
          return fwd && st.op == info(fwd->op).hands_over && st.stage == fwd->stage && st.micro == fwd->micro;
        };
        const auto body_recv = [](const Step& st) { return is_recv(st.op) && is_body_p2p(st.op); };
        const size_t j = p2p_run_end(prog, i + 1);
        std::vector<Step> boundary, rest;
        for (size_t k = i + 1; k < j; ++k)
          if (own_send(*prog[k])) boundary.push_back(*prog[k]);
        for (size_t k = i + 1; k < j; ++k)
          if (body_recv(*prog[k])) boundary.push_back(*prog[k]);
        for (size_t k = i + 1; k < j; ++k)
          if (!own_send(*prog[k]) && !body_recv(*prog[k])) rest.push_back(*prog[k]);
        emit(result, boundary);
        emit(result, rest);
        i = j;
        continue;
      }
      if (slot && is_body_p2p(slot->op)) {
        const size_t j = p2p_run_end(prog, i);
        std::vector<Step> run;
        for (size_t k = i; k < j; ++k) run.push_back(*prog[k]);
        emit(result, run);
        i = j;
        continue;
      }
      result.push_back(slot);
      ++i;
    }
    prog = std::move(result);
  }
  return out;
}

}  // namespace ppsched
