#!/usr/bin/env python3
"""Checks the viewer's picture of a modeled step (issue 61) from its --layout-json, for CTest.

step_picture.py LAYOUT --stages N [--width W]

  every lane    drew something (lane_boxes[].marks > 0): no empty comm lane, no memory plot of
                a step that records no memory
  its label     centred on what the lane drew: the label's middle between ink_y0 and ink_y1
                (not beside the empty rows under a one-row bar)
                (a GPU's comm rows, transfers at once, share one label across them)
  every lane    but a thin summary row has a label: no "stage 1 comm 2" row without one
  its ink       fills the lane but for 3 px: no row of a lane left empty (a compute lane of
                seven rows with its bar on the first)
  every group   has a compute lane or a summary row for each of stages 0 to N-1, and its title
                ends within its header (title_x1 <= header_x1), whole ("...exposed/stage", not
                cut short: title_cut false)
  --width       the window's width (1600: the viewer's default size)
Exit 0 when all hold; else each failure on stderr and exit 1.
"""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("layout")
ap.add_argument("--stages", type=int, required=True)
ap.add_argument("--width", type=float)
a = ap.parse_args()
j = json.load(open(a.layout))
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)


if a.width is not None:
    check(j["width"] == a.width, f"the window is {j['width']} px wide, not {a.width}")
boxes = j["lane_boxes"]
check(boxes, "no lanes drawn")
labelled = 0
for b in boxes:
    name = b["lane"]
    check(b["marks"] > 0, f"{name}: drawn with nothing in it ({b['y0']} to {b['y1']})")
    if b["marks"] > 0 and b["kind"] != "memory":  # a memory plot is as high as its peak
        check(b["ink_y1"] - b["ink_y0"] >= b["y1"] - b["y0"] - 3,
              f"{name}: its lane runs from {b['y0']} to {b['y1']}, what it drew from {b['ink_y0']} to {b['ink_y1']}")
    if "label" in b and b["marks"] > 0:
        labelled += 1
        # A GPU's comm rows (transfers at once) share one label, centred across them all.
        rows = [c for c in boxes if c.get("label_y0") == b["label_y0"] and c["lane"].rsplit("/", 1)[0] == name.rsplit("/", 1)[0] and c["marks"] > 0]
        ink0, ink1 = min(c["ink_y0"] for c in rows), max(c["ink_y1"] for c in rows)
        middle = (b["label_y0"] + b["label_y1"]) / 2
        check(ink0 <= middle <= ink1,
              f"{name}: label '{b['label']}' centred at y = {middle}, its lane's bars from {ink0} to {ink1}")
        check(b["y0"] <= b["label_y1"] and b["label_y0"] <= b["y1"] or len(rows) > 1,
              f"{name}: label '{b['label']}' from y = {b['label_y0']} to {b['label_y1']}, outside its lane ({b['y0']} to {b['y1']})")
    elif b["kind"] != "summary":  # a thin summary row is labelled every few GPUs
        check(False, f"{name}: no label ({b['y0']} to {b['y1']})")
check(labelled > 0, "no label drawn")
for g in j["groups"]:
    lanes = [b["lane"] for b in boxes if b["lane"].startswith(g["name"] + "/")]
    for k in range(a.stages):
        check(f"{g['name']}/stage {k} compute" in lanes or f"{g['name']}/stage {k}" in lanes, f"{g['name']}: no lane of stage {k}: {lanes}")
    check(g["title_x1"] <= g["header_x1"], f"{g['name']}: its title ends at x = {g['title_x1']}, past its header's {g['header_x1']}")
    check(g["title"].endswith("exposed/stage") and not g["title_cut"], f"{g['name']}: title '{g['title']}', cut: {g['title_cut']}")
print(f"{len(boxes)} lanes in {len(j['groups'])} groups, {labelled} labelled; titles in {max(g['title_rows'] for g in j['groups'])} rows")
for f in fails:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
