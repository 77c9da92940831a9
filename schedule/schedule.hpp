// The schedule IR: per-rank step lists plus the facts needed to interpret them
// (placement of stages on ranks, micro-batch count, the optional MPipe layer).
#pragma once

#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "schedule/small_vec.hpp"
#include "schedule/step_types.hpp"

namespace ppsched {

struct TensorDesc {
  std::vector<int64_t> shape;
  std::string dtype;
  bool operator==(const TensorDesc& o) const { return shape == o.shape && dtype == o.dtype; }
  bool operator!=(const TensorDesc& o) const { return !(*this == o); }
};

inline constexpr int32_t kNone = -1;  // absent micro / stage / peer

struct StepLists;
class Slot;

// One step: 16 bytes. The op, micro, stage and peer are inline; the three lists a step rarely
// has (a composite's sub-steps, payload descriptors, an explicit collective group) live behind
// one pointer, null when all are empty. A schedule holds up to millions of steps and every pass
// reads them: the lists cost a step nothing until it has one. Read them with sub_steps(),
// tensors(), group() (empty when absent); change them with edit_*(), which allocates the lists.
// To fit 16 bytes, the stage and the peer are 16-bit (a schedule holds at most kMaxStages
// stages and kMaxRanks ranks, schedule/validate.hpp; readers check before they store) and the
// lists' address is kept in its 48 low bits (user-space addresses on x86-64 and AArch64 Linux;
// an address above is refused with std::bad_alloc where the lists are allocated).
struct Step {
  Op op = Op::FWD;

 private:
  friend class Slot;
  uint8_t idle_ = 0;  // set only in an idle Slot
  uint16_t lists_high_ = 0;  // the lists' address (owned), bits 32..47
  uint32_t lists_low_ = 0;   // ... bits 0..31

 public:
  int32_t micro = kNone;
  int16_t stage = kNone;  // below kMaxStages
  int16_t peer = kNone;   // explicit peer rank (below kMaxRanks); kNone = derived from the peer rule

  Step() = default;
  Step(const Step& o);
  Step(Step&& o) noexcept
      : op(o.op), idle_(o.idle_), lists_high_(o.lists_high_), lists_low_(o.lists_low_), micro(o.micro), stage(o.stage),
        peer(o.peer) {
    o.lists_high_ = 0;
    o.lists_low_ = 0;
  }
  Step& operator=(const Step& o) {
    if (this != &o) {
      Step copy(o);
      swap(copy);
    }
    return *this;
  }
  Step& operator=(Step&& o) noexcept {
    swap(o);
    return *this;
  }
  ~Step();
  void swap(Step& o) noexcept {
    std::swap(op, o.op);
    std::swap(idle_, o.idle_);
    std::swap(lists_high_, o.lists_high_);
    std::swap(lists_low_, o.lists_low_);
    std::swap(micro, o.micro);
    std::swap(stage, o.stage);
    std::swap(peer, o.peer);
  }

  const SmallVec<Step>& sub_steps() const;       // composites
  const SmallVec<TensorDesc>& tensors() const;   // payload descriptors, compared when both ends give them
  const SmallVec<int32_t>& group() const;        // explicit collective group (ALL_REDUCE)
  SmallVec<Step>& edit_sub_steps();
  // The sub-steps to change in place, without allocating the lists of a step that has none.
  struct MutableSteps {
    Step* first;
    Step* last;
    Step* begin() const { return first; }
    Step* end() const { return last; }
    size_t size() const { return static_cast<size_t>(last - first); }
    bool empty() const { return first == last; }
    Step& operator[](size_t i) const { return first[i]; }
  };
  MutableSteps sub_steps_mut();
  SmallVec<TensorDesc>& edit_tensors();
  SmallVec<int32_t>& edit_group();
  bool has_lists() const { return (lists_high_ | lists_low_) != 0; }

  bool operator==(const Step& o) const;
  bool operator!=(const Step& o) const { return !(*this == o); }

 private:
  StepLists* lists_ptr() const {
    return reinterpret_cast<StepLists*>((static_cast<uintptr_t>(lists_high_) << 32) | lists_low_);
  }
  void own_lists(StepLists* p);  // takes p (null: none); refuses an address past 48 bits
  StepLists& lists();
};
static_assert(sizeof(Step) == 16, "Step: keep it at 16 bytes");
static_assert(sizeof(uintptr_t) == 8, "Step keeps 48 bits of a 64-bit address");

struct StepLists {
  SmallVec<Step> sub_steps;
  SmallVec<TensorDesc> tensors;
  SmallVec<int32_t> group;
};

namespace detail {
inline const StepLists kNoLists{};
}

inline void Step::own_lists(StepLists* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a >> 48) {
    delete p;
    throw std::bad_alloc();  // an address a Step cannot hold (none on the supported systems)
  }
  lists_high_ = static_cast<uint16_t>(a >> 32);
  lists_low_ = static_cast<uint32_t>(a);
}
inline Step::Step(const Step& o) : op(o.op), idle_(o.idle_), micro(o.micro), stage(o.stage), peer(o.peer) {
  if (o.has_lists()) own_lists(new StepLists(*o.lists_ptr()));
}
inline Step::~Step() { delete lists_ptr(); }
inline const SmallVec<Step>& Step::sub_steps() const { return (has_lists() ? lists_ptr() : &detail::kNoLists)->sub_steps; }
inline const SmallVec<TensorDesc>& Step::tensors() const { return (has_lists() ? lists_ptr() : &detail::kNoLists)->tensors; }
inline const SmallVec<int32_t>& Step::group() const { return (has_lists() ? lists_ptr() : &detail::kNoLists)->group; }
inline StepLists& Step::lists() {
  if (!has_lists()) own_lists(new StepLists());
  return *lists_ptr();
}
inline SmallVec<Step>& Step::edit_sub_steps() { return lists().sub_steps; }
inline Step::MutableSteps Step::sub_steps_mut() {
  if (!has_lists()) return {nullptr, nullptr};
  return {lists_ptr()->sub_steps.begin(), lists_ptr()->sub_steps.end()};
}
inline SmallVec<TensorDesc>& Step::edit_tensors() { return lists().tensors; }
inline SmallVec<int32_t>& Step::edit_group() { return lists().group; }
inline bool Step::operator==(const Step& o) const {
  return op == o.op && micro == o.micro && stage == o.stage && peer == o.peer &&
         ((lists_high_ == o.lists_high_ && lists_low_ == o.lists_low_) ||
          (sub_steps() == o.sub_steps() && tensors() == o.tensors() && group() == o.group()));
}

// stage below kMaxStages (the caller's: a generator's, or a reader's after its check).
inline Step make_step(Op op, int micro = kNone, int stage = kNone) {
  Step s;
  s.op = op;
  s.micro = micro;
  s.stage = static_cast<int16_t>(stage);
  return s;
}
Step make_composite(Op op, std::vector<Step> sub_steps);

// One slot of a rank's program: a step, or an idle slot (kept for display, skipped when run).
// std::optional<Step>'s interface at a Step's size: the idle mark is a byte of the Step
// (a std::optional would add 8 bytes a slot).
class Slot {
 public:
  Slot() noexcept { step_.idle_ = 1; }
  Slot(std::nullopt_t) noexcept : Slot() {}  // NOLINT: implicit, as std::optional's
  Slot(const Step& s) : step_(s) { step_.idle_ = 0; }  // NOLINT
  Slot(Step&& s) noexcept : step_(std::move(s)) { step_.idle_ = 0; }  // NOLINT
  Slot(const std::optional<Step>& s) : Slot() {  // NOLINT
    if (s) *this = *s;
  }
  Slot(std::optional<Step>&& s) : Slot() {  // NOLINT
    if (s) *this = std::move(*s);
  }
  Slot& operator=(std::nullopt_t) noexcept {
    reset();
    return *this;
  }
  Slot& operator=(const Step& s) {
    step_ = s;
    step_.idle_ = 0;
    return *this;
  }
  Slot& operator=(Step&& s) noexcept {
    step_ = std::move(s);
    step_.idle_ = 0;
    return *this;
  }

  bool has_value() const noexcept { return step_.idle_ == 0; }
  explicit operator bool() const noexcept { return has_value(); }
  Step& operator*() noexcept { return step_; }
  const Step& operator*() const noexcept { return step_; }
  Step* operator->() noexcept { return &step_; }
  const Step* operator->() const noexcept { return &step_; }
  Step& value() {
    if (!has_value()) throw std::bad_optional_access();
    return step_;
  }
  const Step& value() const {
    if (!has_value()) throw std::bad_optional_access();
    return step_;
  }
  void reset() noexcept {
    step_ = Step();
    step_.idle_ = 1;
  }
  template <class... Args>
  Step& emplace(Args&&... args) {
    step_ = Step(std::forward<Args>(args)...);
    step_.idle_ = 0;
    return step_;
  }

  bool operator==(const Slot& o) const { return has_value() == o.has_value() && (!has_value() || step_ == o.step_); }
  bool operator!=(const Slot& o) const { return !(*this == o); }
  bool operator==(std::nullopt_t) const { return !has_value(); }
  bool operator!=(std::nullopt_t) const { return has_value(); }

 private:
  Step step_;
};
static_assert(sizeof(Slot) == 16, "Slot: keep it at a Step's 16 bytes");

using Program = std::vector<Slot>;

enum class PlacementKind : uint8_t { Loop, V, Explicit };

struct Placement {
  PlacementKind kind = PlacementKind::Loop;
  std::vector<int32_t> stage_to_rank;  // always filled (size = stages)

  static Placement loop(int ranks, int stages);
  static Placement v(int ranks, int stages);
  static Placement explicit_map(std::vector<int32_t> stage_to_rank);
  bool operator==(const Placement& o) const { return kind == o.kind && stage_to_rank == o.stage_to_rank; }
};

enum class Overflow : uint8_t { Full, Min };
enum class Tower : uint8_t { Trainable, Frozen, None };

struct MPipeConfig {
  Overflow overflow = Overflow::Full;
  Tower tower = Tower::Trainable;
  bool owner_backward = false;
  std::vector<int32_t> owners;  // explicit owner per micro; empty = from `overflow`
  bool operator==(const MPipeConfig& o) const {
    return overflow == o.overflow && tower == o.tower && owner_backward == o.owner_backward &&
           owners == o.owners;
  }
};

// What a schedule was planned for (`tune -o` with a model): the model file it was priced from,
// which layers each stage holds, and the training settings given with it (0 or empty: the model
// file's own). The commands that price a schedule take them unless told otherwise
// (tools/cli/planned_for.cpp). The schedule file's "planned_for" object.
struct PlannedFor {
  std::string model;              // the model file, as the planner was given it
  std::vector<int32_t> layout;    // body layers per stage, in stage order
  std::string layout_megatron;    // the same, as Megatron's --pipeline-model-parallel-layout (for people)
  int64_t seq_len = 0, micro_batch_size = 0;
  int32_t tp = 0, ep = 0, etp = 0, dp = 0;
  std::string recompute, precision, optimizer;
  bool fsdp = false, distributed_optimizer = false;

  bool operator==(const PlannedFor& o) const {
    return model == o.model && layout == o.layout && seq_len == o.seq_len && micro_batch_size == o.micro_batch_size &&
           tp == o.tp && ep == o.ep && etp == o.etp && dp == o.dp && recompute == o.recompute &&
           precision == o.precision && optimizer == o.optimizer && fsdp == o.fsdp &&
           distributed_optimizer == o.distributed_optimizer;
  }
  bool operator!=(const PlannedFor& o) const { return !(*this == o); }
};

struct Schedule {
  std::string name;
  int32_t ranks = 0;
  int32_t stages = 0;
  int32_t micro_batches = 0;
  Placement placement;
  std::optional<MPipeConfig> mpipe;
  // Replicated stages (Chimera, bidirectional DualPipe): `pipes` copies of a pipeline of
  // stages / pipes model stages run side by side. Stage k is copy k / S of model stage k % S
  // (S = model_stages()); each copy is a chain of its own (stage k hands over to k + 1 only
  // inside its copy), and micro-batch m runs through the copy micro_pipe[m] only. The copies of
  // a model stage add up their weight gradients with a REPLICA_GRAD_SYNC. pipes = 1: none.
  int32_t pipes = 1;
  std::vector<int32_t> micro_pipe;  // pipes > 1: the copy of each micro-batch (size micro_batches)
  std::vector<Program> programs;
  std::optional<PlannedFor> planned_for;  // a planned schedule's model, layout and settings
  // Derived from the programs, never written to a file: the body carries hyper-parallel's data
  // steps (a DATA_LOAD, DATA_SEND or DATA_RECV with a stage), so each micro-batch's inputs and
  // labels travel with its forward and the last stage takes its labels from what arrived (the
  // step table's DataSteps condition). Readers and generators set it (mark_data_steps).
  bool data_steps = false;

  int rank_of(int stage) const { return placement.stage_to_rank[static_cast<size_t>(stage)]; }
  // Replicated stages (pipes > 1); with one pipe these are the plain chain's answers.
  int model_stages() const { return pipes > 1 ? stages / pipes : stages; }
  int model_stage_of(int stage) const { return pipes > 1 ? stage % model_stages() : stage; }
  int pipe_of_stage(int stage) const { return pipes > 1 ? stage / model_stages() : 0; }
  int pipe_of_micro(int micro) const {
    return pipes > 1 && micro >= 0 && static_cast<size_t>(micro) < micro_pipe.size() ? micro_pipe[static_cast<size_t>(micro)] : 0;
  }
  bool is_first_stage(int stage) const { return model_stage_of(stage) == 0; }
  bool is_last_stage(int stage) const { return model_stage_of(stage) == model_stages() - 1; }
  // Whether micro-batch `micro` runs through `stage` (always, with one pipe).
  bool runs_through(int stage, int micro) const { return pipes <= 1 || pipe_of_stage(stage) == pipe_of_micro(micro); }
  // The stage a step of `stage` hands over to (+1) or receives from (-1) inside its copy; kNone
  // past either end of the chain.
  int chain_neighbour(int stage, int delta) const {
    const int to = stage + delta;
    if (stage < 0 || to < 0 || to >= stages || pipe_of_stage(to) != pipe_of_stage(stage)) return -1;
    return to;
  }
  // The ranks holding a copy of `stage`'s model stage, ascending (REPLICA_GRAD_SYNC's group).
  std::vector<int32_t> replica_ranks(int stage) const;
  // Number of owner ranks in MPipe: NT = min(ranks, micro_batches).
  int mpipe_owner_count() const;
  // owner(m) under the MPipe rule (or the explicit owners array). Requires mpipe.
  int owner_of(int micro) const;
  // Stages placed on `rank`, ascending.
  std::vector<int> stages_of(int rank) const;
  // Number of non-idle steps over all ranks (composites count once).
  size_t step_count() const;
  // Number of slots (idle ones too) over all ranks: an upper bound on steps, in O(ranks).
  size_t slot_count() const {
    size_t n = 0;
    for (const auto& prog : programs) n += prog.size();
    return n;
  }
  bool operator==(const Schedule& o) const {
    return name == o.name && ranks == o.ranks && stages == o.stages &&
           micro_batches == o.micro_batches && placement == o.placement && mpipe == o.mpipe &&
           pipes == o.pipes && micro_pipe == o.micro_pipe &&
           data_steps == o.data_steps && programs == o.programs;
  }
};

// Whether any program holds a body data step (a DATA_LOAD, DATA_SEND or DATA_RECV with a
// stage, composites included), and setting Schedule::data_steps from it.
bool has_body_data_steps(const Schedule& s);
void mark_data_steps(Schedule& s);

// The rank a P2P step on `rank` talks to: the explicit peer if given, else the step type's
// peer rule. Returns kNone for steps without a peer.
int peer_of(const Schedule& s, int rank, const Step& step);

// The condition bits (step_types.hpp, Cond) that hold for `step` on `rank`.
uint32_t conditions_of(const Schedule& s, int rank, const Step& step);

// Strings for enums used in files and output.
std::string_view to_string(PlacementKind k);
std::string_view to_string(Overflow o);
std::string_view to_string(Tower t);

// Compact grid notation used by `ppsched show` and messages: F3s1, FS3s1, BCAST, TF2,
// [B0s3|F4s1] for composites.
std::string short_label(const Step& step);

// A 64-bit digest of everything a schedule says (shape, placement, MPipe settings, copies and
// every slot of every program, idle slots included), computed over the in-memory schedule:
// ranks started with different schedules compare digests instead of re-written files. Equal
// schedules have equal digests; different ones differ but for a 2^-64 chance (XXH3-64).
uint64_t schedule_digest(const Schedule& s);

}  // namespace ppsched
