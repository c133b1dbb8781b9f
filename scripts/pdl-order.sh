#!/usr/bin/env bash
# The projection kernels read w (a weight) before griddepcontrol.wait, so that under programmatic
# dependent launch they stream it while the previous kernel still runs. That holds only if the
# machine code issues those reads ahead of the wait: `ld.global.nc` loads may cross the wait, and
# ptxas sinks them to their first use when registers are short (PERF_NOTES.md, attempt 89: two
# trial kernels lost all their overlap that way, unnoticed by every test). This compiles the
# kernels for sm_90 with the NVRTC wheel (as `mhc kernels` does), disassembles them, and checks
# that each register variant issues its first tile's loads of w (LDG ... .NA) before the wait
# (ACQBULK), and that each ring variant issues a bulk copy of w (UBLKCP) before it. In the
# variants whose last warp waits first (_aw, _as) the other warps do not wait at all; there the
# loads must precede the first wait on an mbarrier (SYNCS.PHASECHK: a's landing). Every variant's
# bf16-output twin (`_ybf16`) is checked the same way.
#   scripts/pdl-order.sh [VENV]    (default /tmp/mhc-sass-venv; .ci/run passes its own)
set -euo pipefail
cd "$(dirname "$0")/.."
V=${1:-/tmp/mhc-sass-venv}
CU=$(bash scripts/nvrtc-venv.sh "$V" --tools)
OUT=$(mktemp -d)
cargo build --quiet --release --bin mhc
CUDA_CACHE_DISABLE=1 MHC_CACHE_DIR="$OUT" LD_LIBRARY_PATH="$CU/lib" ./target/release/mhc kernels > /dev/null
cubin=$(ls "$OUT"/projection-sm_90-*.cubin)

# Loads of w a lane issues for its block's first tile before the wait: 8 a k-block held in
# registers (two rows of w, four 16-byte vectors) with tiles of 16 rows, 4 with tiles of 8 rows.
# rr/rr2/rrb: 4, 5 or 5 k-blocks in registers (c7 keeps its other two in shared memory, by
# cp.async); rr, rr2, rrb_c7 and rrb_c7_xf twice (rrb_c4, rrb_c5, rrb_c5_mc2 and rr1_c4 once):
# one code path for whole tiles with K a multiple of 1024, one for the rest (both must precede the
# wait); rs2: 2 in flight; rr8: 4, 5 or 7.
declare -A WANT=(
  [rr_c4]=64 [rr_c5]=80 [rr_c7]=80 [rr2_c4]=64 [rr2_c5]=80 [rrb_c4]=32 [rrb_c5]=40 [rrb_c7]=80
  [rr1_c4]=32 [rrb_c5_mc2]=40 [rrb_c7_xf]=80
  [rs2]=16 [rr8_c4]=16 [rr8_c5]=20 [rr8_c7]=28
)
# The _aw and _as variants: only their last warp waits, before its own loads by design; the same
# loads of the other warps must come before the first mbarrier wait instead.
declare -A WANT_MBAR=(
  [rrb_c4_aw]=32 [rrb_c5_aw]=40 [rrb_c7_xf_aw]=80 [rrb_c4_as]=32 [rrb_c5_as]=40 [rrb_c4_as_mc2]=32 [rrb_c5_as_mc2]=40
)
RING=(m4 m8 m16 w16_m4 w16_m8)
fail=0
# Every projection kernel the engine loads is listed above (a new one must say what it reads first).
for k in $(grep -o '"mhc_projection_[a-z0-9_]*"' src/cuda/kernels.rs | tr -d '"' | sed 's/^mhc_projection_//; s/_ybf16$//' | sort -u); do
  if [ -z "${WANT[$k]:-}" ] && [ -z "${WANT_MBAR[$k]:-}" ] && [[ " ${RING[*]} " != *" $k "* ]]; then
    echo "mhc_projection_$k: not listed in scripts/pdl-order.sh" >&2
    fail=1
  fi
done
sass() { "$CU/bin/cuobjdump" -sass -fun "mhc_projection_$1" "$cubin"; }
# Instructions (by line) before the first ACQBULK (or $3) that match $2.
before_wait() { sass "$1" | awk -v pat="$2" -v stop="${3:-ACQBULK}" '$0 ~ stop { exit } $0 ~ pat { n++ } END { print n + 0 }'; }
for k in "${!WANT[@]}"; do for k in "$k" "${k}_ybf16"; do
  got=$(before_wait "$k" 'LDG[.A-Z0-9]*\.NA')
  if [ "$got" -lt "${WANT[${k%_ybf16}]}" ]; then
    echo "mhc_projection_$k: $got loads of w before the wait, want ${WANT[${k%_ybf16}]}" >&2
    fail=1
  fi
done; done
for k in "${!WANT_MBAR[@]}"; do for k in "$k" "${k}_ybf16"; do
  got=$(before_wait "$k" 'LDG[.A-Z0-9]*\.NA' 'SYNCS\.PHASECHK')
  if [ "$got" -lt "${WANT_MBAR[${k%_ybf16}]}" ]; then
    echo "mhc_projection_$k: $got loads of w before the first mbarrier wait, want ${WANT_MBAR[${k%_ybf16}]}" >&2
    fail=1
  fi
done; done
for k in "${RING[@]}"; do for k in "$k" "${k}_ybf16"; do
  got=$(before_wait "$k" 'UBLKCP')
  if [ "$got" -lt 1 ]; then
    echo "mhc_projection_$k: no bulk copy of w before the wait" >&2
    fail=1
  fi
done; done
rm -rf "$OUT"
[ $fail = 0 ] && echo "every projection kernel reads w ahead of the wait (${#WANT[@]} + ${#WANT_MBAR[@]} register and ${#RING[@]} ring variants, each with f32 and bf16 output)"
exit $fail
