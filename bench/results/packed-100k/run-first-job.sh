#!/usr/bin/env bash
# The driver's memory while it plans the 100,000-job sweep, to its first job's start (then cancelled), nothing else running.
set -u
OUT=/work/main/bench/results/packed-100k
echo "== start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) code $(git -C /work/main rev-parse --short HEAD)"
flock /tmp/slurm-bench.lock /work/main/.venv/bin/python /work/main/bench/bench_packing.py --modes packed --jobs 100000 \
  --work-s 0.01 --workers 4 --first-job-only --json $OUT/fixed-100000-first-job.json --work /tmp/bp-100k-first 2>&1
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
