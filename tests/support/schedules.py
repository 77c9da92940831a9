"""Edits of schedule JSON documents that the CLI and executor tests share."""


def move_reduce_grad_before_tower(doc):
    """Moves rank 0's FSDP_REDUCE_GRAD of stage 0 to just before the MPipe tower's backward
    (MPIPE_TRANSPOSE_BWD), the placement the data-parallel pass refuses: the tower's backward
    adds to stage 0's gradients after they were reduced. Returns (tower, reduce_grad), their
    step indices before the move."""
    prog = doc["programs"][0]
    tower = next(i for i, st in enumerate(prog) if st and st["op"] == "MPIPE_TRANSPOSE_BWD")
    rg = next(i for i, st in enumerate(prog) if st and st["op"] == "FSDP_REDUCE_GRAD" and st.get("stage") == 0)
    prog.insert(tower, prog.pop(rg))
    return tower, rg
