#include "tools/cli/render.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>

#include "schedule/errors.hpp"
#include "schedule/text_format.hpp"
#include "schedule/validate.hpp"
#include "traces/text_grid.hpp"

namespace ppsched::cli {

nlohmann::json step_json(const Step& st) {
  nlohmann::json j;
  j["op"] = std::string(op_name(st.op));
  if (st.micro != kNone) j["micro"] = st.micro;
  if (st.stage != kNone) j["stage"] = st.stage;
  if (st.peer != kNone) j["peer"] = st.peer;
  if (!st.sub_steps().empty()) {
    j["sub_steps"] = nlohmann::json::array();
    for (const auto& sub : st.sub_steps()) j["sub_steps"].push_back(step_json(sub));
  }
  if (!st.tensors().empty()) {
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : st.tensors()) j["tensors"].push_back({{"shape", t.shape}, {"dtype", t.dtype}});
  }
  if (!st.group().empty()) j["group"] = st.group();
  return j;
}

namespace {
// "[kind] ranks 0, 1" and the message: the head of every violation in the text reports.
std::string violation_head(const Violation& v) {
  std::string out = "\n[" + std::string(to_string(v.kind)) + "] ranks";
  for (size_t k = 0; k < v.ranks.size(); ++k) out += (k ? ", " : " ") + std::to_string(v.ranks[k]);
  return out + "\n  " + v.message + "\n";
}
std::string violations_count(const CheckReport& r) {
  return std::to_string(r.violations.size()) + " violation" + (r.violations.size() > 1 ? "s" : "") + "\n";
}
nlohmann::json ops_json(const std::vector<StreamOpRef>& ops) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& o : ops) a.push_back({{"rank", o.rank}, {"op", o.op}, {"name", o.name}, {"stream", o.stream}});
  return a;
}
}  // namespace

nlohmann::json stream_report_json(const StreamProgram& p, const CheckReport& r) {
  nlohmann::json j;
  j["ok"] = r.ok();
  j["completes"] = r.completes;
  j["violations"] = nlohmann::json::array();
  for (const auto& v : r.violations) {
    nlohmann::json jv{{"kind", std::string(to_string(v.kind))}, {"ranks", v.ranks}, {"ops", ops_json(v.ops)}, {"message", v.message}};
    if (!v.interleaving.empty()) jv["interleaving"] = v.interleaving;
    j["violations"].push_back(std::move(jv));
  }
  size_t streams = 0;
  for (const auto& rk : p.ranks) streams += rk.streams.size();
  j["semantics"] = r.semantics;
  j["notes"] = r.notes;
  j["stats"] = {{"ranks", p.ranks.size()},      {"streams", streams},
                {"communicators", p.comms.size()}, {"operations", r.stats.steps},
                {"collective_calls", r.stats.collectives}, {"p2p_messages", r.stats.messages}};
  return j;
}

std::string stream_report_text(const std::string& what, const StreamProgram& p, const CheckReport& r) {
  std::string out;
  size_t streams = 0;
  for (const auto& rk : p.ranks) streams += rk.streams.size();
  if (r.ok()) {
    out += what + ": verified (" + std::to_string(r.stats.steps) + " operations on " + std::to_string(p.ranks.size()) +
           " ranks and " + std::to_string(streams) + " streams; " + std::to_string(r.stats.collectives) +
           " collective calls on " + std::to_string(p.comms.size()) + (p.comms.size() == 1 ? " communicator and " : " communicators and ") +
           std::to_string(r.stats.messages) +
           " P2P messages, each communicator's calls ordered by happens-before on every rank, the same on every "
           "member, no rendezvous cycle)\n";
  } else {
    out += what + ": " + violations_count(r);
    for (const auto& v : r.violations) {
      out += violation_head(v);
      for (const auto& o : v.ops) out += "    " + p.describe(o.rank, o.op) + "\n";
      if (!v.interleaving.empty()) out += "  a run that hangs: " + v.interleaving + "\n";
    }
  }
  if (!r.semantics.empty()) out += "  assumes " + r.semantics + "\n";
  for (const auto& n : r.notes) out += "note: " + n + "\n";
  return out;
}

nlohmann::json report_json(const Schedule& s, const CheckReport& r) {
  nlohmann::json j;
  j["ok"] = r.ok();
  j["violations"] = nlohmann::json::array();
  for (const auto& v : r.violations) {
    nlohmann::json jv;
    jv["kind"] = std::string(to_string(v.kind));
    jv["ranks"] = v.ranks;
    jv["steps"] = nlohmann::json::array();
    for (const auto& ref : v.steps) {
      nlohmann::json js{{"rank", ref.rank}, {"index", ref.index}, {"step", step_json(ref.step)}};
      if (ref.sub >= 0) js["sub"] = ref.sub;
      jv["steps"].push_back(js);
    }
    jv["message"] = v.message;
    if (!v.ops.empty()) jv["ops"] = ops_json(v.ops);
    if (!v.interleaving.empty()) jv["interleaving"] = v.interleaving;
    if (v.cause != DeadlockCause::None) {
      jv["cause"] = std::string(to_string(v.cause));
      jv["completes_with_eager"] = v.completes_with_eager;
    }
    j["violations"].push_back(jv);
  }
  j["notes"] = r.notes;
  j["semantics"] = r.semantics;
  j["stats"] = {{"ranks", s.ranks},
                {"stages", s.stages},
                {"micro_batches", s.micro_batches},
                {"steps", r.stats.steps},
                {"messages", r.stats.messages},
                {"meta_messages", r.stats.meta_messages},
                {"channels", r.stats.channels},
                {"collectives", r.stats.collectives},
                {"peak_memory_bytes", r.stats.peak_memory_bytes},
                {"resident_memory_bytes", r.stats.resident_bytes}};
  return j;
}

std::string report_text(const std::string& what, const Schedule& s, const CheckReport& r) {
  std::string out;
  const auto& st = r.stats;
  int64_t peak = 0, resident = 0;
  for (size_t k = 0; k < st.peak_memory_bytes.size(); ++k)
    if (st.peak_memory_bytes[k] > peak) {
      peak = st.peak_memory_bytes[k];
      resident = k < st.resident_bytes.size() ? st.resident_bytes[k] : 0;
    }
  const std::string memory = resident > 0 ? "peak memory " + human_bytes(peak) + " (" + human_bytes(resident) +
                                                " held for the whole step + " + human_bytes(peak - resident) + " live)"
                                          : "peak live memory " + human_bytes(peak);
  if (r.ok()) {
    out += what + ": verified (" + std::to_string(st.steps) + " steps on " + std::to_string(s.ranks) + " ranks, " +
           std::to_string(st.messages) + " messages (" + std::to_string(st.meta_messages) + " shape/dtype metas) on " +
           std::to_string(st.channels) + " channels, " + std::to_string(st.collectives) +
           " collectives checked; caches empty at the end; " + memory + ")\n";
  } else {
    out += what + ": " + violations_count(r);
    for (const auto& v : r.violations) {
      out += violation_head(v);
      std::set<std::pair<int, int>> shown;
      for (const auto& ref : v.steps) {
        if (ref.rank < 0 || ref.index < 0 || !shown.insert({ref.rank, ref.index}).second || shown.size() > 6) continue;
        out += "    " + render_excerpt(s, ref.rank, ref.index) + "\n";
      }
    }
  }
  if (!r.semantics.empty()) out += "  assumes " + r.semantics + "\n";
  for (const auto& n : r.notes) out += "note: " + n + "\n";
  return out;
}

ProgressLine::ProgressLine(bool quiet) : on_(!quiet && isatty(STDERR_FILENO)) {
  t0_ = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  struct winsize ws {};
  if (on_ && ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1) width_ = ws.ws_col;
}

void ProgressLine::show(const std::string& text) {
  if (!on_) return;
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - t0_;
  if (drawn_ && now - last_ < 0.25) return;
  last_ = now;
  drawn_ = true;
  // One column short of the width: a line that fills it wraps on some terminals.
  std::string line = text.size() < width_ ? text : text.substr(0, width_ - 1);
  std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
  std::fflush(stderr);
}

void ProgressLine::done() {
  if (!drawn_) return;
  std::fprintf(stderr, "\n");
  drawn_ = false;
}

int64_t parse_bytes(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InputError({}, flag + ": expected a size with its unit, such as 80GiB, 512MB or 4096B, got '" +
                             clip(text, 60) + "'");
  }
  std::string unit = text.substr(used);
  if (!(v >= 0) || !std::isfinite(v)) throw InputError({}, flag + ": a size must be >= 0, got '" + clip(text, 60) + "'");
  // A bare number is ambiguous (10 bytes or 10 GiB?): a byte figure names its unit.
  if (unit.empty())
    throw InputError({}, flag + ": '" + clip(text, 60) + "' has no unit: write " + clip(text, 40) + "GiB, " +
                             clip(text, 40) + "MB or " + clip(text, 40) +
                             "B (units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  double mult = 1;
  if (unit == "B") mult = 1;
  else if (unit == "KiB") mult = 1024.0;
  else if (unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  else throw InputError({}, flag + ": unknown unit '" + clip(unit, 60) + "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  if (v * mult > kMaxBytes)
    throw InputError({}, flag + ": " + clip(text, 60) + " is over the limit of " +
                             std::to_string(static_cast<int64_t>(kMaxBytes)) + " bytes (1 TiB)");
  return static_cast<int64_t>(v * mult);
}

}  // namespace ppsched::cli
