#!/usr/bin/env python3
"""A static cycle model of one warp's SASS loops, for ranking variants of a latency-bound loop
(the gates' Sinkhorn) without a GPU. PERF_NOTES.md, "A static cycle model of SASS loops", has
its calibration against the microbenchmark's measurements.

The model: each instruction issues `stall` cycles after the one before it (the stall count that
ptxas writes into the control bits, which covers every fixed-latency dependency), and not before
the scoreboards in its wait mask are released; a variable-latency producer (MUFU, loads) releases
its write scoreboard LAT cycles after it issues (MUFU: --mufu, others: --other). The loop runs
--iters times and the steady-state cycles per trip are printed. Other warps, bank conflicts and
the instruction cache are not modelled.

  scripts/sass-loop-model.py FILE [--kernel NAME] [--range LO HI] [--mufu 24] [--has MUFU.RCP]
FILE: a cubin (disassembled with the cuobjdump of scripts/nvrtc-venv.sh, in VENV as for
scripts/sass.sh) or the text cuobjdump -sass printed. Without --range, every backward branch of at most --max-body
instructions whose body holds an instruction matching --has is a loop to model.
"""
import argparse
import os
import re
import subprocess
import sys

INSN = re.compile(r"\s+/\*([0-9a-f]+)\*/\s+(.*?)\s*;\s+/\* 0x([0-9a-f]{16}) \*/")
HEX = re.compile(r"/\* 0x([0-9a-f]{16}) \*/")
BRANCH = re.compile(r"\bBRA (?:`\(.*?\)\s*)?0x([0-9a-f]+)")


def disassemble(path):
    if not path.endswith(".cubin"):
        return open(path).read()
    # cuobjdump from the NVRTC venv that scripts/sass.sh uses (VENV, as there).
    here = os.path.dirname(os.path.abspath(__file__))
    venv = os.environ.get("VENV", "/tmp/mhc-sass-venv")
    cu = subprocess.run(["bash", os.path.join(here, "nvrtc-venv.sh"), venv, "--tools"], check=True,
                        capture_output=True, text=True).stdout.strip()
    return subprocess.run([os.path.join(cu, "bin", "cuobjdump"), "-sass", path], check=True,
                          capture_output=True, text=True).stdout


def functions(text):
    """(name, [(addr, text, stall, write_sb, read_sb, wait_mask)]) for each function."""
    for part in re.split(r"\n\s+Function : ", text)[1:]:
        lines = part.split("\n")
        ins = []
        for i, line in enumerate(lines):
            m = INSN.match(line)
            if not m or i + 1 >= len(lines):
                continue
            hi = HEX.search(lines[i + 1])
            if not hi:
                continue
            ctrl = int(hi.group(1), 16) >> 41
            ins.append((int(m.group(1), 16), m.group(2), ctrl & 0xF, (ctrl >> 5) & 7,
                        (ctrl >> 8) & 7, (ctrl >> 11) & 0x3F))
        yield lines[0].strip(), ins


def simulate(body, mufu, other, iters):
    """Steady-state cycles per trip of `body` run back to back, and the stall sum of one trip."""
    t, sb, starts = 0, [0] * 6, []
    for _ in range(iters):
        starts.append(t)
        for _, txt, stall, wsb, rsb, wait in body:
            for b in range(6):
                if wait >> b & 1:
                    t = max(t, sb[b])
            if wsb != 7:
                sb[wsb] = t + (mufu if "MUFU" in txt else other)
            if rsb != 7:
                sb[rsb] = t + 2
            t += stall
    warm = iters // 3
    return (starts[-1] - starts[warm]) / (len(starts) - 1 - warm), sum(x[2] for x in body)


def loops(ins, has, max_body):
    for addr, txt, *_ in ins:
        m = BRANCH.search(txt)
        if not m:
            continue
        target = int(m.group(1), 16)
        body = [x for x in ins if target <= x[0] <= addr]
        if target < addr and len(body) <= max_body and any(has in x[1] for x in body):
            yield target, addr, body


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--kernel", help="only functions whose name contains this")
    ap.add_argument("--range", nargs=2, metavar=("LO", "HI"), help="hex addresses of one loop body")
    ap.add_argument("--has", default="MUFU.RCP", help="a loop body must contain this (default MUFU.RCP)")
    ap.add_argument("--max-body", type=int, default=120)
    ap.add_argument("--mufu", type=int, default=24, help="MUFU latency in cycles (default 24)")
    ap.add_argument("--other", type=int, default=30, help="other variable latencies (default 30)")
    ap.add_argument("--iters", type=int, default=24)
    a = ap.parse_args()
    found = False
    for name, ins in functions(disassemble(a.file)):
        if a.kernel and a.kernel not in name:
            continue
        if a.range:
            lo, hi = (int(x, 16) for x in a.range)
            cands = [(lo, hi, [x for x in ins if lo <= x[0] <= hi])]
        else:
            cands = list(loops(ins, a.has, a.max_body))
        for lo, hi, body in cands:
            found = True
            cyc, stalls = simulate(body, a.mufu, a.other, a.iters)
            print(f"{name} {lo:#x}-{hi:#x}: {len(body)} instructions, stall sum {stalls}, "
                  f"{cyc:.0f} cycles a trip (MUFU latency {a.mufu})")
    if not found:
        sys.exit("no loop found")


if __name__ == "__main__":
    main()
