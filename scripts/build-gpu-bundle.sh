#!/usr/bin/env bash
# Builds the release binary and the GPU test binary here (the GPU machine has no Rust) and copies
# them into .gpu/ (git-ignored), to be carried to the GPU machine with the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin mhc
mkdir -p .gpu
cp target/release/mhc .gpu/mhc
# Test executables, named by cargo's JSON messages.
cargo test --release --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        name = m["target"]["name"]
        if name in ("gpu", "kernels_compile"):
            shutil.copy(m["executable"], ".gpu/test-" + name)
            print("bundled", name)
'
strip .gpu/* 2>/dev/null || true
ls -la .gpu
