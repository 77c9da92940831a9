#include <iostream>
#include <sstream>

#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/generators/generator.hpp"
#include "schedule/step_types.hpp"
#include "schedule/validate.hpp"
#include "schedule/formats/torch_lowering.hpp"
#include "tools/cli/command.hpp"

namespace ppsched::cli {
namespace {

Placement parse_placement(const std::string& text, int ranks_hint) {
  if (text == "loop" || text == "v") {
    // The stage count is known only after reading; the reader resolves kind-only placements.
    Placement p;
    p.kind = text == "loop" ? PlacementKind::Loop : PlacementKind::V;
    (void)ranks_hint;
    return p;
  }
  std::vector<int32_t> map;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      int v = std::stoi(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      map.push_back(v);
    } catch (const std::exception&) {
      throw InputError({}, "--placement: expected loop, v or a comma-separated rank per stage (0,1,1,0), got '" + text + "'");
    }
  }
  return Placement::explicit_map(std::move(map));
}

}  // namespace

Action add_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "convert between ppsched JSON and PyTorch pipelining CSV");
  struct State {
    std::string in, out, from, to, placement, csv_kind = "compute_comms";
    int micro = 0;
    bool json = false, fsdp_steps = false;
    bool torch_comms = false;
  };
  auto st = std::make_shared<State>();
  cmd->add_option("input", st->in, "input schedule (.json or .csv)")->required();
  cmd->add_option("-o,--output", st->out, "output file (.json or .csv)")->required();
  cmd->add_option("--from", st->from, "input format json|csv (default: from the extension)")->check(CLI::IsMember({"json", "csv"}));
  cmd->add_option("--to", st->to, "output format json|csv (default: from the extension)")->check(CLI::IsMember({"json", "csv"}));
  cmd->add_option("--placement", st->placement, "CSV input: loop, v, or the rank of each stage (0,1,1,0); default inferred");
  cmd->add_option("--micro", st->micro, "CSV input: number of micro-batches; default inferred")->check(whole_in(1, kMaxCount));
  cmd->add_option("--csv-kind", st->csv_kind, "CSV output: compute_comms (default) or compute_only")
      ->check(CLI::IsMember({"compute_comms", "compute_only"}));
  cmd->add_flag("--fsdp-steps", st->fsdp_steps,
                "insert FSDP_UNSHARD / FSDP_RESHARD / FSDP_REDUCE_GRAD as PyTorch's lowering does (as generate "
                "--fsdp-steps; for a schedule that has none)");
  cmd->add_flag("--torch-comms", st->torch_comms,
                "lower the input's compute order as PyTorch's _PipelineScheduleRuntime does (its _load_csv of a "
                "compute_only file, then _dump_csv compute_comms): UNSHARD, RESHARD, REDUCE_GRAD, SEND/RECV");
  cmd->add_flag("--json", st->json, "print a JSON summary of what was written");
  return [st]() {
    CsvReadOptions csv;
    if (!st->placement.empty()) csv.placement = parse_placement(st->placement, 0);
    if (st->micro > 0) csv.micro_batches = st->micro;
    std::optional<FileFormat> from;
    if (!st->from.empty()) from = format_from_name(st->from);
    refuse_overwriting_input(st->out, {st->in}, "-o");
    if (st->torch_comms && st->csv_kind == "compute_only")
      throw InputError({}, "--torch-comms writes PyTorch's compute_comms lowering; --csv-kind compute_only would drop it");
    Schedule s = read_schedule_input(st->in, from, csv);
    if (st->fsdp_steps) {
      for (const auto& prog : s.programs)
        for (const auto& slot : prog)
          if (slot && info(slot->op).collective == CollectiveScope::DataParallel)
            throw InputError(in_file(st->in), "--fsdp-steps: the schedule has FSDP steps already (" +
                                                  short_label(*slot) + ")");
      s = add_fsdp_steps(s);
      validate_structure(s, st->in);
    }
    if (st->torch_comms) s = lower_like_pytorch(s);
    const FileFormat to = output_format(st->to, "--to", st->out);
    write_output(st->out, write_schedule(s, to, st->csv_kind == "compute_only" ? CsvKind::ComputeOnly : CsvKind::ComputeComms));
    if (st->json) {
      std::cout << "{\"output\": \"" << st->out << "\", \"ranks\": " << s.ranks << ", \"stages\": " << s.stages
                << ", \"micro_batches\": " << s.micro_batches << ", \"placement\": \"" << to_string(s.placement.kind)
                << "\", \"steps\": " << s.step_count() << "}\n";
    } else {
      std::cerr << "wrote " << st->out << ": " << s.ranks << " ranks, " << s.stages << " stages ("
                << to_string(s.placement.kind) << "), " << s.micro_batches << " micro-batches, " << s.step_count()
                << " steps\n";
    }
    return kOk;
  };
}

}  // namespace ppsched::cli
