// The cost and memory model (cost_model.hpp): what each step costs. The step table says *what*
// a step costs (its ComputeKind and Payload); this file says *how much*, from the model's values.
// Where the values come from: a cost file (cost_file.cpp), a network and its layout or the
// embedded default (workload_costs.cpp).
#include "sim/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "schedule/errors.hpp"
#include "sim/cost_fields.hpp"

namespace ppsched {

using namespace cost_fields;

// ---- pricing ----------------------------------------------------------------------------------

const std::vector<ComputeKey>& compute_keys() {
  static const std::vector<ComputeKey> keys = [] {
    std::vector<ComputeKey> k;
    for (const auto& f : kComputeFields) k.push_back({f.key, f.kind});
    return k;
  }();
  return keys;
}

const std::vector<StageField>& stage_fields() {
  static const std::vector<StageField> fields = [] {
    std::vector<StageField> out;
    for (const auto& f : kComputeFields) out.push_back({"compute." + std::string(f.key), f.value, false});
    for (const auto& f : kByteFields)
      if (f.per_stage) out.push_back({"bytes." + std::string(f.key), f.per_stage, f.per_stage == &CostModel::param_bytes});
    out.push_back({"moe.expert_param_bytes", &CostModel::expert_param_bytes, true});
    out.push_back({"memory.activation_bytes", &CostModel::kept_activation_bytes, false});
    out.push_back({"memory.weight_grad_bytes", &CostModel::weight_grad_bytes, false});
    out.push_back({"memory.workspace_bytes", &CostModel::workspace_bytes, false});
    out.push_back({"memory.weights_bytes", &CostModel::weights_bytes, true});
    out.push_back({"memory.grads_bytes", &CostModel::grads_bytes, true});
    out.push_back({"memory.optimizer_bytes", &CostModel::optimizer_bytes, true});
    return out;
  }();
  return fields;
}

const StageValue& CostModel::compute(ComputeKind kind) const {
  static const StageValue zero;
  for (const auto& f : kComputeFields)
    if (f.kind == kind) return this->*f.value;
  return zero;
}

StageValue& CostModel::compute(ComputeKind kind) {
  for (const auto& f : kComputeFields)
    if (f.kind == kind) return this->*f.value;
  throw std::logic_error("CostModel::compute: no field prices compute kind " + std::to_string(static_cast<int>(kind)));
}

double CostModel::compute_ms(Op op, int stage, int micro) const {
  return compute(info(op).compute).at(stage, micro);
}

// A body message is indexed by the stage boundary it crosses: the lower of the two stages, so
// that both ends of a transfer price it alike (FWD_SEND at s and FWD_RECV at s+1 both read
// activation[s]). Collectives are priced by their scope.
double CostModel::payload_bytes(Op op, int stage, int micro) const {
  const StepTypeInfo& i = info(op);
  const int boundary = stage < 0 ? 0 : std::min(stage, stage + i.partner_stage_delta);
  for (const auto& f : kByteFields) {
    const bool priced = i.payload != Payload::None ? f.payload == i.payload
                                                   : i.collective != CollectiveScope::None && f.collective == i.collective;
    if (!priced) continue;
    return f.per_stage ? (this->*f.per_stage).at(boundary, micro) : this->*f.scalar;
  }
  return 0.0;
}

// The checkers count one value per stage; a per-micro row counts its largest micro-batch, so
// that a memory verdict is never optimistic.
// The checkers count one value per stage; a per-micro row counts its largest micro-batch, so
// that a memory verdict is never optimistic. A value that is the same for every stage stays
// one number (MemoryModel reads one number as every stage's): memory in proportion to what the
// model gives, not to the stage count.
MemoryModel CostModel::memory_model(int stages) const {
  MemoryModel m;
  const int n = std::max(stages, 1);
  const auto per_stage = [n](const StageValue& v) {
    std::vector<int64_t> out;
    const int count = v.rows.size() > 1 ? n : 1;
    for (int s = 0; s < count; ++s) out.push_back(std::llround(max_over_micros(v, s)));
    return out;
  };
  const auto given = [&](const StageValue& v) { return v.rows.empty() ? std::vector<int64_t>{} : per_stage(v); };
  m.activation_bytes = per_stage(kept_activation_bytes);
  m.boundary_bytes = per_stage(activation_bytes);
  m.features_bytes = std::llround(features_bytes);
  m.tower_input_bytes = std::llround(tower_input_bytes);
  m.tower_graph_bytes = std::llround(tower_graph_bytes);
  m.data_bytes = std::llround(data_bytes);
  m.param_bytes = param_bytes.given ? per_stage(param_bytes) : std::vector<int64_t>{};
  m.weight_grad_bytes = given(weight_grad_bytes);
  m.workspace_bytes = given(workspace_bytes);
  m.weight_bytes = given(weights_bytes);
  m.grad_bytes = given(grads_bytes);
  m.optimizer_bytes = given(optimizer_bytes);
  m.shared_weights = shared_weights;
  m.expert_param_bytes = given(expert_param_bytes);
  m.expert_parallel = moe.ep;
  // FSDP2's per-unit gathers price a schedule without a pipeline only; with several stages
  // PyTorch's pipelining runtime keeps each stage's whole parameters gathered.
  if (stages == 1) m.fsdp_units = fsdp_units;
  return m;
}

int CostModel::stage_count() const {
  size_t n = 1;
  for (const auto& f : stage_fields()) n = std::max(n, (this->*f.value).rows.size());
  return static_cast<int>(n);
}

bool CostModel::varies_by_micro() const {
  for (const auto& f : stage_fields())
    for (const auto& row : (this->*f.value).rows)
      if (row.size() > 1) return true;
  return false;
}

CostModel CostModel::per_copies(int pipes, int model_stages) const {
  CostModel out = *this;
  if (pipes <= 1) return out;
  for (const auto& f : stage_fields()) {
    StageValue& v = out.*f.value;
    if (v.rows.size() <= 1) continue;
    const auto one = v.rows;
    for (int p = 1; p < pipes; ++p) v.rows.insert(v.rows.end(), one.begin(), one.end());
  }
  if (moe.stages.size() > 1) {
    const auto one = moe.stages;
    for (int p = 1; p < pipes; ++p) out.moe.stages.insert(out.moe.stages.end(), one.begin(), one.end());
  }
  // Each copy holds its own shared weights (copy p's stage k is stage p S + k; the copies are
  // replicas, a tensor of one is not the other's).
  if (model_stages <= 0) model_stages = stage_count();
  out.shared_weights.clear();
  for (int p = 0; p < pipes; ++p)
    for (SharedWeights w : shared_weights) {
      for (int& st : w.stages) st += p * model_stages;
      out.shared_weights.push_back(std::move(w));
    }
  return out;
}

void CostModel::check_fits(int stages, int micro_batches) const {
  for (const auto& f : stage_fields()) {
    const StageValue& v = this->*f.value;
    if (!v.given) continue;  // derived values take their shape from given ones
    Location where = in_file(source == "default" || source.rfind("default ", 0) == 0 ? "" : source);
    const size_t rows = v.rows.size();
    if (rows > 1 && rows != static_cast<size_t>(stages)) {
      where.field = f.path;
      throw InputError(where, "has " + std::to_string(rows) + " per-stage values for " + std::to_string(stages) +
                                  " stages (" + (rows < static_cast<size_t>(stages) ? "shorter than" : "longer than") +
                                  " the schedule's stages): give one value per stage, or one number for all "
                                  "(ppsched costs --template --stages " + std::to_string(stages) +
                                  " writes a file for " + std::to_string(stages) + " stages)");
    }
    for (size_t s = 0; micro_batches > 0 && s < rows; ++s) {
      const size_t width = v.rows[s].size();
      if (width > 1 && width != static_cast<size_t>(micro_batches)) {
        where.field = f.path + "[" + std::to_string(s) + "]";
        throw InputError(where, "has " + std::to_string(width) + " per-micro values for " +
                                    std::to_string(micro_batches) +
                                    " micro-batches: give one per micro-batch, or one number for all");
      }
    }
  }
  // Shared weights are on the schedule's stages, and each of those counts them whole.
  for (size_t k = 0; k < shared_weights.size(); ++k) {
    const SharedWeights& w = shared_weights[k];
    Location where = in_file(source == "default" || source.rfind("default ", 0) == 0 ? "" : source);
    where.field = "memory.shared_weights[" + std::to_string(k) + "]";
    for (int st : w.stages) {
      if (st >= stages)
        throw InputError(where, "names stage " + std::to_string(st) + ", but the schedule has " + std::to_string(stages) +
                                    " stages");
      for (auto [key, held, shared] : {std::tuple{"weights_bytes", &weights_bytes, w.bytes.weights},
                                       std::tuple{"grads_bytes", &grads_bytes, w.bytes.grads},
                                       std::tuple{"optimizer_bytes", &optimizer_bytes, w.bytes.optimizer}})
        if (static_cast<double>(shared) > (*held).at(st, 0))
          throw InputError(where, std::string(key) + " " + std::to_string(shared) + " is more than stage " +
                                      std::to_string(st) + " holds (memory." + key + ": " +
                                      std::to_string(static_cast<int64_t>((*held).at(st, 0))) +
                                      "): a stage's bytes count its shared weights whole");
    }
  }
}


bool fsdp2_per_unit(const Schedule& s, const CostModel& c, const DataParallelOptions& dp) {
  if (!dp.fsdp || dp.degree <= 1 || s.stages != 1 || c.fsdp_units.empty() || c.fsdp_layers.empty()) return false;
  for (const auto& program : s.programs)
    for (const auto& slot : program)
      if (slot && info(slot->op).collective == CollectiveScope::DataParallel) return true;
  return false;
}

}  // namespace ppsched
