#include "schedule/schedule.hpp"

#include <algorithm>

#include "schedule/schedule_digest.hpp"

// Header-only use: no library to link, and the header travels in the GPU machine's bundle.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ppsched {

Step make_composite(Op op, std::vector<Step> sub_steps) {
  Step s;
  s.op = op;
  if (!sub_steps.empty()) s.edit_sub_steps() = std::move(sub_steps);
  return s;
}

Placement Placement::loop(int ranks, int stages) {
  Placement p;
  p.kind = PlacementKind::Loop;
  for (int s = 0; s < stages; ++s) p.stage_to_rank.push_back(ranks > 0 ? s % ranks : 0);
  return p;
}

// V placement: 0..R-1 then R-1..0, repeating (PyTorch's "v" style; pp=4, 12 stages gives
// 0,1,2,3,3,2,1,0,0,1,2,3).
Placement Placement::v(int ranks, int stages) {
  Placement p;
  p.kind = PlacementKind::V;
  for (int s = 0; s < stages; ++s) {
    int lap = ranks > 0 ? s / ranks : 0;
    int pos = ranks > 0 ? s % ranks : 0;
    p.stage_to_rank.push_back(lap % 2 == 0 ? pos : ranks - 1 - pos);
  }
  return p;
}

Placement Placement::explicit_map(std::vector<int32_t> stage_to_rank) {
  Placement p;
  p.kind = PlacementKind::Explicit;
  p.stage_to_rank = std::move(stage_to_rank);
  return p;
}

int Schedule::mpipe_owner_count() const { return std::min(ranks, micro_batches); }

int Schedule::owner_of(int micro) const {
  if (!mpipe || micro < 0) return kNone;
  if (!mpipe->owners.empty()) {
    return micro < static_cast<int>(mpipe->owners.size()) ? mpipe->owners[static_cast<size_t>(micro)]
                                                          : kNone;
  }
  int nt = mpipe_owner_count();
  if (nt <= 0) return kNone;
  if (mpipe->overflow == Overflow::Full) return micro % nt;
  return micro < nt ? micro : 0;
}

std::vector<int> Schedule::stages_of(int rank) const {
  std::vector<int> out;
  for (int s = 0; s < stages; ++s)
    if (rank_of(s) == rank) out.push_back(s);
  return out;
}

std::vector<int32_t> Schedule::replica_ranks(int stage) const {
  std::vector<int32_t> out;
  if (stage < 0 || stage >= stages) return out;
  for (int k = model_stage_of(stage); k < stages; k += model_stages()) out.push_back(rank_of(k));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

size_t Schedule::step_count() const {
  size_t n = 0;
  for (const auto& p : programs)
    for (const auto& slot : p)
      if (slot) ++n;
  return n;
}

namespace {
bool is_body_data_step(const Step& st) {
  if (st.stage < 0) return false;
  const Op op = st.op;
  // The data family of the table: the steps whose payload or compute is the raw micro-batch.
  return info(op).payload == Payload::Data || info(op).compute == ComputeKind::DataLoad;
}
}  // namespace

bool has_body_data_steps(const Schedule& s) {
  for (const auto& prog : s.programs)
    for (const auto& slot : prog) {
      if (!slot) continue;
      if (is_body_data_step(*slot)) return true;
      for (const Step& sub : slot->sub_steps())
        if (is_body_data_step(sub)) return true;
    }
  return false;
}

void mark_data_steps(Schedule& s) { s.data_steps = has_body_data_steps(s); }

int peer_of(const Schedule& s, int rank, const Step& step) {
  if (step.peer != kNone) return step.peer;
  const auto& i = info(step.op);
  // Inside the step's copy of the pipeline (a replicated schedule's copies are chains of their own).
  auto stage_rank = [&](int delta) {
    const int to = s.chain_neighbour(step.stage, delta);
    return to >= 0 ? s.rank_of(to) : kNone;
  };
  switch (i.peer) {
    case PeerRule::None: return kNone;
    case PeerRule::NextStage: return step.stage >= 0 ? stage_rank(+1) : kNone;
    case PeerRule::PrevStage: return step.stage >= 0 ? stage_rank(-1) : kNone;
    case PeerRule::DataChain:
      if (step.stage >= 0) return stage_rank(i.kind == StepKind::P2PSend ? +1 : -1);
      return i.kind == StepKind::P2PSend ? 0 : s.owner_of(step.micro);
    case PeerRule::OwnerToRank0: return 0;
    case PeerRule::Rank0ToOwner: return s.owner_of(step.micro);
  }
  (void)rank;
  return kNone;
}

uint32_t conditions_of(const Schedule& s, int rank, const Step& step) {
  uint32_t c = 0;
  if (step.stage >= 0 && step.stage < s.stages) {
    c |= Body;
    const int st = step.stage;
    c |= s.is_first_stage(st) ? FirstStage : NotFirstStage;
    c |= s.is_last_stage(st) ? LastStage : NotLastStage;
    if (const int prev = s.chain_neighbour(st, -1); prev >= 0) c |= s.rank_of(prev) == rank ? PrevStageLocal : PrevStageRemote;
    if (const int next = s.chain_neighbour(st, +1); next >= 0) c |= s.rank_of(next) == rank ? NextStageLocal : NextStageRemote;
  } else {
    c |= Prefix;
  }
  c |= rank == 0 ? OnRank0 : NotOnRank0;
  c |= s.data_steps ? DataSteps : NoDataSteps;
  if (s.mpipe) {
    c |= MPipe;
    const auto& m = *s.mpipe;
    if (m.tower != Tower::None) c |= TowerPresent;
    if (m.tower == Tower::Trainable) {
      c |= TowerTrainable;
      c |= m.owner_backward ? OwnerBackward : Stage0Backward;
    }
    if (step.micro >= 0 && s.owner_of(step.micro) != 0) c |= OwnerNotRank0;
  }
  return c;
}

std::string_view to_string(PlacementKind k) {
  switch (k) {
    case PlacementKind::Loop: return "loop";
    case PlacementKind::V: return "v";
    case PlacementKind::Explicit: return "explicit";
  }
  return "?";
}
std::string_view to_string(Overflow o) { return o == Overflow::Full ? "full" : "min"; }
std::string_view to_string(Tower t) {
  switch (t) {
    case Tower::Trainable: return "trainable";
    case Tower::Frozen: return "frozen";
    case Tower::None: return "none";
  }
  return "?";
}

std::string short_label(const Step& step) {
  const auto& i = info(step.op);
  if (i.kind == StepKind::Composite) {
    std::string out = "[";
    for (size_t k = 0; k < step.sub_steps().size(); ++k) {
      if (k) out += "|";
      out += short_label(step.sub_steps()[k]);
    }
    return out + "]";
  }
  std::string out(i.short_name);
  if (step.micro >= 0) out += std::to_string(step.micro);
  if (step.stage >= 0) out += "s" + std::to_string(step.stage);
  return out;
}

namespace {
// XXH3-64 over DigestFields' byte stream, buffered: XXH3 takes 32 bytes at a time where
// FNV-1a (the digest before issue 25 item 9) multiplied once per byte (bench/bench_digest.cpp).
class Xxh3Sink {
 public:
  Xxh3Sink() { XXH3_64bits_reset(&state_); }
  void add(uint64_t v) {
    if (used_ + 8 > sizeof buf_) flush();
    for (int k = 0; k < 8; ++k) buf_[used_ + k] = static_cast<unsigned char>(v >> (8 * k));
    used_ += 8;
  }
  void bytes(const std::string& s) {
    flush();
    XXH3_64bits_update(&state_, s.data(), s.size());
  }
  uint64_t value() {
    flush();
    return XXH3_64bits_digest(&state_);
  }

 private:
  void flush() {
    XXH3_64bits_update(&state_, buf_, used_);
    used_ = 0;
  }
  XXH3_state_t state_;
  unsigned char buf_[1 << 14];
  size_t used_ = 0;
};
}  // namespace

uint64_t schedule_digest(const Schedule& s) {
  Xxh3Sink sink;
  DigestFields<Xxh3Sink>(sink).schedule(s);
  return sink.value();
}

}  // namespace ppsched
