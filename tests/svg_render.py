#!/usr/bin/env python3
"""SVG timelines rendered by a real SVG renderer, their labels checked against the schedule
(issue 23, item 6).

    svg_render.py PPSCHED

For 1F1B and interleaved 1F1B (V = 2) at P = 4 and M = 4, 32 and 128: `ppsched generate` writes
the schedule, `ppsched simulate --svg` its timeline, and rsvg-convert (Debian's librsvg2-bin,
installed by tools/setup) renders it: exit 0 and a non-empty PNG of the SVG's width x height
pixels. The labels the SVG text carries must match the schedule: when labels are shown, every
compute step of every rank has its rect labelled with its own micro-batch id (the id its
tooltip names, and the rank's labels are exactly the micro ids of its compute steps); when the
all-or-none rule drops them, no rect has one and the note says the ids are on hover only.

Without rsvg-convert the test is skipped (exit 77), except under CI=true, where it fails: the CI
machine is set up by tools/setup, so a missing renderer means the setup is broken.
"""
import collections
import json
import os
import re
import shutil
import struct
import sys
import xml.etree.ElementTree as ET
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

EXE = sys.argv[1]
NS = "{http://www.w3.org/2000/svg}"
COMPUTE_CLASSES = {"f", "b", "bi", "bw"}
COMPUTE_OPS = {"FWD", "BWD", "BWD_INPUT", "BWD_WEIGHT"}
HOVER_NOTE = "micro-batch ids on hover only"
cli = Cli(EXE, tmp_prefix="ppsched_svg_render_")
check = cli.check


def png_size(path):
    """(width, height) from a PNG's IHDR chunk, or None when the file is no PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def expected_micros(schedule_path):
    """Per rank, the multiset of micro-batch ids of its compute steps (what the labels must be)."""
    doc = json.load(open(schedule_path))
    out = {}
    for rank, program in enumerate(doc["programs"]):
        micros = collections.Counter()
        for step in program:
            if isinstance(step, dict) and step.get("op") in COMPUTE_OPS:
                micros[step["micro"]] += 1
        out[rank] = micros
    return out


def svg_labels(root):
    """Per rank: [(micro named by the rect's tooltip, label text or None)] for each compute rect."""
    out = {}
    for g in root.iter(NS + "g"):
        gid = g.get("id", "")
        if not re.fullmatch(r"rank\d+", gid):
            continue
        rects = []
        for lane in g.findall(NS + "g"):
            kids = list(lane)
            for k, el in enumerate(kids):
                cls = (el.get("class") or "").split()
                if el.tag != NS + "rect" or not cls or cls[0] not in COMPUTE_CLASSES:
                    continue
                if el.get("y") not in (None, "0"):
                    continue  # a composite's later band: the label follows its first band's rect
                title = el.find(NS + "title")
                m = re.match(r"[A-Za-z]+(\d+)", title.text if title is not None and title.text else "")
                tooltip_micro = int(m.group(1)) if m else None
                nxt = next((e for e in kids[k + 1:] if e.tag == NS + "text" or
                            (e.tag == NS + "rect" and e.get("y") in (None, "0"))), None)
                label = nxt.text if nxt is not None and nxt.tag == NS + "text" else None
                rects.append((tooltip_micro, label))
        out[int(gid[4:])] = rects
    return out


rsvg = shutil.which("rsvg-convert")
if not rsvg:
    why = "rsvg-convert is not installed (Debian's librsvg2-bin; tools/setup installs it)"
    if os.environ.get("CI") == "true":
        print("svg_render: FAILED under CI=true: " + why)
        sys.exit(1)
    print("svg_render: skipped: " + why)
    sys.exit(77)

tmp = cli.tmp
rendered = 0
for family, vpp in [("1f1b", 1), ("interleaved-1f1b", 2)]:
    for m in [4, 32, 128]:
        what = "%s V=%d M=%d" % (family, vpp, m)
        base = os.path.join(tmp, "%s_%d" % (family, m))
        gen = ["generate", family, "--pp", "4", "--micro", str(m), "-o", base + ".json"]
        if vpp > 1:
            gen += ["--vpp", str(vpp)]
        sim = ["simulate", base + ".json", "--svg", base + ".svg"]
        for args in (gen, sim):
            cli.run(*args)
        if not os.path.exists(base + ".svg"):
            continue
        # The renderer: exit 0, a PNG of the SVG's size.
        cli.command([rsvg, "-o", base + ".png", base + ".svg"])
        root = ET.parse(base + ".svg").getroot()
        want = (int(float(root.get("width"))), int(float(root.get("height"))))
        got = png_size(base + ".png") if os.path.exists(base + ".png") and os.path.getsize(base + ".png") > 0 else None
        check(got == want, "%s: rendered PNG is %s pixels, the SVG says %s" % (what, got, want))
        rendered += got is not None
        # The labels against the schedule.
        expected = expected_micros(base + ".json")
        labels = svg_labels(root)
        texts = " ".join(t.text or "" for t in root.iter(NS + "text"))
        check(sorted(labels) == sorted(expected), "%s: SVG ranks %s, schedule ranks %s" % (what, sorted(labels), sorted(expected)))
        n_labelled = sum(1 for rects in labels.values() for _, label in rects if label is not None)
        n_rects = sum(len(rects) for rects in labels.values())
        check(n_rects == sum(sum(c.values()) for c in expected.values()),
              "%s: %d compute rects, the schedule has %d compute steps" % (what, n_rects, sum(sum(c.values()) for c in expected.values())))
        if n_labelled:
            check(n_labelled == n_rects, "%s: %d of %d compute rects labelled: a dropped subset" % (what, n_labelled, n_rects))
            check(HOVER_NOTE not in texts, "%s: labels shown and the hover-only note too" % what)
            for rank, rects in labels.items():
                for micro, label in rects:
                    check(label is not None and label.strip() == str(micro),
                          "%s: rank %d: a rect of micro %s labelled %r" % (what, rank, micro, label))
                got_micros = collections.Counter(int(label) for _, label in rects if label and label.strip().isdigit())
                check(got_micros == expected.get(rank), "%s: rank %d labels %s, its compute steps run micros %s"
                      % (what, rank, sorted(got_micros.items())[:20], sorted(expected.get(rank, {}).items())[:20]))
        else:
            check(HOVER_NOTE in texts, "%s: no labels and no note that the ids are on hover only" % what)
            tooltips = any(micro is not None for rects in labels.values() for micro, _ in rects)
            if not tooltips:
                # Past SvgOptions::max_tooltips slices the tooltips go too, and the note says so.
                check("tooltips left out" in texts, "%s: neither labels nor tooltips, and no note saying so" % what)
            for rank, rects in labels.items():
                if tooltips:
                    got_micros = collections.Counter(micro for micro, _ in rects)
                    check(got_micros == expected.get(rank), "%s: rank %d tooltips name micros %s, its compute steps %s"
                          % (what, rank, sorted(got_micros.items())[:20], sorted(expected.get(rank, {}).items())[:20]))
                check(len(rects) == sum(expected.get(rank, {}).values()),
                      "%s: rank %d has %d compute rects for %d compute steps" % (what, rank, len(rects), sum(expected.get(rank, {}).values())))
        check(n_labelled > 0 or m > 4, "%s: the small picture keeps its labels" % what)

cli.finish("svg_render: %d SVGs rendered by %s" % (rendered, rsvg))
