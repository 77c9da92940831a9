#include "exec/stage_manifest.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "schedule/errors.hpp"

namespace ppsched::exec {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

InputError bad(const std::string& file, const std::string& field, const std::string& msg) {
  Location l = in_file(file);
  l.field = field;
  return InputError(l, msg);
}

DataSpec read_spec(const json& j, const std::string& file, const std::string& key) {
  if (!j.contains(key)) throw bad(file, key, "missing: give {\"shape\": [micro_batch_size, ...], \"dtype\": ...}");
  const json& o = j.at(key);
  if (!o.is_object()) throw bad(file, key, "must be an object {\"shape\": [...], \"dtype\": ...}");
  static const std::set<std::string> known{"shape", "dtype", "high", "comment"};
  for (const auto& [k, v] : o.items())
    if (!known.count(k)) throw bad(file, key + "." + k, "unknown key (expected shape, dtype, high)");
  DataSpec d;
  if (!o.contains("shape") || !o.at("shape").is_array() || o.at("shape").empty())
    throw bad(file, key + ".shape", "must be a non-empty array of positive sizes, the first being the micro-batch size");
  for (const auto& v : o.at("shape")) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t{1} << 31))
      throw bad(file, key + ".shape", "every size must be an integer in [1, 2^31], got " + v.dump());
    d.shape.push_back(v.get<int64_t>());
  }
  if (d.numel() > (int64_t{1} << 28)) throw bad(file, key + ".shape", "more than 2^28 elements per micro-batch");
  if (!o.contains("dtype") || !o.at("dtype").is_string())
    throw bad(file, key + ".dtype", "missing: one of float32, float64, int64, int32");
  d.dtype = o.at("dtype").get<std::string>();
  if (d.dtype != "float32" && d.dtype != "float64" && !d.is_integer())
    throw bad(file, key + ".dtype", "'" + d.dtype + "' is not one of float32, float64, int64, int32");
  if (d.is_integer()) {
    if (!o.contains("high") || !o.at("high").is_number_integer() || o.at("high").get<int64_t>() < 1 ||
        o.at("high").get<int64_t>() > (int64_t{1} << 31))
      throw bad(file, key + ".high", "an integer dtype needs \"high\" in [1, 2^31]: values are drawn from [0, high)");
    d.high = o.at("high").get<int64_t>();
  } else if (o.contains("high")) {
    throw bad(file, key + ".high", "only integer dtypes take \"high\" (floating data is standard normal)");
  }
  return d;
}

}  // namespace

int64_t DataSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string StageModules::module_path(int stage) const {
  return (fs::path(dir) / ("stage" + std::to_string(stage) + ".pt")).string();
}

StageModules read_stage_modules(const std::string& dir) {
  if (!fs::is_directory(dir)) throw bad(dir, "", "--stage-module wants a directory holding stages.json and stage0.pt, ...");
  const std::string file = (fs::path(dir) / "stages.json").string();
  std::ifstream in(file);
  if (!in)
    throw bad(file, "", "missing: a --stage-module directory needs a stages.json manifest (stage count, input and "
                        "target shapes; see exec/README.md)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {  // a syntax error, or a number out of range (1E999)
    throw bad(file, "", std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad(file, "", "must be a JSON object");
  static const std::set<std::string> known{"format", "version", "stages", "input", "target", "comment"};
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) throw bad(file, k, "unknown key (expected format, version, stages, input, target)");
  if (j.value("format", "") != "ppsched-stage-modules")
    throw bad(file, "format", "must be \"ppsched-stage-modules\"");
  if (!j.contains("version") || j.at("version") != 1) throw bad(file, "version", "must be 1");
  if (!j.contains("stages") || !j.at("stages").is_number_integer() || j.at("stages").get<int64_t>() < 1 ||
      j.at("stages").get<int64_t>() > 4096)
    throw bad(file, "stages", "must be the number of stage modules, an integer in [1, 4096]");
  StageModules m;
  m.dir = dir;
  m.stages = j.at("stages").get<int>();
  m.input = read_spec(j, file, "input");
  m.target = read_spec(j, file, "target");
  if (m.input.shape[0] != m.target.shape[0])
    throw bad(file, "target.shape", "dim 0 is the micro-batch size and must equal input's (" +
                                        std::to_string(m.input.shape[0]) + "), got " + std::to_string(m.target.shape[0]));
  for (int k = 0; k < m.stages; ++k)
    if (!fs::is_regular_file(m.module_path(k)))
      throw bad(m.module_path(k), "", "missing: stages.json declares " + std::to_string(m.stages) +
                                          " stages, so stage0.pt ... stage" + std::to_string(m.stages - 1) +
                                          ".pt must all exist");
  if (fs::exists(m.module_path(m.stages)))
    throw bad(m.module_path(m.stages), "", "is there, but stages.json declares " + std::to_string(m.stages) +
                                               " stages (stage0.pt ... stage" + std::to_string(m.stages - 1) +
                                               ".pt): fix the manifest's \"stages\" or remove the file");
  return m;
}

}  // namespace ppsched::exec
