#!/usr/bin/env python3
"""Merges the JSON of a busy-SM sweep (DIR/sms-hH-sS-TAG.json, MHC_STREAM_SMS=S, 0 = the
default) into one list of the fused rows for bench/results/, each with `stream_sms`, `pass` and
`run` added, and prints each point against the default's mean.

  scripts/merge-sms.py OUT.json RUN DIR [RUN DIR ...]
"""
import collections
import glob
import json
import os
import re
import sys

NAME = re.compile(r"sms-h(\d+)-s(\d+)-(\w+)\.json")


def main():
    if len(sys.argv) < 4 or len(sys.argv) % 2:
        sys.exit(__doc__)
    out, pairs = sys.argv[1], sys.argv[2:]
    rows = []
    for run, d in zip(pairs[::2], pairs[1::2]):
        for f in sorted(glob.glob(f"{d}/sms-*.json")):
            m = NAME.match(os.path.basename(f))
            if not m:
                continue
            for r in json.load(open(f)):
                if r.get("path") == "fused":
                    rows.append(dict(r, stream_sms=int(m.group(2)), **{"pass": m.group(3)}, run=run))
    with open(out, "w") as fh:
        json.dump(rows, fh, indent=1)
    us = collections.defaultdict(list)
    for r in rows:
        us[(r["run"], r["hidden"], r["tokens"], r["stream_sms"])].append(r["us_per_seam"])
    for run, h in sorted({(k[0], k[1]) for k in us}):
        sms = sorted({k[3] for k in us if k[:2] == (run, h)} - {0})
        print(f"{run} H = {h}: default, then MHC_STREAM_SMS = {', '.join(map(str, sms))}")
        for t in sorted({k[2] for k in us if k[:2] == (run, h)}):
            base = us.get((run, h, t, 0))
            if not base:
                continue
            b = sum(base) / len(base)
            cells = []
            for s in sms:
                v = us.get((run, h, t, s))
                cells.append(f"{100 * (sum(v) / len(v) / b - 1):+.1f} %" if v else "-")
            print(f"  T = {t}: {b:.2f} us ({len(base)} runs) | " + " | ".join(cells))


if __name__ == "__main__":
    main()
