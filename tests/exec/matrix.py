"""The executor's mode x family x PP matrix: which families, which runtime modes, and the flags
of each cell. exec_cases.py runs it for gradient parity and faults; bench/exec_prediction.py
for the calibrated prediction error."""
import os

# The MPipe Transpose tower modes (the matrix runs each with both overflow policies). The
# generator takes --tower / --owner-backward; --tower-layers is the executor's (the model).
TOWER_MODES = {
    "trainable": (["--tower", "trainable"], ["--tower-layers", "2"]),
    "frozen": (["--tower", "frozen"], ["--tower-layers", "2"]),
    "none": (["--tower", "none"], ["--tower-layers", "0"]),
    "ownerbwd": (["--tower", "trainable", "--owner-backward"], ["--tower-layers", "2"]),
}

BODY = {
    "gpipe": ["gpipe"],
    "1f1b": ["1f1b"],
    "interleaved": ["interleaved-1f1b", "--vpp", "2"],
    "interleaved_overlap_dxdw": ["interleaved-1f1b", "--vpp", "2", "--overlap-b-f", "--dxdw-split"],
    "interleaved_batch": ["interleaved-1f1b", "--vpp", "2", "--batch"],
    "zb-h1": ["zb-h1"],
    "zbv": ["zbv", "--vpp", "2"],
    "dualpipev": ["dualpipev", "--vpp", "2"],
    # replicated stages: two parameter copies per stage, synced by REPLICA_GRAD_SYNC
    "dualpipe": ["dualpipe"],
    "chimera": ["chimera"],
}
MATRIX_BODY = list(BODY) + ["tied_allreduce"]
MATRIX_MPIPE = [f"mpipe_{ov}_{mode}" for ov in ("full", "min") for mode in TOWER_MODES]
MATRIX_MODES = {
    # mode: (flags of ppsched check / ppsched-exec, families)
    "rendezvous": ([], MATRIX_BODY + MATRIX_MPIPE),
    "eager": (["--comm", "eager"], MATRIX_BODY + MATRIX_MPIPE),
    "overlap_p2p": (["--overlap-p2p"], MATRIX_BODY + MATRIX_MPIPE),
    "dyn_shape": (["--dyn-shape"], MATRIX_BODY + MATRIX_MPIPE),
    "mpipe_batched_recv": (["--mpipe-batched-recv"], MATRIX_MPIPE),
}


class Cell:
    """One family at one PP: either `generate` (the arguments of `ppsched generate`, family
    first) or `schedule` (a file), and the executor's model flags beyond the base model."""

    def __init__(self, generate=None, schedule=None, model=()):
        self.generate, self.schedule, self.model = generate, schedule, list(model)

    def exec_args(self):
        """The schedule flags of ppsched-exec for this cell."""
        return ["--generate"] + self.generate if self.generate else ["--schedule", self.schedule]


def cell(name, pp, data, micro=None):
    """The cell of family `name` at PP=pp; `data` is tests/data. `micro` overrides the body
    families' micro-batch count (default 2 * pp)."""
    m = ["--pp", str(pp), "--micro", str(micro or 2 * pp)]
    if name in BODY:
        return Cell(generate=BODY[name] + m)
    if name == "tied_allreduce":
        # PP=2: ALL_REDUCE over {0, 1}; PP=4: over {0, 3} only (ranks 1 and 2 take no part).
        return Cell(schedule=os.path.join(data, "exec", f"1f1b_p{pp}_m4_tied.json"), model=["--tie-embeddings"])
    _, ov, mode = name.split("_", 2)  # mpipe_<overflow>_<tower mode>
    shape = ["--vpp", "2", "--micro", str(micro or 4)] if pp == 2 else ["--vpp", "1", "--micro", str(micro or 8)]
    gen, model = TOWER_MODES[mode]
    return Cell(generate=["mpipe-transpose", "--pp", str(pp), "--overflow", ov] + shape + gen, model=model)
