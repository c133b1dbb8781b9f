#!/usr/bin/env bash
# Builds every micro-benchmark of scripts/micro/ here, with nvcc 13.0 from PyPI (no CUDA toolkit
# needed; the venv of scripts/nvrtc-venv.sh --nvcc), for the GPU machine, which then runs them
# with nothing to compile: OUT/<name> for scripts/micro/<name>.cu (default OUT: .gpu/micro).
# Every micro is built for sm_90a with the explicit gencode: `-arch=sm_90a` also emits compute_90
# PTX in nvcc 13.0, which the wgmma micros cannot assemble. The CUDA runtime is linked
# statically, so a binary needs only the GPU machine's driver.
#   scripts/micro/build.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-.gpu/micro}
CU=$(bash scripts/nvrtc-venv.sh "${VENV:-/tmp/mhc-sass-venv}" --nvcc)
mkdir -p "$OUT"
for src in scripts/micro/*.cu; do
  name=$(basename "$src" .cu)
  # ptxas's notes on wgmma (C7519: a fence it placed; C7515: wgmma serialized) are kept in the
  # log beside the binary; an error fails the build.
  "$CU/bin/nvcc" -O3 -gencode arch=compute_90a,code=sm_90a -L"$CU/lib" -o "$OUT/$name" "$src" \
    > "$OUT/$name.log" 2>&1 || { cat "$OUT/$name.log" >&2; exit 1; }
  echo "built $OUT/$name"
done
