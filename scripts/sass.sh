#!/usr/bin/env bash
# The sm_90 machine code of kernels, without a GPU: NVRTC compiles every module here (as `mhc
# kernels` does), cuobjdump disassembles the named kernels into $OUT/<kernel>.sass, and a count of
# instructions by opcode is printed, to compare two versions of a kernel before timing them.
#   scripts/sass.sh KERNEL [KERNEL...]     (OUT: default /tmp/mhc-sass; VENV: /tmp/mhc-sass-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
V=${VENV:-/tmp/mhc-sass-venv}
OUT=${OUT:-/tmp/mhc-sass}
CU=$(bash scripts/nvrtc-venv.sh "$V" --tools)
cargo build --quiet --release --bin mhc
rm -rf "$OUT" && mkdir -p "$OUT"
CUDA_CACHE_DISABLE=1 MHC_CACHE_DIR="$OUT" LD_LIBRARY_PATH="$CU/lib" ./target/release/mhc kernels > "$OUT/kernels.txt"
for k in "$@"; do
  for c in "$OUT"/*.cubin; do
    PATH="$CU/bin:$PATH" "$CU/bin/cuobjdump" -sass -fun "$k" "$c" > "$OUT/$k.sass" 2> /dev/null || true
    grep -q "Function : $k\$" "$OUT/$k.sass" && break
  done
  grep -q "Function : $k\$" "$OUT/$k.sass" || { echo "no kernel named $k" >&2; exit 1; }
  ops=$(grep -E '^\s+/\*[0-9a-f]+\*/\s+' "$OUT/$k.sass" | sed -E 's#^\s+/\*[0-9a-f]+\*/\s+##; s#^@!?U?P[0-9T] ##' \
    | awk '{print $1}' | sed 's/\..*//')
  echo "== $k: $(echo "$ops" | wc -l) instructions ($OUT/$k.sass); most frequent:"
  echo "$ops" | sort | uniq -c | sort -rn | head -15 | awk '{printf "  %-8s %6d\n", $2, $1}'
done
