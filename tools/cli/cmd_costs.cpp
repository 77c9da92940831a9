// `ppsched costs`: shows the embedded default cost model, prints a commented template, or
// checks a cost file and summarises what it prices.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "schedule/errors.hpp"
#include "schedule/text_format.hpp"
#include "sim/cost_model.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/render.hpp"

namespace ppsched::cli {

// The summary has a row per stage; more than this is not a table anyone reads.
constexpr int kMaxSummaryStages = 4096;
namespace {

std::string bytes_text(double b) { return human_bytes(static_cast<int64_t>(std::llround(b))); }

// One stage's value: the number, or "lo..hi" when it varies by micro-batch.
template <class Show>
std::string cell(const StageValue& v, int stage, Show show) {
  if (v.rows.empty()) return show(0.0);
  const auto& row = v.rows[static_cast<size_t>(std::min(stage, static_cast<int>(v.rows.size()) - 1))];
  const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
  return *lo == *hi ? show(*lo) : show(*lo) + ".." + show(*hi);
}

bool all_zero(const StageValue& v) {
  for (const auto& row : v.rows)
    for (double x : row)
      if (x != 0) return false;
  return true;
}

std::string link_text(const Link& l, double message_bytes) {
  std::string out = fixed(l.latency_ms * 1e3, 1) + " us + " +
                    (l.bandwidth_GBps ? fixed(*l.bandwidth_GBps, 1) + " GB/s" : std::string("infinite bandwidth"));
  if (message_bytes > 0)
    out += "  (one " + bytes_text(message_bytes) + " activation: " + fixed(l.transfer_ms(message_bytes), 3) + " ms)";
  return out;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

// `stages` rows, or one "every" row when every value is a scalar and no stage count was given.
std::string summary(const CostModel& c, int stages, bool every) {
  std::string out = "cost model: " + c.source + "\n\n";
  // Per-stage table: the body compute times always, other kinds only where the model has them.
  std::vector<std::pair<std::string, const StageValue*>> columns;
  for (const auto& k : compute_keys()) {
    const StageValue& v = c.compute(k.kind);
    const bool body = k.kind == ComputeKind::Forward || k.kind == ComputeKind::Backward ||
                      k.kind == ComputeKind::BackwardInput || k.kind == ComputeKind::BackwardWeight;
    if (body || !all_zero(v)) columns.emplace_back(std::string(k.key), &v);
  }
  const auto ms = [](double v) { return fixed(v, 3); };
  const auto by = [](double v) { return bytes_text(v); };
  std::vector<std::vector<std::string>> table = {{"stage"}};
  for (const auto& [name, v] : columns) table[0].push_back(name + " ms");
  table[0].push_back("activation msg");
  table[0].push_back("kept activations");
  const bool params = c.param_bytes.given;  // what the data-parallel FSDP_* steps move (--dp)
  if (params) table[0].push_back("params (DP)");
  for (int s = 0; s < stages; ++s) {
    std::vector<std::string> row = {every ? std::string("every") : std::to_string(s)};
    for (const auto& col : columns) row.push_back(cell(*col.second, s, ms));
    row.push_back(cell(c.activation_bytes, s, by));
    row.push_back(cell(c.kept_activation_bytes, s, by));
    if (params) row.push_back(cell(c.param_bytes, s, by));
    table.push_back(std::move(row));
  }
  std::vector<size_t> width(table[0].size(), 0);
  for (const auto& row : table)
    for (size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size() + 2);
  out += every ? std::string("per stage and micro-batch (the same on every stage):\n")
               : "per stage and micro-batch (" + std::to_string(stages) + " stage" + (stages == 1 ? "" : "s") + "):\n";
  for (const auto& row : table) {
    std::string line = "  ";
    for (size_t k = 0; k < row.size(); ++k) line += pad(row[k], width[k]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  out += "\nmessages: gradient " + cell(c.gradient_bytes, 0, by) + ", data " + bytes_text(c.data_bytes) +
         ", features " + bytes_text(c.features_bytes) + ", tower inputs " + bytes_text(c.tower_input_bytes) +
         ", feature grads " + bytes_text(c.feature_grad_bytes) + ", meta " + bytes_text(c.meta_bytes) +
         "\ncollectives: " + std::string(c.collectives == CollectiveAlgorithm::Ring ? "ring" : "tree") +
         "; tower params " + bytes_text(c.tower_param_bytes) + ", tied params " + bytes_text(c.tied_param_bytes) + "\n";
  const double message = c.activation_bytes.at(0, 0);
  out += "\nlinks (" + std::to_string(c.links.ranks_per_node) + " ranks per node):\n";
  out += "  intra-node  " + link_text(c.links.intra_node, message) + "\n";
  out += "  inter-node  " + link_text(c.links.inter_node, message) + "\n";
  for (const auto& p : c.links.pairs)
    out += "  " + pad(std::to_string(p.src) + " -> " + std::to_string(p.dst), 10) + "  " + link_text(p.link, message) + "\n";
  out += "protocol: eager threshold " + bytes_text(c.protocol.eager_threshold_bytes) + "; overlap efficiency " +
         fixed(c.overlap_efficiency, 2) + "\n";
  out += "memory: capacity " + (c.capacity_bytes ? bytes_text(*c.capacity_bytes) + " per rank" : std::string("unlimited")) +
         "; tower graph " + bytes_text(c.tower_graph_bytes) + " per micro, tower copy " + bytes_text(c.tower_copy_bytes) +
         "\n";
  return out;
}

}  // namespace

Action add_costs(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "costs", "show the embedded default cost model, print a commented template, or check a cost file");
  struct State {
    std::string file;
    bool print_template = false, show_default = false, json = false;
    int stages = 0;
  };
  auto st = std::make_shared<State>();
  auto* file = cmd->add_option("file", st->file, "a cost file (format ppsched-costs) to check and summarise");
  auto* tmpl = cmd->add_flag("--template", st->print_template,
                             "print a commented starting file with the default's numbers (valid as is)");
  auto* def = cmd->add_flag("--default", st->show_default, "show the embedded default (7B-class model, H100-class GPUs)");
  cmd->add_option("--stages", st->stages,
                  "stage count: divides the default's 32 layers; a file's per-stage arrays must match it")
      ->check(whole_in(1, kMaxSummaryStages));
  auto* json = cmd->add_flag("--json", st->json, "print the model as a complete cost file, derived values filled in");
  tmpl->excludes(file)->excludes(def)->excludes(json);
  def->excludes(file);
  return [st]() {
    if (st->print_template) {
      std::cout << cost_template(st->stages);
      return kOk;
    }
    if (st->file.empty() && !st->show_default)
      throw InputError({}, "give a cost file to check, --default or --template (see ppsched costs --help)");
    const CostModel c = st->show_default ? default_cost_model(st->stages) : read_cost_file(st->file);
    if (st->stages > 0) c.check_fits(st->stages, 0);
    if (st->json) {
      std::cout << write_cost_model(c);
    } else {
      const bool every = st->stages <= 0 && c.stage_count() == 1;
      std::cout << summary(c, st->stages > 0 ? st->stages : c.stage_count(), every);
      if (!st->show_default) std::cout << "\n" << st->file << ": valid\n";
    }
    return kOk;
  };
}

}  // namespace ppsched::cli
