// The canonical schedule file's reader (schedule_json.hpp; the writer is schedule_json_write.cpp).
//
// Reading is a SAX handler on our own strict JSON parser (json_lexer.hpp, accepting exactly
// what nlohmann's does, about three times faster) that builds the IR directly (no document):
// time and memory are those of the text and the IR. It refuses duplicate keys, which
// nlohmann's DOM would silently collapse. Every type and key problem is an InputError
// located by rank, step index and field path; ranges and field presence are then checked by
// validate_structure. A step in the writer's plain shape is read in one pass over its bytes
// (Reader::claim_object) instead of through eight events: half the time of a file as written.
#include "schedule/formats/schedule_json.hpp"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <memory>
#include <unordered_set>

#include "schedule/errors.hpp"
#include "schedule/formats/json_lexer.hpp"
#include "schedule/formats/json_support.hpp"
#include "schedule/formats/action_notation.hpp"
#include "schedule/validate.hpp"

namespace ppsched {
namespace {

using Keys = std::vector<std::string_view>;
const Keys kTopKeys = {"format",        "version",   "name",  "ranks",      "stages",
                       "micro_batches", "placement", "mpipe", "programs", "pipes", "micro_pipe", "planned_for"};
const Keys kPlanKeys = {"model", "layout", "layout_megatron", "seq_len", "micro_batch_size", "tp", "ep", "etp",
                        "dp", "recompute", "precision", "optimizer", "fsdp", "distributed_optimizer"};
const Keys kMPipeKeys = {"overflow", "tower", "owner_backward", "owners"};
const Keys kStepKeys = {"op", "micro", "stage", "peer", "sub_steps", "tensors", "group"};
const Keys kTensorKeys = {"shape", "dtype"};
// Positions in the lists above.
enum TopKey { kTopFormat, kTopVersion, kTopName, kTopRanks, kTopStages, kTopMicro, kTopPlacement, kTopMPipe,
              kTopPrograms, kTopPipes, kTopMicroPipe, kTopPlannedFor };
enum PlanKey { kPlanModel, kPlanLayout, kPlanLayoutMegatron, kPlanSeqLen, kPlanMicroBatchSize, kPlanTp, kPlanEp, kPlanEtp,
               kPlanDp, kPlanRecompute, kPlanPrecision, kPlanOptimizer, kPlanFsdp, kPlanDistributedOptimizer };
enum MPipeKey { kMPipeOverflow, kMPipeTower, kMPipeOwnerBackward, kMPipeOwners };
enum StepKey { kStepOp, kStepMicro, kStepStage, kStepPeer, kStepSubSteps, kStepTensors, kStepGroup };
enum TensorKey { kTensorShape, kTensorDtype };

// Users may annotate files; these keys are skipped everywhere.
bool is_annotation(std::string_view key) { return key == "comment" || key.substr(0, 2) == "x-"; }

std::string join(const Keys& keys) { return join_keys(keys); }

// The reader is a SAX handler over parse_json_sax: it builds the IR as the events arrive
// and keeps no document, so memory is the text plus the IR. A stack of frames says what
// each open container is (the top object, a program, a step, ...); a value event is checked
// against the frame it lands in. The field path ("programs[1][3].micro") is built from the
// stack only when an error needs it.
class Reader {
 public:
  using number_integer_t = int64_t;
  using number_unsigned_t = uint64_t;
  using number_float_t = double;

  Reader(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  Schedule read() {
    parse_json_sax(text_, *this);
    finish();
    mark_data_steps(s_);
    validate_structure(s_, file_);
    drop_rank_tags(s_);
    return std::move(s_);
  }

  // ---- SAX events ----
  bool null() { return scalar(Value{Kind::Null}); }
  bool boolean(bool v) {
    Value x{Kind::Bool};
    x.b = v;
    return scalar(x);
  }
  bool number_integer(number_integer_t v) {
    Value x{Kind::Int};
    x.i = v;
    return scalar(x);
  }
  bool number_unsigned(number_unsigned_t v) {
    Value x{Kind::Int};
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      x.too_big = true;
      x.u = v;
    } else {
      x.i = static_cast<int64_t>(v);
    }
    return scalar(x);
  }
  bool number_float(number_float_t, std::string_view text) {
    Value x{Kind::Float};
    x.s = &text;
    return scalar(x);
  }
  bool string(std::string_view v) {
    Value x{Kind::String};
    x.s = &v;
    return scalar(x);
  }
  bool start_object(std::size_t) { return open(Kind::Object); }
  bool start_array(std::size_t) { return open(Kind::Array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string_view k);
  const char* claim_object(const char* p, const char* end);
  bool parse_error(std::size_t position, const std::string& message);

 private:
  enum class Kind : uint8_t { Null, Bool, Int, Float, String, Array, Object };
  struct Value {
    Kind kind;
    bool b = false;
    bool too_big = false;  // an integer beyond int64 (u holds it)
    int64_t i = 0;
    uint64_t u = 0;
    const std::string_view* s = nullptr;  // strings; a float's text as written
  };
  static const char* type_name(Kind k) {
    switch (k) {
      case Kind::Null: return "null";
      case Kind::Bool: return "a boolean";
      case Kind::Int: return "an integer";
      case Kind::Float: return "a number with a fraction";
      case Kind::String: return "a string";
      case Kind::Array: return "an array";
      case Kind::Object: return "an object";
    }
    return "a value";
  }

  // What an open container is.
  enum class Ctx : uint8_t { Top, Placement, MPipe, Owners, MicroPipe, Programs, Program, Step, SubSteps, Tensors, Tensor,
                             Shape, Group, Plan, PlanLayout, Skip };
  // A container's own place in its parent is the parent's pending key or element (which
  // cannot change while the container is open), so a frame stores no label. Frames are
  // reused: a push resets one, a pop only lowers depth_, so a step costs no allocation.
  struct Frame {
    Ctx ctx = Ctx::Top;
    bool object = false;
    bool annotation = false; // objects: the pending key is "comment" or "x-...", its value skipped
    int depth = 0;           // steps: 0 for a program's step, 1 for a sub-step, ...
    int key_id = -1;         // objects: the pending key's position in the frame's key list, -1 if none
    uint32_t seen = 0;       // objects: known keys seen (bit per key in the frame's key list)
    long count = 0;          // arrays: elements begun so far
    std::string_view known_key;  // objects: the key whose value comes next, when in the frame's key list
    std::string key_store;       // objects: the key whose value comes next, when not
    Step* step = nullptr;    // Step frames (and the owner of SubSteps/Tensors/Group frames)
    TensorDesc* tensor = nullptr;
    std::unique_ptr<std::unordered_set<std::string>> others;  // annotation / unknown-context keys seen
    // (Not a view into key_store: frames move when the stack grows.)
    std::string_view key() const { return key_id >= 0 ? known_key : std::string_view(key_store); }
  };
  Frame& top() { return stack_[depth_ - 1]; }
  const Frame& top() const { return stack_[depth_ - 1]; }

  // ---- locations ----
  // The path of the value about to be read (the pending key or element of the innermost frame).
  std::string path() const { return path_of(depth_); }
  // The path of the innermost open container itself.
  std::string container_path() const { return path_of(depth_ == 0 ? 0 : depth_ - 1); }
  // The pending keys or elements of the outermost `frames` frames, joined.
  std::string path_of(size_t frames) const {
    std::string out;
    for (size_t k = 0; k < frames; ++k) {
      const Frame& f = stack_[k];
      if (!f.object) {
        out += "[" + std::to_string(f.count) + "]";
      } else if (!f.key().empty()) {
        if (!out.empty()) out += '.';
        out += f.key();
      }
    }
    return out;
  }
  [[noreturn]] void fail_at(std::string field, std::string msg) const {
    Location loc;
    loc.file = file_;
    loc.rank = rank_;
    loc.index = index_;
    loc.field = std::move(field);
    throw InputError(std::move(loc), std::move(msg));
  }
  [[noreturn]] void fail(std::string msg) const { fail_at(path(), std::move(msg)); }
  // One more slot in a program (a step or an idle slot), held to kMaxSlots before it is held.
  void count_slot() {
    if (++slots_ > kMaxSlots)
      fail("the programs hold more than " + std::to_string(kMaxSlots) + " slots (steps and idle slots), the limit "
           "(docs/verification.md \"Limits\")");
  }
  [[noreturn]] void wrong_type(const char* expected, Kind got) const {
    const std::string p = path();
    fail_at(p, "expected " + std::string(expected) + " for " + p + ", got " + type_name(got));
  }
  [[noreturn]] void missing(std::string_view key, const std::string& what) const {
    const std::string where = container_path();
    fail_at(where.empty() ? std::string(key) : where + "." + std::string(key),
            "missing key '" + std::string(key) + "' in " + (where.empty() ? "the top level" : where) +
                ": expected " + what);
  }

  // ---- values ----
  int64_t integer(const Value& v, int64_t lo, int64_t hi, const char* what) const {
    if (v.kind != Kind::Int) wrong_type("an integer", v.kind);
    if (v.too_big || v.i < lo || v.i > hi) {
      const std::string p = path();
      fail_at(p, "expected " + std::string(what) + " for " + p + ", got " +
                     (v.too_big ? std::to_string(v.u) : std::to_string(v.i)));
    }
    return v.i;
  }
  int32_t int32(const Value& v, int32_t lo = std::numeric_limits<int32_t>::min(),
                const char* what = "an integer") const {
    return static_cast<int32_t>(integer(v, lo, std::numeric_limits<int32_t>::max(), what));
  }
  std::string_view text(const Value& v) const {
    if (v.kind != Kind::String) wrong_type("a string", v.kind);
    return *v.s;
  }
  bool boolean_of(const Value& v) const {
    if (v.kind != Kind::Bool) wrong_type("true or false", v.kind);
    return v.b;
  }
  // One of a fixed set of names; the error lists them.
  template <class E>
  E pick(const Value& v, std::string_view what, std::initializer_list<std::pair<std::string_view, E>> names) const {
    const std::string_view name = text(v);
    std::string known;
    for (const auto& [n, value] : names) {
      if (name == n) return value;
      known += (known.empty() ? "\"" : ", \"") + std::string(n) + "\"";
    }
    fail("unknown " + std::string(what) + " \"" + clip(name) + "\": expected one of " + known);
  }
  Step action(const Value& v) const {
    std::string error;
    auto step = parse_action(*v.s, &error);
    if (!step) fail(error);
    return std::move(*step);
  }

  // The op of a step-table name; a short scan beats hashing for names of a few bytes.
  static std::optional<Op> op_named(std::string_view name) {
    static const std::vector<std::pair<std::string_view, Op>> names = [] {
      std::vector<std::pair<std::string_view, Op>> v;
      for (const auto& row : step_table()) v.emplace_back(row.name, row.op);
      return v;
    }();
    for (const auto& [n, op] : names) {
      if (n.size() != name.size() || n.empty() || n[0] != name[0]) continue;
      size_t i = 1;
      while (i < n.size() && n[i] == name[i]) ++i;
      if (i == n.size()) return op;
    }
    return std::nullopt;
  }

  // ---- keys ----
  // The position of `key` in `known`, or -1. The search starts after `after` (the key
  // before it in this object) and wraps: the writer puts keys in list order, so the first
  // candidate is nearly always the one.
  static int key_index(const Keys& known, std::string_view key, int after) {
    const size_t n = known.size();
    size_t k = after + 1 < static_cast<int>(n) ? static_cast<size_t>(after + 1) : 0;
    for (size_t tries = 0; tries < n; ++tries, k = k + 1 == n ? 0 : k + 1) {
      // Length and first byte first: the keys are short and a call to memcmp costs more.
      const std::string_view c = known[k];
      if (c.size() != key.size() || c.empty() || c[0] != key[0]) continue;
      size_t i = 1;
      while (i < c.size() && c[i] == key[i]) ++i;
      if (i == c.size()) return static_cast<int>(k);
    }
    return -1;
  }
  [[noreturn]] void duplicate(std::string_view key) const {
    const std::string k(key);
    const std::string where = container_path();
    fail_at(where.empty() ? k : where + "." + k,
            "duplicate key '" + clip(k) + "'" + (where.empty() ? "" : " in " + where) + ": each key may appear once");
  }
  void note_other(Frame& f, std::string_view k) {
    if (!f.others) f.others = std::make_unique<std::unordered_set<std::string>>();
    if (!f.others->insert(std::string(k)).second) duplicate(k);
  }
  static const Keys* keys_of(Ctx c) {
    switch (c) {
      case Ctx::Top: return &kTopKeys;
      case Ctx::MPipe: return &kMPipeKeys;
      case Ctx::Plan: return &kPlanKeys;
      case Ctx::Step: return &kStepKeys;
      case Ctx::Tensor: return &kTensorKeys;
      default: return nullptr;
    }
  }

  // ---- containers ----
  Frame& push(Ctx ctx, bool object) {
    if (depth_ == stack_.size()) stack_.emplace_back();
    Frame& f = stack_[depth_++];
    f.ctx = ctx;
    f.object = object;
    f.annotation = false;
    f.depth = 0;
    f.key_id = -1;
    f.seen = 0;
    f.count = 0;
    f.step = nullptr;
    f.tensor = nullptr;
    f.key_store.clear();
    if (f.others) f.others.reset();
    return f;
  }

  bool open(Kind kind);
  void open_top_field(int key_id, Kind kind);
  void open_mpipe_field(int key_id, Kind kind);
  bool scalar(const Value& v);
  void top_field(const Frame& f, const Value& v);
  void mpipe_field(int key_id, const Value& v);
  void plan_field(int key_id, const Value& v);
  void program_slot(const Value& v);
  bool close();
  void begin_element() {
    Frame& f = top();
    if (f.ctx == Ctx::Programs) {
      rank_ = static_cast<int>(f.count);
      index_ = -1;
    } else if (f.ctx == Ctx::Program) {
      index_ = static_cast<int>(f.count);
    }
  }
  void end_element() {
    if (depth_ != 0 && !top().object) ++top().count;
  }
  void step_value(Frame& f, const Value* v, Kind kind);
  void finish_step(const Frame& f);
  void finish();

  std::string_view text_;
  const std::string& file_;
  std::vector<Frame> stack_;  // the open containers are stack_[0, depth_)
  size_t depth_ = 0;
  Schedule s_;
  int64_t slots_ = 0;  // slots held so far, over all programs (count_slot)
  int rank_ = -1;
  int index_ = -1;
  bool done_ = false;
  // The top object's keys as read (placement resolved once ranks and stages are known).
  std::optional<std::string> format_;
  bool has_version_ = false, has_ranks_ = false, has_stages_ = false, has_micro_ = false, has_programs_ = false;
  std::optional<std::string> placement_name_;
  std::optional<std::vector<int32_t>> placement_map_;
};

bool Reader::key(std::string_view k) {
  Frame& f = top();
  const Keys* known = keys_of(f.ctx);
  const int at = known ? key_index(*known, k, f.key_id) : -1;
  if (at >= 0) {
    if (f.seen & (1u << at)) duplicate(k);
    f.seen |= 1u << at;
  } else {
    note_other(f, k);
    if (known && !is_annotation(k)) {
      const std::string where = container_path();
      const char* what = f.ctx == Ctx::Step ? "step " : f.ctx == Ctx::Tensor ? "tensor " : "";
      fail_at(where.empty() ? std::string(k) : where + "." + std::string(k),
              "unknown key '" + clip(k) + "' in " + (where.empty() ? "the top level" : what + where) +
                  ": expected one of " + join(*known) + " (keys starting with x- and \"comment\" are ignored)");
    }
  }
  f.annotation = at < 0;
  f.key_id = at;
  if (at >= 0) {
    f.known_key = (*known)[static_cast<size_t>(at)];
  } else {
    f.key_store = k;
  }
  return true;
}

// The plain shape of a program's step, read in one pass over its bytes: {"op": "NAME"} with
// any of "micro", "stage" and "peer" as integers from 0 to 2^31 - 1, each key once, keys and
// name in plain ASCII (no escapes), any JSON whitespace between tokens. That is how the writer
// writes every step without sub-steps, tensors or a group, so a file as written reads at the
// cost of its bytes instead of eight events a step. Anything else (other keys, escapes,
// duplicates, a sign, a fraction, more than ten digits, an unknown op, malformed JSON) is
// declined before anything is stored, and the events read it with their checks and located
// messages; what is claimed is exactly what they would have built.
const char* Reader::claim_object(const char* p, const char* end) {
  namespace d = json_lexer_detail;
  if (depth_ == 0 || top().ctx != Ctx::Program) return nullptr;
  auto skip_ws = [&] {
    while (p != end && d::is_ws(*p)) ++p;
  };
  // A string of plain bytes (which decodes to itself): its text, or false.
  auto plain_string = [&](std::string_view& out) {
    if (p == end || *p != '"') return false;
    const char* run = ++p;
    while (p != end && d::plain(*p)) ++p;
    if (p == end || *p != '"') return false;
    out = std::string_view(run, static_cast<size_t>(p - run));
    ++p;
    return true;
  };
  auto digit = [&] { return p != end && *p >= '0' && *p <= '9'; };
  Step st;
  uint32_t seen = 0;
  int at = -1;
  ++p;  // the '{'
  for (;;) {
    skip_ws();
    std::string_view key;
    if (!plain_string(key)) return nullptr;
    at = key_index(kStepKeys, key, at);
    if (at < 0 || at > kStepPeer || (seen & (1u << at))) return nullptr;
    seen |= 1u << at;
    skip_ws();
    if (p == end || *p != ':') return nullptr;
    ++p;
    skip_ws();
    if (at == kStepOp) {
      std::string_view name;
      if (!plain_string(name)) return nullptr;
      const auto op = op_named(name);
      if (!op) return nullptr;
      st.op = *op;
    } else {
      // 0 or [1-9][0-9]{0,9}, then no fraction or exponent.
      if (!digit()) return nullptr;
      int64_t v = *p++ - '0';
      for (int digits = 1; v != 0 && digit(); ++p) {
        if (++digits > 10) return nullptr;
        v = v * 10 + (*p - '0');
      }
      if (digit() || (p != end && (*p == '.' || *p == 'e' || *p == 'E'))) return nullptr;
      if (v > std::numeric_limits<int32_t>::max()) return nullptr;
      if (at == kStepMicro) {
        st.micro = static_cast<int32_t>(v);
      } else {
        // Past a Step's 16 bits: the general path reports it.
        if (v >= (at == kStepStage ? kMaxStages : kMaxRanks)) return nullptr;
        (at == kStepStage ? st.stage : st.peer) = static_cast<int16_t>(v);
      }
    }
    skip_ws();
    if (p == end) return nullptr;
    if (*p == '}') break;
    if (*p != ',') return nullptr;
    ++p;
  }
  if (!(seen & (1u << kStepOp))) return nullptr;
  begin_element();
  count_slot();
  s_.programs.back().emplace_back(std::move(st));
  end_element();
  return p + 1;
}

// A container as the value of the top object's key `key_id`.
void Reader::open_top_field(int key_id, Kind kind) {
  const bool object = kind == Kind::Object;
  if (key_id == kTopPlacement) {
    if (object) wrong_type("\"loop\", \"v\" or an array with the rank of each stage", kind);
    placement_map_.emplace();
    placement_name_.reset();
    push(Ctx::Placement, false);
  } else if (key_id == kTopMPipe) {
    if (!object) wrong_type("an object", kind);
    s_.mpipe.emplace();
    push(Ctx::MPipe, true);
  } else if (key_id == kTopPrograms) {
    if (object) wrong_type("an array", kind);
    has_programs_ = true;
    push(Ctx::Programs, false);
  } else if (key_id == kTopMicroPipe) {
    if (object) wrong_type("an array with the pipe of each micro-batch", kind);
    push(Ctx::MicroPipe, false);
  } else if (key_id == kTopPlannedFor) {
    if (!object) wrong_type("an object (the model and layout the schedule was planned for)", kind);
    s_.planned_for.emplace();
    push(Ctx::Plan, true);
  } else {
    wrong_type(key_id == kTopName || key_id == kTopFormat ? "a string" : "an integer", kind);
  }
}

// A container as the value of the mpipe object's key `key_id`: only "owners" holds one.
void Reader::open_mpipe_field(int key_id, Kind kind) {
  if (key_id == kMPipeOwners) {
    if (kind == Kind::Object) wrong_type("an array", kind);
    push(Ctx::Owners, false);
  } else if (key_id == kMPipeOwnerBackward) {
    wrong_type("true or false", kind);
  } else {
    wrong_type("a string", kind);
  }
}

// A container begins: check that one is allowed here and push its frame.
bool Reader::open(Kind kind) {
  const bool object = kind == Kind::Object;
  if (depth_ == 0) {
    if (done_) return true;  // not reached: the parser refuses a second value
    if (!object) fail_at({}, std::string("expected a JSON object at the top level, got ") + type_name(kind));
    push(Ctx::Top, true);
    return true;
  }
  Frame& f = top();
  begin_element();
  if (f.ctx == Ctx::Skip || (f.object && f.annotation)) {
    push(Ctx::Skip, object);
    return true;
  }
  switch (f.ctx) {
    case Ctx::Top:
      open_top_field(f.key_id, kind);
      return true;
    case Ctx::MPipe:
      open_mpipe_field(f.key_id, kind);
      return true;
    case Ctx::Plan:
      if (f.key_id != kPlanLayout || object) wrong_type(f.key_id == kPlanLayout ? "an array" : "a scalar", kind);
      push(Ctx::PlanLayout, false);
      return true;
    case Ctx::Programs:
      if (object) wrong_type("an array", kind);
      s_.programs.emplace_back();
      // Ranks' programs are usually of similar length; saves the growth copies.
      if (s_.programs.size() > 1) s_.programs.back().reserve(s_.programs[s_.programs.size() - 2].size());
      push(Ctx::Program, false);
      return true;
    case Ctx::Program: {
      if (!object) wrong_type("a step object, an action string or null", kind);
      Program& prog = s_.programs.back();
      count_slot();
      prog.emplace_back(Step{});
      Frame& nf = push(Ctx::Step, true);
      nf.step = &*prog.back();
      return true;
    }
    case Ctx::SubSteps: {
      if (!object) wrong_type("a step object or an action string", kind);
      Step* parent = f.step;
      const int depth = f.depth;
      parent->edit_sub_steps().emplace_back();
      Frame& nf = push(Ctx::Step, true);
      nf.step = &parent->edit_sub_steps().back();
      nf.depth = depth;
      return true;
    }
    case Ctx::Step:
      step_value(f, nullptr, kind);
      return true;
    case Ctx::Tensors: {
      if (!object)
        wrong_type("a tensor object {\"shape\": [...], \"dtype\": \"...\"}", kind);
      Step* st = f.step;
      st->edit_tensors().emplace_back();
      Frame& nf = push(Ctx::Tensor, true);
      nf.tensor = &st->edit_tensors().back();
      return true;
    }
    case Ctx::Tensor:
      if (f.key_id == kTensorShape) {
        if (object) wrong_type("an array", kind);
        TensorDesc* t = f.tensor;
        push(Ctx::Shape, false).tensor = t;
      } else {
        wrong_type("a string", kind);
      }
      return true;
    case Ctx::Placement:
    case Ctx::Owners:
    case Ctx::MicroPipe:
    case Ctx::Shape:
    case Ctx::Group:
    case Ctx::PlanLayout:
      wrong_type("an integer", kind);
    case Ctx::Skip: break;
  }
  return true;
}

// A step's field: scalar values (v set) or containers (v null, kind the container's).
void Reader::step_value(Frame& f, const Value* v, Kind kind) {
  Step& st = *f.step;
  const int k = f.key_id;
  if (k == kStepOp) {
    if (!v) wrong_type("a string", kind);
    const std::string_view name = text(*v);
    const auto op = op_named(name);
    if (!op) {
      std::string msg = "unknown op '" + clip(name) + "'";
      if (auto torch = op_from_torch_token(name))
        msg += " (PyTorch notation; the JSON name is " + std::string(op_name(*torch)) + ")";
      std::string names;
      for (const auto& row : step_table()) names += (names.empty() ? "" : ", ") + std::string(row.name);
      fail(msg + ": expected one of " + names);
    }
    st.op = *op;
  } else if (k == kStepMicro) {
    if (!v) wrong_type("an integer", kind);
    st.micro = int32(*v, 0, "an integer >= 0");
  } else if (k == kStepStage) {
    if (!v) wrong_type("an integer", kind);
    // Within the stages a schedule may hold, checked before a Step's 16 bits take it.
    st.stage = static_cast<int16_t>(integer(*v, kNone, kMaxStages - 1, "an integer from 0 to 32767, or -1 for no stage"));
  } else if (k == kStepPeer) {
    if (!v) wrong_type("an integer", kind);
    st.peer = static_cast<int16_t>(integer(*v, 0, kMaxRanks - 1, "a rank from 0 to 32767"));
  } else if (k == kStepSubSteps) {
    if (f.depth >= 2) fail("composites do not nest: expected no sub_steps at this depth");
    if (v || kind != Kind::Array) wrong_type("an array", v ? v->kind : kind);
    const int depth = f.depth;
    Frame& nf = push(Ctx::SubSteps, false);
    nf.step = &st;
    nf.depth = depth + 1;
  } else if (k == kStepTensors || k == kStepGroup) {
    if (v || kind != Kind::Array) wrong_type("an array", v ? v->kind : kind);
    push(k == kStepGroup ? Ctx::Group : Ctx::Tensors, false).step = &st;
  }
}

// A scalar as the value of a top-object key: the header fields, counts and placement by name.
void Reader::top_field(const Frame& f, const Value& v) {
  const std::string k(f.key());
  const int id = f.key_id;
  if (id == kTopFormat) {
    format_ = clip(text(v));
    if (*v.s != kScheduleJsonFormat)
      fail("expected format \"" + std::string(kScheduleJsonFormat) + "\", got \"" + *format_ + "\"");
  } else if (id == kTopVersion) {
    const int version = int32(v);
    has_version_ = true;
    if (version != kScheduleJsonVersion)
      fail("unsupported version " + std::to_string(version) + ": this build reads version " +
           std::to_string(kScheduleJsonVersion) + " only");
  } else if (id == kTopName) {
    s_.name = std::string(text(v));
  } else if (id == kTopPipes) {
    const int32_t count = int32(v);
    if (count < 1 || count > kMaxCount) fail("expected a pipe count of at least 1 for pipes, got " + std::to_string(count));
    s_.pipes = count;
  } else if (id == kTopMicroPipe) {
    wrong_type("an array with the pipe of each micro-batch", v.kind);
  } else if (id == kTopRanks || id == kTopStages || id == kTopMicro) {
    const int32_t count = int32(v);
    // Checked here, before anything is sized by the count.
    const int32_t most = id == kTopRanks ? kMaxRanks : id == kTopStages ? kMaxStages : kMaxCount;
    if (count > most)
      fail("expected at most " + std::to_string(most) + " for " + k + ", got " + std::to_string(count));
    if (id == kTopRanks) {
      s_.ranks = count;
      has_ranks_ = true;
    } else if (id == kTopStages) {
      s_.stages = count;
      has_stages_ = true;
    } else {
      s_.micro_batches = count;
      has_micro_ = true;
    }
  } else if (id == kTopPlacement) {
    if (v.kind != Kind::String) wrong_type("\"loop\", \"v\" or an array with the rank of each stage", v.kind);
    if (*v.s != "loop" && *v.s != "v")
      fail("unknown placement \"" + clip(*v.s) +
           "\": expected \"loop\", \"v\" or an array with the rank of each stage");
    placement_name_ = std::string(*v.s);
    placement_map_.reset();
  } else if (id == kTopMPipe || id == kTopPlannedFor) {
    wrong_type("an object", v.kind);
  } else if (id == kTopPrograms) {
    wrong_type("an array", v.kind);
  }
}

// A scalar in the mpipe object.
void Reader::mpipe_field(int key_id, const Value& v) {
  MPipeConfig& m = *s_.mpipe;
  if (key_id == kMPipeOverflow) {
    m.overflow = pick<Overflow>(v, "overflow", {{"full", Overflow::Full}, {"min", Overflow::Min}});
  } else if (key_id == kMPipeTower) {
    m.tower = pick<Tower>(v, "tower",
                          {{"trainable", Tower::Trainable}, {"frozen", Tower::Frozen}, {"none", Tower::None}});
  } else if (key_id == kMPipeOwnerBackward) {
    m.owner_backward = boolean_of(v);
  } else {
    wrong_type("an array", v.kind);
  }
}

// A scalar in the planned_for object.
void Reader::plan_field(int key_id, const Value& v) {
  PlannedFor& p = *s_.planned_for;
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  switch (key_id) {
    case kPlanModel: p.model = std::string(text(v)); break;
    case kPlanLayout: wrong_type("an array with the body layers of each stage", v.kind);
    case kPlanLayoutMegatron: p.layout_megatron = std::string(text(v)); break;
    case kPlanSeqLen: p.seq_len = integer(v, 1, kMax, "a sequence length >= 1"); break;
    case kPlanMicroBatchSize: p.micro_batch_size = integer(v, 1, kMax, "a micro-batch size >= 1"); break;
    case kPlanTp: p.tp = int32(v, 1, "a degree >= 1"); break;
    case kPlanEp: p.ep = int32(v, 1, "a degree >= 1"); break;
    case kPlanEtp: p.etp = int32(v, 1, "a degree >= 1"); break;
    case kPlanDp: p.dp = int32(v, 1, "a degree >= 1"); break;
    case kPlanRecompute:
      p.recompute = pick<std::string>(v, "recompute", {{"none", "none"}, {"selective", "selective"}, {"full", "full"}});
      break;
    case kPlanPrecision:
      p.precision = pick<std::string>(v, "precision", {{"bf16", "bf16"}, {"fp16", "fp16"}, {"fp32", "fp32"}});
      break;
    case kPlanOptimizer: p.optimizer = pick<std::string>(v, "optimizer", {{"adam", "adam"}, {"adamw", "adamw"}, {"sgd", "sgd"}}); break;
    case kPlanFsdp: p.fsdp = boolean_of(v); break;
    case kPlanDistributedOptimizer: p.distributed_optimizer = boolean_of(v); break;
    default: break;
  }
}

// A scalar slot of a program: null (idle) or an action string.
void Reader::program_slot(const Value& v) {
  if (v.kind == Kind::Null) {
    count_slot();
    s_.programs.back().push_back(std::nullopt);
  } else if (v.kind == Kind::String) {
    count_slot();
    s_.programs.back().push_back(action(v));
  } else {
    wrong_type("a step object, an action string or null", v.kind);
  }
}

// A scalar value: checked against where it lands and stored.
bool Reader::scalar(const Value& v) {
  if (depth_ == 0) {
    if (!done_) fail_at({}, std::string("expected a JSON object at the top level, got ") + type_name(v.kind));
    return true;
  }
  Frame& f = top();
  begin_element();
  if (f.ctx == Ctx::Skip || (f.object && f.annotation)) {
    end_element();
    return true;
  }
  switch (f.ctx) {
    case Ctx::Top: top_field(f, v); break;
    case Ctx::Placement: placement_map_->push_back(int32(v)); break;
    case Ctx::MPipe: mpipe_field(f.key_id, v); break;
    case Ctx::Plan: plan_field(f.key_id, v); break;
    case Ctx::PlanLayout: s_.planned_for->layout.push_back(int32(v, 0, "a layer count >= 0")); break;
    case Ctx::Owners: s_.mpipe->owners.push_back(int32(v)); break;
    case Ctx::MicroPipe: s_.micro_pipe.push_back(int32(v)); break;
    case Ctx::Programs: wrong_type("an array", v.kind);
    case Ctx::Program: program_slot(v); break;
    case Ctx::SubSteps:
      if (v.kind != Kind::String) wrong_type("a step object or an action string", v.kind);
      f.step->edit_sub_steps().push_back(action(v));
      break;
    case Ctx::Step: step_value(f, &v, v.kind); break;
    case Ctx::Tensors: wrong_type("a tensor object {\"shape\": [...], \"dtype\": \"...\"}", v.kind);
    case Ctx::Tensor:
      if (f.key_id == kTensorDtype) {
        f.tensor->dtype = std::string(text(v));
      } else {
        wrong_type("an array", v.kind);
      }
      break;
    case Ctx::Shape:
      f.tensor->shape.push_back(
          integer(v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), "an integer"));
      break;
    case Ctx::Group: f.step->edit_group().push_back(int32(v)); break;
    case Ctx::Skip: break;
  }
  end_element();
  return true;
}

// A step object is complete: what needs all of its keys.
void Reader::finish_step(const Frame& f) {
  if (!(f.seen & (1u << kStepOp))) missing("op", "the step's op name (FWD, FWD_SEND, ...)");
  const Step& st = *f.step;
  if ((f.seen & (1u << kStepStage)) && st.stage == kNone &&
      info(st.op).stage == Field::Required) {
    const std::string where = container_path() + ".stage";
    fail_at(where, "stage -1 means no stage, but " + std::string(op_name(st.op)) +
                       " needs a stage (an integer >= 0)");
  }
}

bool Reader::close() {
  Frame& f = top();
  if (f.ctx == Ctx::Step) finish_step(f);
  if (f.ctx == Ctx::Tensor) {
    if (!(f.seen & (1u << kTensorShape))) missing("shape", "an array of dimensions");
    if (!(f.seen & (1u << kTensorDtype))) missing("dtype", "a dtype name such as \"bf16\"");
  }
  if (f.ctx == Ctx::Plan) {
    if (!(f.seen & (1u << kPlanModel))) missing("model", "the model file the schedule was planned for");
    if (!(f.seen & (1u << kPlanLayout))) missing("layout", "an array with the body layers of each stage");
  }
  if (f.ctx == Ctx::Top) {
    if (!format_) missing("format", "\"" + std::string(kScheduleJsonFormat) + "\"");
    if (!has_version_) missing("version", "1");
    if (!has_ranks_) missing("ranks", "the number of ranks");
    if (!has_stages_) missing("stages", "the number of stages");
    if (!has_micro_) missing("micro_batches", "the number of micro-batches");
    if (!has_programs_) missing("programs", "an array with one program per rank");
    done_ = true;
  }
  const Ctx ctx = f.ctx;
  --depth_;
  if (ctx == Ctx::Program) {
    index_ = -1;
    Program& prog = s_.programs.back();
    if (prog.capacity() > 2 * prog.size() + 16) prog.shrink_to_fit();  // reserved by a longer neighbour
  }
  if (ctx == Ctx::Programs) rank_ = -1;
  end_element();
  return true;
}

// The top object is complete: the placement by name needs ranks and stages.
void Reader::finish() {
  if (placement_map_) {
    s_.placement = Placement::explicit_map(std::move(*placement_map_));
  } else if (placement_name_ && *placement_name_ == "v") {
    s_.placement = Placement::v(s_.ranks, s_.stages);
  } else {
    s_.placement = Placement::loop(s_.ranks, s_.stages);
  }
}

bool Reader::parse_error(std::size_t position, const std::string& message) {
  throw_json_syntax_error(text_, file_, position, message);
}

}  // namespace

Schedule read_schedule_json(std::string_view text, const std::string& file_name) {
  return Reader(text, file_name).read();
}

}  // namespace ppsched
