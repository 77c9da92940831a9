#!/usr/bin/env python3
"""PyTorch's lowered schedules on the command line: `generate --torch-comms` and
`convert --torch-comms` write the _comms CSV PyTorch's lowering makes, and a compute_comms CSV
is checked and simulated under --overlap-p2p (PyTorch's runtime semantics) unless
--no-overlap-p2p; a compute_only CSV and JSON stay blocking.

    torch_comms_cli.py PPSCHED DATA_DIR
"""
import json
import os
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402




def main():
    exe, data = sys.argv[1], sys.argv[2]
    comms = os.path.join(data, "schedules", "pytorch_comms", "Interleaved1F1B_pp4_m8.csv")
    cli = Cli(exe, timeout=120, stop="exit", verbose=True)
    expect = cli.check

    with tempfile.TemporaryDirectory() as tmp:
        compute = os.path.join(tmp, "compute.csv")
        lowered = os.path.join(tmp, "lowered.csv")
        cli.run("generate", "interleaved-1f1b", "--pp", "4", "--vpp", "2", "--micro", "8", "--format", "csv",
                "-o", compute)
        cli.run("convert", compute, "-o", compute.replace(".csv", "_only.csv"), "--csv-kind", "compute_only")
        cli.run("convert", compute.replace(".csv", "_only.csv"), "-o", lowered, "--torch-comms")
        with open(comms, newline="") as f:
            want = f.read().replace("\r\n", "\n")
        with open(lowered, newline="") as f:
            expect(f.read() == want, "convert --torch-comms of PyTorch's compute_only CSV writes its _comms CSV")
        gen = cli.run("generate", "interleaved-1f1b", "--pp", "4", "--vpp", "2", "--micro", "8", "--format", "csv",
                      "--torch-comms").stdout
        expect(gen == want, "generate --torch-comms writes the same")
        err = cli.run("generate", "zbv", "--pp", "2", "--vpp", "2", "--micro", "4", "--torch-comms", "--batch", expect=2).stderr
        expect("--batch cannot be combined" in err, "--torch-comms refuses --batch (exit 2)")
        err = cli.run("generate", "interleaved-1f1b", "--pp", "2", "--vpp", "2", "--micro", "4", "--overlap-b-f",
                      "--torch-comms", expect=2).stderr
        expect("has no place in PyTorch's compute-only schedule" in err,
               "an OVERLAP_B_F has no PyTorch lowering (exit 2): " + err.strip()[:120])

        def check(path, *flags):
            p = cli.run("check", path, "--json", *flags)
            return json.loads(p.stdout)["overlap_p2p"], p.stderr

        def makespan(path, *flags):
            j = cli.json("simulate", path, *flags)
            return j["overlap_p2p"], j["makespan_ms"]

        mode, note = check(comms)
        expect(mode and "compute_comms CSV" in note, "check: a compute_comms CSV is checked under --overlap-p2p, with a note")
        expect(check(comms, "--no-overlap-p2p")[0] is False, "check --no-overlap-p2p checks it blocking")
        expect(check(compute.replace(".csv", "_only.csv"))[0] is False, "check: a compute_only CSV stays blocking")
        json_path = os.path.join(tmp, "s.json")
        cli.run("convert", comms, "-o", json_path)
        expect(check(json_path)[0] is False, "check: the same schedule as JSON stays blocking")
        o_default, ms_default = makespan(comms)
        o_explicit, ms_explicit = makespan(json_path, "--overlap-p2p")
        o_blocking, ms_blocking = makespan(comms, "--no-overlap-p2p")
        expect(o_default and o_explicit and not o_blocking, "simulate reports the mode it ran")
        expect(abs(ms_default - ms_explicit) < 1e-9 and ms_blocking > ms_default,
               f"simulate: default = --overlap-p2p ({ms_default:.1f} ms), blocking slower ({ms_blocking:.1f} ms)")
        err = cli.run("check", comms, "--overlap-p2p", "--no-overlap-p2p", expect=2).stderr
        expect("excludes" in err, "--overlap-p2p and --no-overlap-p2p exclude each other (exit 2)")
    cli.finish("torch_comms_cli")


if __name__ == "__main__":
    main()
