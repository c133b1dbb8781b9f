#!/usr/bin/env python3
"""Writes bench/results/README.md: one row a file of bench/results/, with the commit that last
wrote it (git log) and the sections of PERF_NOTES.md and BENCHMARKS.md that name it newest, so a
reader finds what a file measured without reading the notes whole. Run it after committing a new
or replaced result file (the index names the commit, so it follows it), and commit the index:

    python3 scripts/results-index.py    # rewrites bench/results/README.md
"""
import fnmatch
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
INDEX = os.path.join(RESULTS, "README.md")

# What each kind of file holds, by its name.
KINDS = [
    (r"seam-v4-h\d+-h200\.json", "the V4 seam's newest sweep at one H (`mhc bench --op seam-v4`)"),
    (r"seam-h200\.(png|svg)", "the plot of the newest V4.1 seam sweep (`mhc plot`)"),
    (r"seam-h\d+-h200\.json", "the newest V4.1 seam sweep at one H (`mhc bench`)"),
    (r"projection-h200\.json", "the projection's newest table (`mhc bench --op projection`)"),
    (r".*-ab-h200\.json", "an A/B of binaries timed in one run"),
    (r".*micro.*", "a microbenchmark's output (scripts/micro/)"),
    (r"timeline-.*", "stamps of the instrumented kernels (`mhc bench --timeline`)"),
    (r"power-.*", "nvidia-smi samples of power and clocks while the seam ran"),
    (r"ncu-.*", "an Nsight Compute report"),
]


def sections(path, files, last=False):
    """Each file name -> the heading above its first mention (last=True: its last) in one
    markdown file."""
    head, found = None, {}
    with open(path) as f:
        for line in f:
            if line.startswith("##"):
                head = line.lstrip("#").strip()
            if head is None:  # a file's preamble names no measurement of its own
                continue
            names = set()
            for token in re.findall(r"[\w.*-]+-h200\.(?:json|txt|csv|png|svg)", line):
                # seam-h*-h200.json or seam-hH-h200.json name the file of every H
                pattern = re.sub(r"-hH-", "-h*-", token)
                names.update(fnmatch.filter(files, pattern) if "*" in pattern else [token])
            for name in sorted(names):
                if last:
                    found[name] = head
                else:
                    found.setdefault(name, head)
    return found


def last_commit(name):
    """The commit that last wrote the file: hash, date and the start of its subject."""
    out = subprocess.run(
        ["git", "log", "-1", "--format=%h %cs: %s", "--", os.path.join("bench", "results", name)],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()
    return out or "(not committed yet)"


def kind(name):
    for pattern, text in KINDS:
        if re.fullmatch(pattern, name):
            return text
    return "a measurement"


def cell(text):
    text = text.replace("|", "/")
    return text if len(text) <= 100 else text[:97] + "..."


def render():
    files = sorted(f for f in os.listdir(RESULTS) if f != "README.md")
    # PERF_NOTES.md grows at the end of each topic, BENCHMARKS.md at its top: the newest mention.
    notes = sections(os.path.join(ROOT, "PERF_NOTES.md"), files, last=True)
    bench = sections(os.path.join(ROOT, "BENCHMARKS.md"), files)
    lines = [
        "# bench/results",
        "",
        "Every file was measured on the H200 (`-h200`). This index is written by",
        "`scripts/results-index.py`: the commit that last wrote each file, and the sections of",
        "PERF_NOTES.md and BENCHMARKS.md that name it newest (their prediction, setup and reading).",
        "A file's older versions are in git history (`git log -- bench/results/FILE`).",
        "Where a file was written more than once, earlier sections name its earlier runs.",
        "",
        "| file | what | last written | PERF_NOTES.md | BENCHMARKS.md |",
        "|---|---|---|---|---|",
    ]
    for f in files:
        lines.append(
            f"| {f} | {kind(f)} | {cell(last_commit(f))} | {cell(notes.get(f, ''))} | {cell(bench.get(f, ''))} |"
        )
    return "\n".join(lines) + "\n", len(files)


def main():
    text, n = render()
    with open(INDEX, "w") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(INDEX, ROOT)}: {n} files")


if __name__ == "__main__":
    main()
