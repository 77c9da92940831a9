#include "lowering/stream_program_json.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "schedule/errors.hpp"
#include "schedule/formats/json_support.hpp"
#include "schedule/validate.hpp"

namespace ppsched {

namespace {

// Limits that keep memory in proportion to the input.
constexpr size_t kMaxStreamOps = size_t{1} << 22;  // ops over all ranks
constexpr size_t kMaxStreamsPerRank = 64;
constexpr size_t kMaxNameBytes = 256;

struct Reader {
  const std::string& file;
  [[noreturn]] void fail(const std::string& path, const std::string& what, int rank = -1) const {
    Location l = in_file(file);
    l.field = path;
    l.rank = rank;
    throw InputError(l, what);
  }
  void keys(const nlohmann::json& j, const std::string& path, std::initializer_list<std::string_view> allowed) const {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end())
        fail(path, "unknown key \"" + clip(it.key(), 60) + "\"; expected one of " + join_keys(allowed));
  }
  std::string name(const nlohmann::json& j, const std::string& path) const {
    if (!j.is_string()) fail(path, "expected a string, got " + json_type_name(j, true));
    const auto& s = j.get_ref<const std::string&>();
    if (s.empty() || s.size() > kMaxNameBytes)
      fail(path, "expected a name of 1 to " + std::to_string(kMaxNameBytes) + " bytes");
    return s;
  }
  int rank_number(const nlohmann::json& j, const std::string& path, int ranks) const {
    if (!j.is_number_integer()) fail(path, "expected a rank (an integer), got " + json_type_name(j, true));
    const auto v = j.get<int64_t>();
    if (v < 0 || v >= ranks)
      fail(path, "rank " + std::to_string(v) + " is out of range: the program has ranks 0 to " + std::to_string(ranks - 1));
    return static_cast<int>(v);
  }
};

}  // namespace

bool is_stream_program(const nlohmann::json& j) {
  return j.is_object() && j.contains("format") && j["format"].is_string() && j["format"].get<std::string>() == kStreamProgramFormat;
}

StreamProgram read_stream_program(const nlohmann::json& j, const std::string& file) {
  Reader in{file};
  if (!is_stream_program(j)) in.fail("format", "expected \"format\": \"" + std::string(kStreamProgramFormat) + "\"");
  in.keys(j, "", {"format", "version", "event_binding", "communicators", "ranks"});
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    in.fail("version", "expected \"version\": 1");
  if (!j.contains("ranks") || !j["ranks"].is_array() || j["ranks"].empty())
    in.fail("ranks", "expected a non-empty array of ranks");
  const auto& jr = j["ranks"];
  if (jr.size() > static_cast<size_t>(kMaxRanks)) in.fail("ranks", "at most " + std::to_string(kMaxRanks) + " ranks");
  const int R = static_cast<int>(jr.size());
  StreamProgram p;
  if (j.contains("event_binding")) {
    const std::string b = in.name(j["event_binding"], "event_binding");
    if (b != "latest" && b != "any") in.fail("event_binding", "expected \"latest\" (CUDA, the default) or \"any\", got \"" + b + "\"");
    p.any_record = b == "any";
  }
  std::map<std::string, int> comm_id;
  if (j.contains("communicators")) {
    const auto& jc = j["communicators"];
    if (!jc.is_object()) in.fail("communicators", "expected an object of name: [ranks]");
    for (auto it = jc.begin(); it != jc.end(); ++it) {
      const std::string path = "communicators." + clip(it.key(), 60);
      in.name(nlohmann::json(it.key()), path);
      if (!it.value().is_array() || it.value().empty()) in.fail(path, "expected a non-empty array of ranks");
      Communicator c;
      c.name = it.key();
      for (size_t k = 0; k < it.value().size(); ++k)
        c.ranks.push_back(in.rank_number(it.value()[k], path + "[" + std::to_string(k) + "]", R));
      std::sort(c.ranks.begin(), c.ranks.end());
      if (std::adjacent_find(c.ranks.begin(), c.ranks.end()) != c.ranks.end()) in.fail(path, "lists a rank twice");
      comm_id[c.name] = static_cast<int>(p.comms.size());
      p.comms.push_back(std::move(c));
    }
  }
  size_t total_ops = 0;
  p.ranks.resize(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    const std::string rpath = "ranks[" + std::to_string(r) + "]";
    const auto& x = jr[static_cast<size_t>(r)];
    if (!x.is_object()) in.fail(rpath, "expected an object with \"streams\" and \"ops\"", r);
    in.keys(x, rpath, {"streams", "ops"});
    StreamRank& rank = p.ranks[static_cast<size_t>(r)];
    if (!x.contains("streams") || !x["streams"].is_array() || x["streams"].empty() || x["streams"].size() > kMaxStreamsPerRank)
      in.fail(rpath + ".streams", "expected an array of 1 to " + std::to_string(kMaxStreamsPerRank) + " stream names", r);
    std::map<std::string, int> stream_id;
    for (size_t k = 0; k < x["streams"].size(); ++k) {
      std::string n = in.name(x["streams"][k], rpath + ".streams[" + std::to_string(k) + "]");
      if (!stream_id.emplace(n, static_cast<int>(k)).second) in.fail(rpath + ".streams", "names stream \"" + n + "\" twice", r);
      rank.streams.push_back(std::move(n));
    }
    if (!x.contains("ops") || !x["ops"].is_array()) in.fail(rpath + ".ops", "expected an array of operations", r);
    total_ops += x["ops"].size();
    if (total_ops > kMaxStreamOps) in.fail(rpath + ".ops", "more than " + std::to_string(kMaxStreamOps) + " operations in all", r);
    std::map<std::string, int> event_id;
    auto events = [&](const nlohmann::json& a, const std::string& path) {
      std::vector<int32_t> out;
      if (!a.is_array()) in.fail(path, "expected an array of event names", r);
      for (size_t k = 0; k < a.size(); ++k) {
        std::string n = in.name(a[k], path + "[" + std::to_string(k) + "]");
        auto [it, fresh] = event_id.emplace(n, static_cast<int>(rank.events.size()));
        if (fresh) rank.events.push_back(n);
        if (std::find(out.begin(), out.end(), it->second) != out.end()) in.fail(path, "names event \"" + n + "\" twice", r);
        out.push_back(it->second);
      }
      return out;
    };
    for (size_t i = 0; i < x["ops"].size(); ++i) {
      const std::string opath = rpath + ".ops[" + std::to_string(i) + "]";
      const auto& o = x["ops"][i];
      if (!o.is_object()) in.fail(opath, "expected an object", r);
      in.keys(o, opath, {"name", "stream", "collective", "send", "recv", "wait", "record"});
      StreamOp op;
      if (!o.contains("name")) in.fail(opath, "expected a \"name\"", r);
      op.name = in.name(o["name"], opath + ".name");
      if (!o.contains("stream")) in.fail(opath, "expected a \"stream\"", r);
      const std::string s = in.name(o["stream"], opath + ".stream");
      auto sit = stream_id.find(s);
      if (sit == stream_id.end()) {
        std::vector<std::string_view> names(rank.streams.begin(), rank.streams.end());
        in.fail(opath + ".stream", "stream \"" + s + "\" is not one of the rank's streams (" + join_keys(names) + ")", r);
      }
      op.stream = sit->second;
      const int kinds = static_cast<int>(o.contains("collective")) + static_cast<int>(o.contains("send")) + static_cast<int>(o.contains("recv"));
      if (kinds > 1) in.fail(opath, "an operation is at most one of collective, send and recv", r);
      if (o.contains("collective")) {
        const std::string c = in.name(o["collective"], opath + ".collective");
        auto cit = comm_id.find(c);
        if (cit == comm_id.end()) in.fail(opath + ".collective", "communicator \"" + c + "\" is not declared in \"communicators\"", r);
        const auto& members = p.comms[static_cast<size_t>(cit->second)].ranks;
        if (!std::binary_search(members.begin(), members.end(), r))
          in.fail(opath + ".collective", "rank " + std::to_string(r) + " is not a member of communicator \"" + c + "\"", r);
        op.kind = StreamOpKind::Collective;
        op.comm = cit->second;
      }
      for (const char* k : {"send", "recv"})
        if (o.contains(k)) {
          op.kind = std::string_view(k) == "send" ? StreamOpKind::Send : StreamOpKind::Recv;
          op.peer = in.rank_number(o[k], opath + "." + k, R);
          if (op.peer == r) in.fail(opath + "." + k, "a rank does not " + std::string(k) + " to itself", r);
        }
      if (o.contains("wait")) op.waits = events(o["wait"], opath + ".wait");
      if (o.contains("record")) op.records = events(o["record"], opath + ".record");
      rank.ops.push_back(std::move(op));
    }
  }
  return p;
}

nlohmann::json stream_program_json(const StreamProgram& p) {
  nlohmann::json comms = nlohmann::json::object();
  for (const auto& c : p.comms) comms[c.name] = c.ranks;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : p.ranks) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& o : r.ops) {
      nlohmann::json jo = {{"name", o.name}, {"stream", r.streams[static_cast<size_t>(o.stream)]}};
      if (o.kind == StreamOpKind::Collective) jo["collective"] = p.comms[static_cast<size_t>(o.comm)].name;
      if (o.kind == StreamOpKind::Send) jo["send"] = o.peer;
      if (o.kind == StreamOpKind::Recv) jo["recv"] = o.peer;
      auto names = [&](const std::vector<int32_t>& ev) {
        nlohmann::json a = nlohmann::json::array();
        for (int e : ev) a.push_back(r.events[static_cast<size_t>(e)]);
        return a;
      };
      if (!o.waits.empty()) jo["wait"] = names(o.waits);
      if (!o.records.empty()) jo["record"] = names(o.records);
      ops.push_back(std::move(jo));
    }
    ranks.push_back({{"streams", r.streams}, {"ops", std::move(ops)}});
  }
  return {{"format", kStreamProgramFormat},
          {"version", 1},
          {"event_binding", p.any_record ? "any" : "latest"},
          {"communicators", std::move(comms)},
          {"ranks", std::move(ranks)}};
}

}  // namespace ppsched
