// FSDP_UNSHARD, FSDP_RESHARD, FSDP_REDUCE_GRAD (PyTorch's UNSHARD, RESHARD, REDUCE_GRAD) with
// no data parallelism: the data-parallel group of each pipeline rank is that rank alone, so there
// is nothing to gather, free or reduce, and the steps do nothing. (PyTorch's REDUCE_GRAD also
// scales the gradients by 1/M; here the loss is already divided by M, exec/README "Stage
// modules".) Every lowered PyTorch schedule carries these steps, so without handlers the
// executor would refuse it. Data-parallel groups (--dp) give them their collectives.
#include "exec/runtime.hpp"

namespace ppsched::exec {
namespace {

void run_alone_in_dp_group(RunContext&, const StepAt&) {}

}  // namespace

void register_fsdp_handlers(HandlerTable& t) {
  for (Op op : {Op::FSDP_UNSHARD, Op::FSDP_RESHARD, Op::FSDP_REDUCE_GRAD})
    t[static_cast<size_t>(op)].run = run_alone_in_dp_group;
}

}  // namespace ppsched::exec
