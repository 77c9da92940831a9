// A standalone SVG picture of a simulation. Layout, top to bottom: the title (schedule and
// makespan), a time axis in ms, then per rank a compute bar, a thin communication strip
// (sends in its upper half, receives in its lower half, collectives across it) and the
// memory curve, then a legend. Everything is inline (one <style>, one arrow marker), so a
// browser shows the file as is.
//
// Size control: slices narrower than a pixel are merged with their sub-pixel neighbours into
// one rect (grey when the merged kinds differ), the memory curve keeps at most four points
// per pixel column (entry, extremes, exit), tooltips and P2P arrows are left out above their
// limits. The file stays O(width x ranks) however many steps the schedule has.
#include "traces/svg_timeline.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "model/text_format.hpp"
#include "traces/chrome_trace.hpp"

namespace ppsched {
namespace {

// Geometry (pixels).
constexpr double kLeft = 104, kRight = 28, kTitleH = 30, kAxisH = 24;
constexpr double kComputeH = 18, kCommGap = 2, kCommH = 8, kMemGap = 3, kMemH = 28, kRowGap = 12;
constexpr double kLegendLineH = 18;

// Colour classes of a slice.
enum Cls : uint8_t { kF, kB, kBi, kBw, kT, kD, kX, kS, kR, kC, kM, kClsCount };
struct ClsInfo {
  const char* css;
  const char* fill;
  const char* legend;
};
constexpr ClsInfo kCls[kClsCount] = {
    {"f", "#7aa6e0", "forward"},          {"b", "#6cc070", "backward"},
    {"bi", "#a8dca0", "backward (input)"}, {"bw", "#f3d36b", "backward (weight)"},
    {"t", "#c39bd3", "tower"},             {"d", "#c9a27e", "data load"},
    {"x", "#c8c8c8", "local (FSDP, swap)"}, {"s", "#f5a55a", "P2P send"},
    {"r", "#f3b7b3", "P2P receive"},       {"c", "#e36f6f", "collective"},
    {"m", "#8f8f8f", "merged (sub-pixel)"},
};

Cls class_of_compute(const Step& step) {
  switch (info(step.op).compute) {
    case ComputeKind::Forward: return kF;
    case ComputeKind::Backward: return kB;
    case ComputeKind::BackwardInput: return kBi;
    case ComputeKind::BackwardWeight: return kBw;
    case ComputeKind::TowerForward:
    case ComputeKind::TowerBackward:
    case ComputeKind::TowerGradBackward: return kT;
    case ComputeKind::DataLoad: return kD;
    case ComputeKind::Fsdp:
    case ComputeKind::Swap: return kX;
    case ComputeKind::None: break;
  }
  switch (info(step.op).kind) {
    case StepKind::Collective: return kC;
    case StepKind::P2PSend: return kS;
    case StepKind::P2PRecv: return kR;
    default: return kX;
  }
}

// The class of a slice on its lane (a composite: the class of its first sub-step).
Cls class_of(const Step* step, Lane lane) {
  switch (lane) {
    case Lane::Send: return kS;
    case Lane::Recv: return kR;
    case Lane::Collective: return kC;
    case Lane::Compute: break;
  }
  if (!step) return kX;
  if (is_composite(step->op) && !step->sub_steps().empty()) return class_of_compute(step->sub_steps()[0]);
  return class_of_compute(*step);
}

// ---- output helpers ------------------------------------------------------------------------

struct Svg {
  std::string s;

  Svg& raw(std::string_view v) {
    s.append(v.data(), v.size());
    return *this;
  }
  Svg& integer(int64_t v) {
    char buf[24];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    s.append(buf, static_cast<size_t>(res.ptr - buf));
    return *this;
  }
  // Coordinates with one decimal, from an integer (deterministic, no locale).
  Svg& num(double v) {
    if (!std::isfinite(v)) v = 0;
    int64_t t = std::llround(v * 10);
    if (t < 0) {
      s.push_back('-');
      t = -t;
    }
    integer(t / 10);
    if (t % 10) {
      s.push_back('.');
      s.push_back(static_cast<char>('0' + t % 10));
    }
    return *this;
  }
  // XML text or attribute content.
  Svg& text(std::string_view v) {
    for (char c : v) {
      switch (c) {
        case '&': s += "&amp;"; break;
        case '<': s += "&lt;"; break;
        case '>': s += "&gt;"; break;
        case '"': s += "&quot;"; break;
        case '\'': s += "&apos;"; break;
        default:
          // Control characters are not allowed in XML 1.0 (except tab and newlines).
          if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
            s.push_back(' ');
          else
            s.push_back(c);
      }
    }
    return *this;
  }
};

// Coordinates and times: a non-finite value (not expected) draws at 0 rather than as "nan".
std::string coord(double v, int decimals) { return fixed(std::isfinite(v) ? v : 0.0, decimals); }

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target` ticks over `span`.
double tick_step(double span, int target) {
  double raw = span / std::max(1, target);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

// The label shown inside a compute rect: the micro-batch(es).
std::string micro_label(const Step* step) {
  if (!step) return {};
  if (is_composite(step->op)) {
    std::string out;
    for (size_t k = 0; k < step->sub_steps().size(); ++k) {
      if (k) out += '|';
      if (step->sub_steps()[k].micro >= 0) out += std::to_string(step->sub_steps()[k].micro);
    }
    return out;
  }
  return step->micro >= 0 ? std::to_string(step->micro) : std::string();
}

struct RowGeometry {
  double top = 0;      // compute bar
  double comm = 0;     // communication strip
  double memory = 0;   // memory strip
};

}  // namespace

std::string svg_timeline(const Schedule& s, const RunRecord& r, const SvgOptions& options) {
  int nranks = std::max(s.ranks, static_cast<int32_t>(r.ranks.size()));
  double makespan = r.makespan_ms;
  for (const auto& sl : r.slices) {
    nranks = std::max(nranks, sl.rank + 1);
    if (std::isfinite(sl.end_ms)) makespan = std::max(makespan, sl.end_ms);
  }
  for (const auto& m : r.memory) nranks = std::max(nranks, m.rank + 1);
  const double span_ms = makespan > 0 && std::isfinite(makespan) ? makespan : 1.0;

  const double W = std::max(100, options.width);
  const double scale = W / span_ms;
  auto x_of = [&](double t) { return kLeft + std::clamp(std::isfinite(t) ? t : 0.0, 0.0, span_ms) * scale; };

  const double row_h = kComputeH + kCommGap + kCommH + (options.memory ? kMemGap + kMemH : 0) + kRowGap;
  const double rows_top = kTitleH + kAxisH;
  auto row = [&](int rank) {
    RowGeometry g;
    g.top = rows_top + rank * row_h;
    g.comm = g.top + kComputeH + kCommGap;
    g.memory = g.comm + kCommH + kMemGap;
    return g;
  };

  // Slices in drawing order: by (rank, lane) (a counting sort), then by start time (usually
  // already so: the engine records slices in time order).
  std::vector<uint32_t> order(r.slices.size());
  {
    std::vector<size_t> first(static_cast<size_t>(nranks) * kTraceLanes + 1, 0);
    auto key = [&](const TimedSlice& sl) { return static_cast<size_t>(sl.rank) * kTraceLanes + static_cast<size_t>(sl.lane) % kTraceLanes; };
    size_t kept = 0;
    for (const auto& sl : r.slices)
      if (sl.rank >= 0) ++first[key(sl) + 1], ++kept;
    for (size_t k = 1; k < first.size(); ++k) first[k] += first[k - 1];
    order.resize(kept);
    std::vector<size_t> next(first.begin(), first.end() - 1);
    for (size_t i = 0; i < r.slices.size(); ++i)
      if (r.slices[i].rank >= 0) order[next[key(r.slices[i])]++] = static_cast<uint32_t>(i);
    auto by_start = [&](uint32_t a, uint32_t b) { return r.slices[a].start_ms < r.slices[b].start_ms; };
    for (size_t k = 0; k + 1 < first.size(); ++k) {
      auto b = order.begin() + static_cast<std::ptrdiff_t>(first[k]), e = order.begin() + static_cast<std::ptrdiff_t>(first[k + 1]);
      if (!std::is_sorted(b, e, by_start)) std::stable_sort(b, e, by_start);
    }
  }
  // Memory samples by rank, in time order.
  std::vector<std::vector<const MemorySample*>> samples_of(static_cast<size_t>(nranks));
  for (const auto& m : r.memory)
    if (m.rank >= 0) samples_of[static_cast<size_t>(m.rank)].push_back(&m);
  for (auto& v : samples_of) {
    auto by_time = [](const MemorySample* a, const MemorySample* b) { return a->time_ms < b->time_ms; };
    if (!std::is_sorted(v.begin(), v.end(), by_time)) std::stable_sort(v.begin(), v.end(), by_time);
  }

  std::unordered_set<uint64_t> critical;
  for (const auto& c : r.critical_path)
    critical.insert((static_cast<uint64_t>(static_cast<uint32_t>(c.rank)) << 32) | static_cast<uint32_t>(c.step_index));
  auto is_critical = [&](const TimedSlice& sl) {
    return !critical.empty() && sl.lane == Lane::Compute &&
           critical.count((static_cast<uint64_t>(static_cast<uint32_t>(sl.rank)) << 32) |
                          static_cast<uint32_t>(sl.step_index));
  };
  const bool tooltips = r.slices.size() <= static_cast<size_t>(std::max(0, options.max_tooltips));
  const bool arrows = !r.flows.empty() && r.flows.size() <= static_cast<size_t>(std::max(0, options.max_arrows));

  // Micro-batch labels: every compute slice of a pixel or more gets its label, or none does
  // (a dropped subset would read wrong: "0..9 0..9 8 9" at M = 32). The font shrinks until
  // the narrowest labelled slice holds its label; below kMinLabelFont the ids are on hover
  // only, and the legend says so.
  constexpr double kMaxLabelFont = 10, kMinLabelFont = 6, kCharEm = 0.62;
  double label_font = kMaxLabelFont;
  bool any_label = false;
  for (uint32_t i : order) {
    const TimedSlice& sl = r.slices[i];
    if (sl.lane != Lane::Compute || !(sl.end_ms > sl.start_ms)) continue;
    const double w = x_of(sl.end_ms) - x_of(sl.start_ms);
    if (w < 1.0) continue;  // merged into a sub-pixel run: never labelled
    const std::string label = micro_label(slice_step(s, sl));
    if (label.empty()) continue;
    any_label = true;
    label_font = std::min(label_font, (w - 2) / (kCharEm * static_cast<double>(label.size())));
  }
  label_font = std::floor(label_font * 2) / 2;  // half pixels
  const bool labels = any_label && label_font >= kMinLabelFont;
  if (!labels) label_font = kMaxLabelFont;  // no label drawn: the style keeps the usual size
  // Virtual stages told apart: a rank's k-th local stage (its chunk) is shaded by k (lighter
  // for later chunks), named in the legend.
  std::vector<int> local_of(s.placement.stage_to_rank.size(), 0);
  int chunks = 1;
  {
    std::unordered_map<int, int> seen;
    for (size_t st = 0; st < s.placement.stage_to_rank.size(); ++st) {
      local_of[st] = seen[s.placement.stage_to_rank[st]]++;
      chunks = std::max(chunks, local_of[st] + 1);
    }
  }
  constexpr int kShades = 4;  // chunk k >= kShades shares the last shade
  const auto chunk_of = [&](const Step* step) {
    if (!step) return 0;
    const Step& leaf = is_composite(step->op) && !step->sub_steps().empty() ? step->sub_steps().front() : *step;
    return leaf.stage >= 0 && static_cast<size_t>(leaf.stage) < local_of.size() ? local_of[static_cast<size_t>(leaf.stage)] : 0;
  };
  const auto shade_class = [&](int chunk) -> const char* {
    static const char* const names[kShades] = {"", " v1", " v2", " v3"};
    return chunks > 1 ? names[std::min(chunk, kShades - 1)] : "";
  };

  Svg body;
  body.s.reserve(1 << 16);
  bool used[kClsCount] = {};
  bool any_critical = false;

  // ---- time axis and grid ------------------------------------------------------------------
  const double rows_bottom = rows_top + nranks * row_h;
  {
    const double step = tick_step(span_ms, std::max(2, static_cast<int>(W / 110)));
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    const double axis_y = rows_top - 6;
    body.raw("<g id=\"axis\">\n<line class=\"ax\" x1=\"").num(kLeft).raw("\" y1=\"").num(axis_y).raw("\" x2=\"")
        .num(kLeft + W).raw("\" y2=\"").num(axis_y).raw("\"/>\n");
    for (int k = 0;; ++k) {
      const double t = k * step;
      if (t > span_ms * (1 + 1e-9)) break;
      const double x = x_of(t);
      body.raw("<line class=\"gr\" x1=\"").num(x).raw("\" y1=\"").num(axis_y).raw("\" x2=\"").num(x)
          .raw("\" y2=\"").num(rows_bottom - kRowGap).raw("\"/>");
      body.raw("<line class=\"ax\" x1=\"").num(x).raw("\" y1=\"").num(axis_y - 4).raw("\" x2=\"").num(x)
          .raw("\" y2=\"").num(axis_y).raw("\"/>");
      body.raw("<text class=\"tk\" x=\"").num(x).raw("\" y=\"").num(axis_y - 7).raw("\">")
          .raw(coord(t, decimals)).raw("</text>\n");
    }
    body.raw("<text class=\"sl\" x=\"").num(kLeft - 6).raw("\" y=\"").num(axis_y - 7)
        .raw("\" text-anchor=\"end\">time (ms)</text>\n</g>\n");
  }

  // ---- rows ----------------------------------------------------------------------------------
  size_t pos = 0;
  for (int rank = 0; rank < nranks; ++rank) {
    const RowGeometry g = row(rank);
    body.raw("<g id=\"rank").integer(rank).raw("\">\n");
    // Label and idle background.
    body.raw("<text class=\"rl\" x=\"8\" y=\"").num(g.top + 13).raw("\">rank ").integer(rank).raw("</text>");
    {
      std::string stages;
      for (size_t st = 0; st < s.placement.stage_to_rank.size(); ++st)
        if (s.placement.stage_to_rank[st] == rank) stages += (stages.empty() ? "" : ", ") + std::to_string(st);
      if (!stages.empty())
        body.raw("<text class=\"sl\" x=\"8\" y=\"").num(g.top + 25).raw("\">stage").raw(stages.find(',') != std::string::npos ? "s " : " ")
            .text(stages).raw("</text>");
    }
    body.raw("\n<rect class=\"bg\" x=\"").num(kLeft).raw("\" y=\"").num(g.top).raw("\" width=\"").num(W)
        .raw("\" height=\"").num(kComputeH).raw("\"/><rect class=\"bg\" x=\"").num(kLeft).raw("\" y=\"").num(g.comm)
        .raw("\" width=\"").num(W).raw("\" height=\"").num(kCommH).raw("\"/>\n");

    // One lane at a time; sub-pixel slices merge into runs.
    while (pos < order.size() && r.slices[order[pos]].rank == rank) {
      const Lane lane = r.slices[order[pos]].lane;
      double y = g.top, h = kComputeH;
      if (lane == Lane::Send) y = g.comm, h = kCommH / 2;
      if (lane == Lane::Recv) y = g.comm + kCommH / 2, h = kCommH / 2;
      if (lane == Lane::Collective) y = g.comm, h = kCommH;
      body.raw("<g transform=\"translate(0,").num(y).raw(")\">");

      struct Run {
        double x0 = 0, x1 = 0;
        Cls cls = kX;
        int count = 0;
      } run;
      auto flush = [&] {
        if (!run.count) return;
        used[run.cls] = true;
        body.raw("<rect class=\"").raw(kCls[run.cls].css).raw("\" x=\"").num(run.x0).raw("\" width=\"")
            .num(std::max(run.x1 - run.x0, 0.5)).raw("\" height=\"").num(h).raw("\"/>");
        run.count = 0;
      };
      for (; pos < order.size() && r.slices[order[pos]].rank == rank && r.slices[order[pos]].lane == lane; ++pos) {
        const TimedSlice& sl = r.slices[order[pos]];
        if (!(sl.end_ms > sl.start_ms)) continue;  // nothing to see
        const Step* step = slice_step(s, sl);
        const Cls cls = class_of(step, lane);
        const double xa = x_of(sl.start_ms), xb = x_of(sl.end_ms);
        if (xb - xa < 1.0) {
          if (run.count && xa - run.x1 < 1.0) {
            run.x1 = std::max(run.x1, xb);
            if (run.cls != cls) run.cls = kM;
            ++run.count;
          } else {
            flush();
            run = {xa, xb, cls, 1};
          }
          continue;
        }
        flush();
        const bool crit = is_critical(sl);
        any_critical |= crit;
        // A composite on the compute stream: one band per sub-step.
        const bool bands = lane == Lane::Compute && step && is_composite(step->op) && step->sub_steps().size() > 1;
        const size_t nb = bands ? step->sub_steps().size() : 1;
        for (size_t k = 0; k < nb; ++k) {
          const Cls c = bands ? class_of_compute(step->sub_steps()[k]) : cls;
          used[c] = true;
          const Step* part = bands ? &step->sub_steps()[k] : step;
          const char* shade = lane == Lane::Compute ? shade_class(chunk_of(part)) : "";
          body.raw("<rect class=\"").raw(kCls[c].css).raw(shade).raw(crit ? " cp" : "").raw("\" x=\"").num(xa);
          if (k) body.raw("\" y=\"").num(h * static_cast<double>(k) / static_cast<double>(nb));
          body.raw("\" width=\"").num(xb - xa).raw("\" height=\"").num(h / static_cast<double>(nb));
          if (tooltips) {
            body.raw("\"><title>").text(slice_name(s, sl)).raw(": ").raw(coord(sl.start_ms, 3)).raw("-")
                .raw(coord(sl.end_ms, 3)).raw(" ms</title></rect>");
          } else {
            body.raw("\"/>");
          }
        }
        if (lane == Lane::Compute) {
          const std::string label = labels ? micro_label(step) : std::string();
          if (!label.empty())
            body.raw("<text class=\"lb\" x=\"").num((xa + xb) / 2).raw("\" y=\"").num(9 + label_font * 0.4).raw("\">")
                .text(label).raw("</text>");
        }
      }
      flush();
      body.raw("</g>\n");
    }

    // Memory curve, scaled to this rank's peak.
    if (options.memory) {
      const auto& samples = samples_of[static_cast<size_t>(rank)];
      const double bottom = g.memory + kMemH, usable = kMemH - 4;
      body.raw("<line class=\"mb\" x1=\"").num(kLeft).raw("\" y1=\"").num(bottom).raw("\" x2=\"").num(kLeft + W)
          .raw("\" y2=\"").num(bottom).raw("\"/><text class=\"sl\" x=\"8\" y=\"").num(g.memory + 11)
          .raw("\">memory</text>\n");
      if (!samples.empty()) {
        int64_t peak = 0;
        double peak_t = samples.front()->time_ms;
        for (const auto* m : samples)
          if (m->bytes > peak) peak = m->bytes, peak_t = m->time_ms;
        auto y_of = [&](int64_t b) {
          return bottom - (peak > 0 ? usable * std::clamp(static_cast<double>(b) / static_cast<double>(peak), 0.0, 1.0) : 0.0);
        };
        // Step function, at most four points per pixel column: entry, both extremes, exit.
        const auto curve = [&](int64_t MemorySample::*field, const char* css) {
          std::vector<std::pair<double, double>> pts;
          auto add = [&](double x, double yv) {
            if (!pts.empty() && std::abs(pts.back().first - x) < 0.05 && std::abs(pts.back().second - yv) < 0.05) return;
            pts.emplace_back(x, yv);
          };
          double entry = bottom;
          size_t i = 0;
          while (i < samples.size()) {
            const double x = x_of(samples[i]->time_ms);
            const double col = std::floor(x);
            int64_t lo = samples[i]->*field, hi = lo, last = lo;
            size_t j = i + 1;
            for (; j < samples.size() && std::floor(x_of(samples[j]->time_ms)) == col; ++j) {
              lo = std::min(lo, samples[j]->*field);
              hi = std::max(hi, samples[j]->*field);
              last = samples[j]->*field;
            }
            if (i > 0) add(x, entry);
            add(x, y_of(samples[i]->*field));
            add(x, y_of(hi));
            add(x, y_of(lo));
            add(x, y_of(last));
            entry = y_of(last);
            i = j;
          }
          add(kLeft + W, entry);
          body.raw("<polyline class=\"").raw(css).raw("\" points=\"");
          for (size_t k = 0; k < pts.size(); ++k) {
            if (k) body.raw(" ");
            body.num(pts[k].first).raw(",").num(pts[k].second);
          }
          body.raw("\"/>\n");
        };
        curve(&MemorySample::bytes, "mem");
        // With a model's costs the rank also holds its weights, gradients and optimizer state
        // for the whole step (a dashed level) and keeps activations (a lighter curve).
        const int64_t resident =
            static_cast<size_t>(rank) < r.ranks.size() ? r.ranks[static_cast<size_t>(rank)].memory.resident_bytes() : 0;
        if (resident > 0) {
          body.raw("<line class=\"res\" x1=\"").num(kLeft).raw("\" y1=\"").num(y_of(resident)).raw("\" x2=\"")
              .num(kLeft + W).raw("\" y2=\"").num(y_of(resident)).raw("\"><title>held for the whole step (weights, "
                                                                   "gradients, optimizer state): ")
              .raw(human_bytes(static_cast<double>(resident))).raw("</title></line>\n");
          curve(&MemorySample::activations, "act");
        }
        // The peak: a dot on the curve (tooltip: when) and its value under the row's label.
        const std::string peak_text = "peak " + human_bytes(static_cast<double>(peak));
        body.raw("<circle class=\"pkd\" cx=\"").num(x_of(peak_t)).raw("\" cy=\"").num(y_of(peak))
            .raw("\" r=\"2.5\"><title>").raw(peak_text).raw(" at ").raw(coord(peak_t, 3)).raw(" ms</title></circle>");
        body.raw("<text class=\"pk\" x=\"8\" y=\"").num(g.memory + kMemH - 2).raw("\">").raw(peak_text).raw("</text>\n");
      }
    }
    body.raw("</g>\n");
  }

  // ---- P2P arrows: from the end of the send to the end of its receive ---------------------------
  if (arrows) {
    body.raw("<g id=\"p2p\">\n");
    for (const MessageFlow& f : r.flows) {
      if (f.send_slice < 0 || f.recv_slice < 0 || static_cast<size_t>(f.send_slice) >= r.slices.size() ||
          static_cast<size_t>(f.recv_slice) >= r.slices.size())
        continue;
      const TimedSlice& a = r.slices[static_cast<size_t>(f.send_slice)];
      const TimedSlice& b = r.slices[static_cast<size_t>(f.recv_slice)];
      if (a.rank < 0 || b.rank < 0) continue;
      const double y1 = row(a.rank).comm + kCommH / 4, y2 = row(b.rank).comm + 3 * kCommH / 4;
      body.raw("<line class=\"ar\" x1=\"").num(x_of(a.end_ms)).raw("\" y1=\"").num(y1).raw("\" x2=\"")
          .num(x_of(b.end_ms)).raw("\" y2=\"").num(y2).raw("\" marker-end=\"url(#ah)\"/>\n");
    }
    body.raw("</g>\n");
  }

  // ---- violation markers ---------------------------------------------------------------------------
  if (!r.check.violations.empty()) {
    std::unordered_map<uint64_t, double> start_of;  // (rank, step) -> first slice start
    for (const auto& sl : r.slices) {
      if (sl.rank < 0) continue;
      uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(sl.rank)) << 32) | static_cast<uint32_t>(sl.step_index);
      auto it = start_of.find(key);
      if (it == start_of.end()) start_of.emplace(key, sl.start_ms);
      else it->second = std::min(it->second, sl.start_ms);
    }
    body.raw("<g id=\"violations\">\n");
    int markers = 0;
    for (const Violation& v : r.check.violations) {
      for (const StepRef& ref : v.steps) {
        if (ref.rank < 0 || ref.rank >= nranks || markers >= 500) continue;
        auto it = start_of.find((static_cast<uint64_t>(static_cast<uint32_t>(ref.rank)) << 32) |
                                static_cast<uint32_t>(ref.index));
        const double x = it != start_of.end() ? x_of(it->second) : kLeft + W;
        const double y = row(ref.rank).top;
        body.raw("<polygon class=\"vi\" points=\"").num(x - 4).raw(",").num(y - 5).raw(" ").num(x + 4).raw(",")
            .num(y - 5).raw(" ").num(x).raw(",").num(y + 1).raw("\"><title>").text(to_string(v.kind)).raw(": ")
            .text(v.message).raw("</title></polygon>\n");
        ++markers;
      }
    }
    body.raw("</g>\n");
  }

  // ---- legend ----------------------------------------------------------------------------------------
  const double total_w = kLeft + W + kRight;
  Svg legend;
  double legend_y = rows_bottom + 4, lx = kLeft;
  int legend_lines = 1;
  auto entry_space = [&](std::string_view text) {
    const double need = 20 + 6.2 * static_cast<double>(text.size()) + 14;
    if (lx + need > kLeft + W && lx > kLeft) {
      lx = kLeft;
      legend_y += kLegendLineH;
      ++legend_lines;
    }
    const double x = lx;
    lx += need;
    return x;
  };
  auto swatch = [&](const char* css, std::string_view text) {
    const double x = entry_space(text);
    legend.raw("<rect class=\"").raw(css).raw("\" x=\"").num(x).raw("\" y=\"").num(legend_y)
        .raw("\" width=\"14\" height=\"11\"/><text x=\"").num(x + 18).raw("\" y=\"").num(legend_y + 10).raw("\">")
        .text(text).raw("</text>\n");
  };
  legend.raw("<g id=\"legend\">\n");
  for (int c = 0; c < kClsCount; ++c)
    if (used[c]) swatch(kCls[c].css, kCls[c].legend);
  swatch("bg", "idle");
  if (any_critical) swatch("bg cp", "critical path");
  if (chunks > 1)
    for (int k = 0; k < std::min(chunks, kShades); ++k) {
      const std::string text = k + 1 < kShades || chunks == kShades
                                   ? "local stage " + std::to_string(k) + (k == 0 ? " (full shade)" : " (lighter)")
                                   : "local stages " + std::to_string(k) + "+ (lightest)";
      swatch((std::string("f") + shade_class(k)).c_str(), text);
    }
  if (any_label && !labels) {
    const std::string note = std::string("micro-batch ids on hover only: too narrow to label at this scale") +
                             (tooltips ? "" : " (and tooltips left out above " + std::to_string(options.max_tooltips) +
                                                  " slices: ppsched simulate --trace shows them)");
    const double x = entry_space(note);
    legend.raw("<text class=\"sl\" x=\"").num(x).raw("\" y=\"").num(legend_y + 10).raw("\">").text(note).raw("</text>\n");
  }
  if (options.memory && !r.memory.empty()) {
    const double x = entry_space("memory (scaled to the rank's peak)");
    legend.raw("<line class=\"mem\" x1=\"").num(x).raw("\" y1=\"").num(legend_y + 6).raw("\" x2=\"").num(x + 14)
        .raw("\" y2=\"").num(legend_y + 6).raw("\"/><text x=\"").num(x + 18).raw("\" y=\"").num(legend_y + 10)
        .raw("\">memory (scaled to the rank&apos;s peak)</text>\n");
    bool resident = false;
    for (const auto& x : r.ranks) resident = resident || x.memory.resident_bytes() > 0;
    if (resident) {
      const double xa = entry_space("kept activations");
      legend.raw("<line class=\"act\" x1=\"").num(xa).raw("\" y1=\"").num(legend_y + 6).raw("\" x2=\"").num(xa + 14)
          .raw("\" y2=\"").num(legend_y + 6).raw("\"/><text x=\"").num(xa + 18).raw("\" y=\"").num(legend_y + 10)
          .raw("\">kept activations</text>\n");
      const double xr = entry_space("held for the whole step (weights, gradients, optimizer)");
      legend.raw("<line class=\"res\" x1=\"").num(xr).raw("\" y1=\"").num(legend_y + 6).raw("\" x2=\"").num(xr + 14)
          .raw("\" y2=\"").num(legend_y + 6).raw("\"/><text x=\"").num(xr + 18).raw("\" y=\"").num(legend_y + 10)
          .raw("\">held for the whole step (weights, gradients, optimizer)</text>\n");
    }
  }
  if (arrows) {
    const double x = entry_space("P2P transfer");
    legend.raw("<line class=\"ar\" x1=\"").num(x).raw("\" y1=\"").num(legend_y + 6).raw("\" x2=\"").num(x + 14)
        .raw("\" y2=\"").num(legend_y + 6).raw("\" marker-end=\"url(#ah)\"/><text x=\"").num(x + 18).raw("\" y=\"")
        .num(legend_y + 10).raw("\">P2P transfer</text>\n");
  } else if (!r.flows.empty()) {
    const std::string note = std::to_string(r.flows.size()) + " P2P transfers (arrows left out above " +
                             std::to_string(options.max_arrows) + ")";
    const double x = entry_space(note);
    legend.raw("<text class=\"sl\" x=\"").num(x).raw("\" y=\"").num(legend_y + 10).raw("\">").text(note).raw("</text>\n");
  }
  legend.raw("</g>\n");
  const double total_h = rows_bottom + 4 + legend_lines * kLegendLineH + 8;

  // ---- document ----------------------------------------------------------------------------------------
  Svg doc;
  doc.s.reserve(body.s.size() + legend.s.size() + 4096);
  doc.raw("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"")
      .num(total_w).raw("\" height=\"").num(total_h).raw("\" viewBox=\"0 0 ").num(total_w).raw(" ").num(total_h)
      .raw("\">\n<style>\n"
           "text{font-family:sans-serif;font-size:11px;fill:#222}\n"
           ".ti{font-size:15px;font-weight:bold}\n"
           ".rl{font-size:12px;font-weight:bold}\n"
           ".sl{font-size:9px;fill:#555}\n"
           ".tk{font-size:10px;fill:#444;text-anchor:middle}\n"
           ".lb{font-size:").num(label_font).raw("px;fill:#111;text-anchor:middle}\n"
           ".v1{fill-opacity:0.7}\n.v2{fill-opacity:0.5}\n.v3{fill-opacity:0.35}\n"
           ".pk{font-size:9px;fill:#1f5fa8}\n"
           ".pkd{fill:#1f5fa8}\n"
           ".gr{stroke:#e6e6e6;stroke-width:1}\n"
           ".ax{stroke:#444;stroke-width:1}\n"
           ".bg{fill:#f0f0f0}\n"
           ".mb{stroke:#cccccc;stroke-width:0.5}\n"
           ".mem{fill:none;stroke:#1f5fa8;stroke-width:1}\n"
           ".act{fill:none;stroke:#7fb0e0;stroke-width:1}\n"
           ".res{stroke:#1f5fa8;stroke-width:0.8;stroke-dasharray:3,2}\n"
           ".ar{stroke:#555;stroke-width:0.7;fill:none;opacity:0.8}\n"
           ".cp{stroke:#000;stroke-width:1.2}\n"
           ".vi{fill:#d00000}\n");
  for (const auto& c : kCls) doc.raw(".").raw(c.css).raw("{fill:").raw(c.fill).raw("}\n");
  doc.raw("</style>\n<defs><marker id=\"ah\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"6\" "
          "markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#555\"/></marker></defs>\n");
  doc.raw("<rect x=\"0\" y=\"0\" width=\"").num(total_w).raw("\" height=\"").num(total_h).raw("\" fill=\"#ffffff\"/>\n");
  {
    std::string title = s.name.empty() ? std::string("schedule") : s.name;
    title += " \xE2\x80\x94 makespan " + coord(r.makespan_ms, 3) + " ms \xC2\xB7 " + std::to_string(nranks) +
             (nranks == 1 ? " rank" : " ranks");
    if (s.micro_batches > 0) title += " \xC2\xB7 " + std::to_string(s.micro_batches) + " micro-batches";
    if (!r.completed) title += " \xC2\xB7 stopped early (deadlock)";
    if (!r.check.violations.empty()) title += " \xC2\xB7 " + std::to_string(r.check.violations.size()) +
                                           (r.check.violations.size() == 1 ? " violation" : " violations");
    doc.raw("<title>").text(title).raw("</title>\n<text class=\"ti\" x=\"8\" y=\"20\">").text(title).raw("</text>\n");
  }
  doc.raw(body.s).raw(legend.s).raw("</svg>\n");
  return std::move(doc.s);
}

}  // namespace ppsched
