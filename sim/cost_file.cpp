// The cost and memory model (cost_model.hpp). The step table says *what* a step costs (its
// ComputeKind and Payload); this file says *how much*, from a cost file or the default.
//
// ---- File format "ppsched-costs", version 1 -------------------------------------------------
//
// Units: times in milliseconds, sizes in bytes, bandwidths in GB/s (1e9 bytes per second).
// A per-stage value ("StageValue") is one of
//   2.5                      every stage, every micro-batch
//   [2.5, 2.5, 3.0]          one value per stage
//   [[2.0, 3.1], 2.5, ...]   per stage, a number or one value per micro-batch (variable
//                            sequence lengths)
// Every per-stage array of a file has the same length (the stage count) and every per-micro
// row the same length (the micro-batch count); a length of 1 acts like a scalar.
//
// {
//   "format": "ppsched-costs", "version": 1,                                    (required)
//   "compute": {                                                   (required; ms, StageValue)
//     "FWD", "BWD", "BWD_INPUT", "BWD_WEIGHT",        body stage compute of one micro-batch
//     "TOWER_FWD", "TOWER_BWD", "TOWER_GRAD_BWD",     MPipe tower: MPIPE_TRANSPOSE_FWD,
//                                                     MPIPE_TRANSPOSE_BWD (recompute + backward),
//                                                     the backward of MPIPE_GRAD_RECV_WITH_BACKWARD
//     "DATA_LOAD", "FSDP", "SWAP"                     data loading, FSDP/DP steps, swap steps
//   },
//     Missing BWD = BWD_INPUT + BWD_WEIGHT (both needed); missing BWD_INPUT and BWD_WEIGHT =
//     BWD / 2 each; one of them missing = BWD minus the other. A backward time without FWD
//     is an error. Every other missing time is 0.
//   "bytes": {                                                         (optional; bytes >= 0)
//     "activation": StageValue   the output of stage s, sent to stage s+1 (one message)
//     "gradient": StageValue     the gradient of that output, sent back (default: activation)
//     "data", "features", "tower_inputs", "feature_grads": one DATA_* / MPipe message
//     "meta": one shape/dtype meta message (default 64)
//     "tower_params": MPIPE_PARAM_BROADCAST / MPIPE_GRAD_REDUCE payload
//     "tied_params": tied-parameter ALL_REDUCE payload                    (missing: 0)
//     "params": StageValue, per stage only: the bytes of stage s's parameters (and of its
//               gradients, same dtype) that the data-parallel FSDP_* collectives move
//               (missing: 0, so they cost their latency terms only)
//   },
//   "link": {"latency_ms": 0.005, "bandwidth_GBps": 450}           (optional; missing = free)
//     or {"intra_node": LINK, "inter_node": LINK, "ranks_per_node": 8,
//         "pairs": [{"src": 0, "dst": 9, "latency_ms": .., "bandwidth_GBps": ..}]}
//     A flat link is every link. bandwidth null (or missing) = infinite, latency missing = 0.
//     ranks_per_node (default 8) puts ranks r and q on one node when r / N == q / N. A pair
//     applies to both directions unless the reverse direction is listed too; its missing
//     fields come from the link it replaces.
//   "collectives": {"algorithm": "ring" | "tree"},                                (ring)
//   "protocol": {"eager_threshold_bytes": 4194304,     payloads up to this may complete before
//                                                      the receiver posts (NCCL's buffer)
//                "compute_blocks_host": false,        true: the host runs each compute itself
//                                                      (CPUs) and posts nothing meanwhile
//                "background_progress": true,         false: a receiver takes a payload in only
//                                                      while it waits (CPUs, a core per rank)
//                "send_handoff_ms": null,             a number: a rendezvous send completes that
//                                                      long after its transfer starts (Gloo)
//                "deferred_start_ms": 0},             background_progress false: a transfer that
//                                                      waited for its receiver to wait starts
//                                                      this much later still
//   "overlap_efficiency": 0,      OVERLAP_F_B / OVERLAP_B_F: 1 = shorter sub-step fully hidden;
//                                 0 (default): two computes on one device take turns
//   "moe": {"ep": 8,                  (optional) expert parallelism: an MoE layer's all-to-all spans
//                                     the first ep data-parallel replicas of a pipeline rank (1)
//           "contention": 0.152,      the share of the device an all-to-all takes beside compute (20/132)
//           "expert_param_bytes": StageValue, per stage only: the routed experts' part of
//                                     bytes.params (sharded over dp / ep ranks; missing: 0)},
//     A model's cost model also holds each MoE layer's phases (attention, dispatch, experts,
//     combine: lowering/moe_phases.hpp); a cost file does not carry them.
//   "memory": {
//     "capacity_bytes": number or null (usable per rank), "capacity_basis": how it was derived
//     (text), "margin": 0.05 (a peak within it below the capacity is tight), "activation_bytes": StageValue (kept from
//     FWD to BWD per micro-batch), "weight_grad_bytes": StageValue (kept from BWD_INPUT to
//     BWD_WEIGHT; missing: half of activation_bytes), "workspace_bytes": StageValue (held while a
//     backward runs: a recomputing backward's recomputed layer), "weights_bytes", "grads_bytes",
//     "optimizer_bytes": per stage only (what the stage holds for the whole step, before
//     data-parallel sharding; missing: 0), "tower_graph_bytes" (owner_backward: the kept tower
//     graph per micro), "tower_copy_bytes" (the tower parameters every rank keeps, MPipe),
//     "shared_weights": [{"stages": [0, 7], "weights_bytes", "grads_bytes", "optimizer_bytes"}]
//     (weights each listed stage's bytes above count whole: a tied embedding and output head,
//     an MTP module's copies; a rank holding several of the stages holds them once; missing:
//     none)
//   }
// }
// Keys named "comment" or starting with "x-" are ignored anywhere; any other unknown key is an
// error, so a misspelt key never silently falls back to a default.
#include "sim/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "schedule/errors.hpp"
#include "schedule/formats/json_fields.hpp"
#include "schedule/formats/json_support.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/text_format.hpp"
#include "schedule/validate.hpp"
#include "workload/model_file.hpp"
#include "platform/platform_file.hpp"
#include "sim/cost_fields.hpp"

namespace ppsched {

using namespace cost_fields;

namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Keys = std::vector<std::string_view>;

const Keys kTopKeys = {"format", "version", "compute", "bytes", "link", "collectives", "protocol",
                       "overlap_efficiency", "moe", "memory"};
const Keys kMoeKeys = {"ep", "contention", "expert_param_bytes"};
const Keys kMemoryKeys = {"capacity_bytes",   "capacity_basis",   "margin",           "activation_bytes", "weight_grad_bytes", "workspace_bytes",
                          "weights_bytes",    "grads_bytes",      "optimizer_bytes",   "tower_graph_bytes",
                          "tower_copy_bytes", "shared_weights"};
const Keys kSharedWeightKeys = {"stages", "weights_bytes", "grads_bytes", "optimizer_bytes"};
constexpr size_t kMaxSharedWeights = 1024;
constexpr int64_t kMaxSharedWeightStages = int64_t{1} << 20;  // the stage limit (README "Limits")

Keys compute_key_names() {
  Keys k;
  for (const auto& f : kComputeFields) k.push_back(f.key);
  return k;
}
Keys byte_key_names() {
  Keys k;
  for (const auto& f : kByteFields) k.push_back(f.key);
  return k;
}

}  // namespace

// ---- reading ----------------------------------------------------------------------------------
namespace {

std::string type_of(const json& j) { return JsonFields::type_of(j); }

class Reader {
 public:
  explicit Reader(const std::string& file) : f_(file) {}

  CostModel read(std::string_view text) { return read(parse_json_strict(text, f_.file(), false)); }

  CostModel read(const json& root) {
    if (!root.is_object()) fail("", "expected a JSON object at the top level, got " + type_of(root));
    check_format(root);
    check_keys(root, "", kTopKeys);
    CostModel c;
    c.source = f_.file();
    const json* compute = root.contains("compute") ? &root["compute"] : nullptr;
    if (!compute) fail("compute", "missing key 'compute': expected an object of times in ms, at least {\"FWD\": ..}");
    read_compute(*compute, c);
    if (root.contains("bytes")) read_bytes(root["bytes"], c);
    if (!c.gradient_bytes.given) c.gradient_bytes.rows = c.activation_bytes.rows;
    if (root.contains("link")) c.links = read_links(f_, root["link"]);
    if (root.contains("collectives")) c.collectives = read_collectives(f_, root["collectives"]);
    if (root.contains("protocol")) c.protocol = read_protocol(f_, root["protocol"]);
    if (root.contains("overlap_efficiency"))
      c.overlap_efficiency = number(root["overlap_efficiency"], "overlap_efficiency", Quantity::Fraction);
    if (root.contains("moe")) read_moe(root["moe"], c);
    if (root.contains("memory")) read_memory(root["memory"], c);
    return c;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const { f_.fail(path, msg); }

  void check_format(const json& root) const {
    if (!root.contains("format")) fail("format", "missing key 'format': expected \"ppsched-costs\"");
    if (root["format"] != "ppsched-costs")
      fail("format", "expected \"ppsched-costs\", got " + (root["format"].is_string() ? root["format"].dump() : type_of(root["format"])));
    if (!root.contains("version")) fail("version", "missing key 'version': expected 1");
    if (root["version"] != 1)
      fail("version", "unsupported version " + root["version"].dump() + ": this build reads version 1 only");
  }

  const json& object(const json& j, const std::string& path, const Keys& known) const { return f_.object(j, path, known); }
  void check_keys(const json& obj, const std::string& path, const Keys& known) const { f_.object(obj, path, known); }
  double number(const json& j, const std::string& path, Quantity q, const std::string& forms = "") const {
    return f_.quantity(j, path, q, forms);
  }

  // Every per-stage array has one length, every per-micro row one length; the first of each
  // sets it.
  void check_length(size_t n, const std::string& path, size_t& length, std::string& first, const char* what) const {
    if (n <= 1) return;
    if (length == 0) {
      length = n;
      first = path;
    } else if (n != length) {
      fail(path, "has " + std::to_string(n) + " " + what + " values but " + first + " has " + std::to_string(length) +
                     ": every " + what + " array of a file has the same length");
    }
  }

  StageValue stage_value(const json& j, const std::string& path, Quantity q) {
    StageValue v;
    v.given = true;
    if (!j.is_array()) {
      v.rows = {{number(j, path, q, ", an array with one value per stage, or an array of per-micro arrays")}};
      return v;
    }
    if (j.empty()) fail(path, "expected at least one value per stage, got an empty array");
    check_length(j.size(), path, stages_, stages_path_, "per-stage");
    for (size_t s = 0; s < j.size(); ++s) {
      const std::string sp = path + "[" + std::to_string(s) + "]";
      const json& e = j[s];
      if (!e.is_array()) {
        v.rows.push_back({number(e, sp, q, " or an array of per-micro values")});
        continue;
      }
      if (e.empty()) fail(sp, "expected at least one per-micro value, got an empty array");
      check_length(e.size(), sp, micros_, micros_path_, "per-micro");
      std::vector<double> row;
      for (size_t m = 0; m < e.size(); ++m) row.push_back(number(e[m], sp + "[" + std::to_string(m) + "]", q));
      v.rows.push_back(std::move(row));
    }
    return v;
  }

  void read_compute(const json& j, CostModel& c) {
    const Keys known = compute_key_names();
    object(j, "compute", known);
    for (const auto& f : kComputeFields)
      if (j.contains(f.key)) c.*f.value = stage_value(j[std::string(f.key)], "compute." + std::string(f.key), Quantity::Time);
    const bool bwd = c.bwd.given, in = c.bwd_input.given, w = c.bwd_weight.given;
    if (!c.fwd.given && (bwd || in || w))
      fail("compute.FWD", "missing FWD: a backward time is given, so the forward time is needed too");
    if (!bwd && in != w)
      fail("compute.BWD", std::string("missing BWD: give BWD, or both BWD_INPUT and BWD_WEIGHT (BWD is their sum); only ") +
                              (in ? "BWD_INPUT" : "BWD_WEIGHT") + " is given");
    const auto plus = [](double a, double b) { return a + b; };
    if (!bwd && in && w) c.bwd = combine(c.bwd_input, c.bwd_weight, plus);
    if (bwd && !in && !w) c.bwd_input = c.bwd_weight = combine(c.bwd, c.bwd, [](double a, double) { return a / 2; });
    if (bwd && in != w) {
      // One half given: the other is what remains of the full backward.
      const StageValue& half = in ? c.bwd_input : c.bwd_weight;
      const char* half_key = in ? "compute.BWD_INPUT" : "compute.BWD_WEIGHT";
      StageValue rest = combine(c.bwd, half, [](double b, double h) { return b - h; });
      for (size_t s = 0; s < rest.rows.size(); ++s)
        for (size_t m = 0; m < rest.rows[s].size(); ++m)
          if (rest.rows[s][m] < 0) {
            const int si = static_cast<int>(s), mi = static_cast<int>(m);
            fail(half_key, format_text("%g ms exceeds BWD (%g ms) at stage %d, micro %d", half.at(si, mi), c.bwd.at(si, mi), si, mi) +
                               ": the other half is derived as BWD minus this one and would be negative; "
                               "give both BWD_INPUT and BWD_WEIGHT, or a larger BWD");
          }
      (in ? c.bwd_weight : c.bwd_input) = std::move(rest);
    }
  }

  void read_bytes(const json& j, CostModel& c) {
    object(j, "bytes", byte_key_names());
    for (const auto& f : kByteFields) {
      if (!j.contains(f.key)) continue;
      const std::string path = "bytes." + std::string(f.key);
      if (f.per_stage) c.*f.per_stage = stage_value(j[std::string(f.key)], path, Quantity::Bytes);
      else c.*f.scalar = number(j[std::string(f.key)], path, Quantity::Bytes);
    }
    per_stage_only(c.param_bytes, "bytes.params", "parameters do not");
  }

  // A value that does not vary by micro-batch: one number per stage.
  void per_stage_only(const StageValue& v, const std::string& path, const std::string& why) const {
    for (size_t s = 0; s < v.rows.size(); ++s)
      if (v.rows[s].size() > 1)
        fail(path + "[" + std::to_string(s) + "]", "expected one number of bytes per stage: " + why +
                                                       " vary by micro-batch, got " + std::to_string(v.rows[s].size()) +
                                                       " per-micro values");
  }

  void read_moe(const json& j, CostModel& c) {
    object(j, "moe", kMoeKeys);
    if (j.contains("ep")) c.moe.ep = static_cast<int>(f_.whole(j["ep"], "moe.ep", 1, 65536, "an expert-parallel degree from 1 to 65536"));
    if (j.contains("contention"))
      c.moe.contention = f_.number(j["contention"], "moe.contention", 0, 0.9, "a share of the device from 0 to 0.9");
    if (j.contains("expert_param_bytes")) {
      c.expert_param_bytes = stage_value(j["expert_param_bytes"], "moe.expert_param_bytes", Quantity::Bytes);
      per_stage_only(c.expert_param_bytes, "moe.expert_param_bytes", "parameters do not");
    }
  }

  void read_memory(const json& j, CostModel& c) {
    object(j, "memory", kMemoryKeys);
    if (j.contains("capacity_bytes")) {
      const json& cap = j["capacity_bytes"];
      if (cap.is_null()) c.capacity_bytes.reset();
      else c.capacity_bytes = number(cap, "memory.capacity_bytes", Quantity::Bytes, ", or null for no limit");
    }
    if (j.contains("capacity_basis")) {
      if (!j["capacity_basis"].is_string()) fail("memory.capacity_basis", "expected a string (how the capacity was derived)");
      c.capacity_basis = clip(j["capacity_basis"].get<std::string>(), 200);
    }
    if (j.contains("margin")) c.memory_margin = number(j["margin"], "memory.margin", Quantity::Fraction);
    if (j.contains("activation_bytes"))
      c.kept_activation_bytes = stage_value(j["activation_bytes"], "memory.activation_bytes", Quantity::Bytes);
    for (auto [key, field] : {std::pair{"weight_grad_bytes", &CostModel::weight_grad_bytes},
                              std::pair{"workspace_bytes", &CostModel::workspace_bytes}})
      if (j.contains(key)) c.*field = stage_value(j[key], std::string("memory.") + key, Quantity::Bytes);
    // What a stage holds for the whole step does not change with the micro-batch.
    for (auto [key, field] : {std::pair{"weights_bytes", &CostModel::weights_bytes},
                              std::pair{"grads_bytes", &CostModel::grads_bytes},
                              std::pair{"optimizer_bytes", &CostModel::optimizer_bytes}}) {
      if (!j.contains(key)) continue;
      c.*field = stage_value(j[key], std::string("memory.") + key, Quantity::Bytes);
      per_stage_only(c.*field, std::string("memory.") + key, "what a stage holds for the whole step does not");
    }
    if (j.contains("tower_graph_bytes"))
      c.tower_graph_bytes = number(j["tower_graph_bytes"], "memory.tower_graph_bytes", Quantity::Bytes);
    if (j.contains("tower_copy_bytes"))
      c.tower_copy_bytes = number(j["tower_copy_bytes"], "memory.tower_copy_bytes", Quantity::Bytes);
    if (j.contains("shared_weights")) read_shared_weights(j["shared_weights"], c);
  }

  // Shared weights name at least two stages, ascending; whether those are the schedule's is
  // checked with its stage count (CostModel::check_fits).
  void read_shared_weights(const json& j, CostModel& c) {
    const std::string base = "memory.shared_weights";
    if (!j.is_array()) fail(base, "expected an array of {\"stages\", \"weights_bytes\", ...} objects, got " + type_of(j));
    if (j.size() > kMaxSharedWeights) fail(base, std::to_string(j.size()) + " entries is over the limit of 1024");
    for (size_t k = 0; k < j.size(); ++k) {
      const std::string path = base + "[" + std::to_string(k) + "]";
      const json& e = object(j[k], path, kSharedWeightKeys);
      SharedWeights w;
      if (!e.contains("stages")) fail(path + ".stages", "missing key 'stages': expected the stages that hold the weights");
      const json& st = e["stages"];
      if (!st.is_array() || st.size() < 2 || st.size() > static_cast<size_t>(kMaxSharedWeightStages))
        fail(path + ".stages", "expected an array of 2 or more stage indices, got " + (st.is_array() ? st.dump() : type_of(st)));
      for (size_t i = 0; i < st.size(); ++i) {
        const json& x = st[i];
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= kMaxSharedWeightStages ||
            (!w.stages.empty() && x.get<int64_t>() <= w.stages.back()))
          fail(path + ".stages[" + std::to_string(i) + "]",
               "expected stage indices from 0, ascending and distinct, got " + (x.is_number() ? x.dump() : type_of(x)));
        w.stages.push_back(x.get<int>());
      }
      for (auto [key, field] : {std::pair{"weights_bytes", &ResidentBytes::weights}, std::pair{"grads_bytes", &ResidentBytes::grads},
                                std::pair{"optimizer_bytes", &ResidentBytes::optimizer}})
        if (e.contains(key)) w.bytes.*field = static_cast<int64_t>(number(e[key], path + "." + key, Quantity::Bytes));
      c.shared_weights.push_back(std::move(w));
    }
  }

  JsonFields f_;
  size_t stages_ = 0, micros_ = 0;
  std::string stages_path_, micros_path_;
};

}  // namespace

CostModel read_cost_model(std::string_view text, const std::string& file_name) {
  return Reader(file_name).read(text);
}

CostModel read_cost_document(const nlohmann::json& doc, const std::string& file_name) { return Reader(file_name).read(doc); }

CostModel read_cost_file(const std::string& path) {
  return read_cost_model(read_input_file(path, kMaxCostFileBytes), path);
}

// ---- writing ----------------------------------------------------------------------------------
namespace {

// A figure as the file writes it; one the reader would refuse (over the limits, not finite) is
// refused here, naming its key, so that what is written always reads back.
ordered_json quantity(double v, const std::string& path, Quantity q) {
  const ordered_json j = json_number(v);
  if (!JsonFields::quantity_problem(v, q, {}).empty())  // (the figure spelt only for the message)
    throw InputError({}, path + ": " + JsonFields::quantity_problem(v, q, j.dump()));
  return j;
}

ordered_json stage_json(const StageValue& v, const std::string& path, Quantity q) {
  if (v.rows.empty()) return 0;
  if (v.rows.size() == 1 && v.rows[0].size() == 1) return quantity(v.rows[0][0], path, q);
  ordered_json out = ordered_json::array();
  for (size_t s = 0; s < v.rows.size(); ++s) {
    const auto& row = v.rows[s];
    const std::string at = path + "[" + std::to_string(s) + "]";
    if (row.size() == 1) {
      out.push_back(quantity(row[0], at, q));
      continue;
    }
    ordered_json micro = ordered_json::array();
    for (size_t m = 0; m < row.size(); ++m) micro.push_back(quantity(row[m], at + "[" + std::to_string(m) + "]", q));
    out.push_back(std::move(micro));
  }
  return out;
}

// Comments for the template, by object; `c` supplies the numbers.
using Comment = std::vector<std::string>;
struct Comments {
  Comment top, compute, bytes, link, intra, inter, collectives, protocol, memory;
};

Comments template_comments(const CostModel& c, int stages) {
  // The figures of the embedded default network (workload/default_workload.cpp).
  const Workload net = default_workload();
  const Layer& layer = net.explicit_layers.front();
  const double kLayers = static_cast<double>(net.explicit_layers.size()), kMfu = net.device.mfu;
  const double kLayerFwdFlops = layer.fwd_flops, kLayerFwdMs = layer.fwd_flops / net.device.effective_flops() * 1e3;
  const double kLayerKeptBytes = static_cast<double>(layer.activation_bytes), kGiB = 1024.0 * 1024 * 1024;
  const auto f = [](const char* fmt, double a, double b = 0, double d = 0) {
    return format_text(fmt, a, b, d);
  };
  Comments k;
  k.top = {"ppsched cost model (format ppsched-costs, version 1). Keys named \"comment\" or starting with \"x-\" are ignored.",
           "Units: times in ms, sizes in bytes, bandwidths in GB/s (1e9 bytes/s; null = infinite).",
           "A per-stage value is a number (every stage), an array with one value per stage, or an array whose",
           "entries may be arrays with one value per micro-batch (variable sequence lengths).",
           f("These numbers are ppsched's embedded default for %g stages: a 7B-class transformer (hidden 4096, 32 layers,",
             stages),
           f("seq 4096, micro-batch 1, bf16), %g layers per stage, on H100-class GPUs, 8 per node.", kLayers / stages),
           "overlap_efficiency: how much of the shorter sub-step of OVERLAP_F_B / OVERLAP_B_F is hidden (0..1); default 0:",
           "two computes on one device take turns unless a measurement says otherwise."};
  k.compute = {"Milliseconds per micro-batch. FWD: forward of one stage; BWD: full backward; BWD_INPUT / BWD_WEIGHT:",
               "the halves of a split backward (missing: BWD/2 each; missing BWD: their sum).",
               f("Default: forward FLOPs per layer = 24 s h^2 + 4 s^2 h = %.3f TFLOP (2 x params x tokens plus attention),",
                 kLayerFwdFlops / 1e12),
               f("at 989 TFLOP/s peak x %.0f%% MFU = %.3f ms per layer; BWD = 2 x FWD, BWD_INPUT = BWD_WEIGHT = FWD.", kMfu * 100,
                 kLayerFwdMs),
               "TOWER_FWD / TOWER_BWD / TOWER_GRAD_BWD: MPipe tower forward, rank-0 recompute + backward, owner backward",
               "(default: a 2-layer tower; 1x, 3x, 2x its forward). DATA_LOAD: loading one micro-batch.",
               "FSDP: a fixed overhead of each FSDP_UNSHARD / RESHARD / REDUCE_GRAD step, added to the data-parallel",
               "collective the simulator prices from bytes.params (ppsched simulate --dp N). SWAP: each swap step."};
  k.bytes = {"Bytes of one message. activation[s]: stage s's output sent to stage s+1 (default: s x b x h x 2 = 32 MiB);",
             "gradient[s]: its gradient sent back (missing: = activation). data / tower_inputs: one micro-batch of",
             "token ids (s x 8). features / feature_grads: MPipe tower output and its gradient. meta: one shape/dtype",
             f("message. tower_params: MPipe broadcast / grad-reduce payload (2 layers x 12 h^2 x 2 = %.0f MiB).",
               c.tower_param_bytes / (1024.0 * 1024)),
             "tied_params: tied-parameter ALL_REDUCE payload (a 32000 x 4096 bf16 embedding).",
             f("params[s]: stage s's parameter (= gradient) bytes, moved by the data-parallel FSDP_* collectives (%g",
               kLayers / stages),
             "layers x 12 h^2 x 2 bytes, bf16); per stage only."};
  k.link = {"A transfer takes latency_ms + bytes / bandwidth. Ranks r and q share a node when r / ranks_per_node ==",
            "q / ranks_per_node. A flat {\"latency_ms\", \"bandwidth_GBps\"} sets every link at once.",
            "pairs: per-pair overrides, e.g. {\"src\": 0, \"dst\": 9, \"latency_ms\": 0.02, \"bandwidth_GBps\": 25};",
            "a pair applies to both directions unless the reverse is listed too."};
  k.intra = {"NVLink 4 between two GPUs of a node: ~450 GB/s per direction effective, ~5 us."};
  k.inter = {"400 Gb/s InfiniBand NDR between nodes: ~50 GB/s, ~10 us."};
  k.collectives = {"Collective algorithm over the group's links: \"ring\" or \"tree\"."};
  k.protocol = {"Payloads up to eager_threshold_bytes may complete before the receiver posts (NCCL's per-peer buffer).",
                "compute_blocks_host: false on GPUs (the host launches a compute and goes on posting communication);",
                "true on CPUs (the host runs the compute itself and posts nothing until it has finished).",
                "background_progress: true on GPUs (a posted transfer moves on its own); false on CPUs with a core per",
                "rank (the receiver's transport thread reads a payload in only while that rank waits).",
                "send_handoff_ms: null on NCCL (a send completes when its payload arrived); on Gloo the time from a",
                "transfer's start to its send's return (the transport took the payload; the receive ends later).",
                "deferred_start_ms: with background_progress false, the extra start delay of a transfer that waited for",
                "its receiver to wait (its sender computes: the transport thread needs a core)."};
  k.memory = {"capacity_bytes: usable per rank (null = no limit; default: an H100 80 GB's 79.65 GiB less a 4 GiB reserve for the",
              "CUDA context, NCCL's buffers and fragmentation); capacity_basis says how. margin: a peak within this fraction",
              "below the capacity is reported tight. activation_bytes: kept from FWD to BWD per micro-",
              f("batch and stage: 34 s h bytes per layer (Korthikanti et al. 2022, FlashAttention) = %.2f GiB x %g layers.",
                kLayerKeptBytes / kGiB, kLayers / stages),
              "weight_grad_bytes: kept from BWD_INPUT to BWD_WEIGHT (every matmul's input and output gradient, 32 s h",
              "per layer; missing: half of activation_bytes). workspace_bytes: held while a backward runs (what a",
              "recomputing backward recomputes). weights_bytes, grads_bytes, optimizer_bytes: what a stage holds for",
              "the whole step before data-parallel sharding (default: bf16 weights, fp32 gradients, fp32 master",
              "weights and Adam's two moments, 2 + 4 + 12 bytes per parameter; --dp N with --distributed-optimizer",
              "or --fsdp shards them).",
              "tower_graph_bytes: owner_backward keeps the tower graph of each owned micro (2 layers' activations).",
              "tower_copy_bytes: the tower parameters every rank keeps (MPipe)."};
  return k;
}

ordered_json model_json(const CostModel& c, const Comments* k) {
  ordered_json root;
  const auto note = [&](ordered_json& j, const Comment& lines) {
    if (k) j["comment"] = lines;
  };
  note(root, k ? k->top : Comment{});
  root["format"] = "ppsched-costs";
  root["version"] = 1;
  if (!k) root["x-source"] = c.source;
  ordered_json compute;
  note(compute, k ? k->compute : Comment{});
  for (const auto& f : kComputeFields)
    compute[std::string(f.key)] = stage_json(c.*f.value, "compute." + std::string(f.key), Quantity::Time);
  root["compute"] = std::move(compute);
  ordered_json bytes;
  note(bytes, k ? k->bytes : Comment{});
  for (const auto& f : kByteFields)
    bytes[std::string(f.key)] = f.per_stage ? stage_json(c.*f.per_stage, "bytes." + std::string(f.key), Quantity::Bytes)
                                            : quantity(c.*f.scalar, "bytes." + std::string(f.key), Quantity::Bytes);
  root["bytes"] = std::move(bytes);
  ordered_json link;
  note(link, k ? k->link : Comment{});
  link.update(links_json(c.links, k ? k->intra : Comment{}, k ? k->inter : Comment{}));
  root["link"] = std::move(link);
  ordered_json coll;
  note(coll, k ? k->collectives : Comment{});
  coll.update(collectives_json(c.collectives));
  root["collectives"] = std::move(coll);
  ordered_json protocol;
  note(protocol, k ? k->protocol : Comment{});
  protocol.update(protocol_json(c.protocol));
  root["protocol"] = std::move(protocol);
  root["overlap_efficiency"] = c.overlap_efficiency;
  if (c.expert_param_bytes.given || c.moe.ep != 1 || c.moe.contention != MoeCosts{}.contention)
    root["moe"] = {{"ep", c.moe.ep},
                   {"contention", c.moe.contention},
                   {"expert_param_bytes", stage_json(c.expert_param_bytes, "moe.expert_param_bytes", Quantity::Bytes)}};
  ordered_json memory;
  note(memory, k ? k->memory : Comment{});
  memory["capacity_bytes"] =
      c.capacity_bytes ? quantity(*c.capacity_bytes, "memory.capacity_bytes", Quantity::Bytes) : ordered_json(nullptr);
  if (!c.capacity_basis.empty()) memory["capacity_basis"] = c.capacity_basis;
  memory["margin"] = c.memory_margin;
  memory["activation_bytes"] = stage_json(c.kept_activation_bytes, "memory.activation_bytes", Quantity::Bytes);
  // Written only when set: a model without them reads back equal (weight_grad_bytes missing
  // means half the activation).
  for (auto [key, field] : {std::pair{"weight_grad_bytes", &CostModel::weight_grad_bytes},
                            std::pair{"workspace_bytes", &CostModel::workspace_bytes},
                            std::pair{"weights_bytes", &CostModel::weights_bytes},
                            std::pair{"grads_bytes", &CostModel::grads_bytes},
                            std::pair{"optimizer_bytes", &CostModel::optimizer_bytes}})
    if (!(c.*field).rows.empty()) memory[key] = stage_json(c.*field, std::string("memory.") + key, Quantity::Bytes);
  memory["tower_graph_bytes"] = quantity(c.tower_graph_bytes, "memory.tower_graph_bytes", Quantity::Bytes);
  memory["tower_copy_bytes"] = quantity(c.tower_copy_bytes, "memory.tower_copy_bytes", Quantity::Bytes);
  if (!c.shared_weights.empty()) {
    ordered_json shared = ordered_json::array();
    for (size_t i = 0; i < c.shared_weights.size(); ++i) {
      const SharedWeights& w = c.shared_weights[i];
      const std::string at = "memory.shared_weights[" + std::to_string(i) + "].";
      const auto bytes = [&](int64_t b, const char* key) {
        return quantity(static_cast<double>(b), at + key, Quantity::Bytes);
      };
      shared.push_back({{"stages", w.stages},
                        {"weights_bytes", bytes(w.bytes.weights, "weights_bytes")},
                        {"grads_bytes", bytes(w.bytes.grads, "grads_bytes")},
                        {"optimizer_bytes", bytes(w.bytes.optimizer, "optimizer_bytes")}});
    }
    memory["shared_weights"] = std::move(shared);
  }
  root["memory"] = std::move(memory);
  return root;
}

}  // namespace

std::string write_cost_model(const CostModel& model) { return model_json(model, nullptr).dump(2) + "\n"; }

nlohmann::json cost_document(const CostModel& model) { return model_json(model, nullptr); }

std::string cost_template() { return cost_template(kDefaultCostStages); }

std::string cost_template(int stages) {
  const int p = stages > 0 ? stages : kDefaultCostStages;
  const CostModel c = default_cost_model(p);
  const Comments k = template_comments(c, p);
  return model_json(c, &k).dump(2) + "\n";
}

}  // namespace ppsched
