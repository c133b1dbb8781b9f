#!/usr/bin/env bash
# Builds the release binary and the GPU test binary here (the GPU machine has no Rust) and copies
# them into .gpu/ (git-ignored), to be carried to the GPU machine with the working tree.
# PREV=<rev> also builds that revision's binary as .gpu/mhc-prev (a scratch worktree; target
# folder PREV_TARGET, default /tmp/mhc-prev-target), the baseline of gpu-session.sh seamab.
# KC=1 also compiles every bundled binary's kernels here with the NVRTC wheel (KC=timeline: the
# instrumented ones of `mhc bench --timeline` as well) and packs them as .gpu/kc.tar.xz, which
# gpu-session.sh unpacks and uses as the kernel cache: the GPU machine then loads instead of
# compiling (~70 s a kernel source there). Extra binaries put in .gpu/ before (A/B variants) are
# compiled too when named in KC_BINS.
# ENV_BINS="name:VAR=value[,VAR=value...] ..." also writes .gpu/mhc-<name>, a wrapper that runs this
# bundle's mhc with those variables set (an AB_BIN of gpu-session.sh seamab for a setting that
# needs no rebuild, e.g. ENV_BINS="w6:MHC_CLUSTER_WAVES=6 s24:MHC_STREAM_MIN_TILES=24"; values
# cannot contain commas); the kernels are this bundle's, so KC_BINS need not name it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin mhc
mkdir -p .gpu
cp target/release/mhc .gpu/mhc
if [ -n "${PREV:-}" ]; then
  wt=$(mktemp -d)/prev
  git worktree add --detach "$wt" "$PREV" > /dev/null
  target=${PREV_TARGET:-/tmp/mhc-prev-target}
  (cd "$wt" && CARGO_TARGET_DIR="$target" cargo build --release --bin mhc)
  cp "$target/release/mhc" .gpu/mhc-prev
  git worktree remove --force "$wt"
fi
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
for spec in ${ENV_BINS:-}; do
  name=${spec%%:*}
  vars=${spec#*:}
  if [ "$name" = "$spec" ] || [ -z "$name" ] || [ -z "$vars" ]; then
    echo "ENV_BINS: expected name:VAR=value[,VAR=value...], got '$spec'" >&2
    exit 1
  fi
  # Commas separate the variables, so a value cannot hold one (a forced projection plan such as
  # MHC_PROJ_PLAN=0,0,0,0,3 goes through gpu-session.sh projtune's PROJ_PLANS instead).
  IFS=, read -ra pieces <<< "$vars"
  for piece in "${pieces[@]}"; do
    if [[ "$piece" != *=* ]]; then
      echo "ENV_BINS: '$piece' in '$spec' is not VAR=value (values cannot contain commas)" >&2
      exit 1
    fi
  done
  printf '#!/bin/sh\nexec env %s "$(dirname "$0")/mhc" "$@"\n' "${vars//,/ }" > ".gpu/mhc-$name"
  chmod +x ".gpu/mhc-$name"
  echo "wrapper .gpu/mhc-$name: ${vars//,/ }"
done
if [ -n "${KC:-}" ]; then
  CU=$(bash scripts/nvrtc-venv.sh "${VENV:-/tmp/mhc-sass-venv}")
  kc=$(mktemp -d)/kc
  for b in mhc ${KC_BINS:-}; do
    for flag in "" $([ "$KC" = timeline ] && echo --timeline); do
      # (An older binary fails its instrumented build where it spills: still cached, so go on.)
      CUDA_CACHE_DISABLE=1 MHC_CACHE_DIR="$kc" LD_LIBRARY_PATH="$CU/lib" .gpu/$b kernels $flag | tail -n 1 \
        || [ -n "$flag" ]
    done
  done
  tar cJf .gpu/kc.tar.xz -C "$(dirname "$kc")" kc
  rm -rf "$(dirname "$kc")"
fi
ls -la .gpu
