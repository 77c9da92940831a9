// The canonical schedule file's writer (schedule_json.hpp; the reader is schedule_json_read.cpp).
//
// Writing is by hand into one string buffer: the output is canonical (fixed key order, one
// step per line) and must stay fast for millions of steps.
#include "schedule/formats/schedule_json.hpp"

#include <charconv>

#include "schedule/formats/json_string.hpp"

namespace ppsched {
namespace {

void put_int(std::string& out, int64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

void put_string(std::string& out, std::string_view s) { append_json_string(out, s); }

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
  // A step-table name: plain capitals and underscores, nothing to escape (and a step is the
  // writer's hot path: going through the escaper cost 5% of writing a 782k-step file).
  out += "{\"op\": \"";
  out += op_name(st.op);
  out += '"';
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
  if (!st.sub_steps().empty()) {
    out += ", \"sub_steps\": [";
    for (size_t k = 0; k < st.sub_steps().size(); ++k) {
      if (k) out += ", ";
      put_step(out, st.sub_steps()[k]);
    }
    out += ']';
  }
  if (!st.tensors().empty()) {
    out += ", \"tensors\": [";
    for (size_t k = 0; k < st.tensors().size(); ++k) {
      if (k) out += ", ";
      out += "{\"shape\": ";
      put_int_array(out, st.tensors()[k].shape);
      out += ", \"dtype\": ";
      put_string(out, st.tensors()[k].dtype);
      out += '}';
    }
    out += ']';
  }
  if (!st.group().empty()) {
    out += ", \"group\": ";
    put_int_array(out, st.group());
  }
  out += '}';
}

// The "planned_for" object: the model and layout always, each setting only when given.
void put_planned_for(std::string& out, const PlannedFor& p) {
  out += ",\n  \"planned_for\": {\"model\": ";
  put_string(out, p.model);
  out += ", \"layout\": ";
  put_int_array(out, p.layout);
  if (!p.layout_megatron.empty()) {
    out += ", \"layout_megatron\": ";
    put_string(out, p.layout_megatron);
  }
  const auto number = [&](const char* key, int64_t v) {
    if (v <= 0) return;
    out += ", \"";
    out += key;
    out += "\": ";
    put_int(out, v);
  };
  const auto text = [&](const char* key, const std::string& v) {
    if (v.empty()) return;
    out += ", \"";
    out += key;
    out += "\": ";
    put_string(out, v);
  };
  number("seq_len", p.seq_len);
  number("micro_batch_size", p.micro_batch_size);
  number("tp", p.tp);
  number("ep", p.ep);
  number("etp", p.etp);
  number("dp", p.dp);
  text("recompute", p.recompute);
  text("precision", p.precision);
  text("optimizer", p.optimizer);
  if (p.fsdp) out += ", \"fsdp\": true";
  if (p.distributed_optimizer) out += ", \"distributed_optimizer\": true";
  out += '}';
}

}  // namespace

std::string write_schedule_json(const Schedule& s) {
  std::string out;
  out.reserve(256 + s.step_count() * 48);
  out += "{\n  \"format\": ";
  put_string(out, kScheduleJsonFormat);
  out += ",\n  \"version\": ";
  put_int(out, kScheduleJsonVersion);
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
  if (s.pipes > 1) {
    out += ",\n  \"pipes\": ";
    put_int(out, s.pipes);
    out += ",\n  \"micro_pipe\": ";
    put_int_array(out, s.micro_pipe);
  }
  if (s.planned_for) put_planned_for(out, *s.planned_for);
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
