// Per-micro cache lifecycles (reference hyper_parallel.md §4), read from the step table:
// every entry is produced once, consumed once, and the caches are empty at the end of a run
// (MPipe's reset() refuses to start otherwise). The same walk measures live bytes per rank.
#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_map>

#include "checkers/checks.hpp"
#include "lowering/effects.hpp"
#include "schedule/flat_map.hpp"
#include "schedule/text_format.hpp"

namespace ppsched {

int64_t MemoryModel::bytes_of(Cache c, int stage) const {
  switch (c) {
    case Cache::fwd_cache: return activation(stage);
    // What the weight gradients read: every matmul's input and output gradient (a cost model's
    // memory.weight_grad_bytes; without one, half the activation).
    case Cache::dw_cache: return weight_grad_bytes.empty() ? activation(stage) / 2 : pick(weight_grad_bytes, stage);
    case Cache::fwd_outputs_cache:
    case Cache::bwd_cache:
    case Cache::fwd_recv_buffer:
    case Cache::bwd_recv_buffer: return boundary(stage);
    case Cache::swap_offloading:
    case Cache::swap_loading: return activation(stage);
    case Cache::swap_on_host: return 0;
    case Cache::data_batch: return data_bytes;
    case Cache::tower_features:
    case Cache::outputs_for_stage0:
    case Cache::keep_grad:
    case Cache::feature_grads: return features_bytes;
    case Cache::inputs_for_explicit_forward: return tower_input_bytes;
    case Cache::outputs_for_bwd: return tower_graph_bytes;
  }
  return 0;
}

namespace {

uint64_t pack(Cache c, int stage, int micro) {
  return (static_cast<uint64_t>(c) << 56) | (static_cast<uint64_t>(static_cast<uint32_t>(stage + 1) & 0xFFFFFFu) << 32) |
         static_cast<uint32_t>(micro);
}

std::string entry_name(Cache c, int stage, int micro) {
  const auto& ci = cache_info(c);
  std::string out(ci.name);
  out += "[";
  if (ci.per_stage) out += "stage " + std::to_string(stage) + ", ";
  out += "micro " + std::to_string(micro) + "]";
  return out;
}

std::string producers_of(Cache c) {
  std::string out;
  for (const auto& i : step_table())
    for (const auto& e : i.effects)
      if (e.cache == c && e.effect == Effect::Produce) {
        if (out.find(std::string(i.name)) == std::string::npos) out += (out.empty() ? "" : " or ") + std::string(i.name);
      }
  return out;
}

class Walk {
 public:
  Walk(const Schedule& s, const CheckOptions& o, std::vector<Violation>& out, CheckStats& stats)
      : s_(s), o_(o), out_(out), stats_(stats) {}

  void run() {
    stats_.peak_memory_bytes.assign(static_cast<size_t>(s_.ranks), 0);
    stats_.peak_memory_index.assign(static_cast<size_t>(s_.ranks), -1);
    stats_.steps = 0;  // counted by the walks, which visit every slot anyway
    index_local_stages();
    // What each rank holds for the whole step: its stages' weights, gradients, optimizer state.
    resident_ = o_.memory.resident_by_rank(s_.ranks, s_.stages, [&](int st) { return s_.rank_of(st); }, o_.dp);
    stats_.resident_bytes.clear();
    for (const auto& r : resident_) stats_.resident_bytes.push_back(r.total());
    for (int r = 0; r < s_.ranks; ++r)
      if (o_.testing_exact_cache_walk || !clean_rank(r)) walk_rank(r);
  }

 private:
  // ---- the clean case, proved fast -------------------------------------------------------
  // Most schedules are clean. One pass per rank over a dense table of entry states (one byte
  // per (cache, stage of this rank, micro)) proves it and measures the peak exactly as
  // walk_rank does; at the first thing it cannot handle (an anomaly, an entry of another
  // rank's stage, a key outside the table, a peak over the budget) it gives up and the rank
  // is walked again by walk_rank, which explains. A clean pass leaves the table all zero.
  void index_local_stages() {
    local_.assign(static_cast<size_t>(std::max(s_.stages, 0)), -1);
    stages_on_.assign(static_cast<size_t>(s_.ranks), 0);
    for (int st = 0; st < s_.stages; ++st) {
      const int owner = s_.rank_of(st);
      if (owner < 0 || owner >= s_.ranks) continue;
      local_[static_cast<size_t>(st)] = stages_on_[static_cast<size_t>(owner)]++;
    }
  }

  bool clean_rank(int r) {
    const Program& prog = s_.programs[static_cast<size_t>(r)];
    const size_t M = static_cast<size_t>(std::max(s_.micro_batches, 0));
    const size_t slots = static_cast<size_t>(stages_on_[static_cast<size_t>(r)]) + 1;  // + the rank's own caches
    const size_t cells = static_cast<size_t>(kCacheCount) * slots * M;
    if (M == 0 || cells > 16 * prog.size() + 65536) return false;
    if (state_.size() < cells) state_.resize(cells, 0);
    uint8_t* state = state_.data();
    int64_t bytes = 0, peak = 0, live = 0;
    int peak_index = -1;
    size_t steps = 0;
    bool ok = true;
    gathered_.clear();
    for (int i = 0; i < static_cast<int>(prog.size()) && ok; ++i) {
      if (!prog[static_cast<size_t>(i)]) continue;
      ++steps;
      for_each_leaf(*prog[static_cast<size_t>(i)], [&](const Step& st, int) {
        if (!ok) return;
        if (is_gather_step(st)) {
          bytes += gather_delta(st);
          if (bytes > peak) {
            peak = bytes;
            peak_index = i;
          }
          return;
        }
        if (st.micro < 0 || static_cast<size_t>(st.micro) >= M) {
          ok = effects_.of(r, st).effects.empty();
          return;
        }
        if (const int64_t spike = with_workspace(st, bytes); spike > peak) {
          peak = spike;
          peak_index = i;
        }
        for (const ResolvedEffect& e : effects_.of(r, st)) {
          size_t slot = slots - 1;
          if (e.stage >= 0) {
            if (e.stage >= s_.stages || s_.rank_of(e.stage) != r) {
              ok = false;
              return;
            }
            slot = static_cast<size_t>(local_[static_cast<size_t>(e.stage)]);
          } else if (cache_info(e.cache).per_stage) {
            ok = false;
            return;
          }
          uint8_t& cell = state[(static_cast<size_t>(e.cache) * slots + slot) * M + static_cast<size_t>(st.micro)];
          if (e.effect == Effect::Produce) {
            if (cell) ok = false;
            cell = 1;
            bytes += e.bytes;
            ++live;
          } else if (!cell) {
            ok = false;
          } else if (e.effect == Effect::Consume) {
            cell = 0;
            bytes -= e.bytes;
            --live;
          }
          if (!ok) return;
        }
        if (bytes > peak) {
          peak = bytes;
          peak_index = i;
        }
      });
    }
    if (!ok || live != 0 || over_budget(r, peak)) {
      std::fill(state_.begin(), state_.begin() + static_cast<std::ptrdiff_t>(cells), uint8_t{0});
      return false;
    }
    stats_.peak_memory_bytes[static_cast<size_t>(r)] = resident_[static_cast<size_t>(r)].total() + peak;
    stats_.peak_memory_index[static_cast<size_t>(r)] = peak_index;
    stats_.steps += steps;
    return true;
  }

  // ---- the explaining walk ------------------------------------------------------------------
  struct Entry {
    int index, sub;  // producer
    int stage;
  };

  // Where a step whose effects produce `key` appears on the rank at or after `from`.
  int find_producer(int r, int from, Cache c, int stage, int micro) const {
    const Program& prog = s_.programs[static_cast<size_t>(r)];
    for (int j = from; j < static_cast<int>(prog.size()); ++j) {
      if (!prog[static_cast<size_t>(j)]) continue;
      bool hit = false;
      for_each_leaf(*prog[static_cast<size_t>(j)], [&](const Step& st, int) {
        uint32_t cond = conditions_of(s_, r, st);
        for (const auto& e : info(st.op).effects)
          if (e.cache == c && e.effect == Effect::Produce && (e.when & cond) == e.when &&
              key_stage(e, st) == stage && st.micro == micro)
            hit = true;
      });
      if (hit) return j;
    }
    return -1;
  }

  template <class Fn>
  static void for_each_leaf(const Step& top, Fn&& fn) {
    if (is_composite(top.op)) {
      for (int k = 0; k < static_cast<int>(top.sub_steps().size()); ++k) fn(top.sub_steps()[static_cast<size_t>(k)], k);
    } else {
      fn(top, -1);
    }
  }

  static int key_stage(const CacheEffect& e, const Step& st) {
    return cache_info(e.cache).per_stage ? st.stage + e.stage_offset : -1;
  }

  void missing(int r, int i, int sub, const Step& st, const ResolvedEffect& e) {
    int stage = e.stage;
    Violation v;
    // A compute step whose input is missing: its dependency, not a cache slip.
    bool input_of_compute = is_forward(st.op) || is_backward_input_side(st.op);
    v.kind = input_of_compute ? ViolationKind::Dependency : ViolationKind::CacheViolation;
    v.ranks = {r};
    v.steps = {step_ref(s_, r, i, sub)};
    std::string entry = entry_name(e.cache, stage, st.micro);
    int later = find_producer(r, i + 1, e.cache, stage, st.micro);
    std::string where = later >= 0 ? " It is produced only later, at step " + std::to_string(later) + " (" +
                                         short_label(*s_.programs[static_cast<size_t>(r)][static_cast<size_t>(later)]) + ")."
                                   : " No step of this rank produces it.";
    if (later >= 0) v.steps.push_back(step_ref(s_, r, later));
    std::string why;
    switch (e.cache) {
      case Cache::fwd_recv_buffer: why = "its input has not arrived: the FWD_RECV of this (stage, micro) must come first"; break;
      case Cache::bwd_recv_buffer:
        why = "its output gradient has not arrived: the BWD_RECV must come first (hyper-parallel would silently read an "
              "unfilled buffer)";
        break;
      case Cache::fwd_outputs_cache:
        why = is_forward(st.op) ? "the previous stage (on this rank) has not run its FWD for this micro-batch"
                               : "there is nothing to send: the FWD that produces it has not run (KeyError popping "
                                 "fwd_outputs_cache)";
        break;
      case Cache::bwd_cache:
        why = is_send(st.op) ? "there is nothing to send: the backward that produces it has not run"
                             : "the next stage (on this rank) has not run its backward for this micro-batch";
        break;
      case Cache::fwd_cache: why = "there is no forward state: the FWD of this (stage, micro) has not run on this rank"; break;
      case Cache::dw_cache: why = "BWD_WEIGHT needs the state its BWD_INPUT keeps ('dw called before dx')"; break;
      default: why = std::string(cache_info(e.cache).meaning) + " is not there; it is produced by " + producers_of(e.cache); break;
    }
    v.message = short_label(st) + " " + (e.effect == Effect::Read ? "reads" : "consumes") + " " + entry +
                " but no earlier step on rank " + std::to_string(r) + " produced it: " + why + "." + where;
    out_.push_back(std::move(v));
  }

  void walk_rank(int r) {
    FlatMap<Entry> live;
    // Entries consumed before they existed: their late producer settles the debt instead of
    // leaving a second, derived "not empty at the end" report.
    std::unordered_map<uint64_t, int> owed;
    int64_t bytes = 0, peak = 0, peak_workspace = 0;
    int peak_index = -1;
    std::array<int, kCacheCount> counts{}, peak_counts{};
    size_t peak_gathered = 0;
    gathered_.clear();
    const Program& prog = s_.programs[static_cast<size_t>(r)];
    for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
      if (!prog[static_cast<size_t>(i)]) continue;
      ++stats_.steps;
      for_each_leaf(*prog[static_cast<size_t>(i)], [&](const Step& st, int sub) {
        if (is_gather_step(st)) bytes += gather_delta(st);
        if (const int64_t spike = with_workspace(st, bytes); spike > peak) {
          peak = spike;
          peak_index = i;
          peak_counts = counts;
          peak_gathered = gathered_.size();
          peak_workspace = spike - bytes;
        }
        for (const ResolvedEffect& e : effects_.of(r, st)) {
          const int stage = e.stage;
          uint64_t k = pack(e.cache, stage, st.micro);
          if (e.effect == Effect::Produce) {
            if (!owed.empty() && !live.find(k)) {
              if (auto debt = owed.find(k); debt != owed.end()) {
                if (--debt->second == 0) owed.erase(debt);
                continue;
              }
            }
            auto [held, inserted] = live.insert(k, Entry{i, sub, stage});
            if (!inserted) {
              Violation v;
              v.kind = ViolationKind::CacheViolation;
              v.ranks = {r};
              v.steps = {step_ref(s_, r, i, sub), step_ref(s_, r, held->index, held->sub)};
              v.message = short_label(st) + " produces " + entry_name(e.cache, stage, st.micro) +
                          ", which already holds an entry from step " + std::to_string(held->index) +
                          ": the earlier one is overwritten and leaks (e.g. a duplicated receive, or a step run twice).";
              out_.push_back(std::move(v));
              continue;
            }
            bytes += e.bytes;
            counts[static_cast<size_t>(e.cache)]++;
            continue;
          }
          const bool present = e.effect == Effect::Consume ? live.erase(k) : live.find(k) != nullptr;
          if (!present) {
            const bool planted_bug = o_.testing_disable_recv_rule &&
                                     (e.cache == Cache::fwd_recv_buffer || e.cache == Cache::bwd_recv_buffer);
            if (!planted_bug) missing(r, i, sub, st, e);
            if (e.effect == Effect::Consume) owed[k]++;
          } else if (e.effect == Effect::Consume) {
            bytes -= e.bytes;
            counts[static_cast<size_t>(e.cache)]--;
          }
        }
        if (bytes > peak) {
          peak = bytes;
          peak_index = i;
          peak_counts = counts;
          peak_gathered = gathered_.size();
          peak_workspace = 0;
        }
      });
    }
    const ResidentBytes& held = resident_[static_cast<size_t>(r)];
    stats_.peak_memory_bytes[static_cast<size_t>(r)] = held.total() + peak;
    stats_.peak_memory_index[static_cast<size_t>(r)] = peak_index;
    if (over_budget(r, peak)) {
      Violation v;
      v.kind = ViolationKind::Memory;
      v.ranks = {r};
      v.steps = {step_ref(s_, r, peak_index)};
      std::string what;
      for (int c = 0; c < kCacheCount; ++c)
        if (peak_counts[static_cast<size_t>(c)] > 0)
          what += (what.empty() ? "" : ", ") + std::to_string(peak_counts[static_cast<size_t>(c)]) + " x " +
                  std::string(cache_info(static_cast<Cache>(c)).name);
      if (peak_gathered > 0)
        what += (what.empty() ? "" : ", ") + std::string("the gathered parameters of ") + std::to_string(peak_gathered) +
                " stage" + (peak_gathered > 1 ? "s" : "") + " (--fsdp)";
      if (peak_workspace > 0)
        what += (what.empty() ? "" : ", ") + std::string("the backward's recomputation workspace (") + human_bytes(peak_workspace) + ")";
      if (what.empty()) what = "nothing";
      const std::string at = " at step " + std::to_string(std::max(peak_index, 0)) +
                             (peak_index >= 0 ? " (" + short_label(*prog[static_cast<size_t>(peak_index)]) + ")" : "");
      if (held.total() == 0) {
        v.message = "Rank " + std::to_string(r) + " peaks at " + human_bytes(peak) + " of live activations and buffers" + at +
                    ", over its budget of " + human_bytes(*o_.memory_budget) + ". Live then: " + what + ".";
      } else {
        // Which part dominates: the resident parts and the live bytes, the largest named.
        const std::pair<int64_t, const char*> parts[] = {{held.weights, "the weights"},
                                                         {held.grads, "the gradients"},
                                                         {held.optimizer, "the optimizer state"},
                                                         {peak, "the live activations and buffers"}};
        const auto* top = &parts[0];
        for (const auto& p : parts)
          if (p.first > top->first) top = &p;
        v.message = "Rank " + std::to_string(r) + " peaks at " + human_bytes(held.total() + peak) + at + ", over its budget of " +
                    human_bytes(*o_.memory_budget) + ": it holds " + human_bytes(held.weights) + " of weights, " +
                    human_bytes(held.grads) + " of gradients and " + human_bytes(held.optimizer) +
                    " of optimizer state for the whole step, and " + human_bytes(peak) + " live then (" + what +
                    "). The largest part is " + top->second + " (" + human_bytes(top->first) +
                    (top->first == peak ? "" : "; --dp N with --distributed-optimizer or --fsdp shards it") + ").";
      }
      out_.push_back(std::move(v));
    }
    report_leftovers(r, live);
  }

  void report_leftovers(int r, const FlatMap<Entry>& live) {
    if (live.empty()) return;
    // One violation per cache: name it and the micro-batches, like MPipe's reset().
    std::map<int, std::vector<std::pair<int, int>>> by_cache;  // cache -> (stage, micro)
    std::map<int, std::vector<StepRef>> producers;
    // In key order, so that the producers named do not depend on the table's layout.
    std::vector<std::pair<uint64_t, Entry>> entries_in_order;
    live.for_each([&](uint64_t k, const Entry& e) { entries_in_order.emplace_back(k, e); });
    std::sort(entries_in_order.begin(), entries_in_order.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [k, e] : entries_in_order) {
      int c = static_cast<int>(k >> 56);
      int micro = static_cast<int>(static_cast<uint32_t>(k));
      by_cache[c].emplace_back(e.stage, micro);
      if (producers[c].size() < 4) producers[c].push_back(step_ref(s_, r, e.index, e.sub));
    }
    for (auto& [c, entries] : by_cache) {
      std::sort(entries.begin(), entries.end());
      auto& refs = producers[c];
      std::sort(refs.begin(), refs.end(), [](const StepRef& a, const StepRef& b) { return a.index < b.index; });
      const auto& ci = cache_info(static_cast<Cache>(c));
      std::string list;
      for (size_t j = 0; j < entries.size() && j < 16; ++j) {
        list += (j ? ", " : "") + std::string(ci.per_stage ? "(stage " + std::to_string(entries[j].first) + ", micro " : "micro ") +
                std::to_string(entries[j].second) + (ci.per_stage ? ")" : "");
      }
      if (entries.size() > 16) list += ", ... (" + std::to_string(entries.size()) + " in all)";
      std::string consumers;
      for (const auto& i : step_table())
        for (const auto& e : i.effects)
          if (static_cast<int>(e.cache) == c && e.effect == Effect::Consume &&
              consumers.find(std::string(i.name)) == std::string::npos)
            consumers += (consumers.empty() ? "" : " or ") + std::string(i.name);
      Violation v;
      v.kind = ViolationKind::CacheViolation;
      v.ranks = {r};
      v.steps = refs;
      v.message = "Cache " + std::string(ci.name) + " on rank " + std::to_string(r) + " is not empty at the end of the run: " +
                  list + " (" + std::string(ci.meaning) + "). Nothing consumed " + (entries.size() > 1 ? "them" : "it") +
                  " (consumed by " + consumers + "); the next run would start with stale entries (MPipe's reset() "
                  "refuses to start).";
      out_.push_back(std::move(v));
    }
  }

  // A backward that recomputes holds, while it runs, what it recomputes on top of its inputs
  // (MemoryModel::workspace_bytes): the live bytes at its start plus that.
  int64_t with_workspace(const Step& st, int64_t bytes) const {
    if (!is_backward_input_side(st.op) || st.stage < 0 || o_.memory.workspace_bytes.empty()) return bytes;
    return bytes + o_.memory.workspace(st.stage);
  }
  bool over_budget(int r, int64_t live_peak) const {
    return o_.memory_budget && resident_[static_cast<size_t>(r)].total() + live_peak > *o_.memory_budget;
  }

  // ---- gathered parameters (--fsdp over N > 1 replicas) ------------------------------------
  // An FSDP_UNSHARD makes the stage's gathered parameters live (the (N-1)/N of them the rank
  // does not hold; MemoryModel::gathered), its FSDP_RESHARD frees them; a gather of a gathered stage or a release of
  // a sharded one changes nothing (the data-parallel pass reports those). Returns the change.
  bool is_gather_step(const Step& st) const {
    return gathers_ && info(st.op).collective == CollectiveScope::DataParallel && st.stage >= 0;
  }
  int64_t gather_delta(const Step& st) {
    const CollectiveKind k = info(st.op).collective_kind;
    const int64_t bytes = o_.memory.gathered(st.stage, o_.dp);
    if (k == CollectiveKind::AllGather && gathered_.insert(st.stage).second) return bytes;
    if (k == CollectiveKind::Release && gathered_.erase(st.stage)) return -bytes;
    return 0;
  }

  const Schedule& s_;
  const CheckOptions& o_;
  std::vector<Violation>& out_;
  CheckStats& stats_;
  EffectResolver effects_{s_, o_.memory};
  const bool gathers_ = o_.dp.fsdp && o_.dp.degree > 1;
  std::set<int> gathered_;          // the stages gathered on the rank being walked
  std::vector<ResidentBytes> resident_;  // per rank
  std::vector<int32_t> local_;      // stage -> its position among its rank's stages
  std::vector<int32_t> stages_on_;  // rank -> how many stages it holds
  std::vector<uint8_t> state_;      // clean_rank's entry states, all zero between ranks
};

}  // namespace

void check_caches(const PassInput& in, CheckReport& out) {
  Walk(in.schedule, in.options, out.violations, out.stats).run();
}

}  // namespace ppsched
