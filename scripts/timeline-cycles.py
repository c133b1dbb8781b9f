#!/usr/bin/env python3
"""Median SM cycles between the stamps of a cluster seam's row block, from the raw timelines of
`MHC_TIMELINE_RAW=DIR mhc bench --backend cuda --timeline ...` (DIR/timeline-raw-h*-t*-pdl*.json;
needs the instrumented kernels, `mhc kernels --timeline`). Block 0 of every launch but the first
two, stamps in the order the row's block passes them (kernels/common.cuh, TL_* slots), each
interval the median over the launches. Stamps cost up to ~150 cycles each (PERF_NOTES.md, the
measurement of run 117): use the intervals to locate phases and to compare builds, not as the
phases' own cost.

  scripts/timeline-cycles.py DIR/timeline-raw-h5120-t1-pdl1.json [...]
"""
import json
import statistics
import sys

# (slot, name) in the order of the row's block's chain.
ORDER = [(0, "start"), (1, "pre-wait"), (2, "wait"), (3, "coefs"), (4, "elementwise"), (5, "fn"),
         (14, "projection"), (7, "leaves sent"), (8, "leaves landed"), (9, "leaf pass"),
         (10, "upper pass"), (15, "gates start"), (16, "sk start"), (17, "sk end"), (11, "stores")]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for path in sys.argv[1:]:
        d = json.load(open(path))
        launches = d["launches"][2:]
        if not launches:
            print(f"== {path}: fewer than three launches")
            continue
        print(f"== {path} {launches[0]['kernel']}")
        prev, total = None, 0.0
        for slot, name in ORDER:
            vals = [l["cycles"][0][slot] - l["cycles"][0][prev[0]] for l in launches
                    if prev is not None and l["cycles"][0][slot] and l["cycles"][0][prev[0]]]
            if vals:
                m = statistics.median(vals)
                total += m
                print(f"  {prev[1]:>14} -> {name:<14} {m:8.0f}")
            if any(l["cycles"][0][slot] for l in launches):
                prev = (slot, name)
        print(f"  total {total:.0f}")


if __name__ == "__main__":
    main()
