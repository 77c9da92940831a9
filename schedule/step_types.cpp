#include "schedule/step_types.hpp"

#include <unordered_map>

namespace ppsched {
namespace {

using E = Effect;
using C = Cache;

std::array<CacheInfo, kCacheCount> make_caches() {
  return {{
      {C::fwd_cache, "fwd_cache", true, MemoryClass::Activation, "autograd graph and outputs kept from FWD to its backward"},
      {C::fwd_outputs_cache, "fwd_outputs_cache", true, MemoryClass::Buffer, "stage output waiting to be sent or handed to the next local stage"},
      {C::bwd_cache, "bwd_cache", true, MemoryClass::Buffer, "input gradients waiting to be sent or handed to the previous local stage"},
      {C::dw_cache, "_dw_cache", true, MemoryClass::Activation, "state BWD_INPUT keeps for BWD_WEIGHT"},
      {C::fwd_recv_buffer, "fwd_recv_buffer", true, MemoryClass::Buffer, "received activation waiting for its FWD"},
      {C::bwd_recv_buffer, "bwd_recv_buffer", true, MemoryClass::Buffer, "received gradient waiting for its backward"},
      {C::swap_offloading, "swap_offloading", true, MemoryClass::Activation, "activation offload launched, not waited"},
      {C::swap_on_host, "swap_on_host", true, MemoryClass::Activation, "activation offloaded to host memory"},
      {C::swap_loading, "swap_loading", true, MemoryClass::Activation, "activation reload launched, not waited"},
      {C::data_batch, "data_batch", false, MemoryClass::Buffer, "a micro-batch's inputs and labels, loaded or received"},
      {C::tower_features, "tower_features", false, MemoryClass::Buffer, "tower output placed as stage 0's input (ctx.arg_mbs[m])"},
      {C::inputs_for_explicit_forward, "_inputs_for_explicit_forward", false, MemoryClass::Activation, "tower input kept for the stage-0 recompute"},
      {C::outputs_for_stage0, "_outputs_for_stage0", false, MemoryClass::Buffer, "tower output on an owner, waiting for MPIPE_FWD_SEND"},
      {C::keep_grad, "_keep_grad", false, MemoryClass::Activation, "placed features on rank 0 whose gradients the tower backward needs"},
      {C::outputs_for_bwd, "_outputs_for_bwd", false, MemoryClass::Activation, "graph-connected tower output on an owner (owner_backward)"},
      {C::feature_grads, "feature_grads", false, MemoryClass::Buffer, "gradients the body backward left on rank 0's placed features"},
  }};
}

StepTypeInfo row(Op op, std::string_view name, std::string_view short_name,
                 std::string_view torch_token, StepKind kind, Field micro, Field stage,
                 std::string_view summary) {
  StepTypeInfo i{};
  i.op = op;
  i.name = name;
  i.short_name = short_name;
  i.torch_token = torch_token;
  i.kind = kind;
  i.micro = micro;
  i.stage = stage;
  i.runs_on = RunsOn::StageRank;
  i.peer = PeerRule::None;
  i.partner = op;
  i.partner_stage_delta = 0;
  i.payload = Payload::None;
  i.meta = Meta::None;
  i.collective = CollectiveScope::None;
  i.collective_kind = CollectiveKind::None;
  i.collective_bytes = CollectiveBytes::None;
  i.compute = ComputeKind::None;
  i.composite = CompositeKind::None;
  i.forward_first = false;
  i.hands_over = std::nullopt;
  i.input_recv = std::nullopt;
  i.posting = Posting::Blocking;
  i.mpipe = false;
  i.summary = summary;
  return i;
}

StepTypeInfo& p2p(StepTypeInfo& i, PeerRule peer, Op partner, int delta, Payload payload, Meta meta) {
  i.peer = peer;
  i.partner = partner;
  i.partner_stage_delta = delta;
  i.payload = payload;
  i.meta = meta;
  return i;
}

using Table = std::array<StepTypeInfo, kOpCount>;

// Puts row `i` in its op's slot; returns the slot, to fill in the columns row() does not take.
StepTypeInfo& put(Table& t, StepTypeInfo i) {
  auto& slot = t[static_cast<int>(i.op)];
  slot = std::move(i);
  return slot;
}

void compute_rows(Table& t) {
  using K = StepKind;
  using F = Field;
  auto add = [&t](StepTypeInfo i) -> StepTypeInfo& { return put(t, std::move(i)); };
  // ---- compute ---------------------------------------------------------------------------
  // A forward takes its input from the previous stage (a receive buffer, or the previous
  // local stage's output under V placement; reference §4) and keeps its graph for backward.
  auto& fwd = add(row(Op::FWD, "FWD", "F", "F", K::Compute, F::Required, F::Required,
                      "forward of one micro-batch through one stage"));
  fwd.compute = ComputeKind::Forward;
  fwd.hands_over = Op::FWD_SEND;
  fwd.input_recv = Op::FWD_RECV;
  // The micro-batch's data: without body data steps MPipe's stage 0 eats what the prefix
  // loaded or received (other schedules read their inputs and labels from the data set). With
  // them (hyper-parallel's add_send_recv, DATA_SEND/DATA_RECV beside every cross-rank forward)
  // the data is kept on each rank until it is sent on; the last stage's labels use it up.
  fwd.effects = {{C::fwd_recv_buffer, E::Consume, PrevStageRemote},
                 {C::fwd_outputs_cache, E::Consume, PrevStageLocal, -1},
                 {C::data_batch, E::Consume, FirstStage | MPipe | NoDataSteps},
                 {C::data_batch, E::Read, DataSteps | NotLastStage},
                 {C::data_batch, E::Consume, DataSteps | LastStage},
                 {C::tower_features, E::Consume, FirstStage | TowerPresent},
                 {C::fwd_cache, E::Produce},
                 {C::fwd_outputs_cache, E::Produce, NotLastStage}};

  // Backward seeds from the next stage's gradient (received, or handed over locally).
  const std::vector<CacheEffect> backward_inputs = {
      {C::fwd_cache, E::Consume},
      {C::bwd_recv_buffer, E::Consume, NextStageRemote},
      {C::bwd_cache, E::Consume, NextStageLocal, +1},
      {C::bwd_cache, E::Produce, NotFirstStage},
      {C::feature_grads, E::Produce, FirstStage | OnRank0 | Stage0Backward},
      {C::feature_grads, E::Produce, FirstStage | OnRank0 | OwnerBackward | OwnerNotRank0}};
  auto& bwd = add(row(Op::BWD, "BWD", "B", "B", K::Compute, F::Required, F::Required,
                      "full backward (input and weight gradients) of one micro-batch"));
  bwd.compute = ComputeKind::Backward;
  bwd.hands_over = Op::BWD_SEND;
  bwd.input_recv = Op::BWD_RECV;
  bwd.effects = backward_inputs;

  auto& bwd_in = add(row(Op::BWD_INPUT, "BWD_INPUT", "Bi", "I", K::Compute, F::Required, F::Required,
                         "input-gradient half of a split backward; keeps state for BWD_WEIGHT"));
  bwd_in.compute = ComputeKind::BackwardInput;
  bwd_in.hands_over = Op::BWD_SEND;
  bwd_in.input_recv = Op::BWD_RECV;
  bwd_in.effects = backward_inputs;
  bwd_in.effects.push_back({C::dw_cache, E::Produce});

  auto& bwd_w = add(row(Op::BWD_WEIGHT, "BWD_WEIGHT", "Bw", "W", K::Compute, F::Required, F::Required,
                        "weight-gradient half of a split backward"));
  bwd_w.compute = ComputeKind::BackwardWeight;
  bwd_w.effects = {{C::dw_cache, E::Consume}};

  // The phases of one MoE layer (Megatron-Core's combined 1F1B phase table, NVIDIA/Megatron-LM
  // #2719): a forward's attention, dispatch, experts and combine; a backward's mirror, the
  // combine's gradient first; a split backward's weight half computes only (no all-to-all).
  using W = PhaseWork;
  constexpr Stream Cs = Stream::Compute, Ms = Stream::Comm;
  fwd.moe_phases = {{W::Attention, Cs, "attn_fwd"}, {W::Dispatch, Ms, "dispatch_fwd"}, {W::Experts, Cs, "mlp_fwd"},
                    {W::Combine, Ms, "combine_fwd"}};
  // Under --delay-wgrad-compute a backward's mlp_bwd and attn_bwd compute the input gradients
  // only, each followed, beside the chain, by its weight gradients (Megatron's "mlp wgrad" and
  // "pre_dispatch_computation wgrad", run by the layer's backward after its dgrad).
  bwd.moe_phases = {{W::Combine, Ms, "combine_bwd"}, {W::Experts, Cs, "mlp_bwd"}, {W::Dispatch, Ms, "dispatch_bwd"},
                    {W::Attention, Cs, "attn_bwd"}, {W::Experts, Cs, "mlp_wgrad", true},
                    {W::Attention, Cs, "attn_wgrad", true}};
  bwd_in.moe_phases = {{W::Combine, Ms, "combine_bwd"}, {W::Experts, Cs, "mlp_bwd_dx"}, {W::Dispatch, Ms, "dispatch_bwd"},
                       {W::Attention, Cs, "attn_bwd_dx"}};
  bwd_w.moe_phases = {{W::Experts, Cs, "mlp_bwd_dw"}, {W::Attention, Cs, "attn_bwd_dw"}};

  auto& ofb = add(row(Op::OVERLAP_F_B, "OVERLAP_F_B", "FB", "OVERLAP_F_B", K::Composite, F::None, F::None,
                      "a forward and a backward run together (sub_steps: forward, backward)"));
  ofb.composite = CompositeKind::Overlap;
  ofb.forward_first = true;
  auto& obf = add(row(Op::OVERLAP_B_F, "OVERLAP_B_F", "BF", "OVERLAP_B_F", K::Composite, F::None, F::None,
                      "a backward and a forward run together (sub_steps: backward, forward)"));
  obf.composite = CompositeKind::Overlap;
}

void body_p2p_rows(Table& t) {
  using K = StepKind;
  using F = Field;
  auto add = [&t](StepTypeInfo i) -> StepTypeInfo& { return put(t, std::move(i)); };
  // ---- body P2P --------------------------------------------------------------------------
  auto& fs = add(row(Op::FWD_SEND, "FWD_SEND", "FS", "SEND_F", K::P2PSend, F::Required, F::Required,
                     "send a stage's output to the next stage"));
  p2p(fs, PeerRule::NextStage, Op::FWD_RECV, +1, Payload::Activation, Meta::FirstPerStage);
  fs.posting = Posting::OverlapP2P;
  fs.effects = {{C::fwd_outputs_cache, E::Consume}};

  auto& fr = add(row(Op::FWD_RECV, "FWD_RECV", "FR", "RECV_F", K::P2PRecv, F::Required, F::Required,
                     "receive a stage's input from the previous stage"));
  p2p(fr, PeerRule::PrevStage, Op::FWD_SEND, -1, Payload::Activation, Meta::FirstPerStage);
  fr.posting = Posting::OverlapP2P;
  fr.effects = {{C::fwd_recv_buffer, E::Produce}};

  auto& bs = add(row(Op::BWD_SEND, "BWD_SEND", "BS", "SEND_B", K::P2PSend, F::Required, F::Required,
                     "send input gradients to the previous stage"));
  p2p(bs, PeerRule::PrevStage, Op::BWD_RECV, -1, Payload::Gradient, Meta::None);
  bs.posting = Posting::OverlapP2P;
  bs.effects = {{C::bwd_cache, E::Consume}};

  auto& br = add(row(Op::BWD_RECV, "BWD_RECV", "BR", "RECV_B", K::P2PRecv, F::Required, F::Required,
                     "receive output gradients from the next stage"));
  p2p(br, PeerRule::NextStage, Op::BWD_SEND, +1, Payload::Gradient, Meta::None);
  br.posting = Posting::OverlapP2P;
  br.effects = {{C::bwd_recv_buffer, E::Produce}};

  auto& batch = add(row(Op::BATCH_SEND_RECV, "BATCH_SEND_RECV", "BATCH", "BATCH_SEND_RECV", K::Composite, F::None,
                        F::None, "P2P sub-steps issued as one group (batch_isend_irecv / ncclGroupStart..End)"));
  batch.composite = CompositeKind::Batch;
}

void data_rows(Table& t) {
  using K = StepKind;
  using F = Field;
  auto add = [&t](StepTypeInfo i) -> StepTypeInfo& { return put(t, std::move(i)); };
  // ---- data ------------------------------------------------------------------------------
  // Two forms (reference hyper_parallel.md §1.2): the MPipe prefix (no stage) routes a
  // micro-batch owner -> rank 0; the body form (a stage) rides the forward chain, DATA_SEND at
  // stage s beside FWD_SEND, DATA_RECV at s+1 beside FWD_RECV. hyper-parallel's DATA_LOAD
  // loads only at stage 0 (or in the prefix); its add_send_recv splices one before every
  // forward, and the others do nothing.
  auto& dl = add(row(Op::DATA_LOAD, "DATA_LOAD", "DL", "DATA_LOAD", K::Local, F::Required, F::Optional,
                     "load a micro-batch from the data iterator (in the body: at stage 0)"));
  dl.compute = ComputeKind::DataLoad;
  dl.effects = {{C::data_batch, E::Produce, Prefix | MPipe}, {C::data_batch, E::Produce, FirstStage | DataSteps}};
  auto& ds = add(row(Op::DATA_SEND, "DATA_SEND", "DS", "DATA_SEND", K::P2PSend, F::Required, F::Optional,
                     "ship raw inputs and labels (owner to rank 0 in the MPipe prefix, else stage s to s+1)"));
  p2p(ds, PeerRule::DataChain, Op::DATA_RECV, +1, Payload::Data, Meta::EveryStep);
  ds.effects = {{C::data_batch, E::Consume, Prefix | MPipe}, {C::data_batch, E::Consume, Body}};
  auto& dr = add(row(Op::DATA_RECV, "DATA_RECV", "DR", "DATA_RECV", K::P2PRecv, F::Required, F::Optional,
                     "receive raw inputs and labels (rank 0 from the owner in the MPipe prefix, else from stage s-1)"));
  p2p(dr, PeerRule::DataChain, Op::DATA_SEND, -1, Payload::Data, Meta::EveryStep);
  dr.effects = {{C::data_batch, E::Produce, Prefix | MPipe}, {C::data_batch, E::Produce, Body}};
}

void data_parallel_rows(Table& t) {
  using K = StepKind;
  using F = Field;
  auto add = [&t](StepTypeInfo i) -> StepTypeInfo& { return put(t, std::move(i)); };
  // ---- FSDP / DP -------------------------------------------------------------------------
  // Data-parallel collectives: priced as compute (ComputeKind::Fsdp), no pipeline rank waits.
  auto dp = [&](Op op, std::string_view name, std::string_view short_name, std::string_view token, CollectiveKind kind,
                std::string_view summary) {
    auto& i = add(row(op, name, short_name, token, K::Collective, F::None, F::Required, summary));
    i.collective = CollectiveScope::DataParallel;
    i.collective_kind = kind;
    i.compute = ComputeKind::Fsdp;
  };
  dp(Op::FSDP_UNSHARD, "FSDP_UNSHARD", "UNSH", "UNSHARD", CollectiveKind::AllGather, "all-gather a stage's sharded parameters");
  dp(Op::FSDP_RESHARD, "FSDP_RESHARD", "RESH", "RESHARD", CollectiveKind::Release, "free a stage's gathered parameters");
  dp(Op::FSDP_REDUCE_GRAD, "FSDP_REDUCE_GRAD", "RG", "REDUCE_GRAD", CollectiveKind::ReduceScatter,
     "reduce-scatter a stage's gradients after its last backward");
  auto& ar = add(row(Op::ALL_REDUCE, "ALL_REDUCE", "AR", "ALL_REDUCE", K::Collective, F::None, F::Optional,
                     "all-reduce of tied parameters' gradients over an explicit rank group"));
  ar.collective = CollectiveScope::ExplicitGroup;
  ar.collective_kind = CollectiveKind::AllReduce;
  ar.collective_bytes = CollectiveBytes::TiedParams;
  // Chimera's sync_grad / DualPipe's copy exchange: the copies of a replicated stage add up their
  // weight gradients, once each, after the copy's last weight-gradient backward.
  auto& rs = add(row(Op::REPLICA_GRAD_SYNC, "REPLICA_GRAD_SYNC", "RS", "REPLICA_GRAD_SYNC", K::Collective, F::None,
                     F::Required, "all-reduce a replicated stage's weight gradients over the ranks holding its copies"));
  rs.collective = CollectiveScope::Replicas;
  rs.collective_kind = CollectiveKind::AllReduce;
  rs.collective_bytes = CollectiveBytes::StageGrads;
}

void swap_rows(Table& t) {
  using K = StepKind;
  using F = Field;
  auto add = [&t](StepTypeInfo i) -> StepTypeInfo& { return put(t, std::move(i)); };
  // ---- swap (lifecycle: LAUNCH_OFFLOAD < WAIT_OFFLOAD < LAUNCH_LOAD < WAIT_LOAD < backward) --
  auto swap = [&](Op op, std::string_view name, std::string_view short_name, Cache in, Cache out,
                  std::string_view summary) {
    auto& i = add(row(op, name, short_name, name, K::Local, F::Required, F::Required, summary));
    i.compute = ComputeKind::Swap;
    i.effects = {{in, E::Consume}, {out, E::Produce}};
  };
  swap(Op::SWAP_LAUNCH_OFFLOAD, "SWAP_LAUNCH_OFFLOAD", "SLO", C::fwd_cache, C::swap_offloading,
       "start copying a kept activation to host memory");
  swap(Op::SWAP_WAIT_OFFLOAD, "SWAP_WAIT_OFFLOAD", "SWO", C::swap_offloading, C::swap_on_host,
       "wait for the offload; the device copy is freed");
  swap(Op::SWAP_LAUNCH_LOAD, "SWAP_LAUNCH_LOAD", "SLL", C::swap_on_host, C::swap_loading,
       "start copying the activation back to the device");
  swap(Op::SWAP_WAIT_LOAD, "SWAP_WAIT_LOAD", "SWL", C::swap_loading, C::fwd_cache,
       "wait for the reload; the backward may run");
}

void mpipe_rows(Table& t) {
  using K = StepKind;
  using F = Field;
  auto add = [&t](StepTypeInfo i) -> StepTypeInfo& { return put(t, std::move(i)); };
  // ---- MPipe Transpose (reference §1.3, §2.5, §4) ------------------------------------------
  // hyper-parallel writes the emitting rank in its micro field (reference §1.1): a tag.
  auto& bcast = add(row(Op::MPIPE_PARAM_BROADCAST, "MPIPE_PARAM_BROADCAST", "BCAST", "", K::Collective,
                        F::RankTag, F::Optional, "broadcast the trainable tower parameters from rank 0"));
  bcast.collective = CollectiveScope::AllPipelineRanks;
  bcast.collective_kind = CollectiveKind::Broadcast;
  bcast.collective_bytes = CollectiveBytes::TowerParams;
  bcast.payload = Payload::None;
  bcast.runs_on = RunsOn::EveryRank;

  auto& tf = add(row(Op::MPIPE_TRANSPOSE_FWD, "MPIPE_TRANSPOSE_FWD", "TF", "", K::Compute, F::Required,
                     F::Optional, "run the tower on a micro-batch this rank owns"));
  tf.compute = ComputeKind::TowerForward;
  tf.runs_on = RunsOn::Owner;
  tf.effects = {{C::data_batch, E::Read},
                {C::tower_features, E::Produce, OnRank0 | TowerPresent},
                {C::inputs_for_explicit_forward, E::Produce, Stage0Backward},
                {C::keep_grad, E::Produce, OnRank0 | Stage0Backward},
                {C::outputs_for_stage0, E::Produce, NotOnRank0 | TowerPresent},
                {C::outputs_for_bwd, E::Produce, NotOnRank0 | OwnerBackward}};

  auto& mfs = add(row(Op::MPIPE_FWD_SEND, "MPIPE_FWD_SEND", "MFS", "", K::P2PSend, F::Required, F::Optional,
                      "owner ships tower features to rank 0"));
  p2p(mfs, PeerRule::OwnerToRank0, Op::MPIPE_FWD_RECV, 0, Payload::Features, Meta::EveryStep);
  mfs.posting = Posting::MPipeBatched;
  mfs.effects = {{C::outputs_for_stage0, E::Consume}};
  mfs.runs_on = RunsOn::Owner;

  auto& mfr = add(row(Op::MPIPE_FWD_RECV, "MPIPE_FWD_RECV", "MFR", "", K::P2PRecv, F::Required, F::Optional,
                      "rank 0 receives tower features from the owner"));
  p2p(mfr, PeerRule::Rank0ToOwner, Op::MPIPE_FWD_SEND, 0, Payload::Features, Meta::EveryStep);
  mfr.posting = Posting::MPipeBatched;
  mfr.effects = {{C::tower_features, E::Produce}, {C::keep_grad, E::Produce, TowerTrainable}};
  mfr.runs_on = RunsOn::Rank0;

  auto& gs = add(row(Op::MPIPE_GRAPH_SEND, "MPIPE_GRAPH_SEND", "GS", "", K::P2PSend, F::Required,
                     F::Optional, "owner ships the tower input for rank 0's recompute"));
  p2p(gs, PeerRule::OwnerToRank0, Op::MPIPE_GRAPH_RECV, 0, Payload::TowerInputs, Meta::EveryStep);
  gs.posting = Posting::MPipeBatched;
  gs.effects = {{C::inputs_for_explicit_forward, E::Consume}};
  gs.runs_on = RunsOn::Owner;

  auto& gr = add(row(Op::MPIPE_GRAPH_RECV, "MPIPE_GRAPH_RECV", "GR", "", K::P2PRecv, F::Required,
                     F::Optional, "rank 0 receives the tower input of a micro it does not own"));
  p2p(gr, PeerRule::Rank0ToOwner, Op::MPIPE_GRAPH_SEND, 0, Payload::TowerInputs, Meta::EveryStep);
  gr.effects = {{C::inputs_for_explicit_forward, E::Produce}};
  gr.runs_on = RunsOn::Rank0;

  auto& tb = add(row(Op::MPIPE_TRANSPOSE_BWD, "MPIPE_TRANSPOSE_BWD", "TB", "", K::Compute, F::Required,
                     F::Optional, "rank 0 recomputes the tower and backprops the feature gradients"));
  tb.compute = ComputeKind::TowerBackward;
  tb.effects = {{C::inputs_for_explicit_forward, E::Consume},
                {C::keep_grad, E::Consume},
                {C::feature_grads, E::Consume}};
  tb.runs_on = RunsOn::Rank0;

  auto& grads = add(row(Op::MPIPE_GRAD_SEND, "MPIPE_GRAD_SEND", "GRADS", "", K::P2PSend, F::Required,
                        F::Optional, "rank 0 ships feature gradients back to the owner (owner_backward)"));
  p2p(grads, PeerRule::Rank0ToOwner, Op::MPIPE_GRAD_RECV_WITH_BACKWARD, 0, Payload::FeatureGrads,
      Meta::EveryStep);
  grads.posting = Posting::MPipeBatched;
  grads.effects = {{C::keep_grad, E::Consume}, {C::feature_grads, E::Consume}};
  grads.runs_on = RunsOn::Rank0;

  auto& gradr = add(row(Op::MPIPE_GRAD_RECV_WITH_BACKWARD, "MPIPE_GRAD_RECV_WITH_BACKWARD", "GRADR+B", "",
                        K::P2PRecv, F::Required, F::Optional,
                        "owner receives feature gradients and backprops its kept tower graph"));
  p2p(gradr, PeerRule::OwnerToRank0, Op::MPIPE_GRAD_SEND, 0, Payload::FeatureGrads, Meta::EveryStep);
  gradr.compute = ComputeKind::TowerGradBackward;
  gradr.effects = {{C::outputs_for_bwd, E::Consume}};
  gradr.runs_on = RunsOn::Owner;

  auto& greduce = add(row(Op::MPIPE_GRAD_REDUCE, "MPIPE_GRAD_REDUCE", "GREDUCE", "", K::Collective,
                          F::None, F::Optional, "SUM all-reduce of this run's tower-gradient delta"));
  greduce.collective = CollectiveScope::AllPipelineRanks;
  greduce.runs_on = RunsOn::EveryRank;
  greduce.collective_kind = CollectiveKind::AllReduce;
  greduce.collective_bytes = CollectiveBytes::TowerParams;

  for (Op op : {Op::MPIPE_PARAM_BROADCAST, Op::MPIPE_TRANSPOSE_FWD, Op::MPIPE_FWD_SEND, Op::MPIPE_FWD_RECV,
                Op::MPIPE_GRAPH_SEND, Op::MPIPE_GRAPH_RECV, Op::MPIPE_TRANSPOSE_BWD, Op::MPIPE_GRAD_SEND,
                Op::MPIPE_GRAD_RECV_WITH_BACKWARD, Op::MPIPE_GRAD_REDUCE})
    t[static_cast<size_t>(op)].mpipe = true;
}

// The table, section by section (each section's comment says what its step types share).
Table make_table() {
  Table t{};
  compute_rows(t);
  body_p2p_rows(t);
  data_rows(t);
  data_parallel_rows(t);
  swap_rows(t);
  mpipe_rows(t);
  return t;
}

}  // namespace

namespace detail {
// Priority 101 (the first one available to programs): built before any static object of
// this program that might look a step type up.
__attribute__((init_priority(101))) const std::array<StepTypeInfo, kOpCount> step_table_data = make_table();
__attribute__((init_priority(101))) const std::array<CacheInfo, kCacheCount> cache_table_data = make_caches();
}  // namespace detail

const std::array<StepTypeInfo, kOpCount>& step_table() { return detail::step_table_data; }


std::string_view op_name(Op op) { return info(op).name; }
std::string_view to_string(Stream s) { return s == Stream::Compute ? "compute" : "comm"; }


std::optional<Op> op_from_name(std::string_view name) {
  static const std::unordered_map<std::string_view, Op> by_name = [] {
    std::unordered_map<std::string_view, Op> m;
    for (const auto& i : step_table()) m.emplace(i.name, i.op);
    return m;
  }();
  auto it = by_name.find(name);
  if (it == by_name.end()) return std::nullopt;
  return it->second;
}

std::optional<Op> op_from_torch_token(std::string_view token) {
  static const std::unordered_map<std::string_view, Op> by_token = [] {
    std::unordered_map<std::string_view, Op> m;
    for (const auto& i : step_table()) {
      if (!i.torch_token.empty()) m.emplace(i.torch_token, i.op);
      m.emplace(i.name, i.op);  // canonical names are accepted as tokens too
    }
    return m;
  }();
  auto it = by_token.find(token);
  if (it == by_token.end()) return std::nullopt;
  return it->second;
}

bool is_body_compute(Op op) {
  switch (info(op).compute) {
    case ComputeKind::Forward:
    case ComputeKind::Backward:
    case ComputeKind::BackwardInput:
    case ComputeKind::BackwardWeight: return true;
    default: return false;
  }
}

}  // namespace ppsched
