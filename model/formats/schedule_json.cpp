// The canonical schedule file (schedule_json.hpp).
//
// Reading goes through nlohmann's DOM (linear), built by a SAX handler that reports
// duplicate keys, which nlohmann would silently collapse, where they are. Every type and
// key problem is an InputError located by rank, step index and field path; ranges and
// field presence are then checked by validate_structure.
//
// Writing is by hand into one string buffer: the output is canonical (fixed key order, one
// step per line) and must stay fast for millions of steps.
#include "model/formats/schedule_json.hpp"

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/errors.hpp"
#include "model/formats/json_support.hpp"
#include "model/formats/action_notation.hpp"
#include "model/validate.hpp"

namespace ppsched {
namespace {

using nlohmann::json;

constexpr std::string_view kFormatTag = "ppsched-schedule";
constexpr int kVersion = 1;

using Keys = std::vector<std::string_view>;
const Keys kTopKeys = {"format",        "version",   "name",  "ranks",   "stages",
                       "micro_batches", "placement", "mpipe", "programs"};
const Keys kMPipeKeys = {"overflow", "tower", "owner_backward", "owners"};
const Keys kStepKeys = {"op", "micro", "stage", "peer", "sub_steps", "tensors", "group"};
const Keys kTensorKeys = {"shape", "dtype"};

// Users may annotate files; these keys are skipped everywhere.
bool is_annotation(std::string_view key) { return key == "comment" || key.substr(0, 2) == "x-"; }

std::string join(const Keys& keys) { return join_keys(keys); }

std::string type_of(const json& j) { return json_type_name(j, true); }

// ---- parsing -----------------------------------------------------------------------------


// ---- reading ------------------------------------------------------------------------------

// Where a value sits: rank and step index when inside a program, and the field path, built
// only when an error needs it ("programs[1][3].micro"), so that reading allocates nothing
// per field. A Where points to its parent, which must outlive it.
struct Where {
  const Where* parent = nullptr;
  std::string_view key;  // ".key" step, or
  long element = -1;     // "[element]" step
  int rank = -1;
  int index = -1;

  bool empty() const { return !parent && key.empty() && element < 0; }
  std::string path() const {
    std::string out = parent ? parent->path() : std::string();
    if (element >= 0) return out + "[" + std::to_string(element) + "]";
    if (key.empty()) return out;
    return out.empty() ? std::string(key) : out + "." + std::string(key);
  }
};
Where top(std::string_view key) { return Where{nullptr, key}; }
Where child(const Where& w, std::string_view key) { return Where{&w, key, -1, w.rank, w.index}; }
Where element(const Where& w, size_t k) { return Where{&w, {}, static_cast<long>(k), w.rank, w.index}; }

class Reader {
 public:
  explicit Reader(const std::string& file) : file_(file) {}

  Schedule read(std::string_view text) {
    json root = parse(text);
    if (!root.is_object()) fail({}, "expected a JSON object at the top level, got " + type_of(root));
    Schedule s;
    check_format(root);
    check_keys(root, kTopKeys, {}, "");
    s.name = root.contains("name") ? get_string(root["name"], top("name")) : "";
    s.ranks = get_int(required(root, "ranks", "the number of ranks"), top("ranks"));
    s.stages = get_int(required(root, "stages", "the number of stages"), top("stages"));
    s.micro_batches =
        get_int(required(root, "micro_batches", "the number of micro-batches"), top("micro_batches"));
    // Checked here, before the placement map is sized by the stage count.
    for (const auto& [key, count] : {std::pair<std::string_view, int32_t>{"ranks", s.ranks},
                                     {"stages", s.stages},
                                     {"micro_batches", s.micro_batches}})
      if (count > kMaxCount)
        fail(top(key), "expected at most " + std::to_string(kMaxCount) + " for " + std::string(key) + ", got " +
                           std::to_string(count));
    s.placement = read_placement(root, s);
    if (root.contains("mpipe")) s.mpipe = read_mpipe(root["mpipe"]);
    const json& programs = required(root, "programs", "an array with one program per rank");
    const Where programs_where = top("programs");
    expect_array(programs, programs_where);
    s.programs.reserve(programs.size());
    for (size_t r = 0; r < programs.size(); ++r) {
      const int rank = static_cast<int>(r);
      Where w = element(programs_where, r);
      w.rank = rank;
      expect_array(programs[r], w);
      Program prog;
      prog.reserve(programs[r].size());
      for (size_t i = 0; i < programs[r].size(); ++i) {
        const json& item = programs[r][i];
        Where iw = element(w, i);
        iw.index = static_cast<int>(i);
        if (item.is_null()) {
          prog.push_back(std::nullopt);
        } else {
          prog.push_back(read_step(item, iw, "a step object, an action string or null"));
        }
      }
      s.programs.push_back(std::move(prog));
    }
    validate_structure(s, file_);
    return s;
  }

 private:
  [[noreturn]] void fail(const Where& w, std::string msg) const {
    Location loc;
    loc.file = file_;
    loc.rank = w.rank;
    loc.index = w.index;
    loc.field = w.path();
    throw InputError(std::move(loc), std::move(msg));
  }
  static std::string describe(const Where& w) { return w.empty() ? "the top level" : w.path(); }

  json parse(std::string_view text) const { return parse_json_strict(text, file_, true); }

  void check_format(const json& root) const {
    const json& tag = required(root, "format", "\"" + std::string(kFormatTag) + "\"");
    const std::string value = get_string(tag, top("format"));
    if (value != kFormatTag)
      fail(top("format"), "expected format \"" + std::string(kFormatTag) + "\", got \"" + value + "\"");
    const int version = get_int(required(root, "version", "1"), top("version"));
    if (version != kVersion)
      fail(top("version"), "unsupported version " + std::to_string(version) + ": this build reads version " +
                               std::to_string(kVersion) + " only");
  }

  const json& required(const json& obj, std::string_view key, const std::string& what) const {
    return required(obj, key, what, Where{});
  }
  const json& required(const json& obj, std::string_view key, const std::string& what, const Where& w) const {
    auto it = obj.find(key);
    if (it == obj.end())
      fail(child(w, key), "missing key '" + std::string(key) + "' in " + describe(w) + ": expected " + what);
    return *it;
  }

  void check_keys(const json& obj, const Keys& known, const Where& w, const char* what) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      const std::string& key = it.key();
      if (is_annotation(key) || std::find(known.begin(), known.end(), key) != known.end()) continue;
      const std::string where = w.empty() ? "the top level" : std::string(what) + w.path();
      fail(child(w, key), "unknown key '" + key + "' in " + where + ": expected one of " + join(known) +
                              " (keys starting with x- and \"comment\" are ignored)");
    }
  }

  void expect_array(const json& j, const Where& w) const {
    if (!j.is_array()) fail(w, "expected an array for " + w.path() + ", got " + type_of(j));
  }

  std::string get_string(const json& j, const Where& w) const {
    if (!j.is_string()) fail(w, "expected a string for " + w.path() + ", got " + type_of(j));
    return j.get<std::string>();
  }

  int64_t get_int64(const json& j, const Where& w, int64_t lo, int64_t hi, const char* what) const {
    bool ok = false;
    int64_t v = 0;
    if (j.is_number_integer() && !j.is_number_unsigned()) {
      v = j.get<int64_t>();
      ok = true;
    } else if (j.is_number_unsigned()) {
      const uint64_t u = j.get<uint64_t>();
      ok = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      v = ok ? static_cast<int64_t>(u) : 0;
    } else {
      fail(w, "expected an integer for " + w.path() + ", got " + type_of(j));
    }
    if (!ok || v < lo || v > hi)
      fail(w, "expected " + std::string(what) + " for " + w.path() + ", got " + j.dump());
    return v;
  }
  int32_t get_int(const json& j, const Where& w, int32_t lo = std::numeric_limits<int32_t>::min(),
                  const char* what = "an integer") const {
    return static_cast<int32_t>(get_int64(j, w, lo, std::numeric_limits<int32_t>::max(), what));
  }

  bool get_bool(const json& j, const Where& w) const {
    if (!j.is_boolean()) fail(w, "expected true or false for " + w.path() + ", got " + type_of(j));
    return j.get<bool>();
  }

  Placement read_placement(const json& root, const Schedule& s) const {
    if (!root.contains("placement")) return Placement::loop(s.ranks, s.stages);
    const json& p = root["placement"];
    const Where w = top("placement");
    const char* expected = "\"loop\", \"v\" or an array with the rank of each stage";
    if (p.is_string()) {
      const std::string name = p.get<std::string>();
      if (name == "loop") return Placement::loop(s.ranks, s.stages);
      if (name == "v") return Placement::v(s.ranks, s.stages);
      fail(w, "unknown placement \"" + name + "\": expected " + expected);
    }
    if (!p.is_array()) fail(w, "expected " + std::string(expected) + " for placement, got " + type_of(p));
    std::vector<int32_t> map;
    map.reserve(p.size());
    for (size_t k = 0; k < p.size(); ++k) map.push_back(get_int(p[k], element(w, k)));
    return Placement::explicit_map(std::move(map));
  }

  MPipeConfig read_mpipe(const json& j) const {
    const Where w = top("mpipe");
    if (!j.is_object()) fail(w, "expected an object for mpipe, got " + type_of(j));
    check_keys(j, kMPipeKeys, w, "");
    MPipeConfig m;
    if (j.contains("overflow"))
      m.overflow = pick<Overflow>(j["overflow"], child(w, "overflow"),
                                  {{"full", Overflow::Full}, {"min", Overflow::Min}});
    if (j.contains("tower"))
      m.tower =
          pick<Tower>(j["tower"], child(w, "tower"),
                      {{"trainable", Tower::Trainable}, {"frozen", Tower::Frozen}, {"none", Tower::None}});
    if (j.contains("owner_backward"))
      m.owner_backward = get_bool(j["owner_backward"], child(w, "owner_backward"));
    if (j.contains("owners")) {
      const Where ow = child(w, "owners");
      const json& owners = j["owners"];
      expect_array(owners, ow);
      for (size_t k = 0; k < owners.size(); ++k) m.owners.push_back(get_int(owners[k], element(ow, k)));
    }
    return m;
  }

  // One of a fixed set of names; the error lists them.
  template <class E>
  E pick(const json& j, const Where& w, std::initializer_list<std::pair<std::string_view, E>> names) const {
    const std::string v = get_string(j, w);
    std::string known;
    for (const auto& [name, value] : names) {
      if (v == name) return value;
      known += (known.empty() ? "\"" : ", \"") + std::string(name) + "\"";
    }
    fail(w, "unknown " + std::string(w.key) + " \"" + v + "\": expected one of " + known);
  }

  // depth: 0 for a program's step, 1 for a sub-step. A sub-step's own sub_steps are read
  // (validation explains why they are wrong); deeper nesting stops here, so that no input
  // can recurse deeply.
  Step read_step(const json& j, const Where& w, const char* expected, int depth = 0) const {
    if (j.is_string()) {
      std::string error;
      auto step = parse_action(j.get_ref<const std::string&>(), &error);
      if (!step) fail(w, error);
      return *step;
    }
    if (!j.is_object())
      fail(w, "expected " + std::string(expected) + " for " + w.path() + ", got " + type_of(j));
    check_keys(j, kStepKeys, w, "step ");
    Step st;
    const Where opw = child(w, "op");
    const json& op_value = required(j, "op", "the step's op name (FWD, FWD_SEND, ...)", w);
    if (!op_value.is_string()) fail(opw, "expected a string for " + opw.path() + ", got " + type_of(op_value));
    const std::string& name = op_value.get_ref<const std::string&>();
    const auto op = op_from_name(name);
    if (!op) {
      std::string msg = "unknown op '" + name + "'";
      if (auto torch = op_from_torch_token(name))
        msg += " (PyTorch notation; the JSON name is " + std::string(op_name(*torch)) + ")";
      std::string names;
      for (const auto& row : step_table()) names += (names.empty() ? "" : ", ") + std::string(row.name);
      fail(opw, msg + ": expected one of " + names);
    }
    st.op = *op;
    if (auto it = j.find("micro"); it != j.end())
      st.micro = get_int(*it, child(w, "micro"), 0, "an integer >= 0");
    if (auto it = j.find("stage"); it != j.end()) {
      st.stage = get_int(*it, child(w, "stage"), kNone, "an integer >= 0, or -1 for no stage");
      if (st.stage == kNone && info(st.op).stage == Field::Required)
        fail(child(w, "stage"), "stage -1 means no stage, but " + name + " needs a stage (an integer >= 0)");
    }
    if (auto it = j.find("peer"); it != j.end()) st.peer = get_int(*it, child(w, "peer"), 0, "an integer >= 0");
    if (auto it = j.find("sub_steps"); it != j.end()) {
      const Where sw = child(w, "sub_steps");
      if (depth >= 2) fail(sw, "composites do not nest: expected no sub_steps at this depth");
      expect_array(*it, sw);
      for (size_t k = 0; k < it->size(); ++k)
        st.sub_steps.push_back(
            read_step((*it)[k], element(sw, k), "a step object or an action string", depth + 1));
    }
    if (auto it = j.find("tensors"); it != j.end()) {
      const Where tw = child(w, "tensors");
      expect_array(*it, tw);
      for (size_t k = 0; k < it->size(); ++k) st.tensors.push_back(read_tensor((*it)[k], element(tw, k)));
    }
    if (auto it = j.find("group"); it != j.end()) {
      const Where gw = child(w, "group");
      expect_array(*it, gw);
      for (size_t k = 0; k < it->size(); ++k) st.group.push_back(get_int((*it)[k], element(gw, k)));
    }
    return st;
  }

  TensorDesc read_tensor(const json& j, const Where& w) const {
    if (!j.is_object())
      fail(w, "expected a tensor object {\"shape\": [...], \"dtype\": \"...\"} for " + w.path() + ", got " +
                  type_of(j));
    check_keys(j, kTensorKeys, w, "tensor ");
    TensorDesc t;
    const Where sw = child(w, "shape");
    const json& shape = required(j, "shape", "an array of dimensions", w);
    expect_array(shape, sw);
    for (size_t d = 0; d < shape.size(); ++d)
      t.shape.push_back(get_int64(shape[d], element(sw, d), std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max(), "an integer"));
    t.dtype = get_string(required(j, "dtype", "a dtype name such as \"bf16\"", w), child(w, "dtype"));
    return t;
  }

  const std::string& file_;
};

// ---- writing ------------------------------------------------------------------------------

void put_int(std::string& out, int64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

void put_string(std::string& out, std::string_view s) {
  static const char* const hex = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += hex[(c >> 4) & 0xf];
          out += hex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

template <class Ints>
void put_int_array(std::string& out, const Ints& v) {
  out += '[';
  for (size_t k = 0; k < v.size(); ++k) {
    if (k) out += ", ";
    put_int(out, v[k]);
  }
  out += ']';
}

void put_step(std::string& out, const Step& st) {
  out += "{\"op\": ";
  put_string(out, op_name(st.op));
  if (st.micro != kNone) {
    out += ", \"micro\": ";
    put_int(out, st.micro);
  }
  if (st.stage != kNone) {
    out += ", \"stage\": ";
    put_int(out, st.stage);
  }
  if (st.peer != kNone) {
    out += ", \"peer\": ";
    put_int(out, st.peer);
  }
  if (!st.sub_steps.empty()) {
    out += ", \"sub_steps\": [";
    for (size_t k = 0; k < st.sub_steps.size(); ++k) {
      if (k) out += ", ";
      put_step(out, st.sub_steps[k]);
    }
    out += ']';
  }
  if (!st.tensors.empty()) {
    out += ", \"tensors\": [";
    for (size_t k = 0; k < st.tensors.size(); ++k) {
      if (k) out += ", ";
      out += "{\"shape\": ";
      put_int_array(out, st.tensors[k].shape);
      out += ", \"dtype\": ";
      put_string(out, st.tensors[k].dtype);
      out += '}';
    }
    out += ']';
  }
  if (!st.group.empty()) {
    out += ", \"group\": ";
    put_int_array(out, st.group);
  }
  out += '}';
}

}  // namespace

Schedule read_schedule_json(std::string_view text, const std::string& file_name) {
  return Reader(file_name).read(text);
}

std::string write_schedule_json(const Schedule& s) {
  std::string out;
  out.reserve(256 + s.step_count() * 48);
  out += "{\n  \"format\": ";
  put_string(out, kFormatTag);
  out += ",\n  \"version\": ";
  put_int(out, kVersion);
  out += ",\n  \"name\": ";
  put_string(out, s.name);
  out += ",\n  \"ranks\": ";
  put_int(out, s.ranks);
  out += ",\n  \"stages\": ";
  put_int(out, s.stages);
  out += ",\n  \"micro_batches\": ";
  put_int(out, s.micro_batches);
  out += ",\n  \"placement\": ";
  // The kind decides: a loop or v placement is written by name, an explicit one as its map
  // (even when that map happens to equal a rule), so that reading it back gives the same IR.
  if (s.placement.kind == PlacementKind::Explicit) {
    put_int_array(out, s.placement.stage_to_rank);
  } else {
    put_string(out, to_string(s.placement.kind));
  }
  if (s.mpipe) {
    out += ",\n  \"mpipe\": {\"overflow\": ";
    put_string(out, to_string(s.mpipe->overflow));
    out += ", \"tower\": ";
    put_string(out, to_string(s.mpipe->tower));
    out += ", \"owner_backward\": ";
    out += s.mpipe->owner_backward ? "true" : "false";
    if (!s.mpipe->owners.empty()) {
      out += ", \"owners\": ";
      put_int_array(out, s.mpipe->owners);
    }
    out += '}';
  }
  out += ",\n  \"programs\": [";
  for (size_t r = 0; r < s.programs.size(); ++r) {
    out += r ? ",\n    [" : "\n    [";
    const Program& prog = s.programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      out += i ? ",\n      " : "\n      ";
      if (prog[i]) {
        put_step(out, *prog[i]);
      } else {
        out += "null";
      }
    }
    out += prog.empty() ? "]" : "\n    ]";
  }
  out += s.programs.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

}  // namespace ppsched
