#include "workload/model_file.hpp"

#include <algorithm>
#include <filesystem>

#include "schedule/formats/json_fields.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "workload/hf_config.hpp"
#include "platform/platform_file.hpp"

namespace ppsched {
namespace {

using Keys = JsonFields::Keys;
const Keys kTopKeys = {"format", "version", "name", "hf_config", "layers", "training", "device",
                       "link", "collectives", "protocol", "overlap_efficiency", "bytes", "layout"};
// A model file's messages come from its layers; of a cost file's "bytes" it takes only the
// shape/dtype meta message, which no layer describes.
const Keys kBytesKeys = {"meta"};
const Keys kLayerKeys = {"name", "kind", "count", "params", "fwd_flops", "bwd_flops", "bwd_input_flops",
                         "bwd_weight_flops", "activation_bytes", "output_bytes", "weight_grad_bytes", "workspace_bytes"};
const Keys kTrainingKeys = {"seq_len", "micro_batch_size", "precision", "optimizer", "distributed_optimizer",
                            "fsdp", "dp", "tp", "ep", "etp", "moe_capacity_factor", "recompute",
                            "flash_attention", "attention_core"};
const Keys kDeviceKeys = {"flops_per_s", "mfu", "memory_bytes", "memory_reserve_bytes", "fitted", "split_backward",
                          "rank_time_factors"};
const Keys kSplitStages = {"first_stage", "other_stages"};
const Keys kSplitKeys = {"input", "weight"};
const Keys kFittedKinds = {"FWD", "BWD_INPUT", "BWD_WEIGHT"};
const Keys kFittedKeys = {"flops_per_s", "overhead_ms"};
const Keys kKinds = {"embedding", "decoder", "mtp", "norm", "head", "loss", "layer"};
constexpr LayerKind kKindValues[] = {LayerKind::Embedding, LayerKind::Decoder, LayerKind::Mtp, LayerKind::FinalNorm,
                                     LayerKind::Head, LayerKind::Loss, LayerKind::Generic};
const Keys kRecompute = {"none", "selective", "full"};

class ModelReader {
 public:
  explicit ModelReader(const std::string& file) : f_(file) {}

  Workload read(std::string_view text) {
    const nlohmann::json root = parse_json_strict(text, f_.file(), false);
    Workload net;
    net.source = f_.file();
    if (is_hf_config(root)) {
      // A config.json as it is: the training settings and the device are the defaults (or flags).
      net.arch = read_hf_config(root, f_.file());
      net.name = root.contains("_name_or_path") && root["_name_or_path"].is_string()
                     ? clip(root["_name_or_path"].get<std::string>(), 80)
                     : net.arch->model_type;
      fit_default_length(net);
      return net;
    }
    if (!root.is_object()) f_.fail("", "expected a JSON object (a ppsched-model file or a Hugging Face config.json), got " + JsonFields::type_of(root));
    if (!root.contains("format"))
      f_.fail("format", "missing key 'format': expected \"ppsched-model\" (or a Hugging Face config.json with \"model_type\")");
    if (root["format"] != "ppsched-model")
      f_.fail("format", "expected \"ppsched-model\", got " + (root["format"].is_string() ? clip(root["format"].dump(), 60) : JsonFields::type_of(root["format"])) +
                            (root["format"] == "ppsched-costs" ? ": this is a cost file; give it with --costs" : ""));
    if (!root.contains("version")) f_.fail("version", "missing key 'version': expected 1");
    if (root["version"] != 1) f_.fail("version", "unsupported version " + clip(root["version"].dump(), 40) + ": this build reads version 1");
    f_.object(root, "", kTopKeys);
    net.name = root.contains("name") ? clip(f_.text(root["name"], "name", "a name"), 80) : std::filesystem::path(f_.file()).stem().string();
    const bool hf = root.contains("hf_config"), listed = root.contains("layers");
    if (hf == listed)
      f_.fail(hf ? "layers" : "", hf ? "give either hf_config or layers, not both"
                                     : "missing the network: give \"hf_config\" (a config.json, by path or inline) or \"layers\"");
    if (hf) net.arch = hf_config(root["hf_config"]);
    else read_layers(root["layers"], net);
    net.device.mfu = hf ? 0.45 : 1.0;  // listed FLOPs are taken as achieved unless told
    if (root.contains("training")) read_training(root["training"], net);
    if (!root.contains("training") || !root["training"].contains("seq_len")) fit_default_length(net);
    if (root.contains("device")) read_device(root["device"], net.device);
    if (root.contains("link")) net.links = read_links(f_, root["link"]);
    if (root.contains("collectives")) net.collectives = read_collectives(f_, root["collectives"]);
    if (root.contains("protocol")) net.protocol = read_protocol(f_, root["protocol"]);
    if (root.contains("overlap_efficiency"))
      net.overlap_efficiency = f_.quantity(root["overlap_efficiency"], "overlap_efficiency", Quantity::Fraction);
    if (root.contains("bytes") && f_.object(root["bytes"], "bytes", kBytesKeys).contains("meta"))
      net.meta_bytes = f_.quantity(root["bytes"]["meta"], "bytes.meta", Quantity::Bytes);
    if (root.contains("layout")) net.default_layout = f_.text(root["layout"], "layout", "a layout string (\"8,8,8,8\" or Megatron's)");
    return net;
  }

 private:
  // The default sequence length (4096) is no longer than a model's learned positions (GPT-2's
  // 1024): a model cannot run past them (check_positions).
  static void fit_default_length(Workload& net) {
    if (net.arch && net.arch->learned_positions > 0)
      for (int64_t& s : net.training.seq_lens) s = std::min(s, net.arch->learned_positions);
  }

  Architecture hf_config(const nlohmann::json& j) {
    if (j.is_object()) return read_hf_config(j, f_.file(), "hf_config");
    const std::string& rel = f_.text(j, "hf_config", "a path to a config.json, or the config inline as an object");
    std::filesystem::path p(rel);
    if (p.is_relative()) p = std::filesystem::path(f_.file()).parent_path() / p;
    std::string text;
    try {
      text = read_input_file(p.string(), kMaxModelFileBytes);
    } catch (const InputError& e) {
      f_.fail("hf_config", e.what());
    }
    const nlohmann::json config = parse_json_strict(text, p.string(), false);
    return read_hf_config(config, p.string());
  }

  void read_layers(const nlohmann::json& j, Workload& net) {
    if (!j.is_array()) f_.fail("layers", "expected an array of layers, got " + JsonFields::type_of(j));
    if (j.empty()) f_.fail("layers", "expected at least one layer, got an empty array");
    if (j.size() > static_cast<size_t>(kMaxLayers)) f_.fail("layers", std::to_string(j.size()) + " layers is over the limit of " + std::to_string(kMaxLayers));
    int64_t total = 0;
    for (size_t k = 0; k < j.size(); ++k) {
      const std::string path = "layers[" + std::to_string(k) + "]";
      const nlohmann::json& e = f_.object(j[k], path, kLayerKeys);
      const int64_t count = e.contains("count") ? f_.whole(e["count"], path + ".count", 1, kMaxLayers, "a count from 1 to " + std::to_string(kMaxLayers)) : 1;
      if (total + count > kMaxLayers)
        f_.fail(path + ".count", "the layers add up to more than the limit of " + std::to_string(kMaxLayers));
      Layer l;
      l.kind = e.contains("kind") ? kKindValues[f_.choice(e["kind"], path + ".kind", kKinds)] : LayerKind::Generic;
      const auto need = [&](const char* key) -> const nlohmann::json& {
        if (!e.contains(key)) f_.fail(path + "." + key, std::string("missing key '") + key + "'");
        return e[key];
      };
      const auto flops = [&](const nlohmann::json& v, const std::string& p) {
        return f_.number(v, p, 0, kMaxLayerFlops, "FLOPs from 0 to 1e24");
      };
      const auto bytes = [&](const nlohmann::json& v, const std::string& p) {
        return f_.whole(v, p, 0, static_cast<int64_t>(kMaxLayerBytes), "a whole number of bytes from 0 to 2^50");
      };
      l.params = f_.whole(need("params"), path + ".params", 0, static_cast<int64_t>(kMaxLayerParams), "a parameter count from 0 to 1e15");
      l.fwd_flops = flops(need("fwd_flops"), path + ".fwd_flops");
      const bool has_b = e.contains("bwd_flops"), has_i = e.contains("bwd_input_flops"), has_w = e.contains("bwd_weight_flops");
      const double bwd = has_b ? flops(e["bwd_flops"], path + ".bwd_flops") : 0;
      double in = has_i ? flops(e["bwd_input_flops"], path + ".bwd_input_flops") : 0;
      double w = has_w ? flops(e["bwd_weight_flops"], path + ".bwd_weight_flops") : 0;
      if (!has_i && !has_w) {
        const double b = has_b ? bwd : 2 * l.fwd_flops;
        in = w = b / 2;
      } else if (has_i != has_w) {
        const double b = has_b ? bwd : 2 * l.fwd_flops;
        double& other = has_i ? w : in;
        const double given = has_i ? in : w;
        if (given > b)
          f_.fail(path + (has_i ? ".bwd_input_flops" : ".bwd_weight_flops"),
                  "exceeds the whole backward (" + std::string(has_b ? "bwd_flops" : "2 x fwd_flops") +
                      "): the other half is what remains of it and would be negative");
        other = b - given;
      } else if (has_b && std::abs(in + w - bwd) > 1e-9 * std::max(1.0, bwd)) {
        f_.fail(path + ".bwd_flops", "bwd_flops differs from bwd_input_flops + bwd_weight_flops: give either, or consistent figures");
      }
      l.bwd_input_flops = in;
      l.bwd_weight_flops = w;
      l.activation_bytes = bytes(need("activation_bytes"), path + ".activation_bytes");
      l.output_bytes = bytes(need("output_bytes"), path + ".output_bytes");
      l.weight_grad_bytes = e.contains("weight_grad_bytes") ? bytes(e["weight_grad_bytes"], path + ".weight_grad_bytes")
                                                            : l.activation_bytes / 2;
      l.workspace_bytes = e.contains("workspace_bytes") ? bytes(e["workspace_bytes"], path + ".workspace_bytes") : 0;
      const std::string name = e.contains("name") ? clip(f_.text(e["name"], path + ".name", "a layer name"), 60) : "";
      for (int64_t c = 0; c < count; ++c) {
        l.name = name.empty() ? "layers." + std::to_string(total + c) : count > 1 ? name + "." + std::to_string(c) : name;
        net.explicit_layers.push_back(l);
      }
      total += count;
    }
  }

  void read_training(const nlohmann::json& j, Workload& net) {
    f_.object(j, "training", kTrainingKeys);
    Training& t = net.training;
    const bool listed = !net.arch.has_value();
    for (const char* key : {"seq_len", "micro_batch_size", "recompute", "flash_attention", "attention_core", "ep", "etp",
                            "moe_capacity_factor"})
      if (listed && j.contains(key))
        f_.fail(std::string("training.") + key, std::string("the layers are listed with their figures: ") + key +
                                                    " does not change them (it applies to hf_config models)");
    if (j.contains("seq_len")) {
      const nlohmann::json& s = j["seq_len"];
      const auto one = [&](const nlohmann::json& v, const std::string& p) {
        return f_.whole(v, p, 1, kMaxSeqLen, "a sequence length from 1 to " + std::to_string(kMaxSeqLen));
      };
      t.seq_lens.clear();
      if (s.is_array()) {
        if (s.empty() || s.size() > static_cast<size_t>(kMaxLayers))
          f_.fail("training.seq_len", "expected one length per micro-batch (1 to " + std::to_string(kMaxLayers) + " of them)");
        for (size_t k = 0; k < s.size(); ++k) t.seq_lens.push_back(one(s[k], "training.seq_len[" + std::to_string(k) + "]"));
      } else {
        t.seq_lens.push_back(one(s, "training.seq_len"));
      }
    }
    if (j.contains("micro_batch_size"))
      t.micro_batch_size = f_.whole(j["micro_batch_size"], "training.micro_batch_size", 1, kMaxMicroBatchSize,
                                    "a micro-batch size from 1 to " + std::to_string(kMaxMicroBatchSize));
    if (j.contains("precision"))
      t.precision = static_cast<Precision>(f_.choice(j["precision"], "training.precision", {"bf16", "fp16", "fp32"}));
    if (j.contains("optimizer"))
      t.optimizer = f_.choice(j["optimizer"], "training.optimizer", {"adam", "adamw", "sgd"}) == 2 ? Optimizer::Sgd : Optimizer::Adam;
    if (j.contains("distributed_optimizer")) t.distributed_optimizer = f_.boolean(j["distributed_optimizer"], "training.distributed_optimizer");
    if (j.contains("fsdp")) t.fsdp = f_.boolean(j["fsdp"], "training.fsdp");
    if (j.contains("dp")) t.dp = static_cast<int>(f_.whole(j["dp"], "training.dp", 1, int64_t{1} << 20, "a data-parallel degree from 1 to 2^20"));
    if (j.contains("tp")) t.tp = static_cast<int>(f_.whole(j["tp"], "training.tp", 1, 65536, "a tensor-parallel degree from 1 to 65536"));
    if (j.contains("ep")) t.ep = static_cast<int>(f_.whole(j["ep"], "training.ep", 1, kMaxExperts, "an expert-parallel degree from 1 to 65536"));
    if (j.contains("etp"))
      t.etp = static_cast<int>(f_.whole(j["etp"], "training.etp", 1, 65536, "an expert tensor-parallel degree from 1 to 65536"));
    if (j.contains("moe_capacity_factor"))
      t.moe_capacity_factor = f_.number(j["moe_capacity_factor"], "training.moe_capacity_factor", 1, 1024,
                                        "a capacity / imbalance factor from 1 to 1024");
    if (const std::string why = expert_parallel_problem(t, net.arch ? net.arch->experts : 0); !why.empty())
      f_.fail(j.contains("ep") ? "training.ep" : "training.dp", why);
    if (const std::string why = tensor_parallel_problem(t, net.arch ? &*net.arch : nullptr); !why.empty()) f_.fail("training.tp", why);
    if (j.contains("recompute")) {
      const nlohmann::json& r = j["recompute"];
      t.recompute.clear();
      if (r.is_array()) {
        const size_t decoders = static_cast<size_t>(net.arch->layers + net.arch->mtp_layers);
        if (r.size() != decoders)
          f_.fail("training.recompute", "expected one mode per decoder layer (" + std::to_string(decoders) + "), got " + std::to_string(r.size()));
        for (size_t k = 0; k < r.size(); ++k)
          t.recompute.push_back(static_cast<Recompute>(f_.choice(r[k], "training.recompute[" + std::to_string(k) + "]", kRecompute)));
      } else {
        t.recompute.push_back(static_cast<Recompute>(f_.choice(r, "training.recompute", kRecompute)));
      }
    }
    if (j.contains("flash_attention")) t.flash_attention = f_.boolean(j["flash_attention"], "training.flash_attention");
    if (j.contains("attention_core"))
      t.attention_core = static_cast<AttentionCore>(f_.choice(j["attention_core"], "training.attention_core", {"causal", "full"}));
    if (const std::string why = attention_core_problem(t); !why.empty()) f_.fail("training.attention_core", why);
    if (t.fsdp && t.distributed_optimizer)
      f_.fail("training.distributed_optimizer", "FSDP already shards the optimizer state: give fsdp or distributed_optimizer");
  }

  void read_device(const nlohmann::json& j, Device& d) {
    f_.object(j, "device", kDeviceKeys);
    if (j.contains("flops_per_s"))
      d.flops_per_s = f_.number(j["flops_per_s"], "device.flops_per_s", kMinFlopsPerSecond, kMaxFlopsPerSecond, "FLOP/s from 1e3 to 1e21");
    if (j.contains("mfu")) {
      d.mfu = f_.number(j["mfu"], "device.mfu", 0, 1, "a fraction of the peak above 0 and at most 1");
      if (d.mfu <= 0) f_.fail("device.mfu", "expected a fraction of the peak above 0 and at most 1, got 0");
    }
    if (j.contains("memory_bytes")) {
      if (j["memory_bytes"].is_null()) d.memory_bytes.reset();
      else d.memory_bytes = f_.whole(j["memory_bytes"], "device.memory_bytes", 1, int64_t{1} << 50, "bytes from 1 to 2^50, or null");
    }
    if (j.contains("memory_reserve_bytes"))
      d.memory_reserve_bytes = f_.whole(j["memory_reserve_bytes"], "device.memory_reserve_bytes", 0, int64_t{1} << 50,
                                        "bytes from 0 to 2^50");
    if (d.memory_bytes && d.memory_reserve_bytes >= *d.memory_bytes)
      f_.fail("device.memory_reserve_bytes", "the reserve (" + std::to_string(d.memory_reserve_bytes) +
                                                 " bytes) leaves nothing of device.memory_bytes (" +
                                                 std::to_string(*d.memory_bytes) + ")");
    // What `ppsched calibrate --model` fitted: per compute kind an achieved rate and a fixed
    // time per step.
    if (j.contains("fitted")) {
      const nlohmann::json& fit = f_.object(j["fitted"], "device.fitted", kFittedKinds);
      for (size_t k = 0; k < kFittedKinds.size(); ++k) {
        const std::string key(kFittedKinds[k]);
        if (!fit.contains(key)) continue;
        const std::string path = "device.fitted." + key;
        const nlohmann::json& e = f_.object(fit[key], path, kFittedKeys);
        if (!e.contains("flops_per_s")) f_.fail(path + ".flops_per_s", "missing key 'flops_per_s'");
        Device::Fitted out;
        out.flops_per_s = f_.number(e["flops_per_s"], path + ".flops_per_s", kMinFlopsPerSecond, kMaxFlopsPerSecond, "FLOP/s from 1e3 to 1e21");
        if (e.contains("overhead_ms"))
          out.overhead_ms = f_.number(e["overhead_ms"], path + ".overhead_ms", 0, 1e9, "a time in ms from 0 to 1e9");
        d.fitted[k] = out;
      }
    }
    if (j.contains("split_backward")) {
      const nlohmann::json& sb = f_.object(j["split_backward"], "device.split_backward", kSplitStages);
      for (const char* which : {"first_stage", "other_stages"}) {
        if (!sb.contains(which)) continue;
        const std::string path = std::string("device.split_backward.") + which;
        const nlohmann::json& e = f_.object(sb[which], path, kSplitKeys);
        Device::SplitCost c;
        for (auto [key, field] : {std::pair{"input", &Device::SplitCost::input}, std::pair{"weight", &Device::SplitCost::weight}}) {
          if (!e.contains(key)) f_.fail(path + "." + key, std::string("missing key '") + key + "'");
          c.*field = f_.number(e[key], path + "." + key, 0, 100, "a fraction of the whole backward from 0 to 100");
        }
        (std::string(which) == "first_stage" ? d.split_first : d.split_other) = c;
      }
    }
    // What `ppsched calibrate --model` measured of each traced rank: per compute kind, the
    // factor on its steps' fitted time.
    if (j.contains("rank_time_factors")) {
      const nlohmann::json& r = j["rank_time_factors"];
      if (!r.is_array() || r.empty() || r.size() > (size_t{1} << 20))
        f_.fail("device.rank_time_factors", "expected an array of 1 to 2^20 ranks' factors ({\"FWD\": .., \"BWD_INPUT\": .., \"BWD_WEIGHT\": ..})");
      d.rank_time.clear();
      for (size_t i = 0; i < r.size(); ++i) {
        const std::string path = "device.rank_time_factors[" + std::to_string(i) + "]";
        const nlohmann::json& e = f_.object(r[i], path, kFittedKinds);
        std::array<double, 3> x{};
        for (size_t k = 0; k < kFittedKinds.size(); ++k) {
          const std::string key(kFittedKinds[k]);
          if (!e.contains(key)) f_.fail(path + "." + key, "missing key '" + key + "'");
          x[k] = f_.number(e[key], path + "." + key, 1e-3, 1e3, "a factor on the step time from 0.001 to 1000");
        }
        d.rank_time.push_back(x);
      }
    }
  }

  JsonFields f_;
};

}  // namespace

Workload read_model(std::string_view text, const std::string& file) { return ModelReader(file).read(text); }

Workload read_model_file(const std::string& path) {
  return read_model(read_input_file(path, kMaxModelFileBytes), path);
}

namespace {

// The sections a model file gives beside its layers: training, device (fitted rates included),
// the platform (link, collectives, protocol, overlap, meta bytes) and the layout.
void write_sections(const Workload& net, nlohmann::json& out) {
  const Training& t = net.training;
  nlohmann::json tr = nlohmann::json::object();
  if (net.arch) {
    if (t.seq_lens.size() == 1) tr["seq_len"] = t.seq_lens[0];
    else tr["seq_len"] = t.seq_lens;
    tr["micro_batch_size"] = t.micro_batch_size;
    nlohmann::json rc = nlohmann::json::array();
    for (Recompute r : t.recompute) rc.push_back(to_string(r));
    tr["recompute"] = t.recompute.size() == 1 ? rc[0] : rc;
    tr["flash_attention"] = t.flash_attention;
    if (t.attention_core) tr["attention_core"] = to_string(*t.attention_core);
  }
  tr["precision"] = to_string(t.precision);
  tr["optimizer"] = to_string(t.optimizer);
  tr["distributed_optimizer"] = t.distributed_optimizer;
  tr["fsdp"] = t.fsdp;
  tr["dp"] = t.dp;
  tr["tp"] = t.tp;
  if (net.arch && net.arch->experts > 0) {
    tr["ep"] = t.ep;
    if (t.etp > 0) tr["etp"] = t.etp;
    tr["moe_capacity_factor"] = t.moe_capacity_factor;
  }
  out["training"] = tr;
  nlohmann::json dev = {{"flops_per_s", net.device.flops_per_s}, {"mfu", net.device.mfu}};
  dev["memory_bytes"] = net.device.memory_bytes ? nlohmann::json(*net.device.memory_bytes) : nlohmann::json(nullptr);
  dev["memory_reserve_bytes"] = net.device.memory_reserve_bytes;
  nlohmann::json fitted = nlohmann::json::object();
  for (size_t k = 0; k < 3; ++k)
    if (net.device.fitted[k])
      fitted[kRateKindKeys[k]] = {{"flops_per_s", net.device.fitted[k]->flops_per_s},
                                     {"overhead_ms", net.device.fitted[k]->overhead_ms}};
  if (!fitted.empty()) dev["fitted"] = fitted;
  nlohmann::json split = nlohmann::json::object();
  if (net.device.split_first) split["first_stage"] = {{"input", net.device.split_first->input}, {"weight", net.device.split_first->weight}};
  if (net.device.split_other) split["other_stages"] = {{"input", net.device.split_other->input}, {"weight", net.device.split_other->weight}};
  if (!split.empty()) dev["split_backward"] = split;
  if (!net.device.rank_time.empty()) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& x : net.device.rank_time)
      ranks.push_back({{kRateKindKeys[0], x[0]}, {kRateKindKeys[1], x[1]}, {kRateKindKeys[2], x[2]}});
    dev["rank_time_factors"] = ranks;
  }
  out["device"] = dev;
  if (net.links) out["link"] = links_json(*net.links);
  if (net.collectives) out["collectives"] = collectives_json(*net.collectives);
  if (net.protocol) out["protocol"] = protocol_json(*net.protocol);
  if (net.overlap_efficiency) out["overlap_efficiency"] = *net.overlap_efficiency;
  if (net.meta_bytes) out["bytes"]["meta"] = json_number(*net.meta_bytes);
  if (!net.default_layout.empty()) out["layout"] = net.default_layout;
}

}  // namespace

nlohmann::json layer_json(const Layer& l) {
  return {{"name", l.name},
          {"kind", to_string(l.kind)},
          {"params", l.params},
          {"fwd_flops", l.fwd_flops},
          {"bwd_input_flops", l.bwd_input_flops},
          {"bwd_weight_flops", l.bwd_weight_flops},
          {"activation_bytes", l.activation_bytes},
          {"output_bytes", l.output_bytes},
          {"weight_grad_bytes", l.weight_grad_bytes},
          {"workspace_bytes", l.workspace_bytes}};
}

std::string write_model_file(const std::string& path, const Workload& net) {
  nlohmann::json doc = parse_json_strict(read_input_file(path, kMaxModelFileBytes), path, false);
  nlohmann::json out;
  if (is_hf_config(doc)) {
    out = {{"format", "ppsched-model"}, {"version", 1}, {"name", net.name}, {"hf_config", doc}};
  } else {
    out = doc;
    if (out.contains("hf_config") && out["hf_config"].is_string()) {
      std::filesystem::path p(out["hf_config"].get<std::string>());
      if (p.is_relative()) p = std::filesystem::path(path).parent_path() / p;
      out["hf_config"] = parse_json_strict(read_input_file(p.string(), kMaxModelFileBytes), p.string(), false);
    }
  }
  write_sections(net, out);
  return out.dump(2) + "\n";
}

std::string write_model(const Workload& net, const std::string& comment) {
  if (net.arch) throw std::logic_error("write_model: a network with an architecture is written by write_model_file");
  nlohmann::json out = {{"format", "ppsched-model"}, {"version", 1}, {"name", net.name}};
  if (!comment.empty()) out["comment"] = comment;
  nlohmann::json layers = nlohmann::json::array();
  for (const Layer& l : net.explicit_layers) layers.push_back(layer_json(l));
  out["layers"] = std::move(layers);
  write_sections(net, out);
  return out.dump(2) + "\n";
}

}  // namespace ppsched
