#include "results/run_record.hpp"

namespace ppsched {

const char* to_string(RunSource s) { return s == RunSource::Measured ? "measured" : "simulated"; }

const char* to_string(RunTransport t) {
  switch (t) {
    case RunTransport::Gloo: return "gloo";
    case RunTransport::Nccl: return "nccl";
    case RunTransport::None: break;
  }
  return "";
}

std::optional<RunTransport> transport_from_name(const std::string& name) {
  if (name == "gloo") return RunTransport::Gloo;
  if (name == "nccl") return RunTransport::Nccl;
  if (name.empty()) return RunTransport::None;
  return std::nullopt;
}

RunProvenance provenance_of(const Schedule& s, RunSource source) {
  RunProvenance p;
  p.source = source;
  p.schedule = s.name;
  p.ranks = s.ranks;
  p.stages = s.stages;
  p.micro_batches = s.micro_batches;
  return p;
}

std::string RunProvenance::display_label() const {
  if (!label.empty()) return label;
  std::string l = to_string(source);
  if (transport != RunTransport::None) l += std::string(" (") + to_string(transport) + ")";
  return l;
}

}  // namespace ppsched
