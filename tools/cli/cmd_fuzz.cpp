// `ppsched fuzz`: runs the fuzzing properties against the installed generators and checkers
// (or mutates the user's own schedules with --mutate), shrinks any failure to a minimal case,
// writes it to --out with the command that reproduces it, and exits 1.
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>

#include "checkers/checks.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/formats/schedule_json.hpp"
#include "schedule/text_format.hpp"
#include "tools/cli/command.hpp"
#include "tools/fuzz/properties.hpp"

namespace ppsched::cli {

// Each case generates and checks schedules of up to --pp-max ranks; beyond this a case is
// no longer a quick property check.
constexpr int kMaxFuzzPipeline = 64;
namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  fuzz::Distribution reached;
  double seconds = 0;
};

nlohmann::json mix_json(const fuzz::Distribution::Mix& m) {
  return {{"kept", m.kept}, {"discarded", m.discarded}, {"judged_alone", m.judged_alone}, {"verdicts", m.verdicts}};
}

std::string mix_text(const std::map<std::string, size_t>& verdicts) {
  std::string out;
  for (const auto& [name, n] : verdicts) out += (out.empty() ? "" : ", ") + name + " " + std::to_string(n);
  return out;
}

// --mutate: which authoring mistakes would the checks catch in this schedule?
int mutate_files(const std::vector<std::string>& files, uint64_t seed, size_t per_kind, bool json) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : files) {
    Schedule base = read_schedule_file(f);
    std::mt19937_64 rng(seed);
    nlohmann::json rows = nlohmann::json::array();
    if (!json) std::cout << f << ": which mutations the checks catch (" << per_kind << " tries per class)\n";
    for (int k = 0; k < kMutationKinds; ++k) {
      size_t applied = 0, caught = 0, still_valid = 0;
      std::map<std::string, size_t> by_kind;
      for (size_t t = 0; t < per_kind; ++t) {
        Schedule s = base;
        Mutation m{static_cast<MutationKind>(k), static_cast<int>(rng() % 1024), static_cast<int>(rng() % 65536),
                   static_cast<int>(rng() % 64)};
        if (!apply_mutation(s, m).applied) continue;
        ++applied;
        CheckReport r = verify(s);
        if (r.ok()) {
          ++still_valid;
          continue;
        }
        ++caught;
        for (const auto& v : r.violations) by_kind[std::string(to_string(v.kind))]++;
      }
      std::string kinds;
      for (auto& [name, n] : by_kind) kinds += (kinds.empty() ? "" : ", ") + name + " " + std::to_string(n);
      rows.push_back({{"mutation", std::string(to_string(static_cast<MutationKind>(k)))},
                      {"applied", applied},
                      {"caught", caught},
                      {"still_valid", still_valid},
                      {"kinds", by_kind}});
      if (!json) {
        std::string line = format_text("  %-24s applied %4zu  caught %4zu  still valid %4zu  %s\n",
                      std::string(to_string(static_cast<MutationKind>(k))).c_str(), applied, caught, still_valid,
                      kinds.c_str());
        std::cout << line;
      }
    }
    out.push_back({{"file", f}, {"mutations", rows}});
  }
  if (json) std::cout << out.dump(2) << "\n";
  return kOk;
}

// What `ppsched fuzz` was asked, as its flags say.
struct FuzzFlags {
  double seconds = 0;
  long long cases = 0;  // 0: not given
  uint64_t seed = 0;
  bool seed_given = false;
  fuzz::Limits limits;
  std::string out = "fuzz-out", property, one_case;
  std::vector<std::string> mutate;
  bool json = false, planted = false, planted_lowering = false;
};

CLI::App* declare_fuzz_flags(CLI::App& app, FuzzFlags& f) {
  auto* cmd = app.add_subcommand("fuzz", "property-based fuzzing of generators, checkers and simulator (with shrinking)");
  cmd->add_option("--seconds", f.seconds, "run for N seconds (default: 20 unless --cases; at most a week)")
      ->check(number_in(0, 604800));
  cmd->add_option("--cases", f.cases, "run N cases per property (1 to 10^9)")->check(whole_in(1, 1000000000));
  cmd->add_option("--seed", f.seed, "random seed (printed when not given)")->check(seed_value())->each([&f](const std::string&) { f.seed_given = true; });
  cmd->add_option("--family", f.limits.family, "only this schedule family");
  cmd->add_option("--pp-max", f.limits.pp_max, "largest pipeline size (default 6)")->check(whole_in(1, kMaxFuzzPipeline));
  cmd->add_option("--property", f.property, "only this property: generated-clean, verdicts-agree, mutations-reported, round-trips, lowering-matches-reference");
  cmd->add_option("--out", f.out, "where a failing case is written (default fuzz-out)");
  cmd->add_option("--case", f.one_case, "rerun one encoded case (as printed on a failure)");
  cmd->add_option("--mutate", f.mutate, "mutate these schedule files and report which mistakes the checks catch");
  cmd->add_flag("--json", f.json, "machine-readable summary");
  cmd->add_flag("--testing-planted-bug", f.planted, "TEST-ONLY: run the checker with one rule disabled")->group("");
  cmd->add_flag("--testing-planted-lowering-bug", f.planted_lowering, "TEST-ONLY: the lowering puts a meta after its payload")->group("");
  return cmd;
}

// `fuzz --case`: one encoded case rerun under each property.
int rerun_case(const FuzzFlags& f, const std::vector<fuzz::Property>& props, const fuzz::Switches& sw) {
  fuzz::Case c = fuzz::decode(f.one_case);
  int status = kOk;
  for (auto p : props) {
    fuzz::Verdict v = fuzz::check(p, c, sw);
    std::cout << fuzz::to_string(p) << ": " << (v.discarded ? "not applicable" : v.failure ? "FAILS: " + *v.failure : "holds") << "\n";
    if (v.failure) status = kFound;
}
return status;
}

// A property failed on case `c`: shrinks it, writes the minimal schedule and how to reproduce it
// under --out, and reports it.
int report_failure(const FuzzFlags& f, fuzz::Property p, const fuzz::Case& c, const fuzz::Switches& sw, bool tty) {
  if (tty) std::cerr << "\n";
  std::cerr << "ppsched fuzz: property " << fuzz::to_string(p) << " failed; shrinking...\n";
  int steps = 0;
  fuzz::Case small = fuzz::shrink(p, c, sw, &steps);
  fuzz::Verdict sv = fuzz::check(p, small, sw);
  std::vector<std::string> applied;
  Schedule s = fuzz::build(small, &applied);
  std::string dir = f.out;
  if (const std::string why = make_folder(dir); !why.empty())
    throw InputError(in_file(dir), "cannot create the output folder: " + why);
  write_output(dir + "/minimal.json", write_schedule_json(s));
  std::string repro = "ppsched fuzz --property " + std::string(fuzz::to_string(p)) + " --case '" + fuzz::encode(small) + "'" +
                      (f.planted ? " --testing-planted-bug" : "") +
                      (f.planted_lowering ? " --testing-planted-lowering-bug" : "");
  write_output(dir + "/reproduce.sh", "#!/bin/sh\n# " + sv.failure.value_or("") + "\n" + repro + "\nppsched check " + dir + "/minimal.json\n");
  if (f.json) {
    nlohmann::json j{{"ok", false},
                     {"property", std::string(fuzz::to_string(p))},
                     {"failure", sv.failure.value_or("")},
                     {"case", fuzz::encode(small)},
                     {"original_case", fuzz::encode(c)},
                     {"shrink_steps", steps},
                     {"steps", s.step_count()},
                     {"mutations", applied},
                     {"seed", f.seed},
                     {"minimal", dir + "/minimal.json"}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "FAILED property " << fuzz::to_string(p) << " (seed " << f.seed << ")\n"
              << "  " << sv.failure.value_or("") << "\n"
              << "  minimal case (" << steps << " shrink steps, " << s.step_count() << " steps): " << fuzz::encode(small) << "\n";
    for (const auto& a : applied) std::cout << "    " << a << "\n";
    std::cout << "  written: " << dir << "/minimal.json, " << dir << "/reproduce.sh\n  reproduce: " << repro << "\n";
}
return kFound;
}

// The progress line: a bar on a terminal, a line every 5 s otherwise.
void print_progress(const FuzzFlags& f, const std::vector<Stats>& stats, size_t round, double t, double budget, bool tty) {
  size_t total = 0;
  for (auto& x : stats) total += x.reached.cases;
  if (tty) {
    int width = 30, done = f.cases ? int(width * double(round) / double(f.cases)) : int(width * std::min(1.0, t / budget));
    std::fprintf(stderr, "\r[%s%s] %zu cases, %.0f cases/s", std::string(static_cast<size_t>(done), '#').c_str(),
                 std::string(static_cast<size_t>(width - done), '.').c_str(), total, total / std::max(t, 1e-9));
  } else {
    std::fprintf(stderr, "ppsched fuzz: %.0f s, %zu cases, %.0f cases/s\n", t, total, total / std::max(t, 1e-9));
}
}

// Per property: cases, discards, rates and verdict mixes (by mutation too); printed unless --json.
nlohmann::json property_summary(const FuzzFlags& f, const std::vector<fuzz::Property>& props, const std::vector<Stats>& stats) {
  nlohmann::json summary = nlohmann::json::array();
  for (size_t k = 0; k < props.size(); ++k) {
    const auto& x = stats[k];
    const auto& d = x.reached;
    const double rate = x.seconds > 0 ? double(d.cases) / x.seconds : 0.0;
    nlohmann::json by_mutation = nlohmann::json::object();
    for (const auto& [name, mix] : d.by_mutation) by_mutation[name] = mix_json(mix);
    nlohmann::json row{{"property", std::string(fuzz::to_string(props[k]))},
                       {"cases", d.cases},
                       {"kept", d.kept()},
                       {"discarded", d.discarded},
                       {"discard_rate", d.discard_rate()},
                       {"multi_rank_share", d.share(d.multi_rank)},
                       {"deadlock_share", d.share(d.deadlocks)},
                       {"verdicts", d.all.verdicts},
                       {"seconds", x.seconds},
                       {"cases_per_second", rate}};
    if (!d.by_mutation.empty()) row["by_mutation"] = by_mutation;
    summary.push_back(row);
    if (!f.json) {
      std::cout << format_text(
                    "  %-27s %7zu cases (%.1f%% not applicable)  %6.0f cases/s  multi-rank %.1f%%  deadlock %.1f%%  [%s]\n",
                    std::string(fuzz::to_string(props[k])).c_str(), d.cases, 100 * d.discard_rate(), rate,
                    100 * d.share(d.multi_rank), 100 * d.share(d.deadlocks), mix_text(d.all.verdicts).c_str());
      for (const auto& [name, mix] : d.by_mutation) {
        std::cout << format_text("      %-24s kept %6zu  discarded %5zu  judged alone %5zu  [%s]\n", name.c_str(),
                                 mix.kept, mix.discarded, mix.judged_alone, mix_text(mix.verdicts).c_str());
      }
    }
}
  return summary;
}

}  // namespace

Action add_fuzz(CLI::App& app) {
  auto st = std::make_shared<FuzzFlags>();
  declare_fuzz_flags(app, *st);
  return [st]() {
    if (!st->seed_given) st->seed = std::random_device{}();
    if (!st->mutate.empty()) return mutate_files(st->mutate, st->seed, st->cases ? st->cases : 50, st->json);
    if (!st->limits.family.empty() && !find_generator(st->limits.family))
      throw InputError({}, "--family: unknown family '" + st->limits.family + "' (ppsched generate --list)");
    std::vector<fuzz::Property> props;
    if (st->property.empty()) {
      for (int k = 0; k < fuzz::kProperties; ++k) props.push_back(static_cast<fuzz::Property>(k));
    } else if (auto p = fuzz::property_from_name(st->property)) {
      props.push_back(*p);
    } else {
      throw InputError({}, "--property: unknown property '" + st->property + "'");
    }
    fuzz::Switches sw;
    sw.planted_bug = st->planted;
    sw.planted_lowering_bug = st->planted_lowering;
    if (!st->one_case.empty()) return rerun_case(*st, props, sw);
    const double budget = st->cases ? 1e18 : (st->seconds > 0 ? st->seconds : 20.0);
    const bool tty = isatty(STDERR_FILENO);
    std::mt19937_64 rng(st->seed);
    std::vector<Stats> stats(props.size());
    const auto t0 = Clock::now();
    auto last_report = t0;
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    size_t round = 0;
    if (!st->json) std::cerr << "ppsched fuzz: seed " << st->seed << (st->cases ? "" : ", " + std::to_string(int(budget)) + " s") << "\n";
    while (st->cases ? round < static_cast<size_t>(st->cases) : elapsed() < budget) {
      for (size_t k = 0; k < props.size(); ++k) {
        const auto p0 = Clock::now();
        fuzz::Case c = fuzz::random_case(props[k], rng, st->limits);
        fuzz::Verdict v = fuzz::check(props[k], c, sw);
        stats[k].seconds += std::chrono::duration<double>(Clock::now() - p0).count();
        stats[k].reached.add(props[k], v);
        if (v.failure) return report_failure(*st, props[k], c, sw, tty);
      }
      ++round;
      const auto now = Clock::now();
      if (!st->json && std::chrono::duration<double>(now - last_report).count() >= (tty ? 0.2 : 5.0)) {
        last_report = now;
        print_progress(*st, stats, round, elapsed(), budget, tty);
      }
    }
    if (tty && !st->json) std::cerr << "\n";
    const nlohmann::json summary = property_summary(*st, props, stats);
    if (st->json) std::cout << nlohmann::json{{"ok", true}, {"seed", st->seed}, {"seconds", elapsed()}, {"properties", summary}}.dump(2) << "\n";
    else std::cout << "ppsched fuzz: all properties held (seed " << st->seed << ", " << int(elapsed()) << " s)\n";
    return kOk;
  };
}

}  // namespace ppsched::cli
