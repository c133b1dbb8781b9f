#!/usr/bin/env python3
"""Markdown tables for BENCHMARKS.md from `mhc bench --json` files.

    scripts/bench-tables.py seam bench/results/seam-h5120-h200.json [OP]  # OP: seam (default), seam_v4, ...
    scripts/bench-tables.py projection bench/results/projection-h200.json
    scripts/bench-tables.py seamab DIR BASE [OP]  # the seamab step's files in DIR, against binary BASE
    scripts/bench-tables.py projtune DIR [PLAN...]  # the projtune step's files in DIR, against "auto"
"""
import glob
import json
import os
import re
import sys


def node(rows):
    """The one-block empty-kernel node with PDL on (`mhc bench` rows with op "node"), if timed."""
    for r in rows:
        if r.get("op") == "node" and r["tokens"] == 1 and r.get("pdl", False):
            return r["us_per_seam"]
    return None


def seam(path, op="seam"):
    rows = json.load(open(path))
    nd = node(rows)
    by = {}
    for r in rows:
        if r.get("op", "seam") == op:
            by[(r["tokens"], r["path"], r["mode"], r.get("pdl", False))] = r
    if nd is not None:
        print(f"One graph node (empty kernel, one block, PDL on): {nd:.2f} us.\n")
    print("| T | fused, graph, PDL (us) | fused, graph, no PDL (us) | launches | GB/s (PDL) | % of copy (PDL) "
          "| floor (us) | 2 x (floor + node) (us) | fused, eager (us) | host us/call | unfused, graph (us) "
          "| unfused launches | speedup (PDL) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in sorted({k[0] for k in by}):
        on = by.get((t, "fused", "graph", True))
        off = by.get((t, "fused", "graph", False))
        eager = by.get((t, "fused", "eager", True)) or by.get((t, "fused", "eager", False))
        uf = by.get((t, "unfused", "graph", False))
        main = on or off
        cells = [
            str(t),
            f"{on['us_per_seam']:.1f}" if on else "",
            f"{off['us_per_seam']:.1f}" if off else "",
            f"{main['launches_per_seam']:.0f}",
            f"{main['gbps']:.0f}",
            f"{main['pct_of_copy_bw']:.1f}",
            f"{main['floor_us']:.2f}",
            (f"{2 * (main['floor_us'] + nd):.1f} ({'met' if main['us_per_seam'] <= 2 * (main['floor_us'] + nd) else 'missed'})"
             if nd is not None else ""),
            f"{eager['us_per_seam']:.1f}" if eager else "",
            f"{eager['host_us_per_call']:.1f}" if eager else "",
            f"{uf['us_per_seam']:.1f}" if uf else "",
            f"{uf['launches_per_seam']:.0f}" if uf else "",
            f"{uf['us_per_seam'] / main['us_per_seam']:.1f}x" if uf else "",
        ]
        print("| " + " | ".join(cells) + " |")


def seamab(folder, base, op=None):
    """A/B of binaries timed in one run (gpu-session.sh seamab): per H and T, each binary's rounds
    (fused, graph, PDL on) and the change of its mean against BASE's. OP: the runs of AB_OP=OP
    (files seamab-op_OP-<name>-...), else the seam's."""
    runs = {}  # (name, H) -> {T: [us per round]}
    prefix = f"op_{op}-" if op else ""
    want = (op or "seam").replace("-", "_")
    for f in sorted(glob.glob(os.path.join(folder, "seamab-*-h*-r*.json"))):
        m = re.match(r"seamab-(.+)-h(\d+)-r(\d+)\.json$", os.path.basename(f))
        name, h = m.group(1), int(m.group(2))
        if name.startswith("op_") != bool(op) or not name.startswith(prefix):
            continue
        name = name[len(prefix):]
        for r in json.load(open(f)):
            if r.get("op") == want and r["path"] == "fused" and r["mode"] == "graph" and r.get("pdl"):
                runs.setdefault((name, h), {}).setdefault(r["tokens"], []).append(r["us_per_seam"])
    names = [base] + sorted({n for n, _ in runs} - {base})
    print("| H | T | " + " | ".join(names) + " |")
    print("|---:|---:|" + "---:|" * len(names))
    mean = lambda v: sum(v) / len(v)
    for h in sorted({h for _, h in runs}, key=lambda h: (h != 5120, h)):
        ref = runs.get((base, h), {})
        for t in sorted(ref):
            cells = [str(h), str(t)]
            for n in names:
                v = runs.get((n, h), {}).get(t)
                if not v:
                    cells.append("")
                    continue
                text = " / ".join(f"{x:.2f}" for x in v)
                if n != base:
                    text += f" ({100 * (mean(v) / mean(ref[t]) - 1):+.1f} %)"
                cells.append(text)
            print("| " + " | ".join(cells) + " |")


def projtune(folder, *plans):
    """The projection under forced plans (gpu-session.sh projtune): per (K, N, M), the best of each
    plan's rounds (fused, PDL on) with its % of copy and its change against the table's ("auto").
    PLAN: the plans to show (MHC_PROJ_PLAN values as in the file names), default every one found."""
    runs = {}  # plan -> {(K, N, M): [(us, % copy) per round]}
    for f in sorted(glob.glob(os.path.join(folder, "projtune-*.json"))):
        m = re.match(r"projtune-(.+?)(?:-r\d+)?\.json$", os.path.basename(f))
        for r in json.load(open(f)):
            if r.get("op") == "projection" and r["path"] == "fused" and r.get("pdl"):
                key = (r["hidden"], r["n"], r["tokens"])
                runs.setdefault(m.group(1), {}).setdefault(key, []).append((r["us_per_seam"], r["pct_of_copy_bw"]))
    names = ["auto"] + [p for p in (plans or sorted(set(runs) - {"auto"})) if p != "auto"]
    print("| K | N | M | " + " | ".join(names) + " |")
    print("|---:|---:|---:|" + "---|" * len(names))
    for key in sorted(runs.get("auto", {})):
        base = min(u for u, _ in runs["auto"][key])
        cells = [str(x) for x in key]
        for n in names:
            v = runs.get(n, {}).get(key)
            if not v:
                cells.append("")
                continue
            us, pct = min(u for u, _ in v), max(p for _, p in v)
            cells.append(f"{us:.2f} ({pct:.1f} %)" + ("" if n == "auto" else f" {100 * (us / base - 1):+.1f} %"))
        print("| " + " | ".join(cells) + " |")


def projection(path):
    rows = json.load(open(path))
    nd = node(rows)
    by = {}
    stream = {}  # pure reads of w (path "w-stream"), PDL on, per (K, N)
    for r in rows:
        if r.get("op", "projection") != "projection":
            continue
        if r["path"] == "w-stream":
            if r.get("pdl", False):
                stream[(r["hidden"], r["n"])] = r
            continue
        by[(r["hidden"], r["n"], r["tokens"], r["path"], r.get("pdl", False))] = r
    if nd is not None:
        print(f"One graph node (empty kernel, one block, PDL on): {nd:.2f} us.\n")
    print("| K | N | M | ours, PDL (us) | % copy (PDL) | ours, no PDL (us) | % copy (no PDL) | floor + node (us) "
          "| pure read of w, PDL (us, % copy) | cuBLAS f32 out (us) | cuBLAS bf16 out (us) "
          "| faster than both (PDL / no PDL) | ours, bf16 out, PDL (us, % copy) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    yes = lambda o, f, b: ("yes" if o["us_per_seam"] < min(f["us_per_seam"], b["us_per_seam"]) else "no") if o else ""
    for (k, n, m) in sorted({key[:3] for key in by}):
        on = by.get((k, n, m, "fused", True))
        off = by.get((k, n, m, "fused", False))
        f = by[(k, n, m, "cublas-f32", False)]
        b = by[(k, n, m, "cublas-bf16", False)]
        us = lambda o: f"{o['us_per_seam']:.2f}" if o else ""
        pct = lambda o: f"{o['pct_of_copy_bw']:.1f}" if o else ""
        fl = (on or off)["floor_us"]
        fn = f"{fl + nd:.2f}" if nd is not None else ""
        st = stream.get((k, n))
        sc = f"{st['us_per_seam']:.2f} ({st['pct_of_copy_bw']:.0f} %)" if st else ""
        ob = by.get((k, n, m, "fused-bf16", True))
        obs = f"{ob['us_per_seam']:.2f} ({ob['pct_of_copy_bw']:.1f} %)" if ob else ""
        print(f"| {k} | {n} | {m} | {us(on)} | {pct(on)} | {us(off)} | {pct(off)} | {fn} | {sc} | "
              f"{us(f)} | {us(b)} | {yes(on, f, b)} / {yes(off, f, b)} | {obs} |")


if __name__ == "__main__":
    {"seam": seam, "projection": projection, "seamab": seamab, "projtune": projtune}[sys.argv[1]](*sys.argv[2:])
