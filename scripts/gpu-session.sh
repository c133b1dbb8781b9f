#!/usr/bin/env bash
# Every GPU check and timing of a session, in one command on the GPU machine (GUIDE.md):
#   scripts/gpu-session.sh [STEP...]     steps: info kernels tests tests-fast tests-slow check bench
#                                        tune cltune ncu sanitize sanitize-seam sanitize-proj
#                                        sanitize-unfused sanitize-stream proj bench-v4 projtune
#                                        projab seamab projtl launches power
#                                        tests-only (TEST_FILTER)
#                                        timeline all
#                                        (default all)
# Expects the binaries of scripts/build-gpu-bundle.sh in .gpu/. Writes logs, JSON and plots under
# a scratch folder, packs them into $OUT/session.tar.gz (OUT defaults to /tmp/mhc-out), and prints a
# short table last.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MHC_CACHE_DIR=${MHC_CACHE_DIR:-/tmp/mhc-kernel-cache}
# Kernels compiled where the bundle was built (build-gpu-bundle.sh KC=1), loaded instead of
# compiled here.
if [ -f .gpu/kc.tar.xz ]; then
  mkdir -p "$MHC_CACHE_DIR" && tar xJf .gpu/kc.tar.xz -C "$MHC_CACHE_DIR" --strip-components=1
fi
# The device tool returns only a few files: work in a scratch folder and hand back one archive.
RESULT=${OUT:-/tmp/mhc-out}
OUT=/tmp/mhc-session
[ -n "${KEEP_SESSION:-}" ] || rm -rf "$OUT"
LOG=$OUT/logs
mkdir -p "$LOG"
B=.gpu
STEPS=${*:-all}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
ALL_SUMMARY=$OUT/all-summaries.txt

want() { [[ " $STEPS " == *" all "* || " $STEPS " == *" $1 "* ]]; }
step() {
  local name=$1; shift
  echo "== $name: $*"
  local t0=$(date +%s%N)
  timeout "${STEP_TIMEOUT:-300}" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%-22s rc=%-3s %6d ms\n' "$name" "$rc" "$ms" >> "$SUMMARY"
  tail -n "${TAIL:-25}" "$LOG/$name.log"
  return 0
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$LOG/nvidia-smi.txt" 2>&1
want info && step info $B/mhc info
want kernels && step kernels $B/mhc kernels --json "$OUT/kernels.json"
if want tests || want tests-fast; then
  # The spill test reads ptxas's report, which a compile served from the driver's compute cache
  # lacks (src/cuda/nvrtc.rs, compile_fresh).
  step test-kernels env MHC_REQUIRE_NVRTC=1 CUDA_CACHE_DISABLE=1 $B/test-kernels_compile
  TAIL=40 step test-gpu-fast env MHC_REQUIRE_GPU=1 $B/test-gpu --test-threads=1 --skip fused_every_op_every_t
fi
if want tests || want tests-slow; then
  for h in ${SLOW_H:-4096 5120 7168}; do
    TAIL=40 step test-gpu-slow-$h env MHC_REQUIRE_GPU=1 $B/test-gpu --test-threads=1 fused_every_op_every_t_h$h
  done
fi
if [[ " $STEPS " == *" tests-only "* ]]; then  # explicit only: the GPU tests named by TEST_FILTER
  TAIL=40 step test-gpu-only env MHC_REQUIRE_GPU=1 $B/test-gpu --test-threads=1 ${TEST_FILTER:?TEST_FILTER}
fi
if want check; then
  step check-cuda $B/mhc check --backend cuda --tokens 1,7,128 --json "$OUT/check.json"
  step run-roundtrip bash -c "$B/mhc sample --op seam --tokens 5 --norm --output /tmp/in.st && $B/mhc run --op seam --input /tmp/in.st --output /tmp/out.st --backend cuda --fp8"
  step no-cache-start bash -c "rm -rf /tmp/cold && MHC_CACHE_DIR=/tmp/cold $B/mhc check --backend cuda --tokens 1 --ops seam --preset v4.1-flash && MHC_CACHE_DIR=/tmp/cold $B/mhc check --backend cuda --tokens 1 --ops seam --preset v4.1-flash"
fi
if want bench; then
  for h in ${BENCH_H:-5120 4096 7168}; do
    step bench-$h $B/mhc bench --backend cuda --hidden $h ${BENCH_ARGS:-} --json "$OUT/bench-$h.json" --plot "$OUT/bench-$h"
  done
fi
if want bench-v4; then
  # The V4 seam (its own pre-mix: the tile kernel's finisher and the cluster kernel's V4 variants).
  for h in ${BENCH_H:-5120 4096 7168}; do
    step bench-v4-$h $B/mhc bench --backend cuda --hidden $h --op seam-v4 ${BENCH_ARGS:-} --json "$OUT/bench-v4-$h.json"
  done
fi
if want tune; then
  for plan in ${PLANS:-}; do
    MHC_PLAN=$plan step tune-$plan $B/mhc bench --backend cuda --hidden ${TUNE_H:-5120} --tokens ${TUNE_T:-1,128} --no-baseline --no-eager ${TUNE_ARGS:-} --json "$OUT/tune-$plan.json"
  done
fi
if want cltune; then
  # The seam in clusters (CLUSTERS: sizes for MHC_CLUSTER, 0 = the tile kernel) at TUNE_T tokens.
  for cl in ${CLUSTERS:-0 16}; do
    MHC_CLUSTER=$cl step cltune-$cl $B/mhc bench --backend cuda --hidden ${TUNE_H:-5120} --tokens ${TUNE_T:-1,4,16,64,128} --no-baseline --no-eager ${TUNE_ARGS:-} --json "$OUT/cltune-$cl.json"
  done
fi
if want ncu; then
  # Hardware counters of the fused seam (Firecracker machines only; clocks left alone).
  for t in ${NCU_T:-1 128}; do
    step ncu-t$t ncu --clock-control none --kernel-name regex:mhc_seam --launch-skip 3 --launch-count 2 \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section SchedulerStats \
      $B/mhc bench --backend cuda --hidden 5120 --tokens $t --no-baseline --no-eager --rounds 1 --reps 1
  done
fi
if [[ " $STEPS " == *" launches "* ]]; then  # explicit only
  # Each launch of a seam timed apart (ncu, kernels serialized, no PDL overlap): at large T the
  # tiles launch and the tails launch (PERF_NOTES.md, attempt 62). LAUNCH_T tokens, LAUNCH_H sizes,
  # LAUNCH_BIN binaries (default this bundle's), LAUNCH_METRICS more metrics (e.g. DRAM bytes),
  # LAUNCH_CACHE ncu's --cache-control (default all: caches flushed before each profiled launch;
  # none keeps what the previous launch left in L2).
  for bin in ${LAUNCH_BIN:-$B/mhc}; do
    for h in ${LAUNCH_H:-5120}; do
      for t in ${LAUNCH_T:-512 2048 16384}; do
        step launches-$(basename "$bin")-h$h-t$t ncu --clock-control none --cache-control ${LAUNCH_CACHE:-all} \
          --kernel-name regex:mhc_seam --launch-skip 4 --launch-count 2 \
          --metrics gpu__time_duration.sum,launch__grid_size,sm__inst_executed.sum${LAUNCH_METRICS:+,$LAUNCH_METRICS} \
          $bin bench --backend cuda --hidden $h --tokens $t --no-baseline --no-eager --rounds 1 --reps 1
      done
    done
  done
fi
if want ncusrc; then
  # Where the warps of one fused seam launch stall, per SASS instruction (T = NCU_T, first value;
  # NCU_SKIP launches skipped: at large T launches alternate tiles, tails).
  t=${NCU_T:-1}; t=${t%% *}; sk=${NCU_SKIP:-3}
  step ncu-full ncu --clock-control none --kernel-name regex:mhc_seam --launch-skip $sk --launch-count 1 --set full \
    --warp-sampling-interval ${NCU_INTERVAL:-0} --import-source no -f -o "$OUT/seam-t$t-$sk" $B/mhc bench --backend cuda --hidden 5120 --tokens $t --no-baseline --no-eager --rounds 1 --reps 1
  step ncu-source bash -c "ncu -i '$OUT/seam-t$t-$sk.ncu-rep' --page source --csv --print-source sass > '$LOG/ncu-source-t$t-$sk.csv'; ncu -i '$OUT/seam-t$t-$sk.ncu-rep' --page details > '$LOG/ncu-details-t$t-$sk.txt'; rm '$OUT/seam-t$t-$sk.ncu-rep'"
fi
if want variants; then
  # The same seam with the Sinkhorn shortened or doubled: the difference is its cost.
  for it in ${ITERS:-1 40}; do
    step iters-$it $B/mhc bench --backend cuda --hidden 5120 --tokens ${TUNE_T:-1,16,128} --no-baseline --no-eager --sinkhorn-iters $it
  done
fi
if want sanitize || want sanitize-seam; then
  # T = 128: the cluster kernel's tiles of 32 tokens (mhc_seam_clp2).
  step memcheck compute-sanitizer --tool memcheck $B/mhc check --backend cuda --tokens 1,33,128,300 --preset v4.1-flash
  step racecheck compute-sanitizer --tool racecheck $B/mhc check --backend cuda --tokens 1,33,128 --ops seam --preset v4.1-flash
  # seam_v4 at T = 200: the cluster kernel in waves; at T = 400: the tile kernel's finisher with
  # the norm's tree over warp-rows.
  step racecheck-v4 compute-sanitizer --tool racecheck $B/mhc check --backend cuda --tokens 1,200,400 --ops seam_v4 --preset v4-flash
  step synccheck compute-sanitizer --tool synccheck $B/mhc check --backend cuda --tokens 1,33,128 --ops seam,pre_delayed,entry --preset v4.1-flash
fi
if want sanitize || want sanitize-stream; then
  # The seams' stream variant of the tiles launch (cp.async stages, named barriers) at T = 1001.
  for tool in memcheck racecheck synccheck; do
    step $tool-stream compute-sanitizer --tool $tool $B/mhc check --backend cuda --tokens 1001 --ops seam --preset v4.1-flash
    step $tool-stream-v4 compute-sanitizer --tool $tool $B/mhc check --backend cuda --tokens 1001 --ops seam_v4 --preset v4-flash
  done
fi
if want sanitize || want sanitize-unfused; then
  # The unfused kernels (the canonical sums of squares' shared-memory tree): every op they serve.
  for tool in memcheck racecheck; do
    step $tool-unfused env MHC_PATH=unfused compute-sanitizer --tool $tool $B/mhc check --backend cuda --tokens 1,5,33 --ops seam,seam_v4,pre,entry,gates,rmsnorm --preset v4.1-flash
  done
fi
if want sanitize || want sanitize-proj; then
  # The projection's shared-memory ring (cp.async stages, one barrier per stage).
  # SAN_PROJ_PLAN forces a plan (MHC_PROJ_PLAN), SAN_PROJ_T the rows (M) checked.
  for tool in memcheck racecheck synccheck; do
    step $tool-proj env ${SAN_PROJ_PLAN:+MHC_PROJ_PLAN=$SAN_PROJ_PLAN} compute-sanitizer --tool $tool $B/mhc check --backend cuda --tokens ${SAN_PROJ_T:-1,5,17} --ops projection --preset v4.1-flash
  done
fi
if want timeline; then
  # Where a seam's time goes: stamps of the instrumented kernels inside the replayed chain. TL_BIN:
  # other binaries as well (A/B variants; timeline-<name>.json beside this bundle's timeline.json).
  # TL_RAW=1: every block's stamps as well, under raw-<name>/ (MHC_TIMELINE_RAW).
  for bin in $B/mhc ${TL_BIN:-}; do
    name=timeline$([ "$bin" = $B/mhc ] || echo "-$(basename "$bin")")
    TAIL=40 step $name env ${TL_RAW:+MHC_TIMELINE_RAW=$OUT/raw-$name} $bin bench --backend cuda --hidden ${TL_H:-5120} --timeline --tokens ${TL_T:-1,4,16,64,128,512,2048} --json "$OUT/$name.json"
  done
fi
if want projtune; then
  # The projection under forced plans (PROJ_PLANS: "auto" or kpw,nst; PROJ_ARGS picks the shapes),
  # in PROJ_ROUNDS alternating rounds (default 1; JSON projtune-<plan>[-r<round>]). Only "auto" of
  # the first round also times cuBLAS, as the run's reference.
  for round in $(seq 1 ${PROJ_ROUNDS:-1}); do
    sfx=$([ "${PROJ_ROUNDS:-1}" = 1 ] || echo "-r$round")
    for plan in ${PROJ_PLANS:-auto}; do
      if [ "$plan" = auto ]; then
        step projtune-auto$sfx env -u MHC_PROJ_PLAN $B/mhc bench --backend cuda --op projection --pdl on $([ $round = 1 ] || echo --no-baseline) ${PROJ_ARGS:-} --json "$OUT/projtune-auto$sfx.json"
      else
        step projtune-$plan$sfx env MHC_PROJ_PLAN=$plan $B/mhc bench --backend cuda --op projection --pdl on --no-baseline ${PROJ_ARGS:-} --json "$OUT/projtune-$plan$sfx.json"
      fi
    done
  done
fi
if [[ " $STEPS " == *" projab "* ]]; then  # explicit only (needs AB_BIN)
  # A/B in one run: this bundle's projection against other binaries' (AB_BIN: one or several,
  # space-separated, e.g. ".gpu/mhc-e1 .gpu/mhc-e2"), alternating in AB_ROUNDS rounds (default 2),
  # PDL on, shapes from PROJ_ARGS; cuBLAS once as the run's reference. JSON: projab-<name>-<round>.
  for round in $(seq 1 ${AB_ROUNDS:-2}); do
    for bin in ${AB_BIN:?AB_BIN}; do
      name=$(basename "$bin")
      step projab-$name-$round $bin bench --backend cuda --op projection --pdl on --no-baseline ${PROJ_ARGS:-} --json "$OUT/projab-$name-$round.json"
    done
    step projab-new-$round $B/mhc bench --backend cuda --op projection --pdl on $([ $round = 1 ] || echo --no-baseline) ${PROJ_ARGS:-} --json "$OUT/projab-new-$round.json"
  done
fi
if [[ " $STEPS " == *" seamab "* ]]; then  # explicit only (needs AB_BIN)
  # The seam's A/B in one run: other binaries (AB_BIN: one or several, space-separated, e.g.
  # ".gpu/mhc-prev") and this bundle's (not with AB_NO_BASE=1), alternating in AB_ROUNDS rounds
  # (default 2), PDL on, no baselines, at each H of AB_H (default 5120 4096 7168) and the tokens
  # of AB_T (a default sweep at H = 5120, fewer at the others; AB_OP another op, e.g. seam-v4).
  # JSON:
  # seamab-<name>-h<H>-r<round> (with AB_OP: seamab-op_<op>-<name>-...); the table:
  # `scripts/bench-tables.py seamab DIR BASE_NAME [OP]`.
  for round in $(seq 1 ${AB_ROUNDS:-2}); do
    for bin in ${AB_BIN:?AB_BIN} $([ -n "${AB_NO_BASE:-}" ] || echo $B/mhc); do
      name=${AB_OP:+op_$AB_OP-}$(basename "$bin")
      for h in ${AB_H:-5120 4096 7168}; do
        ts=${AB_T:-$([ $h = 5120 ] && echo 1,2,4,8,16,32,64,128,256,512,2048,8192,16384 || echo 1,16,128,2048)}
        step seamab-$name-h$h-r$round $bin bench --backend cuda --hidden $h --op ${AB_OP:-seam} --tokens $ts --no-baseline --no-eager --pdl on --json "$OUT/seamab-$name-h$h-r$round.json"
      done
    done
  done
fi
if want projtl; then
  # Where a projection call's time goes (instrumented kernel; PTL_ARGS picks shapes, PTL_PLANS plans).
  for plan in ${PTL_PLANS:-auto}; do
    if [ "$plan" = auto ]; then
      TAIL=40 step projtl-auto env -u MHC_PROJ_PLAN $B/mhc bench --backend cuda --op projection --timeline ${PTL_ARGS:-} --json "$OUT/projtl-auto.json"
    else
      TAIL=40 step projtl-$plan env MHC_PROJ_PLAN=$plan $B/mhc bench --backend cuda --op projection --timeline ${PTL_ARGS:-} --json "$OUT/projtl-$plan.json"
    fi
  done
fi
want proj && step bench-proj $B/mhc bench --backend cuda --op projection --json "$OUT/bench-proj.json"
if [[ " $STEPS " == *" power "* ]]; then  # explicit only
  # Power and clocks while the seam runs (attempt 63 read the SM clock lower under one binary
  # than another): nvidia-smi sampled every 100 ms in the background of `mhc bench` for each
  # binary of POWER_BIN (default this bundle's), H = POWER_H, T = POWER_T; a CSV per binary
  # (power-<name>.csv, `clocks_event_reasons.active` is the bitmask of what held the clock back)
  # and its maximum power, SM clock range and reasons seen, in the log.
  for bin in ${POWER_BIN:-$B/mhc}; do
    name=$(basename "$bin")
    nvidia-smi --query-gpu=timestamp,power.draw,enforced.power.limit,clocks.sm,clocks.mem,temperature.gpu,clocks_event_reasons.active \
      --format=csv,noheader,nounits -lms 100 > "$OUT/power-$name.csv" 2> "$LOG/power-$name-smi.err" &
    smi=$!
    step power-$name $bin bench --backend cuda --hidden ${POWER_H:-5120} --tokens ${POWER_T:-2048,16384} --no-baseline --no-eager --pdl on --json "$OUT/power-$name.json"
    kill $smi 2> /dev/null
    python3 - "$OUT/power-$name.csv" >> "$LOG/power-$name.log" <<'PY'
import sys
def num(x):
    try:
        return float(x)
    except ValueError:  # "[N/A]" and the like
        return float("nan")
rows = [l.split(", ") for l in open(sys.argv[1]) if l.count(",") >= 6]
busy = [r for r in rows if num(r[3]) > 1000]  # samples with the SM clock up (running)
if not busy:
    print("power: no busy samples"); sys.exit()
pw = [num(r[1]) for r in busy]; sm = sorted(num(r[3]) for r in busy)
print(f"power: {len(busy)} busy samples, max {max(pw):.0f} W of {busy[0][2]} W, "
      f"SM clock {sm[0]:.0f}-{sm[-1]:.0f} MHz (median {sm[len(sm) // 2]:.0f}), "
      f"reasons {sorted(set(r[6].strip() for r in busy))}")
PY
    tail -n 1 "$LOG/power-$name.log"
  done
fi

# Keep the archive small enough to come back (16 MiB a file): cut very long logs.
for f in "$LOG"/*.log; do
  if [ "$(stat -c %s "$f")" -gt 4000000 ]; then head -c 2000000 "$f" > "$f.head"; tail -c 1000000 "$f" > "$f.tail"; rm "$f"; fi
done
mkdir -p "$RESULT"
tar -czf "$RESULT/session.tar.gz" -C "$OUT" logs $(cd "$OUT" && ls -d *.json *.svg *.png *.csv raw-* 2>/dev/null)
cat "$SUMMARY" >> "$ALL_SUMMARY"
echo "== summary"
cat "$LOG/nvidia-smi.txt"
cat "$SUMMARY"
