#!/usr/bin/env python3
"""A projtune/projab session's JSONs -> flat rows appended to a bench/results file.

    scripts/flatten-proj.py DIR SESSION OUT [NAME=VARIANT ...]

DIR holds gpu-session.sh's projtune-<plan>[-r<round>].json and projab-<bin>-<round>.json;
SESSION labels the rows (date, attempt, commit); NAME=VARIANT renames a projab binary
(e.g. mhc-pin="pinned wait everywhere"); "auto" and "new" are this bundle's table.
"""
import glob
import json
import os
import re
import sys

d, session, out = sys.argv[1:4]
names = dict(a.split("=", 1) for a in sys.argv[4:])
rows = []
for f in sorted(glob.glob(f"{d}/projtune-*.json") + glob.glob(f"{d}/projab-*.json")):
    base = os.path.basename(f)
    m = re.match(r"projtune-(.*?)(?:-r(\d+))?\.json$", base)
    if m:
        plan, rnd = m.group(1), int(m.group(2) or 1)
        variant = "table" if plan == "auto" else "MHC_PROJ_PLAN=" + plan
    else:
        m = re.match(r"projab-(.*)-(\d+)\.json$", base)
        plan, rnd = m.group(1), int(m.group(2))
        variant = "table" if plan == "new" else names.get(plan, plan)
    for e in json.load(open(f)):
        if e["op"] != "projection":
            continue
        rows.append(dict(session=session, variant=variant, commit=e["commit"], round=rnd,
                         path=e["path"], pdl=e["pdl"], k=e["hidden"], n=e["n"], m=e["tokens"],
                         us=round(e["us_per_seam"], 3), spread=round(e["spread"], 4),
                         pct_of_copy_bw=round(e["pct_of_copy_bw"], 2),
                         copy_gbps=round(e["copy_gbps"], 1), gpu=e["gpu"], date=e["date"]))
old = json.load(open(out)) if os.path.exists(out) else []
with open(out, "w") as fh:
    json.dump(old + rows, fh, indent=1)
print(len(rows), "rows ->", out)
