#!/usr/bin/env python3
"""Merges the JSON of `scripts/gpu-session.sh seamab` (DIR/seamab-[op_X-]BIN-hH-rR.json) into one
list of the fused rows for bench/results/, each with `variant`, `round` and `run` added.

  scripts/merge-ab.py OUT.json RUN DIR:BIN:VARIANT [DIR:BIN:VARIANT ...]
RUN: a label for the GPU run (e.g. run129); BIN: the binary's name in the file names (mhc,
mhc-fold, ...); VARIANT: what to call its rows (e.g. main-9b88347, attempt157).
"""
import glob
import json
import os
import re
import sys

NAME = re.compile(r"seamab-(op_[a-z0-9-]+?-)?(mhc(?:-[a-z0-9]+)*?)-h(\d+)-r(\d+)\.json")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out, run, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    rows = []
    for spec in specs:
        d, name, variant = spec.split(":", 2)
        for f in sorted(glob.glob(f"{d}/seamab-*.json")):
            m = NAME.match(os.path.basename(f))
            if not m or m.group(2) != name:
                continue
            for r in json.load(open(f)):
                if r.get("path") != "fused":
                    continue
                r.update(variant=variant, round=int(m.group(4)), run=run)
                rows.append(r)
    json.dump(rows, open(out, "w"))
    print(len(rows), "rows")


if __name__ == "__main__":
    main()
