// Does the model fit the schedule? Checked on every rank before any communication, so a
// mismatch is a clear error everywhere (exit 2) instead of a hang or a shape error mid-run.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "exec/config.hpp"
#include "exec/model_layout.hpp"
#include "schedule/schedule.hpp"

namespace ppsched::exec {

struct Agreement {
  std::vector<std::string> errors;  // every mismatch found, one sentence each
  ModelLayout layout;               // valid when errors is empty
  bool ok() const { return errors.empty(); }
};

// Resolves the model's defaults from the schedule (tower mode, tower layers, stages) in
// `model`, then checks: world size == ranks, model stages == schedule stages, global batch ==
// micro-batches x micro-batch size, a tower exactly when MPIPE_* steps run one (trainable /
// frozen as the schedule says), the model can be cut, tied parameters have their ALL_REDUCE
// (and an ALL_REDUCE has tied parameters), every step type has an executor handler, and steps
// that declare their tensors carry as many as the model ships.
//
// With data parallelism (`dp`): WORLD_SIZE == ranks x dp; at dp > 1 every stage must carry an
// FSDP_REDUCE_GRAD after its last backward (otherwise its replicas' gradients would silently
// diverge: the executor adds no communication the schedule does not list), and with --fsdp
// every compute step of a stage must find its parameters gathered (an FSDP_UNSHARD before it,
// no FSDP_RESHARD in between).
Agreement check_agreement(const Schedule& s, int world_size, ModelConfig& model,
                          const std::function<bool(Op)>& has_handler, const DataParallelOptions& dp = {});

// The runtime modes (ppsched check's flags) this executor cannot run, one sentence each naming
// the flag; empty when it runs `mode`. Its transports block a send until the receive is posted
// (rendezvous): --comm eager runs only a schedule that also completes under rendezvous
// (`completes_under_rendezvous`, the verifier's replay). --dyn-shape, --overlap-p2p and
// --mpipe-batched-recv run (the last two need a transport with non-blocking P2P: Gloo; the run
// refuses them with one without, before any communication).
std::vector<std::string> unsupported_modes(const CheckOptions& mode, bool completes_under_rendezvous);

}  // namespace ppsched::exec
