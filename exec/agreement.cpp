#include "exec/agreement.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "schedule/errors.hpp"

namespace ppsched::exec {
namespace {

std::string where(int rank, int index, const Step& st) {
  return "rank " + std::to_string(rank) + " step " + std::to_string(index) + " (" + short_label(st) + ")";
}

// Calls f(rank, index, leaf) for every leaf step (composites expanded).
template <class F>
void for_each_leaf(const Schedule& s, F&& f) {
  for (int r = 0; r < static_cast<int>(s.programs.size()); ++r) {
    const auto& prog = s.programs[static_cast<size_t>(r)];
    for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
      if (!prog[static_cast<size_t>(i)]) continue;
      const Step& st = *prog[static_cast<size_t>(i)];
      f(r, i, st);
      for (const auto& sub : st.sub_steps()) f(r, i, sub);
    }
  }
}

void check_tower(const Schedule& s, ModelConfig& m, std::vector<std::string>& errors) {
  // Which MPipe steps run a tower, and where the first one is (for the message).
  std::string first_tower_step;
  for_each_leaf(s, [&](int r, int i, const Step& st) {
    if (first_tower_step.empty() && info(st.op).mpipe) first_tower_step = where(r, i, st);
  });
  const Tower sched_tower = s.mpipe ? s.mpipe->tower : Tower::None;
  if (!first_tower_step.empty() && !s.mpipe)
    errors.push_back("the schedule uses MPIPE_* steps (" + first_tower_step + ") but declares no \"mpipe\" layer");
  if (m.tower && s.mpipe && *m.tower != sched_tower)
    errors.push_back("--tower " + std::string(to_string(*m.tower)) + " disagrees with the schedule, whose MPipe tower is " +
                     std::string(to_string(sched_tower)));
  if (m.tower && !s.mpipe && *m.tower != Tower::None)
    errors.push_back("--tower " + std::string(to_string(*m.tower)) +
                     " asks for an MPipe tower but the schedule has no MPipe layer (generate mpipe-transpose)");
  if (!m.tower) m.tower = sched_tower;
  if (m.tower_layers < 0) m.tower_layers = sched_tower == Tower::None || m.kind == ModelKind::StageModules ? 0 : 1;
  if (sched_tower != Tower::None && m.tower_layers == 0 && m.kind != ModelKind::StageModules)
    errors.push_back("the schedule runs a " + std::string(to_string(sched_tower)) + " MPipe tower (" + first_tower_step +
                     ") but the model has none: give --tower-layers T > 0");
  if (sched_tower == Tower::None && m.tower_layers > 0)
    errors.push_back("--tower-layers " + std::to_string(m.tower_layers) + " builds an MPipe tower, but the schedule " +
                     (s.mpipe ? "declares tower \"none\" (data only)" : "has no MPipe layer") +
                     ": no step would run it");
}

void check_tied(const Schedule& s, const ModelConfig& m, std::vector<std::string>& errors) {
  std::map<int, std::pair<int, std::vector<int32_t>>> reduce_on_rank;  // rank -> (index, group)
  std::string first_reduce;
  for_each_leaf(s, [&](int r, int i, const Step& st) {
    if (info(st.op).collective_bytes != CollectiveBytes::TiedParams) return;
    if (first_reduce.empty()) first_reduce = where(r, i, st);
    if (!reduce_on_rank.count(r)) reduce_on_rank[r] = {i, st.group()};
  });
  if (!m.tie_embeddings) {
    if (!first_reduce.empty())
      errors.push_back("the schedule all-reduces tied parameters (ALL_REDUCE at " + first_reduce +
                       ") but the model ties none: add --tie-embeddings (gpt)");
    return;
  }
  if (m.kind != ModelKind::Gpt) errors.push_back("--tie-embeddings needs --model gpt");
  if (m.tower_layers > 0) errors.push_back("--tie-embeddings cannot be combined with an MPipe tower (the embedding would be in the tower)");
  const int first = s.rank_of(0), last = s.rank_of(s.stages - 1);
  if (first == last) return;  // one rank holds both ends: the head uses the embedding tensor itself
  for (int r : {first, last}) {
    auto it = reduce_on_rank.find(r);
    bool covers = it != reduce_on_rank.end() &&
                  std::count(it->second.second.begin(), it->second.second.end(), first) &&
                  std::count(it->second.second.begin(), it->second.second.end(), last);
    if (!covers)
      errors.push_back("the model ties the embedding of stage 0 (rank " + std::to_string(first) +
                       ") to the LM head of stage " + std::to_string(s.stages - 1) + " (rank " + std::to_string(last) +
                       ") but rank " + std::to_string(r) + " has no ALL_REDUCE over a group containing both");
  }
}

// Data parallelism: what the executor needs beyond the schedule's own rules (the checker's
// data_parallel pass, which ppsched-exec runs under the same --dp options, places the FSDP
// steps: a stage computing on sharded parameters, a missing or early REDUCE_GRAD, a trainable
// tower's gradients).
void check_data_parallel(const Schedule& s, const ModelConfig& m, const DataParallelOptions& dp,
                         std::vector<std::string>& errors) {
  if (dp.fsdp && m.tie_embeddings)
    errors.push_back("--fsdp cannot shard tied parameters (--tie-embeddings): the tied weight belongs to two stages");
  if (dp.degree <= 1) return;
  // The checker only notes a schedule without FSDP steps (its author may reduce outside it);
  // the executor adds no communication the schedule does not list, so the replicas would diverge.
  bool any = false;
  for_each_leaf(s, [&](int, int, const Step& st) { any = any || info(st.op).collective == CollectiveScope::DataParallel; });
  if (!any)
    errors.push_back("--dp " + std::to_string(dp.degree) + ": the schedule has no FSDP_* steps, so nothing would average "
                     "the gradients over the data-parallel groups and the replicas would diverge; the executor adds "
                     "no communication a schedule file does not list: ppsched convert --fsdp-steps inserts PyTorch's "
                     "FSDP steps (FSDP_REDUCE_GRAD right after each stage's last BWD / BWD_WEIGHT, and the tower's), "
                     "--generate FAMILY with --dp N adds them itself, or run a lowered PyTorch CSV");
}

// --model moe (exec/expert_link.hpp): experts over the data-parallel group.
void check_moe(const Schedule& s, const ModelConfig& m, const DataParallelOptions& dp, std::vector<std::string>& errors) {
  if (m.experts <= 0) return;
  if (m.topk < 1 || m.topk > m.experts)
    errors.push_back("--topk " + std::to_string(m.topk) + " must be between 1 and --experts " + std::to_string(m.experts));
  if (m.ep != dp.degree)
    errors.push_back("--ep " + std::to_string(m.ep) + " must equal --dp " + std::to_string(dp.degree) +
                     ": the experts are split over the data-parallel group (Megatron's EP = DP); EP < DP is not supported");
  if (m.ep > m.experts)
    errors.push_back("--ep " + std::to_string(m.ep) + " is more than --experts " + std::to_string(m.experts) +
                     ": a member would hold no expert");
  if (dp.fsdp) errors.push_back("--fsdp with --model moe: the experts are split over the group already, not sharded");
  if (m.tower_layers > 0 || s.mpipe) errors.push_back("--model moe with an MPipe tower is not supported");
  if (m.tie_embeddings) errors.push_back("--tie-embeddings with --model moe is not supported");
  if (s.pipes > 1) errors.push_back("--model moe with replicated stages is not supported");
}

}  // namespace

Agreement check_agreement(const Schedule& s, int world_size, ModelConfig& m,
                          const std::function<bool(Op)>& has_handler, const DataParallelOptions& dp) {
  Agreement a;
  auto& errors = a.errors;
  if (const std::string e = mesh_mismatch(dp.mesh(s.ranks), world_size); !e.empty()) errors.push_back(e);
  check_data_parallel(s, m, dp, errors);
  check_moe(s, m, dp, errors);
  // Replicated stages: the model is cut into the schedule's model stages, each built once per copy.
  const int model_stages = s.model_stages();
  const int stages = m.stages.value_or(model_stages);
  if (stages != model_stages)
    errors.push_back("the model is cut into " + std::to_string(stages) + " virtual stages (--model-stages) but the schedule has " +
                     std::to_string(model_stages) + (s.pipes > 1 ? " (model stages, each in " + std::to_string(s.pipes) + " copies)" : ""));
  if (s.pipes > 1 && m.tie_embeddings)
    errors.push_back("--tie-embeddings with replicated stages (" + std::to_string(s.pipes) +
                     " copies of the pipeline): each copy would need its own ALL_REDUCE of the tied weight");
  if (s.pipes > 1 && dp.fsdp)
    errors.push_back("--fsdp with replicated stages (" + std::to_string(s.pipes) +
                     " copies of the pipeline): the copies' REPLICA_GRAD_SYNC needs the full gradients");
  if (m.micro_batch_size < 1) errors.push_back("--micro-batch-size must be >= 1");
  if (m.global_batch_size && *m.global_batch_size != s.micro_batches * m.micro_batch_size)
    errors.push_back("--global-batch-size " + std::to_string(*m.global_batch_size) + " is not the schedule's " +
                     std::to_string(s.micro_batches) + " micro-batches x --micro-batch-size " +
                     std::to_string(m.micro_batch_size) + " = " + std::to_string(s.micro_batches * m.micro_batch_size));
  if (m.kind == ModelKind::StageModules) {
    const StageModules& sm = *m.stage_modules;
    if (sm.stages != model_stages)
      errors.push_back(sm.dir + "/stages.json declares " + std::to_string(sm.stages) +
                       " stage modules but the schedule has " + std::to_string(model_stages) +
                       " virtual stages: export one module per virtual stage");
    if (m.tie_embeddings) errors.push_back("--tie-embeddings needs --model gpt, not --stage-module");
    if (s.mpipe && s.mpipe->tower != Tower::None)
      errors.push_back("--stage-module: the schedule runs a " + std::string(to_string(s.mpipe->tower)) +
                       " MPipe tower, which cannot be cut out of TorchScript stages; generate mpipe-transpose with "
                       "--tower none (data only)");
  }
  if (m.hidden < 1 || m.layers < 0) errors.push_back("--hidden and --layers must be >= 1");
  if (m.kind == ModelKind::Gpt) {
    if (m.heads < 1 || m.hidden % m.heads != 0)
      errors.push_back("--hidden " + std::to_string(m.hidden) + " is not divisible by --heads " + std::to_string(m.heads));
    if (m.seq < 1 || m.vocab < 2) errors.push_back("--seq must be >= 1 and --vocab >= 2");
  }

  std::set<Op> missing;
  for_each_leaf(s, [&](int r, int i, const Step& st) {
    if (is_composite(st.op) || has_handler(st.op)) return;
    if (missing.insert(st.op).second)
      errors.push_back("the executor has no handler for " + std::string(op_name(st.op)) + " (first at " + where(r, i, st) + ")");
  });
  // The built-in models ship one tensor per transfer (activation, gradient, data, features,
  // tower input); a step that declares its tensors must agree, or the channel would drift.
  bool reported_tensors = false;
  for_each_leaf(s, [&](int r, int i, const Step& st) {
    if (reported_tensors || !is_p2p(st.op) || st.tensors().size() <= 1) return;
    reported_tensors = true;
    errors.push_back(where(r, i, st) + " declares " + std::to_string(st.tensors().size()) +
                     " tensors but the model ships one per transfer");
  });

  check_tower(s, m, errors);
  check_tied(s, m, errors);
  if (m.kind == ModelKind::StageModules && m.stage_modules->stages != model_stages) return a;  // nothing to cut
  // Without --layers: one block per virtual stage (at least 4), resolved here so that the
  // ranks, the layout and the parity reference all build the same model.
  // With --layout and no --layers, the layout's blocks are the model's.
  if (m.layers == 0 && m.kind != ModelKind::StageModules && m.layout.empty())
    m.layers = default_layers(m.kind, model_stages, std::max(0, m.tower_layers));
  try {
    a.layout = make_layout(m, model_stages, std::max(0, m.tower_layers));
  } catch (const InputError& e) {
    errors.push_back(e.message());
  }
  return a;
}

std::vector<std::string> unsupported_modes(const CheckOptions& mode, bool completes_under_rendezvous) {
  std::vector<std::string> out;
  if (mode.comm == CommMode::Eager && !completes_under_rendezvous)
    out.push_back("--comm eager: the schedule completes only with buffered sends, and the Gloo and NCCL transports "
                  "block a send until its receive is posted (rendezvous): it would hang");
  return out;
}

}  // namespace ppsched::exec
