#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "checkers/checks.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/formats/torch_lowering.hpp"
#include "schedule/validate.hpp"
#include "tools/cli/command.hpp"

namespace ppsched::cli {

void add_generator_flags(CLI::App& cmd, GeneratorFlags& f, bool family_required) {
  std::string families;
  for (const auto& g : generators()) families += (families.empty() ? "" : ", ") + std::string(g.name);
  auto* name = cmd.add_option(family_required ? "family" : "--generate", f.family, "schedule family: " + families);
  if (family_required) name->required();
  cmd.add_option("--pp", f.options.pp, "pipeline ranks P")->check(whole_in(1, kMaxGeneratedRanks));
  cmd.add_option("--vpp", f.options.vpp, "virtual stages per rank V (default 1)")->check(whole_in(1, kMaxStages));
  cmd.add_option("--micro", f.options.micro, "micro-batches M")->check(whole_in(1, kMaxCount));
  cmd.add_flag("--less-memory", f.options.less_memory, "interleaved: shallow warmup (V-1)*R0 + (P-1-i)");
  cmd.add_flag("--overlap-b-f", f.options.overlap_b_f, "interleaved: steady pairs become OVERLAP_B_F");
  cmd.add_flag("--dxdw-split", f.options.dxdw_split, "interleaved: split backward into BWD_INPUT/BWD_WEIGHT (needs --overlap-b-f)");
  cmd.add_option("--group-size", f.options.group_size,
                 "interleaved-1f1b: Megatron-LM's microbatch_group_size_per_vp_stage G, P <= G <= M (each virtual "
                 "stage runs G micro-batches in turn; default: PyTorch's / hyper-parallel's rounds)")
      ->check(whole_in(1, kMaxCount));
  auto* data_on = cmd.add_flag("--data-steps", f.data_steps_on,
                               "hyper-parallel's body data steps: DATA_SEND/DATA_RECV beside every cross-rank forward "
                               "(inputs and labels travel with it), DATA_LOAD before each forward (default for "
                               "mpipe-transpose)");
  auto* data_off = cmd.add_flag("--no-data-steps", f.data_steps_off,
                                "leave the body data steps out (mpipe-transpose: its body without them)");
  data_on->excludes(data_off);
  cmd.add_option("--overflow", f.overflow, "mpipe-transpose: owner rule full|min")->check(CLI::IsMember({"full", "min"}));
  cmd.add_option("--tower", f.tower, "mpipe-transpose: trainable|frozen|none")->check(CLI::IsMember({"trainable", "frozen", "none"}));
  cmd.add_flag("--owner-backward", f.options.owner_backward, "mpipe-transpose: owners run the tower backward");
  auto* batch = cmd.add_flag("--batch", f.batch, "coalesce runs of P2P steps into BATCH_SEND_RECV (batch transport)");
  cmd.add_option("--p2p-transport", f.transport,
                 "hyper-parallel's p2p_transport: plain (default: each P2P step alone), batch (= --batch), boundary "
                 "(after each OVERLAP_B_F, its forward's FWD_SEND and the gap's receives first, every transfer a batch of "
                 "its own; needs OVERLAP_B_F steps: interleaved-1f1b --overlap-b-f)")
      ->check(CLI::IsMember({"plain", "batch", "boundary"}))
      ->excludes(batch);
  cmd.add_flag("--fsdp-steps", f.fsdp_steps,
               "insert FSDP_UNSHARD / FSDP_RESHARD / FSDP_REDUCE_GRAD as PyTorch's lowering does (a pipeline x data "
               "parallel job: simulate --dp N [--fsdp])");
}

void generator_flags_need_generate(CLI::App& cmd) {
  CLI::Option* gen = cmd.get_option("--generate");
  for (const char* name : {"--pp", "--vpp", "--micro", "--less-memory", "--overlap-b-f", "--dxdw-split", "--group-size",
                           "--data-steps", "--no-data-steps", "--overflow", "--tower", "--owner-backward", "--batch",
                           "--p2p-transport", "--fsdp-steps"})
    if (CLI::Option* o = cmd.get_option_no_throw(name)) o->needs(gen);
}

Schedule build_generated(GeneratorFlags& f) {
  if (f.options.pp < 1) throw InputError({}, "--pp is required (pipeline ranks, >= 1)");
  if (f.options.micro < 1) throw InputError({}, "--micro is required (micro-batches, >= 1)");
  f.options.overflow = f.overflow == "min" ? Overflow::Min : Overflow::Full;
  f.options.tower = f.tower == "frozen" ? Tower::Frozen : f.tower == "none" ? Tower::None : Tower::Trainable;
  // Given with its default value it still does not apply to another family.
  if (const GeneratorInfo* g = find_generator(f.family); g && !g->takes_mpipe_options)
    for (const auto& [given, flag] : {std::pair<bool, const char*>{!f.overflow.empty(), "--overflow"}, {!f.tower.empty(), "--tower"}})
      if (given) throw InputError({}, f.family + ": " + flag + " does not apply (it applies to mpipe-transpose)");
  if (f.data_steps_on) f.options.data_steps = true;
  if (f.data_steps_off) f.options.data_steps = false;
  Schedule s = generate(f.family, f.options);
  if (f.fsdp_steps) s = add_fsdp_steps(s);
  if (f.transport == "batch") f.batch = true;
  if (f.batch) s = coalesce_verified(s, f.family);
  if (f.transport == "boundary") s = boundary_verified(s, f.family);
  validate_structure(s, "<generated " + f.family + ">");
  return s;
}

std::string misplaced_file_kind(const std::string& path) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(read_input_file(path));
  } catch (const std::exception&) {
    return "";
  }
  if (!doc.is_object()) return "";
  if (doc.contains("traceEvents"))
    return "a Chrome trace (it has \"traceEvents\"), not a schedule: ppsched calibrate reads traces, and "
           "ui.perfetto.dev shows them; give the schedule file that ran";
  const auto format = doc.find("format");
  if (format != doc.end() && format->is_string()) {
    if (*format == "ppsched-costs") return "a cost file (format ppsched-costs), not a schedule: give it as --costs " + clip(path);
    if (*format == "ppsched-model") return "a model file (format ppsched-model), not a schedule: give it as --model " + clip(path);
  }
  if (doc.contains("model_type") || doc.contains("num_hidden_layers"))
    return "a Hugging Face config.json, not a schedule: give it as --model " + clip(path);
  return "";
}

Schedule read_schedule_input(const std::string& path, std::optional<FileFormat> format, const CsvReadOptions& csv,
                             std::optional<CsvKind>* csv_kind) {
  int64_t inserted = 0;
  Schedule s;
  try {
    s = read_schedule_file(path, format, csv, csv_kind, &inserted);
  } catch (const InputError& e) {
    const bool json = format ? *format == FileFormat::Json : path.size() >= 5 && path.substr(path.size() - 5) == ".json";
    if (json) {
      if (const std::string kind = misplaced_file_kind(path); !kind.empty()) throw InputError(in_file(path), "this file is " + kind);
    }
    throw;
  }
  if (inserted > 0)
    std::cerr << "note: " << path << ": no communication steps: inserted " << inserted
              << " by the column scan (the rule for a compute-only order, JSON or CSV; a file with any P2P step is "
                 "taken as written)\n";
  return s;
}

void write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    return;
  }
  std::FILE* fp = std::fopen(path.c_str(), "wb");
  if (!fp) throw InputError(in_file(path), std::string("cannot write: ") + std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), fp) == text.size();
  ok = std::fclose(fp) == 0 && ok;
  if (!ok) throw InputError(in_file(path), std::string("write failed: ") + std::strerror(errno));
}

std::string make_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (std::filesystem::is_directory(dir)) return "";
  return ec ? ec.message() : "a file of that name exists";
}

void refuse_overwriting_input(const std::string& output, const std::vector<std::string>& inputs,
                              const std::string& flag) {
  if (output.empty() || output == "-") return;
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& in : inputs) {
    if (in.empty() || in == "-") continue;
    const bool same = fs::exists(output, ec) && fs::exists(in, ec)
                          ? fs::equivalent(output, in, ec)
                          : fs::weakly_canonical(output, ec) == fs::weakly_canonical(in, ec);
    if (same)
      throw InputError(in_file(output), flag + " names the input " + clip(in) +
                                            ": writing it would destroy the input; give another path");
  }
}

FileFormat output_format(const std::string& format, const std::string& flag, const std::string& out) {
  const bool to_file = !out.empty() && out != "-";
  if (format.empty()) return to_file ? format_from_path(out) : FileFormat::Json;
  const FileFormat f = format_from_name(format);
  if (!to_file) return f;
  // The extension is what a later read goes by: a CSV in a .json file would not read back.
  const FileFormat by_ext = format_from_path(out);
  if (by_ext != f)
    throw InputError({}, flag + " " + format + " and the output " + clip(out) + " disagree: the extension says " +
                             (by_ext == FileFormat::Json ? "json" : "csv") + ", and a reader goes by it; name the file ." +
                             format + " or leave " + flag + " out");
  return f;
}

Action add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "write a schedule of a built-in family (with its P2P steps)");
  struct State {
    GeneratorFlags flags;
    std::string out;
    std::string format;
    bool list = false;
    bool json = false;
    bool torch_comms = false;
  };
  auto st = std::make_shared<State>();
  add_generator_flags(*cmd, st->flags, false);
  cmd->get_option("--generate")->description("(same as the positional family)");
  cmd->add_option("family", st->flags.family, "schedule family (see --list)");
  cmd->add_option("-o,--output", st->out, "output file (.json or .csv); default: JSON on stdout");
  cmd->add_option("--format", st->format, "json|csv (default: from the output extension, else json)")
      ->check(CLI::IsMember({"json", "csv"}));
  cmd->add_flag("--torch-comms", st->torch_comms,
                "lower the family's compute order as PyTorch's _PipelineScheduleRuntime does: its UNSHARD, "
                "RESHARD, REDUCE_GRAD and its own placement of SEND/RECV (the _comms CSV it writes)");
  cmd->add_flag("--list", st->list, "list the families and their constraints");
  cmd->add_flag("--json", st->json, "with --list: as JSON");
  return [st]() {
    if (st->list) {
      if (st->json) {
        std::cout << "[";
        bool first = true;
        for (const auto& g : generators()) {
          std::cout << (first ? "" : ",") << "\n  {\"name\": \"" << g.name << "\", \"summary\": \"" << g.summary
                    << "\", \"constraints\": \"" << g.constraints << "\"}";
          first = false;
        }
        std::cout << "\n]\n";
      } else {
        for (const auto& g : generators())
          std::cout << g.name << "\n    " << g.summary << "\n    accepts: " << g.constraints << "\n";
      }
      return kOk;
    }
    if (st->flags.family.empty()) throw InputError({}, "name a family (ppsched generate --list shows them)");
    if (st->torch_comms && st->flags.batch)
      throw InputError({}, "--torch-comms places PyTorch's own sends and receives, one action each; --batch cannot be combined with it");
    Schedule s = build_generated(st->flags);
    if (st->torch_comms) s = lower_like_pytorch(s);
    const FileFormat fmt = output_format(st->format, "--format", st->out);
    write_output(st->out, write_schedule(s, fmt));
    if (!st->out.empty() && st->out != "-")
      std::cerr << "wrote " << st->out << ": " << s.ranks << " ranks, " << s.stages << " stages ("
                << to_string(s.placement.kind) << "), " << s.micro_batches << " micro-batches, " << s.step_count()
                << " steps (" << (fmt == FileFormat::Json ? "JSON" : "CSV") << ")\n";
    return kOk;
  };
}

}  // namespace ppsched::cli
