// `ppsched calibrate TRACE -o costs.json [--schedule FILE]`: fits a cost model to a trace
// (sim/calibrate.hpp) and, given the schedule that ran, predicts the run with it and reports
// the prediction error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/text_format.hpp"
#include "workload/layout.hpp"
#include "workload/model_file.hpp"
#include "sim/calibrate.hpp"
#include "sim/calibrate_model.hpp"
#include "sim/engine.hpp"
#include "sim/workload_costs.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/render.hpp"

namespace ppsched::cli {
namespace {

std::string read_text(const std::string& path) { return read_input_file(path); }

struct Prediction {
  double predicted_ms = 0, error = 0;
  bool same_run = true;  // the schedule (and layout) the trace measured: the error means something
  std::string layout;    // per-layer prediction: the layout it was priced with
  bool completed = false;
  size_t violations = 0;
  std::string mode;  // the runtime mode it was simulated in, as ppsched check's flags
};

// The runtime mode as the flags that select it ("" = the default: rendezvous, blocking).
std::string mode_flags(const CheckOptions& o) {
  std::string f;
  auto add = [&](const char* flag) { f += (f.empty() ? "" : " ") + std::string(flag); };
  if (o.comm == CommMode::Eager) add("--comm eager");
  if (o.overlap_p2p) add("--overlap-p2p");
  if (o.mpipe_batched_recv) add("--mpipe-batched-recv");
  if (o.dyn_shape) add("--dyn-shape");
  if ((o.overlap_p2p || o.mpipe_batched_recv) && o.backend != P2PBackend::Nccl) add("--p2p-backend gloo");
  return f;
}

// A prediction runs in the mode the trace says the run had; a trace that does not say: a
// compute_comms CSV ran under --overlap-p2p (ppsched-exec's default for it).
SimOptions prediction_options(const Calibration& c, const std::optional<CsvKind>& kind, MemoryModel memory) {
  SimOptions so;
  so.check.memory = std::move(memory);
  so.record_trace = false;
  if (c.mode) {
    so.check.comm = c.mode->comm;
    so.check.overlap_p2p = c.mode->overlap_p2p;
    so.check.mpipe_batched_recv = c.mode->mpipe_batched_recv;
    so.check.dyn_shape = c.mode->dyn_shape;
    so.check.backend = c.mode->backend;
  } else {
    so.check.overlap_p2p = selects_overlap_p2p(kind);
    // Only Gloo's transport posts without waiting (exec/transport.hpp): a measured run that did
    // ran on it.
    if (c.transport == RunTransport::Gloo) so.check.backend = P2PBackend::Gloo;
  }
  return so;
}

std::string summary_text(const Calibration& c, const std::string& trace, Statistic st) {
  std::string out = "calibrated from " + trace + " (" + (c.label.empty() ? "unlabelled" : c.label) + ", '" + c.schedule +
                    "', " + std::to_string(c.ranks) + " ranks, " + std::to_string(c.stages) + " stages, " +
                    std::to_string(c.micro_batches) + " micro-batches): " + std::to_string(c.slices) + " slices, " +
                    std::to_string(c.flows) + " flows, makespan " + fixed(c.measured_makespan_ms, 3) + " ms\n";
  out += std::string("  compute (ms; the model takes the ") + (st == Statistic::Median ? "median" : "mean") + "):\n";
  out += "    step            stage  samples      value     median       mean        min        max\n";
  for (const auto& f : c.compute) {
    std::string line = format_text("    %-15s %5s  %7d  %9.4f  %9.4f  %9.4f  %9.4f  %9.4f\n", f.key.c_str(),
                  f.stage < 0 ? "-" : std::to_string(f.stage).c_str(), f.samples, f.value_ms, f.median_ms, f.mean_ms,
                  f.min_ms, f.max_ms);
    out += line;
  }
  const LinkFit& l = c.link;
  out += "  link: latency " + fixed(l.latency_ms * 1e3, 1) + " us, bandwidth " +
         (l.bandwidth_GBps ? fixed(*l.bandwidth_GBps, 4) + " GB/s" : std::string("infinite")) + " (least squares over " +
         std::to_string(l.transfers) + " transfers and " + std::to_string(l.collectives) + " collectives, " + std::to_string(l.sizes) + " sizes; mean transfer " +
         fixed(l.mean_transfer_ms, 4) + " ms, residual rms " + fixed(l.rms_residual_ms, 4) + " ms, max " +
         fixed(l.max_residual_ms, 4) + " ms)\n";
  if (!l.note.empty()) out += "    " + l.note + "\n";
  if (const auto& m = c.moe) {
    std::string layers;
    for (size_t st = 0; st < m->layers.size(); ++st) layers += (st ? "," : "") + std::to_string(m->layers[st]);
    out += "  all-to-all (EP " + std::to_string(m->ep) + "): latency " + fixed(m->latency_ms * 1e3, 1) + " us, bandwidth " +
           (m->bandwidth_GBps ? fixed(*m->bandwidth_GBps, 4) + " GB/s" : std::string("infinite")) + " (least squares over " +
           std::to_string(m->all_to_alls) + " all-to-alls, " + std::to_string(m->sizes) + " sizes; mean " + fixed(m->mean_ms, 4) +
           " ms, residual rms " + fixed(m->rms_residual_ms, 4) + " ms)\n";
    if (!m->note.empty()) out += "    " + m->note + "\n";
    out += "  MoE layers per stage " + layers + ", phase shares from " + std::to_string(m->shared_steps) +
           " steps that ran alone; contention " + fixed(m->contention, 2) +
           (m->overlapped_steps > 0 ? " (fitted on " + std::to_string(m->overlapped_steps) + " overlapped steps, residual rms " +
                                          fixed(m->contention_rms_ms, 4) + " ms)"
                                    : std::string(" (default: no overlapped step to fit it on)")) +
           "\n";
  }
  for (const auto& n : c.notes) out += "  note: " + n + "\n";
  return out;
}

// What `ppsched calibrate` was asked, as its flags say.
struct CalibrateFlags {
  std::string trace, out, schedule, statistic = "mean";
  int stages = -1;
  std::string eager;  // a byte figure with its unit ("" : the default)
  bool json = false;
  CostFlags cost;
  std::string trace_layout, model_out;
};

CLI::App* declare_calibrate_flags(CLI::App& app, CalibrateFlags& f) {
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "fit a cost model to a trace (ppsched-exec --trace or ppsched simulate --trace): per-stage step times "
      "(mean of the slices), link latency and bandwidth (least squares over P2P transfers, timed from the later "
      "of the two posts to the end of the receive), payload bytes. With --schedule, simulate that schedule with the "
      "fitted model and report measured vs predicted iteration time.");
  cmd->add_option("TRACE", f.trace, "Chrome trace JSON written by ppsched")->required();
  cmd->add_option("-o,--output", f.out, "write the fitted ppsched-costs file here ('-' = stdout)");
  cmd->add_option("--schedule", f.schedule, "the schedule that ran: predict it with the fitted model");
  cmd->add_option("--statistic", f.statistic, "per-stage step time: mean (default: the model adds step times up, so their mean reproduces the run's total) or median (robust to a step descheduled on a busy machine)")
      ->check(CLI::IsMember({"median", "mean"}));
  cmd->add_option("--stages", f.stages, "stage count, when the trace does not say (otherData.stages)")
      ->check(whole_in(1, kMaxCount));
  cmd->add_option("--eager-threshold", f.eager,
                  "protocol.eager_threshold_bytes of the fitted model, with its unit (4MiB, 0B; default: 0 for a Gloo "
                  "run's trace, whose sends wait for the receiver; else 4 MiB)");
  cmd->add_flag("--json", f.json, "print the fit (and the prediction) as JSON");
  add_cost_flags(*cmd, f.cost, false);
  // calibrate measures what these assume: refused (as unknown) rather than ignored.
  for (const char* flag : {"--overlap-efficiency", "--memory-margin", "--memory-reserve"}) cmd->remove_option(cmd->get_option(flag));
  // The traced run's backwards ran whole (ppsched-exec has no delayed weight gradients): the fit
  // of its MoE phases has nothing of --delay-wgrad-compute to read.
  cmd->remove_option(cmd->get_option("--delay-wgrad-compute"));
  cmd->get_option("--model")->description(
      "per-layer calibration: explain the trace's per-stage step times by the FLOPs this model (a ppsched-model "
      "file or a Hugging Face config.json) puts on each stage, one achieved rate and per-step overhead per compute "
      "kind; --schedule may then be another schedule (family, V, micro-batches, layout: --layout)");
  cmd->get_option("--layout")->description(
      "with --model and --schedule: the layout the predicted schedule runs with (counts or Megatron's string; "
      "default: the traced layout when the schedule has the traced stage count, else the even split)");
  cmd->add_option("--trace-layout", f.trace_layout,
                  "with --model: the layout the traced run had (default: the trace's otherData.layers, which ppsched-exec "
                  "writes, else the even split over the trace's stages)")
      ->needs(f.cost.model_opt);
  cmd->add_option("--model-out", f.model_out,
                  "with --model: write the model with its fitted rates (device.fitted) as a ppsched-model file")
      ->needs(f.cost.model_opt);
  return cmd;
}

// Another schedule than the traced one may be predicted: priced from the fitted model.
Prediction predict_from_fit(const CalibrateFlags& f, Calibration& c, const WorkloadFit& fit) {
  // Another schedule than the traced one may be predicted: priced from the fitted model.
  std::optional<CsvKind> kind;
  Schedule s = read_schedule_input(f.schedule, {}, {}, &kind);
  // Without --layout a schedule of the traced stage count runs on the traced layout.
  const bool traced_split = f.cost.layout.empty() && s.stages == c.stages;
  WorkloadCosts nc = traced_split ? workload_costs(fit.fitted, fit.traced_layout)
                                 : workload_costs(fit.fitted, s.stages, f.cost.layout, "--layout");
  if (!apply_rank_time(nc.costs, fit.fitted.device, s))
    c.notes.push_back("the predicted schedule has " + std::to_string(s.ranks) + " ranks, the trace " +
                      std::to_string(fit.fitted.device.rank_time.size()) + ": its stages are priced at the fitted rates alone, "
                      "without the traced ranks' time factors");
  SimOptions so = prediction_options(c, kind, nc.costs.memory_model(s.stages));
  so.check.memory_budget.reset();  // a prediction of time: memory is simulate's business
  RunRecord r = simulate(s, nc.costs, so);
  Prediction p;
  p.mode = mode_flags(so.check);
  p.predicted_ms = r.makespan_ms;
  // Only the run that was traced has a measurement to compare with.
  const bool same_run = s.ranks == c.ranks && s.stages == c.stages && s.micro_batches == c.micro_batches &&
                        (c.schedule.empty() || s.name == c.schedule) &&
                        nc.layout.stages == fit.traced_layout.stages;
  p.error = same_run && c.measured_makespan_ms > 0 ? (r.makespan_ms - c.measured_makespan_ms) / c.measured_makespan_ms : 0;
  p.same_run = same_run;
  p.layout = counts_text(nc.layout, nc.layers);
  p.completed = r.completed;
  p.violations = r.check.violations.size();
  return p;
}

// The traced schedule predicted with the fitted cost model: it must be the schedule that ran.
Prediction predict_traced(const CalibrateFlags& f, Calibration& c) {
  std::optional<CsvKind> kind;
  Schedule s = read_schedule_input(f.schedule, {}, {}, &kind);
  Location where = in_file(f.schedule);
  if (s.ranks != c.ranks || s.stages != c.stages)
    throw InputError(where, "has " + std::to_string(s.ranks) + " ranks and " + std::to_string(s.stages) +
                                " stages, the trace " + std::to_string(c.ranks) + " ranks and " +
                                std::to_string(c.stages) + " stages: not the schedule that ran");
  if (c.micro_batches > 0 && s.micro_batches != c.micro_batches)
    throw InputError(where, "has " + std::to_string(s.micro_batches) + " micro-batches, the trace " +
                                std::to_string(c.micro_batches) + ": not the schedule that ran");
  if (!c.schedule.empty() && s.name != c.schedule)
    c.notes.push_back("the trace names schedule '" + c.schedule + "', --schedule '" + s.name + "'");
  SimOptions so = prediction_options(c, kind, c.costs.memory_model(s.stages));
  RunRecord r = simulate(s, c.costs, so);
  Prediction p;
  p.mode = mode_flags(so.check);
  p.predicted_ms = r.makespan_ms;
  p.error = c.measured_makespan_ms > 0 ? (r.makespan_ms - c.measured_makespan_ms) / c.measured_makespan_ms : 0;
  p.completed = r.completed;
  p.violations = r.check.violations.size();
  return p;
}

// Writes -o and --model-out; a file that cannot be written does not lose the fit: its error is
// returned ("" when all went well), the fit is printed, then exit 2.
std::string write_fitted(const CalibrateFlags& f, const Calibration& c, const std::optional<WorkloadFit>& fit) {
  std::string write_error;
  if (!f.out.empty()) {
    try {
      write_output(f.out, write_cost_model(c.costs));
    } catch (const InputError& e) {
      write_error = e.what();
    }
  }
  if (!f.model_out.empty() && write_error.empty()) {
    try {
      write_output(f.model_out, write_model_file(f.cost.model, fit->fitted));
    } catch (const InputError& e) {
      write_error = e.what();
    }
  }
  return write_error;
}

// What the fit found (and the prediction): the same for --json and text.
struct CalibrationReport {
  const CalibrateFlags& flags;
  const Calibration& c;
  const std::optional<WorkloadFit>& fit;
  const std::optional<Prediction>& pred;
  bool wrote = false;         // -o written
  bool wrote_model = false;   // --model-out written
};

void print_calibration_json(const CalibrationReport& rep) {
  const CalibrateFlags& f = rep.flags;
  const Calibration& c = rep.c;
  const auto& pred = rep.pred;
  nlohmann::json j;
  j["trace"] = f.trace;
  j["label"] = c.label;
  j["schedule"] = c.schedule;
  j["ranks"] = c.ranks;
  j["stages"] = c.stages;
  j["micro_batches"] = c.micro_batches;
  j["slices"] = c.slices;
  j["flows"] = c.flows;
  j["measured_makespan_ms"] = c.measured_makespan_ms;
  j["statistic"] = f.statistic;
  j["compute"] = nlohmann::json::array();
  for (const auto& k : c.compute)
    j["compute"].push_back({{"key", k.key}, {"stage", k.stage}, {"samples", k.samples}, {"value_ms", k.value_ms},
                            {"median_ms", k.median_ms}, {"mean_ms", k.mean_ms}, {"min_ms", k.min_ms},
                            {"max_ms", k.max_ms}});
  const LinkFit& l = c.link;
  j["link"] = {{"transfers", l.transfers},
               {"collectives", l.collectives},
               {"sizes", l.sizes},
               {"latency_ms", l.latency_ms},
               {"bandwidth_GBps", l.bandwidth_GBps ? nlohmann::json(*l.bandwidth_GBps) : nlohmann::json(nullptr)},
               {"mean_transfer_ms", l.mean_transfer_ms},
               {"rms_residual_ms", l.rms_residual_ms},
               {"max_residual_ms", l.max_residual_ms},
               {"note", l.note}};
  if (const auto& m = c.moe)
    j["moe"] = {{"ep", m->ep},
                {"all_to_alls", m->all_to_alls},
                {"sizes", m->sizes},
                {"latency_ms", m->latency_ms},
                {"bandwidth_GBps", m->bandwidth_GBps ? nlohmann::json(*m->bandwidth_GBps) : nlohmann::json(nullptr)},
                {"mean_ms", m->mean_ms},
                {"rms_residual_ms", m->rms_residual_ms},
                {"note", m->note},
                {"layers", m->layers},
                {"shared_steps", m->shared_steps},
                {"overlapped_steps", m->overlapped_steps},
                {"contention", m->contention},
                {"contention_rms_ms", m->contention_rms_ms}};
  j["notes"] = c.notes;
  if (rep.wrote) j["output"] = f.out;
  if (rep.fit) {
    j["per_layer"] = {{"model", f.cost.model}, {"traced_layout", rep.fit->traced_layout_text}, {"kinds", nlohmann::json::array()}};
    for (const KindFit& k : rep.fit->fits)
      j["per_layer"]["kinds"].push_back({{"key", k.key}, {"from", k.from}, {"points", k.points},
                                         {"flops_per_s", k.flops_per_s}, {"overhead_ms", k.overhead_ms},
                                         {"through_origin", k.through_origin}, {"rms_residual_ms", k.rms_residual_ms},
                                         {"max_residual_ms", k.max_residual_ms}});
    const auto& rank_times = rep.fit->fitted.device.rank_time;
    j["per_layer"]["rank_time_factors"] = nlohmann::json::array();
    for (size_t r = 0; r < rank_times.size(); ++r)
      j["per_layer"]["rank_time_factors"].push_back({{"rank", r}, {"FWD", rank_times[r][0]},
                                                     {"BWD_INPUT", rank_times[r][1]}, {"BWD_WEIGHT", rank_times[r][2]}});
    if (rep.wrote_model) j["per_layer"]["model_output"] = f.model_out;
  }
  if (pred) {
    j["prediction"] = {{"schedule", f.schedule},
                       {"measured_ms", pred->same_run ? nlohmann::json(c.measured_makespan_ms) : nlohmann::json(nullptr)},
                       {"predicted_ms", pred->predicted_ms},
                       {"mode", pred->mode},
                       {"relative_error", pred->same_run ? nlohmann::json(pred->error) : nlohmann::json(nullptr)},
                       {"completed", pred->completed},
                       {"violations", pred->violations}};
    if (rep.fit) j["prediction"]["layout"] = pred->layout;
  }
  (f.out == "-" ? std::cerr : std::cout) << j.dump() << "\n";
}

void print_calibration_text(const CalibrationReport& rep, Statistic statistic) {
  const CalibrateFlags& f = rep.flags;
  const Calibration& c = rep.c;
  const auto& pred = rep.pred;
  std::ostream& os = f.out == "-" ? std::cerr : std::cout;
  os << summary_text(c, f.trace, statistic);
  if (rep.wrote && f.out != "-") os << "  wrote " << f.out << "\n";
  if (rep.fit) {
    os << "  per layer (" << f.cost.model << ", traced layout " << rep.fit->traced_layout_text
       << "): step ms = rank factor x (overhead + stage FLOPs / rate), least squares over the stages\n";
    for (const KindFit& k : rep.fit->fits) {
      std::string line = format_text("    %-10s from %-10s %3d stages  %10.2f TFLOP/s  overhead %8.4f ms%s  residual rms %.4f ms\n",
                    k.key.c_str(), k.from.c_str(), k.points, k.flops_per_s / 1e12, k.overhead_ms,
                    k.through_origin ? " (through 0)" : "", k.rms_residual_ms);
      os << line;
    }
    if (const auto& rank_times = rep.fit->fitted.device.rank_time; !rank_times.empty()) {
      os << "  per rank: its stages' time over the fitted rates' (device.rank_time_factors; FWD, BWD_INPUT, BWD_WEIGHT)\n";
      for (size_t r = 0; r < rank_times.size(); ++r)
        os << format_text("    rank %-4zu %6.3f  %6.3f  %6.3f\n", r, rank_times[r][0], rank_times[r][1], rank_times[r][2]);
    }
    if (rep.wrote_model) os << "  wrote " << f.model_out << " (the model with device.fitted)\n";
  }
  if (pred && !pred->same_run)
    os << "prediction for " << f.schedule << " on layout " << pred->layout << (pred->mode.empty() ? "" : " (" + pred->mode + ")")
       << ": " << fixed(pred->predicted_ms, 3) << " ms (another run than the traced one: no measurement to compare)"
       << (pred->completed ? "" : " (the simulation stopped: deadlock)")
       << (pred->violations ? " (" + std::to_string(pred->violations) + " violation(s): ppsched check shows them)" : "")
       << "\n";
  else if (pred)
    os << "prediction for " << f.schedule << (pred->mode.empty() ? "" : " (" + pred->mode + ")") << ": measured " << fixed(c.measured_makespan_ms, 3) << " ms, predicted "
       << fixed(pred->predicted_ms, 3) << " ms, error " << (pred->error >= 0 ? "+" : "") << fixed(100 * pred->error, 1)
       << "%" << (pred->completed ? "" : " (the simulation stopped: deadlock)")
       << (pred->violations ? " (" + std::to_string(pred->violations) + " violation(s): ppsched check shows them)" : "")
       << "\n";
}

}  // namespace

Action add_calibrate(CLI::App& app) {
  auto st = std::make_shared<CalibrateFlags>();
  declare_calibrate_flags(app, *st);
  return [st] {
    CalibrateOptions o;
    o.statistic = st->statistic == "mean" ? Statistic::Mean : Statistic::Median;
    o.stages = st->stages;
    if (!st->eager.empty()) o.eager_threshold_bytes = static_cast<double>(parse_bytes(st->eager, "--eager-threshold"));
    refuse_overwriting_input(st->out, {st->trace, st->schedule}, "-o");
    refuse_overwriting_input(st->model_out, {st->trace, st->schedule, st->cost.model}, "--model-out");
    Calibration c = calibrate_trace(read_text(st->trace), st->trace, o);
    // Per-layer calibration: the model's FLOPs on each traced stage explain its step times.
    std::optional<WorkloadFit> fit;
    if (!st->cost.model.empty()) {
      DataParallelFlags dp;
      fit = fit_workload(load_workload(st->cost, dp), c, st->trace_layout, st->trace);
    }
    std::optional<Prediction> pred;
    if (!st->schedule.empty()) pred = fit ? predict_from_fit(*st, c, *fit) : predict_traced(*st, c);
    const std::string write_error = write_fitted(*st, c, fit);
    const CalibrationReport rep{*st, c, fit, pred, !st->out.empty() && write_error.empty(),
                                !st->model_out.empty() && write_error.empty()};
    if (st->json) print_calibration_json(rep);
    else print_calibration_text(rep, o.statistic);
    if (!write_error.empty()) {
      std::cout.flush();
      std::cerr << "error: " << write_error << "\n";
      return kBadInput;
    }
    return pred && (!pred->completed || pred->violations) ? kFound : kOk;
  };
}

}  // namespace ppsched::cli
