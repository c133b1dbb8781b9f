#!/usr/bin/env python3
"""Reduces raw timelines (`MHC_TIMELINE_RAW=DIR mhc bench --backend cuda --timeline`) to the
medians kept in bench/results/timeline-*.json: per build, for each named block's stamps (the order
of scripts/timeline-cycles.py), the median over launches 3-40 of clock64 cycles from the block's
own wait and of globaltimer ns from block 0's wait.

  scripts/timeline-summary.py OUT.json "WHAT" NAME:COMMIT:RAW.json[:BLOCK,BLOCK...] [...]
BLOCKs default to 0 (the row's block; in the two-cluster kernel, 16 is cluster B's rank 0).
"""
import importlib.util
import json
import os
import statistics
import sys

spec = importlib.util.spec_from_file_location(
    "tc", os.path.join(os.path.dirname(os.path.abspath(__file__)), "timeline-cycles.py"))
tc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tc)
WAIT = 2  # the stamp after the PDL wait


def block_medians(launches, blk):
    out = {}
    for slot, name in tc.ORDER:
        cyc = [l["cycles"][blk][slot] - l["cycles"][blk][WAIT] for l in launches
               if l["cycles"][blk][slot] and l["cycles"][blk][WAIT]]
        ns = [l["blocks"][blk][slot] - l["blocks"][0][WAIT] for l in launches
              if l["blocks"][blk][slot] and l["blocks"][0][WAIT]]
        if cyc:
            out[name] = {"cycles_from_own_wait": statistics.median(cyc),
                         "ns_from_block0_wait": statistics.median(ns) if ns else None}
    return out


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out, what, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    builds = {}
    for s in specs:
        parts = s.split(":")
        if len(parts) not in (3, 4):
            sys.exit(f"bad spec {s!r}: NAME:COMMIT:RAW.json[:BLOCKS]")
        name, commit, path = parts[:3]
        blocks = [int(b) for b in parts[3].split(",")] if len(parts) == 4 else [0]
        d = json.load(open(path))
        launches = d["launches"][2:40]
        if not launches:
            sys.exit(f"{path}: fewer than three launches")
        builds[name] = {"kernel": launches[0]["kernel"], "commit": commit,
                        "blocks": {str(b): block_medians(launches, b) for b in blocks}}
    json.dump({"what": what, "builds": builds}, open(out, "w"), indent=1)
    print(f"{out}: {', '.join(builds)}")


if __name__ == "__main__":
    main()
