#!/usr/bin/env bash
# Issue 39's packed wall/ideal rows: new (main) and base (397625b, its own worktree and venv), alternated, one machine, nothing else running.
set -u
OUT=/work/main/bench/results/packed-wall
for spec in "2000 0.1" "200 1"; do
  set -- $spec
  for side in new base; do
    root=/work/main; [ $side = base ] && root=/work/base-397
    echo "== $side jobs=$1 work_s=$2 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    flock /tmp/slurm-bench.lock $root/.venv/bin/python $root/bench/bench_packing.py --modes packed --jobs $1 --work-s $2 \
      --workers 2 --json $OUT/$side-$1x$2.json --work /tmp/packed-wall-$side 2>&1 | tail -15
  done
done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
