#!/usr/bin/env python3
"""SVG labels stay true at any M (issue 23, item 6).

    svg_labels.py PPSCHED

For M = 4, 32 and 128 (1F1B and interleaved 1F1B, V = 2): either every compute rect a pixel or
wider carries its micro-batch label, the labels of each rank being exactly the micro-batches
its compute steps run (never a dropped subset), or no rect has one and the legend says the ids
are on hover only. With V = 2 the two local stages are shaded apart and named in the legend.
When rsvg-convert (Debian's librsvg2-bin) is installed, every SVG is also rendered by it.
"""
import os
import re
import shutil
import sys
import xml.etree.ElementTree as ET
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

EXE = sys.argv[1]
cli = Cli(EXE, timeout=120, tmp_prefix="ppsched_svg_")
check, tmp = cli.check, cli.tmp
NS = "{http://www.w3.org/2000/svg}"
COMPUTE = {"f", "b", "bi", "bw"}


rsvg = shutil.which("rsvg-convert")
for family, vpp in [("1f1b", 1), ("interleaved-1f1b", 2)]:
    for m in [4, 32, 128]:
        svg = os.path.join(tmp, "%s_%d.svg" % (family, m))
        args = ["simulate", "--generate", family, "--pp", "4", "--micro", str(m), "--svg", svg]
        if vpp > 1:
            args += ["--vpp", str(vpp)]
        if cli.run(*args).returncode != 0:
            continue
        root = ET.parse(svg).getroot()
        legend = " ".join(t.text or "" for t in root.iter(NS + "text"))
        labelled, unlabelled, per_rank = 0, 0, {}
        for g in root.iter(NS + "g"):
            gid = g.get("id", "")
            if not gid.startswith("rank"):
                continue
            rank = int(gid[4:])
            labels = set()
            for lane in g.findall(NS + "g"):
                kids = list(lane)
                for k, el in enumerate(kids):
                    cls = (el.get("class") or "").split()
                    if el.tag != NS + "rect" or not cls or cls[0] not in COMPUTE or float(el.get("width", 0)) < 1:
                        continue
                    if el.get("y") not in (None, "0"):
                        continue  # a composite's later band: the label follows its first band's rect
                    nxt = next((e for e in kids[k + 1:] if e.tag == NS + "text" or
                                (e.tag == NS + "rect" and e.get("y") in (None, "0"))), None)
                    if nxt is not None and nxt.tag == NS + "text":
                        labelled += 1
                        labels.update(int(x) for x in re.findall(r"\d+", nxt.text or ""))
                    else:
                        unlabelled += 1
            per_rank[rank] = labels
        what = "%s V=%d M=%d" % (family, vpp, m)
        check(labelled == 0 or unlabelled == 0, "%s: %d rects labelled, %d not: a dropped subset" % (what, labelled, unlabelled))
        if labelled:
            for rank, labels in per_rank.items():
                check(labels == set(range(m)), "%s: rank %d labels %s, expected 0..%d" % (what, rank, sorted(labels)[:40], m - 1))
        else:
            check("micro-batch ids on hover only" in legend, "%s: no labels and no note" % what)
        check(labelled > 0 or m > 4, "%s: the small picture keeps its labels" % what)
        if vpp > 1:
            check("local stage 0" in legend and "local stage 1" in legend, "%s: local stages in the legend" % what)
            shaded = [r for r in root.iter(NS + "rect") if "v1" in (r.get("class") or "").split()]
            check(len(shaded) > 0, "%s: the second local stage is shaded" % what)
        if rsvg:
            r = cli.command([rsvg, "-o", svg + ".png", svg], expect=None)
            check(r.returncode == 0 and os.path.getsize(svg + ".png") > 0, "%s: rsvg-convert: %s" % (what, r.stderr[-300:]))

cli.finish("svg_labels" + ("" if rsvg else " (rsvg-convert not installed: SVGs checked as XML only)"))
