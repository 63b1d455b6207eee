#!/usr/bin/env bash
# When the driver holds its memory: the same sweep at 10,000 jobs, its VmRSS every 5 s (the 100,000-job run took only
# its peak), nothing else running.
set -u
OUT=/work/main/bench/results/packed-100k
echo "== start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) code $(git -C /work/main rev-parse --short HEAD)"
flock /tmp/slurm-bench.lock /work/main/.venv/bin/python /work/main/bench/bench_packing.py --modes packed --jobs 10000 \
  --work-s 0.01 --workers 4 --json $OUT/fixed-10000-rss.json --work /tmp/bp-10k 2>&1
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
