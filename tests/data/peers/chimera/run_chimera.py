"""Runs Shigangli/Chimera's chimera_pipeline_rank.py (AutoGeneratePipelineRank, unmodified) the way
its runtime does (pipeline.py, _call_chimera_pipeline: AutoGeneratePipelineRank(num_stages, 2,
num_micro_batches * 2), generate_pipeline(), then every sub_schedule get_schedule(True) yields;
rank r runs column r: 'f' forward, 'b' backward, 's' nb_sync_grad of the pipe's stage on r).

get_schedule's tokens name the pipeline, not the micro-batch; the micro-batch of each f/b is read
from the pipelines' own next_pass results (MyPipeLine.next_pass wrapped to record what it
returns; the column of a micro-batch is its device mod P, as get_schedule computes it).

ppsched's numbering: the pipelines in creation order (get_schedule's `pipelines` list) each carry
P/2 micro-batches, pipeline i the micro-batches i*P/2 .. i*P/2 + P/2 - 1 in the order of its
micro_batch_ids. up_or_down True (printed '@down@', stage 0 on rank 0) is ppsched's copy 0:
model stage j on rank j is stage j; the other ('@up@', stage 0 on rank P-1) is copy 1: model
stage j on rank P-1-j is stage P + j. A sync is REPLICA_GRAD_SYNC of the pipe's stage on the rank.
"""
import sys
sys.path.insert(0, sys.argv[1])
import chimera_pipeline_rank as C

def run(P, M):
    created = []
    init0 = C.MyPipeLine.__init__
    def init(self, *a, **k):
        init0(self, *a, **k)
        created.append(self)
    C.MyPipeLine.__init__ = init
    calls = []
    next0 = C.MyPipeLine.next_pass
    def next_pass(self):
        out = next0(self)
        calls.append((self, dict(out[0]), dict(out[2])))
        return out
    C.MyPipeLine.next_pass = next_pass
    try:
        # pipeline.py: AutoGeneratePipelineRank(self.num_stages, 2, num_micro_batches*2), where
        # num_micro_batches is per pipeline (main_bert.py halves it for dual pipelines)
        g = C.AutoGeneratePipelineRank(P, 2, M)
        g.generate_pipeline()
        ranks = [[] for _ in range(P)]
        seen = 0
        for sub in g.get_schedule(True):
            step_calls = calls[seen:]
            seen = len(calls)
            for r, tok in enumerate(sub):
                if tok == "":
                    continue
                index, direction, kind = tok.split("@")
                pipe = created[int(index)]
                copy = 0 if pipe.up_or_down else 1
                stage = r if copy == 0 else P + (P - 1 - r)
                if kind == "s":
                    ranks[r].append("%dREPLICA_GRAD_SYNC" % stage)
                    continue
                found = [(k, d[k]) for (p, devs, d) in step_calls if p is pipe for k in devs if devs[k] % P == r]
                assert len(found) == 1, (tok, found)
                k, sign = found[0]
                assert (sign == 1) == (kind == "f")
                micro = int(index) * (P // 2) + pipe.micro_batch_ids.index(k)
                ranks[r].append("%d%s%d" % (stage, "F" if kind == "f" else "B", micro))
        return ranks
    finally:
        C.MyPipeLine.__init__ = init0
        C.MyPipeLine.next_pass = next0

if __name__ == "__main__":
    for P, top in ((4, 32), (8, 32)):
        for M in range(P, top + 1, P):
            print("case chimera --pp %d --micro %d" % (P, M))
            for r, ops in enumerate(run(P, M)):
                print("%d: %s" % (r, " ".join(ops)))
