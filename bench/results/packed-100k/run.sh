#!/usr/bin/env bash
# Issue 39's 100,000-job row: one packed sweep of 100,000 jobs of 0.01 s on 4 workers, `sweepit status` every
# 120 s during it (wall and CPU), nothing else running on the machine; main only (the base took 2 h 20 min, issue 23).
set -u
OUT=/work/main/bench/results/packed-100k
echo "== start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) code $(git -C /work/main rev-parse --short HEAD)"
flock /tmp/slurm-bench.lock /work/main/.venv/bin/python /work/main/bench/bench_packing.py --modes packed --jobs 100000 \
  --work-s 0.01 --workers 4 --status-every 120 --json $OUT/fixed-100000.json --work /tmp/bp-100k 2>&1
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
