// hyper-parallel's body data steps (reference hyper_parallel.md §1.2), for any family's schedule.
//
// hyper-parallel ships each micro-batch's raw inputs and labels along the forward chain (its
// "data.load: single" path): its add_send_recv emits, for every forward whose next stage lives
// on another rank, DATA_SEND before FWD_SEND on the sender and DATA_RECV before FWD_RECV on the
// receiver, at the same column (same micro; the receive at stage s+1), and then splices a
// "zero-width" DATA_LOAD right before every forward (one per forward sub-step, before an
// overlap composite); only the one at stage 0 loads anything. Checked against hyper-parallel's
// own scheduler.py (tests/data/peers/hyper_parallel/).
#include "schedule/generators/generator.hpp"

namespace ppsched {
namespace {

// The data step that rides with a forward transfer: DATA_SEND with FWD_SEND, DATA_RECV with
// FWD_RECV (same micro and stage: the receive sits at stage s+1 like FWD_RECV).
std::optional<Op> data_partner(Op op) {
  if (op == Op::FWD_SEND) return Op::DATA_SEND;
  if (op == Op::FWD_RECV) return Op::DATA_RECV;
  return std::nullopt;
}

void add_to_steps(std::vector<Step>& steps) {
  std::vector<Step> out;
  out.reserve(steps.size() * 2);
  for (Step& st : steps) {
    if (auto d = data_partner(st.op)) out.push_back(make_step(*d, st.micro, st.stage));
    out.push_back(std::move(st));
  }
  steps = std::move(out);
}

}  // namespace

Schedule add_data_steps(Schedule s) {
  for (auto& prog : s.programs) {
    Program out;
    out.reserve(prog.size() + prog.size() / 2);
    for (auto& slot : prog) {
      if (!slot) {
        out.push_back(std::nullopt);
        continue;
      }
      Step& st = *slot;
      if (auto d = data_partner(st.op)) out.push_back(make_step(*d, st.micro, st.stage));
      if (is_forward(st.op)) out.push_back(make_step(Op::DATA_LOAD, st.micro, st.stage));
      if (is_overlap(st.op))
        for (const Step& sub : st.sub_steps())
          if (is_forward(sub.op)) out.push_back(make_step(Op::DATA_LOAD, sub.micro, sub.stage));
      if (is_batch(st.op)) {
        std::vector<Step> subs(st.sub_steps().begin(), st.sub_steps().end());
        add_to_steps(subs);
        st.edit_sub_steps() = std::move(subs);
      }
      out.push_back(std::move(slot));
    }
    prog = std::move(out);
  }
  mark_data_steps(s);
  return s;
}

}  // namespace ppsched
