#include "exec/flag_limits.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "schedule/text_format.hpp"

namespace ppsched::exec {
namespace {

bool parse_real(const std::string& text, double& v) {
  errno = 0;
  char* end = nullptr;
  v = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0';
}

}  // namespace

std::string check_seconds(const std::string& text, double min_s, double max_s) {
  double v = 0;
  const std::string want = "a number of seconds in " + general(min_s) + ".." + general(max_s);
  if (!parse_real(text, v)) return "wants " + want + ", got '" + text + "'";
  if (!std::isfinite(v) || v < min_s || v > max_s) return "'" + text + "' is out of range: it must be " + want;
  return "";
}

std::string check_learning_rate(const std::string& text) {
  double v = 0;
  if (!parse_real(text, v) || !std::isfinite(v) || v < 0)
    return "'" + text + "' is not a learning rate: it must be a finite number >= 0 (0: no SGD step)";
  return "";
}

std::string check_seed(const std::string& text) {
  const std::string want = "an integer in 0..18446744073709551615";
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return "wants " + want + ", got '" + text + "'";
  errno = 0;
  std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE) return "'" + text + "' is out of range: it must be " + want;
  return "";
}

std::string check_count(const std::string& text, long long min_value, long long max_value) {
  const std::string want = "an integer in " + std::to_string(min_value) + ".." + std::to_string(max_value);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0') return "wants " + want + ", got '" + text + "'";
  if (errno == ERANGE || v < min_value || v > max_value) return "'" + text + "' is out of range: it must be " + want;
  return "";
}

std::vector<std::string> check_fault(const FaultInjection& f, const Schedule& s, int iterations, const DeviceMesh& mesh) {
  std::vector<std::string> errors;
  const std::string spec = "--fail-at " + std::to_string(f.rank) + ":" + std::to_string(f.step);
  const int world = mesh.dp > 1 ? mesh.world() : s.ranks;
  if (f.rank < 0 || f.rank >= world) {
    errors.push_back(spec + ": rank " + std::to_string(f.rank) + " is not one of the " +
                     (mesh.dp > 1 ? "job's ranks 0.." : "schedule's ranks 0..") + std::to_string(world - 1));
  } else {
    // With --dp, rank R runs the program of its pipeline rank.
    const int r = mesh.dp > 1 ? mesh.pipeline_rank(f.rank) : f.rank;
    const std::string who = mesh.dp > 1 ? mesh.name(f.rank) : "rank " + std::to_string(f.rank);
    const auto& prog = s.programs[static_cast<size_t>(r)];
    if (f.step < 0 || f.step >= static_cast<int>(prog.size()))
      errors.push_back(spec + ": " + who + "'s program has steps 0.." +
                       std::to_string(static_cast<int>(prog.size()) - 1) + ", not step " + std::to_string(f.step));
    else if (!prog[static_cast<size_t>(f.step)])
      errors.push_back(spec + ": step " + std::to_string(f.step) + " of " + who + " is an idle slot, where no fault can fire");
  }
  if (f.iteration < 0 || f.iteration >= iterations)
    errors.push_back(spec + ": iteration " + std::to_string(f.iteration) + " is not run (--iterations " +
                     std::to_string(iterations) + ": iterations 0.." + std::to_string(iterations - 1) + ")");
  return errors;
}

}  // namespace ppsched::exec
