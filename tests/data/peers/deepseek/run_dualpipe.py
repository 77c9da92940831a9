"""Runs DeepSeek's dualpipe/dualpipe.py (DualPipe.step, unmodified) for every rank under a stub of
torch / torch.distributed and records each rank's sequence of compute operations.

The stub provides only what the ordering path touches: tensors are placeholders, every P2P op
completes at once (dualpipe.py's order does not depend on message contents), modules and the
loss record nothing themselves. Recording wraps DualPipe's own compute methods and reads
DualPipe's own chunk counters after each call; a backward run while WeightGradStore.enabled is
split (its weight gradient goes to WeightGradStore, popped FIFO by _weight_chunk).
"""
import sys, types, importlib.util, queue

SRC = sys.argv[1]  # the checkout's dualpipe/ directory

# ---- stub torch ----
torch = types.ModuleType("torch")
class Tensor:
    def __init__(self): self.grad = None; self._base = None; self.data = None
    def backward(self): run_backward([self], [None])
    def detach_(self): return self
torch.Tensor = Tensor
torch.is_grad_enabled = lambda: True
torch.stack = lambda xs: xs
torch.empty = lambda *a, **k: Tensor()
torch.dtype = object
class _Dev:
    def __eq__(self, o): return True
torch.device = lambda *a: _Dev()
torch.cuda = types.SimpleNamespace(current_device=lambda: 0)
nn = types.ModuleType("torch.nn")
class Module:
    def __init__(self, *a, **k): pass
nn.Module = Module
nn.ModuleList = lambda mods: list(mods)
torch.nn = nn
dist = types.ModuleType("torch.distributed")
class P2POp:
    def __init__(self, op, tensor, peer): pass
dist.P2POp = P2POp
dist.isend = dist.irecv = object()
dist.ProcessGroup = object
class _Req:
    def wait(self): pass
dist.batch_isend_irecv = lambda ops: [_Req() for _ in ops]
dist.distributed_c10d = types.SimpleNamespace(get_global_rank=lambda g, r: r, _get_default_group=None)
torch.distributed = dist
autograd = types.ModuleType("torch.autograd")
autograd.Variable = types.SimpleNamespace(_execution_engine=None)
torch.autograd = autograd
for name, mod in [("torch", torch), ("torch.nn", nn), ("torch.distributed", dist), ("torch.autograd", autograd)]:
    sys.modules[name] = mod

def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m
    spec.loader.exec_module(m)
    return m

pkg = types.ModuleType("dualpipe"); pkg.__path__ = [SRC]; sys.modules["dualpipe"] = pkg
utils = load("dualpipe.utils", SRC + "/utils.py")
comm = load("dualpipe.comm", SRC + "/comm.py")
WeightGradStore = utils.WeightGradStore

# The autograd engine: a backward while WeightGradStore.enabled defers its weight gradient (as
# DeepSeek's example LinearFunc does), else computes it now.
current = {}
def run_backward(tensors, grads):
    rec = current["rec"]
    if WeightGradStore.enabled:
        WeightGradStore.put(lambda w=current["pending"]: rec.append(w))
        current["split"] = True
utils.run_backward = run_backward
dp = load("dualpipe.dualpipe", SRC + "/dualpipe.py")
dp.run_backward = run_backward

class Stage(Module):
    def __init__(self): self.calls = 0
    def parameters(self): yield types.SimpleNamespace(device=_Dev())
    def __call__(self, *inputs): return Tensor()
    @classmethod
    def overlapped_forward_backward(cls, module0, inputs0, criterion0, labels0, module1, loss1, outputs1, output_grads1):
        # what DeepSeek's example does: forward of one chunk, backward of the other
        outputs0 = module0(*inputs0)
        loss0 = criterion0(outputs0, *labels0) if criterion0 is not None else None
        if loss1 is not None: loss1.backward()
        else: run_backward(outputs1, output_grads1)
        return [outputs0], loss0

class Group:
    def __init__(self, rank, size): self._r, self._s = rank, size
    def rank(self): return self._r
    def size(self): return self._s

def run(P, M, r):
    """One rank's compute order: tokens <stage><F|B|I|W><micro>, composites (a;b)OVERLAP_F_B.
    The stage is ppsched's: copy 0 (micro-batches entering at rank 0) holds model stage r on
    rank r as stage r; copy 1 (entering at rank P-1) holds model stage P-1-r on rank r as stage
    P + (P-1-r). Micro-batches of copy 0 are 0..M/2-1, of copy 1 M/2..M-1 (each in DeepSeek's
    chunk order)."""
    dist.distributed_c10d._get_default_group = lambda: Group(r, P)
    comm.set_p2p_tensor_shapes([(1,)]); comm.set_p2p_tensor_dtype("float32")
    m = dp.DualPipe((Stage(), Stage()))
    rec = []
    current["rec"] = rec
    half = M // 2
    def stage_of(direction):  # direction = phase after DualPipe's xor with is_in_second_half
        return r if direction == 0 else P + (P - 1 - r)
    def micro_of(direction, chunk):
        return chunk if direction == 0 else half + chunk
    f0, b0, fb0 = m._forward_compute_chunk, m._backward_compute_chunk, m._forward_backward_compute_chunk
    def fwd(phase):
        d = phase ^ m.is_in_second_half
        f0(phase)
        return "%dF%d" % (stage_of(d), micro_of(d, m.current_f_chunk_id[d] - 1))
    def bwd(phase, enable_zb=False):
        d = phase ^ m.is_in_second_half
        chunk = m.current_b_chunk_id[d]
        current["pending"] = "%dW%d" % (stage_of(d), micro_of(d, chunk))
        current["split"] = False
        b0(phase, enable_zb)
        return "%d%s%d" % (stage_of(d), "I" if current["split"] else "B", micro_of(d, chunk))
    def forward_compute(phase): rec.append(fwd(phase))
    def backward_compute(phase, enable_zb=False): rec.append(bwd(phase, enable_zb))
    def forward_backward_compute(phase0, phase1):
        d0, d1 = phase0 ^ m.is_in_second_half, phase1 ^ m.is_in_second_half
        c0, c1 = m.current_f_chunk_id[d0], m.current_b_chunk_id[d1]
        n = len(rec)
        current["pending"] = "%dW%d" % (stage_of(d1), micro_of(d1, c1))
        current["split"] = False
        # DualPipe's own method (overlapped path: both modules have overlapped_forward_backward);
        # inside it, the plain compute methods are not called.
        fb0(phase0, phase1)
        assert len(rec) == n and not current["split"]
        rec.append("(%dF%d;%dB%d)OVERLAP_F_B" % (stage_of(d0), micro_of(d0, c0), stage_of(d1), micro_of(d1, c1)))
    m._forward_compute_chunk = forward_compute
    m._backward_compute_chunk = backward_compute
    m._forward_backward_compute_chunk = forward_backward_compute
    x = Tensor()
    crit = lambda out, lab: Tensor()
    utils.chunk_tensor = lambda t, chunks, dim: [Tensor() for _ in range(chunks)]
    dp.scatter = lambda inputs, chunks, dim: [[Tensor()] for _ in range(chunks)]
    m.step(x, num_chunks=M, criterion=crit, labels=(x,), return_outputs=False)
    return rec

def accepts(P, M):
    # DualPipe.step's own assertions (and its constructor's rank_mapping), run for rank 0
    import traceback
    try:
        run(P, M, 0)
        return True
    except AssertionError:
        where = traceback.extract_tb(sys.exc_info()[2])[-1]
        # only step()'s argument checks count as a refusal
        if where.line.startswith("assert num_ranks % 2 == 0") or where.line.startswith("assert num_chunks > 0"):
            return False
        raise

if __name__ == "__main__":
    for P in range(2, 9, 2):
        for M in range(2, 4 * P + 1):
            if not accepts(P, M):
                continue
            print("case dualpipe --pp %d --micro %d" % (P, M))
            for r in range(P):
                print("%d: %s" % (r, " ".join(run(P, M, r))))
