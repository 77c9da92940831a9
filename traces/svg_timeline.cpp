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

#include "schedule/text_format.hpp"
#include "traces/chrome_trace.hpp"
#include "traces/lane_groups.hpp"

namespace ppsched {
namespace {

// Geometry (pixels).
constexpr double kLeft = 104, kRight = 28, kTitleH = 30, kAxisH = 24;
constexpr double kComputeH = 18, kCommGap = 2, kCommH = 8, kMemGap = 3, kMemH = 28, kRowGap = 12;
constexpr double kLegendLineH = 18;

// Colour classes of a slice.
enum Cls : uint8_t { kF, kB, kBi, kBw, kT, kD, kX, kS, kR, kC, kA, kM, kClsCount };
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
    {"a", "#3fa7a0", "all-to-all (comm stream)"}, {"m", "#8f8f8f", "merged (sub-pixel)"},
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
    case Lane::Comm: return kA;
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
  double stream = 0;   // communication-stream strip (MoE all-to-alls), when the run has one
  double memory = 0;   // memory strip
};

// The canvas: the time scale (ms to x) and a row per rank.
struct Canvas {
  int nranks = 0;
  double span_ms = 1.0;  // the makespan; 1 when there is none to scale by
  double width = 0;      // of the time axis, pixels
  double scale = 0;      // pixels per ms
  double row_h = 0, rows_top = 0, rows_bottom = 0;
  bool streams = false;  // the run has communication-stream slices (MoE all-to-alls): a strip more a row

  double x_of(double t) const { return kLeft + std::clamp(std::isfinite(t) ? t : 0.0, 0.0, span_ms) * scale; }
  RowGeometry row(int rank) const {
    RowGeometry g;
    g.top = rows_top + rank * row_h;
    g.comm = g.top + kComputeH + kCommGap;
    g.stream = g.comm + kCommH + kCommGap;
    g.memory = (streams ? g.stream + kCommH : g.comm + kCommH) + kMemGap;
    return g;
  }
};

// Every rank the schedule, the summaries, the slices or the samples name gets a row; the time
// axis spans the makespan or, when a slice ends later (a measured run), that slice.
Canvas canvas_of(const Schedule& s, const RunRecord& r, const SvgOptions& options) {
  Canvas l;
  l.nranks = shown_ranks(s, r);
  double makespan = r.makespan_ms;
  for (const auto& sl : r.slices)
    if (std::isfinite(sl.end_ms)) makespan = std::max(makespan, sl.end_ms);
  l.span_ms = makespan > 0 && std::isfinite(makespan) ? makespan : 1.0;
  l.width = std::max(100, options.width);
  l.scale = l.width / l.span_ms;
  for (const auto& sl : r.slices) l.streams = l.streams || sl.lane == Lane::Comm;
  l.row_h = kComputeH + kCommGap + kCommH + (l.streams ? kCommGap + kCommH : 0) + (options.memory ? kMemGap + kMemH : 0) + kRowGap;
  l.rows_top = kTitleH + kAxisH;
  l.rows_bottom = l.rows_top + l.nranks * l.row_h;
  return l;
}

// Slices in drawing order: grouped by (rank, lane), then by start time within a group (usually
// already so: the engine records slices in time order).
std::vector<uint32_t> drawing_order(const RunRecord& r, int nranks) {
  LaneGroups groups = group_by_lane(r, nranks);
  std::vector<uint32_t>& order = groups.order;
  const std::vector<size_t>& first = groups.first;
  auto by_start = [&](uint32_t a, uint32_t b) { return r.slices[a].start_ms < r.slices[b].start_ms; };
  for (size_t k = 0; k + 1 < first.size(); ++k) {
    auto b = order.begin() + static_cast<std::ptrdiff_t>(first[k]), e = order.begin() + static_cast<std::ptrdiff_t>(first[k + 1]);
    if (!std::is_sorted(b, e, by_start)) std::stable_sort(b, e, by_start);
  }
  return std::move(order);
}

// Memory samples by rank, in time order.
std::vector<std::vector<const MemorySample*>> samples_by_rank(const RunRecord& r, int nranks) {
  std::vector<std::vector<const MemorySample*>> samples_of(static_cast<size_t>(nranks));
  for (const auto& m : r.memory)
    if (m.rank >= 0) samples_of[static_cast<size_t>(m.rank)].push_back(&m);
  for (auto& v : samples_of) {
    auto by_time = [](const MemorySample* a, const MemorySample* b) { return a->time_ms < b->time_ms; };
    if (!std::is_sorted(v.begin(), v.end(), by_time)) std::stable_sort(v.begin(), v.end(), by_time);
  }
  return samples_of;
}

// Micro-batch labels: every compute slice of a pixel or more gets its label, or none does
// (a dropped subset would read wrong: "0..9 0..9 8 9" at M = 32). The font shrinks until
// the narrowest labelled slice holds its label; below kMinLabelFont the ids are on hover
// only, and the legend says so.
struct MicroLabels {
  double font = 10;     // px; the usual size when no label is drawn
  bool any = false;     // some slice has a label to show
  bool shown = false;   // the labels are drawn
};

MicroLabels micro_labels(const Schedule& s, const RunRecord& r, const std::vector<uint32_t>& order, const Canvas& l) {
  constexpr double kMaxLabelFont = 10, kMinLabelFont = 6, kCharEm = 0.62;
  MicroLabels out;
  double font = kMaxLabelFont;
  for (uint32_t i : order) {
    const TimedSlice& sl = r.slices[i];
    if (sl.lane != Lane::Compute || !(sl.end_ms > sl.start_ms)) continue;
    const double w = l.x_of(sl.end_ms) - l.x_of(sl.start_ms);
    if (w < 1.0) continue;  // merged into a sub-pixel run: never labelled
    const std::string label = micro_label(slice_step(s, sl));
    if (label.empty()) continue;
    out.any = true;
    font = std::min(font, (w - 2) / (kCharEm * static_cast<double>(label.size())));
  }
  font = std::floor(font * 2) / 2;  // half pixels
  out.shown = out.any && font >= kMinLabelFont;
  out.font = out.shown ? font : kMaxLabelFont;
  return out;
}

// Virtual stages told apart: a rank's k-th local stage (its chunk) is shaded by k (lighter
// for later chunks), named in the legend.
class LocalStages {
 public:
  static constexpr int kShades = 4;  // chunk k >= kShades shares the last shade

  explicit LocalStages(const Schedule& s) : local_of_(s.placement.stage_to_rank.size(), 0) {
    std::unordered_map<int, int> seen;
    for (size_t st = 0; st < s.placement.stage_to_rank.size(); ++st) {
      local_of_[st] = seen[s.placement.stage_to_rank[st]]++;
      chunks_ = std::max(chunks_, local_of_[st] + 1);
    }
  }
  int chunks() const { return chunks_; }
  int chunk_of(const Step* step) const {
    if (!step) return 0;
    const Step& leaf = is_composite(step->op) && !step->sub_steps().empty() ? step->sub_steps().front() : *step;
    return leaf.stage >= 0 && static_cast<size_t>(leaf.stage) < local_of_.size() ? local_of_[static_cast<size_t>(leaf.stage)] : 0;
  }
  const char* shade_class(int chunk) const {
    static const char* const names[kShades] = {"", " v1", " v2", " v3"};
    return chunks_ > 1 ? names[std::min(chunk, kShades - 1)] : "";
  }

 private:
  std::vector<int> local_of_;  // stage -> its index among its rank's stages
  int chunks_ = 1;
};

// The legend: entries left to right under the rows, wrapping at the end of the time axis.
class Legend {
 public:
  Legend(double top, double axis_end) : y_(top), axis_end_(axis_end) { svg_.raw("<g id=\"legend\">\n"); }

  void swatch(const char* css, std::string_view text) {
    const double x = place(text);
    svg_.raw("<rect class=\"").raw(css).raw("\" x=\"").num(x).raw("\" y=\"").num(y_)
        .raw("\" width=\"14\" height=\"11\"/><text x=\"").num(x + 18).raw("\" y=\"").num(y_ + 10).raw("\">")
        .text(text).raw("</text>\n");
  }
  // A stroke of class `css` (an arrow when `arrow`), as the rows draw a curve or a transfer.
  void line(const char* css, std::string_view text, bool arrow = false) {
    const double x = place(text);
    svg_.raw("<line class=\"").raw(css).raw("\" x1=\"").num(x).raw("\" y1=\"").num(y_ + 6).raw("\" x2=\"").num(x + 14)
        .raw("\" y2=\"").num(y_ + 6).raw(arrow ? "\" marker-end=\"url(#ah)\"/>" : "\"/>").raw("<text x=\"").num(x + 18)
        .raw("\" y=\"").num(y_ + 10).raw("\">").text(text).raw("</text>\n");
  }
  void note(std::string_view text) {
    const double x = place(text);
    svg_.raw("<text class=\"sl\" x=\"").num(x).raw("\" y=\"").num(y_ + 10).raw("\">").text(text).raw("</text>\n");
  }
  int lines() const { return lines_; }
  std::string finish() {
    svg_.raw("</g>\n");
    return std::move(svg_.s);
  }

 private:
  // The x of the next entry, on a new line when it would run past the axis' end.
  double place(std::string_view text) {
    const double need = 20 + 6.2 * static_cast<double>(text.size()) + 14;
    if (x_ + need > axis_end_ && x_ > kLeft) {
      x_ = kLeft;
      y_ += kLegendLineH;
      ++lines_;
    }
    const double x = x_;
    x_ += need;
    return x;
  }

  Svg svg_;
  double y_, x_ = kLeft, axis_end_;
  int lines_ = 1;
};

// Every rank's memory strip on one scale: its top is the largest peak of any rank, or the memory
// budget when that is larger, so the strips compare and the rank closest to the budget shows.
struct MemoryScale {
  double bottom = 0, usable = 0;
  int64_t top = 0;
  double y_of(int64_t b) const {
    return bottom - (top > 0 ? usable * std::clamp(static_cast<double>(b) / static_cast<double>(top), 0.0, 1.0) : 0.0);
  }
};

// The picture, drawn section by section: the body (axis, rows, arrows, violation markers), then
// the legend of what the body used, then the document around both.
class Timeline {
 public:
  Timeline(const Schedule& s, const RunRecord& r, const SvgOptions& options)
      : s_(s), r_(r), options_(options), l_(canvas_of(s, r, options)), order_(drawing_order(r, l_.nranks)),
        samples_of_(samples_by_rank(r, l_.nranks)), labels_(micro_labels(s, r, order_, l_)), stages_(s),
        tooltips_(r.slices.size() <= static_cast<size_t>(std::max(0, options.max_tooltips))),
        arrows_(!r.flows.empty() && r.flows.size() <= static_cast<size_t>(std::max(0, options.max_arrows))) {
    for (const auto& c : r.critical_path) critical_.insert(step_key(c.rank, c.step_index));
    for (const auto& samples : samples_of_)
      for (const auto* x : samples) memory_top_ = std::max(memory_top_, x->bytes);
    if (options.memory_budget && *options.memory_budget > 0) memory_top_ = std::max(memory_top_, *options.memory_budget);
  }

  std::string draw() {
    body_.s.reserve(1 << 16);
    time_axis();
    size_t pos = 0;
    for (int rank = 0; rank < l_.nranks; ++rank) rank_row(rank, pos);
    if (arrows_) p2p_arrows();
    if (!r_.check.violations.empty()) violation_markers();
    Legend legend(l_.rows_bottom + 4, kLeft + l_.width);
    legend_entries(legend);
    const double height = l_.rows_bottom + 4 + legend.lines() * kLegendLineH + 8;
    return document(legend.finish(), height);
  }

 private:
  bool is_critical(const TimedSlice& sl) const {
    return !critical_.empty() && sl.lane == Lane::Compute && critical_.count(step_key(sl.rank, sl.step_index));
  }

  void time_axis() {
    const double step = tick_step(l_.span_ms, std::max(2, static_cast<int>(l_.width / 110)));
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    const double axis_y = l_.rows_top - 6;
    body_.raw("<g id=\"axis\">\n<line class=\"ax\" x1=\"").num(kLeft).raw("\" y1=\"").num(axis_y).raw("\" x2=\"")
        .num(kLeft + l_.width).raw("\" y2=\"").num(axis_y).raw("\"/>\n");
    for (int k = 0;; ++k) {
      const double t = k * step;
      if (t > l_.span_ms * (1 + 1e-9)) break;
      const double x = l_.x_of(t);
      body_.raw("<line class=\"gr\" x1=\"").num(x).raw("\" y1=\"").num(axis_y).raw("\" x2=\"").num(x)
          .raw("\" y2=\"").num(l_.rows_bottom - kRowGap).raw("\"/>");
      body_.raw("<line class=\"ax\" x1=\"").num(x).raw("\" y1=\"").num(axis_y - 4).raw("\" x2=\"").num(x)
          .raw("\" y2=\"").num(axis_y).raw("\"/>");
      body_.raw("<text class=\"tk\" x=\"").num(x).raw("\" y=\"").num(axis_y - 7).raw("\">")
          .raw(coord(t, decimals)).raw("</text>\n");
    }
    body_.raw("<text class=\"sl\" x=\"").num(kLeft - 6).raw("\" y=\"").num(axis_y - 7)
        .raw("\" text-anchor=\"end\">time (ms)</text>\n</g>\n");
  }

  // A rank's row: its label and stages, the idle background, its lanes (order_ from `pos` on
  // holds its slices) and its memory curve.
  void rank_row(int rank, size_t& pos) {
    const RowGeometry g = l_.row(rank);
    body_.raw("<g id=\"rank").integer(rank).raw("\">\n");
    body_.raw("<text class=\"rl\" x=\"8\" y=\"").num(g.top + 13).raw("\">rank ").integer(rank).raw("</text>");
    std::string stages;
    for (size_t st = 0; st < s_.placement.stage_to_rank.size(); ++st)
      if (s_.placement.stage_to_rank[st] == rank) stages += (stages.empty() ? "" : ", ") + std::to_string(st);
    if (!stages.empty())
      body_.raw("<text class=\"sl\" x=\"8\" y=\"").num(g.top + 25).raw("\">stage").raw(stages.find(',') != std::string::npos ? "s " : " ")
          .text(stages).raw("</text>");
    body_.raw("\n<rect class=\"bg\" x=\"").num(kLeft).raw("\" y=\"").num(g.top).raw("\" width=\"").num(l_.width)
        .raw("\" height=\"").num(kComputeH).raw("\"/><rect class=\"bg\" x=\"").num(kLeft).raw("\" y=\"").num(g.comm)
        .raw("\" width=\"").num(l_.width).raw("\" height=\"").num(kCommH).raw("\"/>\n");
    if (l_.streams)
      body_.raw("<rect class=\"bg\" x=\"").num(kLeft).raw("\" y=\"").num(g.stream).raw("\" width=\"").num(l_.width)
          .raw("\" height=\"").num(kCommH).raw("\"><title>comm stream (MoE all-to-all)</title></rect>\n");
    while (pos < order_.size() && r_.slices[order_[pos]].rank == rank) lane(rank, g, pos);
    if (options_.memory) memory_strip(rank, g);
    body_.raw("</g>\n");
  }

  // Slices narrower than a pixel, merged into one rect.
  struct SubPixelRun {
    double x0 = 0, x1 = 0;
    Cls cls = kX;
    int count = 0;
  };

  void flush(SubPixelRun& run, double h) {
    if (!run.count) return;
    used_[run.cls] = true;
    body_.raw("<rect class=\"").raw(kCls[run.cls].css).raw("\" x=\"").num(run.x0).raw("\" width=\"")
        .num(std::max(run.x1 - run.x0, 0.5)).raw("\" height=\"").num(h).raw("\"/>");
    run.count = 0;
  }

  // The lane of the slice at order_[pos] on `rank`, up to its last slice.
  void lane(int rank, const RowGeometry& g, size_t& pos) {
    const Lane lane = r_.slices[order_[pos]].lane;
    double y = g.top, h = kComputeH;
    if (lane == Lane::Send) y = g.comm, h = kCommH / 2;
    if (lane == Lane::Recv) y = g.comm + kCommH / 2, h = kCommH / 2;
    if (lane == Lane::Collective) y = g.comm, h = kCommH;
    if (lane == Lane::Comm) y = g.stream, h = kCommH;
    body_.raw("<g transform=\"translate(0,").num(y).raw(")\">");
    SubPixelRun run;
    for (; pos < order_.size() && r_.slices[order_[pos]].rank == rank && r_.slices[order_[pos]].lane == lane; ++pos) {
      const TimedSlice& sl = r_.slices[order_[pos]];
      if (!(sl.end_ms > sl.start_ms)) continue;  // nothing to see
      const Step* step = slice_step(s_, sl);
      const Cls cls = class_of(step, lane);
      const double xa = l_.x_of(sl.start_ms), xb = l_.x_of(sl.end_ms);
      if (xb - xa < 1.0) {
        if (run.count && xa - run.x1 < 1.0) {
          run.x1 = std::max(run.x1, xb);
          if (run.cls != cls) run.cls = kM;
          ++run.count;
        } else {
          flush(run, h);
          run = {xa, xb, cls, 1};
        }
        continue;
      }
      flush(run, h);
      slice(sl, step, cls, xa, xb, h);
    }
    flush(run, h);
    body_.raw("</g>\n");
  }

  // A slice a pixel wide or more: its rect (a composite on the compute stream: one band per
  // sub-step), its tooltip and its micro-batch label.
  void slice(const TimedSlice& sl, const Step* step, Cls cls, double xa, double xb, double h) {
    const Lane lane = sl.lane;
    const bool crit = is_critical(sl);
    any_critical_ |= crit;
    const bool bands = lane == Lane::Compute && step && is_composite(step->op) && step->sub_steps().size() > 1;
    const size_t nb = bands ? step->sub_steps().size() : 1;
    for (size_t k = 0; k < nb; ++k) {
      const Cls c = bands ? class_of_compute(step->sub_steps()[k]) : cls;
      used_[c] = true;
      const Step* part = bands ? &step->sub_steps()[k] : step;
      const char* shade = lane == Lane::Compute ? stages_.shade_class(stages_.chunk_of(part)) : "";
      body_.raw("<rect class=\"").raw(kCls[c].css).raw(shade).raw(crit ? " cp" : "").raw("\" x=\"").num(xa);
      if (k) body_.raw("\" y=\"").num(h * static_cast<double>(k) / static_cast<double>(nb));
      body_.raw("\" width=\"").num(xb - xa).raw("\" height=\"").num(h / static_cast<double>(nb));
      if (tooltips_) {
        body_.raw("\"><title>").text(slice_name(s_, sl)).raw(": ").raw(coord(sl.start_ms, 3)).raw("-")
            .raw(coord(sl.end_ms, 3)).raw(" ms</title></rect>");
      } else {
        body_.raw("\"/>");
      }
    }
    if (lane == Lane::Compute) {
      const std::string label = labels_.shown ? micro_label(step) : std::string();
      if (!label.empty())
        body_.raw("<text class=\"lb\" x=\"").num((xa + xb) / 2).raw("\" y=\"").num(9 + labels_.font * 0.4).raw("\">")
            .text(label).raw("</text>");
    }
  }

  // Memory curve, on the scale every rank shares, with the budget's line.
  void memory_strip(int rank, const RowGeometry& g) {
    const auto& samples = samples_of_[static_cast<size_t>(rank)];
    MemoryScale m;
    m.bottom = g.memory + kMemH;
    m.usable = kMemH - 4;
    m.top = memory_top_;
    body_.raw("<line class=\"mb\" x1=\"").num(kLeft).raw("\" y1=\"").num(m.bottom).raw("\" x2=\"").num(kLeft + l_.width)
        .raw("\" y2=\"").num(m.bottom).raw("\"/><text class=\"sl\" x=\"8\" y=\"").num(g.memory + 11)
        .raw("\">memory</text>\n");
    if (options_.memory_budget && *options_.memory_budget > 0)
      body_.raw("<line class=\"bud\" x1=\"").num(kLeft).raw("\" y1=\"").num(m.y_of(*options_.memory_budget))
          .raw("\" x2=\"").num(kLeft + l_.width).raw("\" y2=\"").num(m.y_of(*options_.memory_budget))
          .raw("\"><title>memory budget (usable capacity): ").raw(human_bytes(static_cast<double>(*options_.memory_budget)))
          .raw("</title></line>\n");
    if (samples.empty()) return;
    int64_t peak = 0;
    double peak_t = samples.front()->time_ms;
    for (const auto* x : samples)
      if (x->bytes > peak) peak = x->bytes, peak_t = x->time_ms;
    memory_curve(samples, &MemorySample::bytes, "mem", m);
    // With a model's costs the rank also holds its weights, gradients and optimizer state
    // for the whole step (a dashed level) and keeps activations (a lighter curve).
    const int64_t resident =
        static_cast<size_t>(rank) < r_.ranks.size() ? r_.ranks[static_cast<size_t>(rank)].memory.resident_bytes() : 0;
    if (resident > 0) {
      body_.raw("<line class=\"res\" x1=\"").num(kLeft).raw("\" y1=\"").num(m.y_of(resident)).raw("\" x2=\"")
          .num(kLeft + l_.width).raw("\" y2=\"").num(m.y_of(resident)).raw("\"><title>held for the whole step (weights, "
                                                                          "gradients, optimizer state): ")
          .raw(human_bytes(static_cast<double>(resident))).raw("</title></line>\n");
      memory_curve(samples, &MemorySample::activations, "act", m);
    }
    // The peak: a dot on the curve (tooltip: when) and its value under the row's label.
    const std::string peak_text = "peak " + human_bytes(static_cast<double>(peak));
    std::string of_budget;
    if (options_.memory_budget && *options_.memory_budget > 0)
      of_budget = ", " + std::to_string(std::lround(100.0 * static_cast<double>(peak) /
                                                    static_cast<double>(*options_.memory_budget))) + "% of the budget";
    body_.raw("<circle class=\"pkd\" cx=\"").num(l_.x_of(peak_t)).raw("\" cy=\"").num(m.y_of(peak))
        .raw("\" r=\"2.5\"><title>").raw(peak_text).raw(" at ").raw(coord(peak_t, 3)).raw(" ms").raw(of_budget)
        .raw("</title></circle>");
    body_.raw("<text class=\"pk\" x=\"8\" y=\"").num(g.memory + kMemH - 2).raw("\">").raw(peak_text).raw("</text>\n");
  }

  // A step function of `field`, at most four points per pixel column: entry, both extremes, exit.
  void memory_curve(const std::vector<const MemorySample*>& samples, int64_t MemorySample::*field, const char* css,
                    const MemoryScale& m) {
    std::vector<std::pair<double, double>> pts;
    auto add = [&](double x, double yv) {
      if (!pts.empty() && std::abs(pts.back().first - x) < 0.05 && std::abs(pts.back().second - yv) < 0.05) return;
      pts.emplace_back(x, yv);
    };
    double entry = m.bottom;
    size_t i = 0;
    while (i < samples.size()) {
      const double x = l_.x_of(samples[i]->time_ms);
      const double col = std::floor(x);
      int64_t lo = samples[i]->*field, hi = lo, last = lo;
      size_t j = i + 1;
      for (; j < samples.size() && std::floor(l_.x_of(samples[j]->time_ms)) == col; ++j) {
        lo = std::min(lo, samples[j]->*field);
        hi = std::max(hi, samples[j]->*field);
        last = samples[j]->*field;
      }
      if (i > 0) add(x, entry);
      add(x, m.y_of(samples[i]->*field));
      add(x, m.y_of(hi));
      add(x, m.y_of(lo));
      add(x, m.y_of(last));
      entry = m.y_of(last);
      i = j;
    }
    add(kLeft + l_.width, entry);
    body_.raw("<polyline class=\"").raw(css).raw("\" points=\"");
    for (size_t k = 0; k < pts.size(); ++k) {
      if (k) body_.raw(" ");
      body_.num(pts[k].first).raw(",").num(pts[k].second);
    }
    body_.raw("\"/>\n");
  }

  // From the end of the send to the end of its receive.
  void p2p_arrows() {
    body_.raw("<g id=\"p2p\">\n");
    for (const MessageFlow& f : r_.flows) {
      if (f.send_slice < 0 || f.recv_slice < 0 || static_cast<size_t>(f.send_slice) >= r_.slices.size() ||
          static_cast<size_t>(f.recv_slice) >= r_.slices.size())
        continue;
      const TimedSlice& a = r_.slices[static_cast<size_t>(f.send_slice)];
      const TimedSlice& b = r_.slices[static_cast<size_t>(f.recv_slice)];
      if (a.rank < 0 || b.rank < 0) continue;
      const double y1 = l_.row(a.rank).comm + kCommH / 4, y2 = l_.row(b.rank).comm + 3 * kCommH / 4;
      body_.raw("<line class=\"ar\" x1=\"").num(l_.x_of(a.end_ms)).raw("\" y1=\"").num(y1).raw("\" x2=\"")
          .num(l_.x_of(b.end_ms)).raw("\" y2=\"").num(y2).raw("\" marker-end=\"url(#ah)\"/>\n");
    }
    body_.raw("</g>\n");
  }

  // A red triangle at the start of each step a violation names (at most 500; a step that
  // never ran: at the row's end).
  void violation_markers() {
    std::unordered_map<uint64_t, double> start_of;  // (rank, step) -> first slice start
    for (const auto& sl : r_.slices) {
      if (sl.rank < 0) continue;
      auto it = start_of.find(step_key(sl.rank, sl.step_index));
      if (it == start_of.end()) start_of.emplace(step_key(sl.rank, sl.step_index), sl.start_ms);
      else it->second = std::min(it->second, sl.start_ms);
    }
    body_.raw("<g id=\"violations\">\n");
    int markers = 0;
    for (const Violation& v : r_.check.violations) {
      for (const StepRef& ref : v.steps) {
        if (ref.rank < 0 || ref.rank >= l_.nranks || markers >= 500) continue;
        auto it = start_of.find(step_key(ref.rank, ref.index));
        const double x = it != start_of.end() ? l_.x_of(it->second) : kLeft + l_.width;
        const double y = l_.row(ref.rank).top;
        body_.raw("<polygon class=\"vi\" points=\"").num(x - 4).raw(",").num(y - 5).raw(" ").num(x + 4).raw(",")
            .num(y - 5).raw(" ").num(x).raw(",").num(y + 1).raw("\"><title>").text(to_string(v.kind)).raw(": ")
            .text(v.message).raw("</title></polygon>\n");
        ++markers;
      }
    }
    body_.raw("</g>\n");
  }

  // What the body drew (classes used, critical path, chunks, curves, arrows), and what it left
  // out and why.
  void legend_entries(Legend& legend) const {
    for (int c = 0; c < kClsCount; ++c)
      if (used_[c]) legend.swatch(kCls[c].css, kCls[c].legend);
    legend.swatch("bg", "idle");
    if (any_critical_) legend.swatch("bg cp", "critical path");
    const int chunks = stages_.chunks();
    if (chunks > 1)
      for (int k = 0; k < std::min(chunks, LocalStages::kShades); ++k) {
        const std::string text = k + 1 < LocalStages::kShades || chunks == LocalStages::kShades
                                     ? "local stage " + std::to_string(k) + (k == 0 ? " (full shade)" : " (lighter)")
                                     : "local stages " + std::to_string(k) + "+ (lightest)";
        legend.swatch((std::string("f") + stages_.shade_class(k)).c_str(), text);
      }
    if (labels_.any && !labels_.shown)
      legend.note(std::string("micro-batch ids on hover only: too narrow to label at this scale") +
                  (tooltips_ ? "" : " (and tooltips left out above " + std::to_string(options_.max_tooltips) +
                                        " slices: ppsched simulate --trace shows them)"));
    if (options_.memory && !r_.memory.empty()) {
      legend.line("mem", "memory (every rank on one scale: the largest peak" +
                             std::string(options_.memory_budget ? " or the budget)" : ")"));
      if (options_.memory_budget && *options_.memory_budget > 0)
        legend.line("bud", "memory budget " + human_bytes(static_cast<double>(*options_.memory_budget)) + " (usable capacity)");
      bool resident = false;
      for (const auto& x : r_.ranks) resident = resident || x.memory.resident_bytes() > 0;
      if (resident) {
        legend.line("act", "kept activations");
        legend.line("res", "held for the whole step (weights, gradients, optimizer)");
      }
    }
    if (arrows_)
      legend.line("ar", "P2P transfer", true);
    else if (!r_.flows.empty())
      legend.note(std::to_string(r_.flows.size()) + " P2P transfers (arrows left out above " +
                  std::to_string(options_.max_arrows) + ")");
  }

  // The standalone file: header, inline style and arrow marker, background, title, then the
  // body and the legend.
  std::string document(const std::string& legend, double height) const {
    const double width = kLeft + l_.width + kRight;
    Svg doc;
    doc.s.reserve(body_.s.size() + legend.size() + 4096);
    doc.raw("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"")
        .num(width).raw("\" height=\"").num(height).raw("\" viewBox=\"0 0 ").num(width).raw(" ").num(height)
        .raw("\">\n<style>\n"
             "text{font-family:sans-serif;font-size:11px;fill:#222}\n"
             ".ti{font-size:15px;font-weight:bold}\n"
             ".rl{font-size:12px;font-weight:bold}\n"
             ".sl{font-size:9px;fill:#555}\n"
             ".tk{font-size:10px;fill:#444;text-anchor:middle}\n"
             ".lb{font-size:").num(labels_.font).raw("px;fill:#111;text-anchor:middle}\n"
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
             ".bud{stroke:#c0392b;stroke-width:1;stroke-dasharray:6,3}\n"
             ".ar{stroke:#555;stroke-width:0.7;fill:none;opacity:0.8}\n"
             ".cp{stroke:#000;stroke-width:1.2}\n"
             ".vi{fill:#d00000}\n");
    for (const auto& c : kCls) doc.raw(".").raw(c.css).raw("{fill:").raw(c.fill).raw("}\n");
    doc.raw("</style>\n<defs><marker id=\"ah\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"6\" "
            "markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#555\"/></marker></defs>\n");
    doc.raw("<rect x=\"0\" y=\"0\" width=\"").num(width).raw("\" height=\"").num(height).raw("\" fill=\"#ffffff\"/>\n");
    const std::string t = title();
    doc.raw("<title>").text(t).raw("</title>\n<text class=\"ti\" x=\"8\" y=\"20\">").text(t).raw("</text>\n");
    doc.raw(body_.s).raw(legend).raw("</svg>\n");
    return std::move(doc.s);
  }

  // "NAME — makespan T ms · R ranks · M micro-batches", and what went wrong.
  std::string title() const {
    const int nranks = l_.nranks;
    std::string title = s_.name.empty() ? std::string("schedule") : s_.name;
    title += " \xE2\x80\x94 makespan " + coord(r_.makespan_ms, 3) + " ms \xC2\xB7 " + std::to_string(nranks) +
             (nranks == 1 ? " rank" : " ranks");
    if (s_.micro_batches > 0) title += " \xC2\xB7 " + std::to_string(s_.micro_batches) + " micro-batches";
    if (!r_.completed) title += " \xC2\xB7 stopped early (deadlock)";
    if (!r_.check.violations.empty()) title += " \xC2\xB7 " + std::to_string(r_.check.violations.size()) +
                                              (r_.check.violations.size() == 1 ? " violation" : " violations");
    return title;
  }

  const Schedule& s_;
  const RunRecord& r_;
  const SvgOptions& options_;
  const Canvas l_;
  const std::vector<uint32_t> order_;
  const std::vector<std::vector<const MemorySample*>> samples_of_;
  const MicroLabels labels_;
  const LocalStages stages_;
  const bool tooltips_, arrows_;
  std::unordered_set<uint64_t> critical_;  // step_key of the critical path's steps
  int64_t memory_top_ = 0;                  // the memory strips' common scale (MemoryScale)
  Svg body_;
  bool used_[kClsCount] = {};
  bool any_critical_ = false;
};

}  // namespace

std::string svg_timeline(const Schedule& s, const RunRecord& r, const SvgOptions& options) {
  return Timeline(s, r, options).draw();
}

}  // namespace ppsched
