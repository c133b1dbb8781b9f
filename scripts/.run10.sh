export KEEP_SESSION=1; R=$OUT; W=/tmp/w10; rm -rf $W; mkdir -p $W/t $W/tune $W/full
rm -rf /tmp/mhc-session; OUT=$W/t TEST_FILTER=projection bash scripts/gpu-session.sh tests-only > $W/t.log 2>&1; grep "test result" /tmp/mhc-session/logs/*.log
rm -rf /tmp/mhc-session; OUT=$W/tune PROJ_PLANS="auto 0,0,0,0,3" PROJ_ARGS="--proj-m 1,2,4 --proj-k 7168" PROJ_ROUNDS=2 bash scripts/gpu-session.sh projtune > $W/tune.log 2>&1; tail -2 $W/tune.log
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 MHC_CACHE_DIR=/tmp/mhc-kernel-cache
.gpu/mhc-cand bench --backend cuda --op projection --json $W/full/bench-proj-cand.json > $W/full/cand.log 2>&1; echo cand $?
.gpu/mhc bench --backend cuda --op projection --json $W/full/bench-proj-main.json > $W/full/main.log 2>&1; echo main $?
tar czf $R/all.tgz -C $W .
