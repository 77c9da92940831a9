#include <catch2/catch.hpp>
#include <algorithm>
#include <set>
#include <vector>

#include "schedule/generators/generator.hpp"
#include "schedule/schedule.hpp"
#include "schedule/step_types.hpp"
#include "schedule/validate.hpp"

using namespace ppsched;

TEST_CASE("every step type has exactly one row, named in hyper-parallel's spelling", "[step_types]") {
  std::set<std::string_view> names, shorts;
  for (int k = 0; k < kOpCount; ++k) {
    const auto& i = step_table()[static_cast<size_t>(k)];
    CHECK(static_cast<int>(i.op) == k);
    CHECK(!i.name.empty());
    CHECK(names.insert(i.name).second);
    CHECK(shorts.insert(i.short_name).second);
    CHECK(op_from_name(i.name) == i.op);
    // Plain capitals, digits and underscores: the schedule writer writes them unescaped.
    CHECK(std::all_of(i.name.begin(), i.name.end(), [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }));
    CHECK(!i.summary.empty());
  }
  CHECK(kOpCount == 33);
  CHECK(!op_from_name("FORWARD").has_value());
}

TEST_CASE("PyTorch action tokens map to the canonical step types", "[step_types]") {
  CHECK(op_from_torch_token("F") == Op::FWD);
  CHECK(op_from_torch_token("B") == Op::BWD);
  CHECK(op_from_torch_token("I") == Op::BWD_INPUT);
  CHECK(op_from_torch_token("W") == Op::BWD_WEIGHT);
  CHECK(op_from_torch_token("SEND_F") == Op::FWD_SEND);
  CHECK(op_from_torch_token("RECV_F") == Op::FWD_RECV);
  CHECK(op_from_torch_token("SEND_B") == Op::BWD_SEND);
  CHECK(op_from_torch_token("RECV_B") == Op::BWD_RECV);
  CHECK(op_from_torch_token("UNSHARD") == Op::FSDP_UNSHARD);
  CHECK(op_from_torch_token("RESHARD") == Op::FSDP_RESHARD);
  CHECK(op_from_torch_token("REDUCE_GRAD") == Op::FSDP_REDUCE_GRAD);
  CHECK(op_from_torch_token("OVERLAP_F_B") == Op::OVERLAP_F_B);
  CHECK(op_from_torch_token("MPIPE_FWD_SEND") == Op::MPIPE_FWD_SEND);
  CHECK(!op_from_torch_token("X").has_value());
}

TEST_CASE("kinds, fields and collectives are declared as the reference describes", "[step_types]") {
  CHECK(info(Op::FWD).kind == StepKind::Compute);
  CHECK(info(Op::FWD).micro == Field::Required);
  CHECK(info(Op::FWD).stage == Field::Required);
  CHECK(info(Op::OVERLAP_B_F).kind == StepKind::Composite);
  CHECK(info(Op::BATCH_SEND_RECV).kind == StepKind::Composite);
  CHECK(info(Op::FWD_SEND).kind == StepKind::P2PSend);
  CHECK(info(Op::BWD_RECV).kind == StepKind::P2PRecv);
  CHECK(info(Op::DATA_LOAD).kind == StepKind::Local);
  CHECK(info(Op::MPIPE_PARAM_BROADCAST).collective == CollectiveScope::AllPipelineRanks);
  // hyper-parallel writes the emitting rank there (reference §1.1): a tag, not a micro-batch.
  CHECK(info(Op::MPIPE_PARAM_BROADCAST).micro == Field::RankTag);
  CHECK(info(Op::MPIPE_GRAD_REDUCE).collective == CollectiveScope::AllPipelineRanks);
  CHECK(info(Op::MPIPE_GRAD_REDUCE).micro == Field::None);
  CHECK(info(Op::ALL_REDUCE).collective == CollectiveScope::ExplicitGroup);
  CHECK(info(Op::FSDP_UNSHARD).collective == CollectiveScope::DataParallel);
  CHECK(info(Op::FSDP_UNSHARD).micro == Field::None);
  CHECK(info(Op::MPIPE_GRAD_RECV_WITH_BACKWARD).kind == StepKind::P2PRecv);
  CHECK(info(Op::MPIPE_GRAD_RECV_WITH_BACKWARD).compute == ComputeKind::TowerGradBackward);
  CHECK(info(Op::MPIPE_FWD_SEND).meta == Meta::EveryStep);
  CHECK(info(Op::FWD_SEND).meta == Meta::FirstPerStage);
  CHECK(info(Op::BWD_SEND).meta == Meta::None);
}

TEST_CASE("every P2P type names a partner of the opposite direction that names it back", "[step_types]") {
  for (const auto& i : step_table()) {
    if (!is_p2p(i.op)) continue;
    const auto& p = info(i.partner);
    CHECK(is_send(i.op) != is_send(p.op));
    CHECK(p.partner == i.op);
    CHECK(p.partner_stage_delta == -i.partner_stage_delta);
    CHECK(p.payload == i.payload);
    CHECK(p.meta == i.meta);
    CHECK(i.peer != PeerRule::None);
  }
}

TEST_CASE("the columns code reads instead of naming ops are declared for every row", "[step_types]") {
  for (const auto& i : step_table()) {
    INFO(i.name);
    // Composites, and only they, say how their sub-steps run.
    CHECK((i.kind == StepKind::Composite) == (i.composite != CompositeKind::None));
    CHECK((i.forward_first) == (i.op == Op::OVERLAP_F_B));
    // Collectives, and only they, have an operation; the pipeline-wide ones, the explicit
    // group and the replicas' sync move a byte count of the cost model.
    CHECK((i.kind == StepKind::Collective) == (i.collective_kind != CollectiveKind::None));
    CHECK((i.collective == CollectiveScope::AllPipelineRanks || i.collective == CollectiveScope::ExplicitGroup ||
           i.collective == CollectiveScope::Replicas) == (i.collective_bytes != CollectiveBytes::None));
    // Only P2P steps change their posting with the mode; sends and receives of a pair agree.
    if (i.posting != Posting::Blocking) CHECK(is_p2p(i.op));
    if (is_send(i.op) && i.posting == Posting::OverlapP2P) CHECK(info(i.partner).posting == Posting::OverlapP2P);
    // The MPipe layer's steps (named MPIPE_* by hyper-parallel) need an mpipe object.
    CHECK(i.mpipe == (i.name.substr(0, 6) == "MPIPE_"));
    // A compute step's hand-over send ends in a receive that the next compute of the chain
    // waits for: FWD's FWD_SEND lands as FWD_RECV, FWD's own input.
    if (i.hands_over) {
      CHECK(is_body_compute(i.op));
      CHECK(is_send(*i.hands_over));
      REQUIRE(i.input_recv.has_value());
      CHECK(info(*i.hands_over).partner == *i.input_recv);
    }
    if (i.input_recv) CHECK(info(*i.input_recv).posting == Posting::OverlapP2P);
  }
  CHECK(info(Op::BATCH_SEND_RECV).composite == CompositeKind::Batch);
  CHECK(info(Op::OVERLAP_B_F).composite == CompositeKind::Overlap);
  CHECK(info(Op::FWD).hands_over == Op::FWD_SEND);
  CHECK(info(Op::BWD_INPUT).hands_over == Op::BWD_SEND);
  CHECK(!info(Op::BWD_WEIGHT).hands_over.has_value());
  CHECK(info(Op::MPIPE_FWD_RECV).posting == Posting::MPipeBatched);
  CHECK(info(Op::MPIPE_GRAPH_RECV).posting == Posting::Blocking);  // only the features are batched (reference §1.3)
  CHECK(info(Op::MPIPE_GRAD_REDUCE).collective_kind == CollectiveKind::AllReduce);
  CHECK(info(Op::MPIPE_PARAM_BROADCAST).collective_kind == CollectiveKind::Broadcast);
  CHECK(info(Op::ALL_REDUCE).collective_bytes == CollectiveBytes::TiedParams);
}

TEST_CASE("every cache an effect consumes is produced by some step type", "[step_types]") {
  std::set<Cache> produced, consumed;
  for (const auto& i : step_table())
    for (const auto& e : i.effects) (e.effect == Effect::Produce ? produced : consumed).insert(e.cache);
  for (Cache c : consumed) {
    INFO(cache_info(c).name);
    CHECK(produced.count(c) == 1);
  }
  for (Cache c : produced) {
    INFO(cache_info(c).name);
    CHECK(consumed.count(c) == 1);
  }
}

TEST_CASE("peer rules follow the stage chain and the MPipe owner map", "[step_types]") {
  Schedule s;
  s.ranks = 4;
  s.stages = 8;
  s.micro_batches = 8;
  s.placement = Placement::loop(4, 8);
  CHECK(peer_of(s, 1, make_step(Op::FWD_SEND, 0, 1)) == 2);
  CHECK(peer_of(s, 3, make_step(Op::FWD_SEND, 0, 3)) == 0);  // stage 4 lives on rank 0
  CHECK(peer_of(s, 1, make_step(Op::FWD_RECV, 0, 1)) == 0);
  CHECK(peer_of(s, 1, make_step(Op::BWD_SEND, 0, 1)) == 0);
  CHECK(peer_of(s, 1, make_step(Op::BWD_RECV, 0, 1)) == 2);
  CHECK(peer_of(s, 2, make_step(Op::DATA_SEND, 0, 2)) == 3);
  Step explicit_peer = make_step(Op::FWD_SEND, 0, 1);
  explicit_peer.peer = 3;
  CHECK(peer_of(s, 1, explicit_peer) == 3);

  s.mpipe = MPipeConfig{};
  s.mpipe->overflow = Overflow::Full;
  CHECK(s.owner_of(5) == 1);
  CHECK(peer_of(s, 0, make_step(Op::MPIPE_FWD_RECV, 5)) == 1);
  CHECK(peer_of(s, 1, make_step(Op::MPIPE_FWD_SEND, 5)) == 0);
  CHECK(peer_of(s, 0, make_step(Op::DATA_RECV, 6)) == 2);
  CHECK(peer_of(s, 2, make_step(Op::DATA_SEND, 6)) == 0);
  CHECK(peer_of(s, 0, make_step(Op::MPIPE_GRAD_SEND, 7)) == 3);
  s.mpipe->overflow = Overflow::Min;
  CHECK(s.owner_of(5) == 0);
  CHECK(s.owner_of(3) == 3);
}

TEST_CASE("V placement goes down and back up the ranks", "[step_types]") {
  CHECK(Placement::v(4, 12).stage_to_rank == std::vector<int32_t>{0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3});
  CHECK(Placement::loop(2, 5).stage_to_rank == std::vector<int32_t>{0, 1, 0, 1, 0});
}

TEST_CASE("conditions tell local from remote neighbours", "[step_types]") {
  Schedule s;
  s.ranks = 2;
  s.stages = 4;
  s.micro_batches = 2;
  s.placement = Placement::v(2, 4);  // 0 1 1 0
  uint32_t c = conditions_of(s, 1, make_step(Op::FWD, 0, 2));
  CHECK((c & PrevStageLocal) != 0);
  CHECK((c & NextStageRemote) != 0);
  CHECK((c & NotLastStage) != 0);
  c = conditions_of(s, 0, make_step(Op::FWD, 0, 3));
  CHECK((c & LastStage) != 0);
  CHECK((c & PrevStageRemote) != 0);
}

TEST_CASE("SmallVec: a Step's lists behave like vectors at one pointer each", "[step_types]") {
  STATIC_REQUIRE(sizeof(SmallVec<Step>) == sizeof(void*));
  STATIC_REQUIRE(sizeof(Step) <= 40);

  SmallVec<std::string> v;
  CHECK(v.empty());
  CHECK(v.begin() == v.end());
  for (int k = 0; k < 100; ++k) v.push_back("item " + std::to_string(k));
  REQUIRE(v.size() == 100);
  CHECK(v.front() == "item 0");
  CHECK(v.back() == "item 99");
  CHECK(v.at(42) == "item 42");
  CHECK_THROWS_AS(v.at(100), std::out_of_range);
  // Appending an element of the vector itself while it grows (the value must be built first).
  SmallVec<std::string> w{"a"};
  for (int k = 0; k < 10; ++k) w.push_back(w[0]);
  CHECK(w.size() == 11);
  for (const auto& x : w) CHECK(x == "a");

  SmallVec<std::string> copy = v;
  CHECK(copy == v);
  copy[3] = "changed";
  CHECK(copy != v);
  CHECK(v[3] == "item 3");
  SmallVec<std::string> moved = std::move(copy);
  CHECK(moved.size() == 100);
  CHECK(copy.empty());  // NOLINT: moved-from is empty by contract

  std::vector<std::string> as_vector = v;
  CHECK(as_vector.size() == 100);
  CHECK(SmallVec<std::string>(as_vector) == v);
  v.erase(v.begin());
  CHECK(v.size() == 99);
  CHECK(v.front() == "item 1");
  v.clear();
  CHECK(v.empty());

  // Nested: composites hold their sub-steps.
  Step batch = make_composite(Op::BATCH_SEND_RECV, {make_step(Op::FWD_SEND, 0, 0), make_step(Op::BWD_RECV, 0, 0)});
  Step again = batch;
  CHECK(again == batch);
  again.sub_steps_mut()[1].micro = 1;
  CHECK(again != batch);
  CHECK(batch.sub_steps()[1].micro == 0);
}

TEST_CASE("Step and Slot: 16 bytes, lists allocated only when a step has one, idle kept through copies and moves") {
  STATIC_REQUIRE(sizeof(Step) == 16);
  STATIC_REQUIRE(sizeof(Slot) == 16);
  // The largest stage, peer and micro a schedule may hold come back as stored.
  Step far = make_step(Op::BWD, kMaxCount - 1, kMaxStages - 1);
  far.peer = static_cast<int16_t>(kMaxRanks - 1);
  far.edit_tensors().push_back(TensorDesc{{8}, "bf16"});
  const Step far_copy = far;
  CHECK(far_copy.micro == kMaxCount - 1);
  CHECK(far_copy.stage == kMaxStages - 1);
  CHECK(far_copy.peer == kMaxRanks - 1);
  CHECK(far_copy.op == Op::BWD);
  CHECK(far_copy.tensors().size() == 1);
  CHECK(make_step(Op::FWD).stage == kNone);

  Step plain = make_step(Op::FWD, 3, 1);
  CHECK_FALSE(plain.has_lists());
  CHECK(plain.sub_steps().empty());
  CHECK(plain.tensors().empty());
  CHECK(plain.group().empty());
  CHECK(plain.sub_steps_mut().empty());
  CHECK_FALSE(plain.has_lists());  // reading, or changing sub-steps in place, allocates nothing

  // A step whose lists were allocated and emptied equals one that never had them.
  Step touched = plain;
  touched.edit_group().push_back(2);
  CHECK(touched.has_lists());
  CHECK(touched != plain);
  touched.edit_group().clear();
  CHECK(touched == plain);

  // Deep copies: changing a copy's lists leaves the original alone.
  Step ar = make_step(Op::ALL_REDUCE);
  ar.edit_group() = std::vector<int32_t>{0, 1};
  ar.edit_tensors().push_back(TensorDesc{{4}, "f32"});
  Step ar2 = ar;
  ar2.edit_group().push_back(2);
  CHECK(ar.group().size() == 2);
  CHECK(ar2.group().size() == 3);
  CHECK(ar2.tensors() == ar.tensors());

  Slot idle;
  CHECK_FALSE(idle.has_value());
  CHECK(idle == std::nullopt);
  Slot idle_copy = idle;
  Slot idle_moved = std::move(idle_copy);
  CHECK_FALSE(idle_copy.has_value());  // NOLINT: a moved-from idle slot stays idle
  CHECK_FALSE(idle_moved.has_value());
  Slot full = ar;
  CHECK(full.has_value());
  CHECK(full->group().size() == 2);
  Slot full_moved = std::move(full);
  CHECK(full_moved.has_value());
  CHECK(*full_moved == ar);
  idle_moved = full_moved;
  CHECK(idle_moved.has_value());
  CHECK(idle_moved == full_moved);
  full_moved.reset();
  CHECK_FALSE(full_moved.has_value());
  CHECK(full_moved != idle_moved);
  CHECK(Slot(std::optional<Step>{}) == Slot());
  CHECK(Slot(std::optional<Step>{plain}) == Slot(plain));
  Program prog(3);  // idle slots, as std::optional<Step> gave
  CHECK(std::none_of(prog.begin(), prog.end(), [](const Slot& x) { return x.has_value(); }));
  prog[1].emplace(plain);
  CHECK(prog[1].has_value());
  CHECK(prog[1].value() == plain);
  CHECK_THROWS_AS(prog[0].value(), std::bad_optional_access);
}

TEST_CASE("schedule_digest: equal schedules digest equal, a one-field change anywhere digests differently",
          "[step_types][digest]") {
  // 1,408 steps: the digest's byte stream (64 bytes a step) crosses its 16 KiB buffer several
  // times, so changes before, across and after a flush are all covered.
  GenerateOptions g;
  g.pp = 4;
  g.vpp = 2;
  g.micro = 32;
  const Schedule base = generate("interleaved-1f1b", g);
  const uint64_t d = schedule_digest(base);
  CHECK(schedule_digest(Schedule(base)) == d);
  CHECK(schedule_digest(generate("interleaved-1f1b", g)) == d);

  auto changed = [&](auto&& edit) {
    Schedule s = base;
    edit(s);
    return schedule_digest(s);
  };
  // One step's micro-batch or peer, on the first, a middle and the last step of the last rank.
  const Program& last = base.programs.back();
  std::vector<size_t> filled;
  for (size_t k = 0; k < last.size(); ++k)
    if (last[k]) filled.push_back(k);
  REQUIRE(filled.size() > 2);
  for (size_t at : {filled.front(), filled[filled.size() / 2], filled.back()}) {
    CAPTURE(at);
    CHECK(changed([&](Schedule& s) { s.programs.back()[at]->micro += 1; }) != d);
    CHECK(changed([&](Schedule& s) { s.programs.back()[at]->peer += 1; }) != d);
  }
  CHECK(changed([&](Schedule& s) { s.programs.back()[filled[1]]->stage += 1; }) != d);
  CHECK(changed([&](Schedule& s) { s.programs.back()[filled[1]] = std::nullopt; }) != d);
  CHECK(changed([](Schedule& s) { s.programs[2].push_back(std::nullopt); }) != d);
  CHECK(changed([](Schedule& s) { s.name += "x"; }) != d);
  // Strings are length-prefixed: "ab" + "c" and "a" + "bc" differ.
  auto dtypes = [&](const char* a, const char* b) {
    return changed([&](Schedule& s) {
      s.programs.back()[filled[1]]->edit_tensors().push_back(TensorDesc{{4}, a});
      s.programs.back()[filled[1]]->edit_tensors().push_back(TensorDesc{{4}, b});
    });
  };
  CHECK(dtypes("ab", "c") != dtypes("a", "bc"));
  CHECK(dtypes("ab", "c") == dtypes("ab", "c"));
}
