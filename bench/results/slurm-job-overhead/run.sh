#!/usr/bin/env bash
# Issue 39's "a Slurm job's own overhead" row again, on main, with sacct's CPU of each job, against
# hydra-submitit-launcher 1.2.0 in its own venv without sweepit; nothing else running.
set -u
OUT=/work/main/bench/results/slurm-job-overhead
echo "== start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) code $(git -C /work/main rev-parse --short HEAD)"
flock /tmp/slurm-bench.lock /work/main/.venv/bin/python /work/main/bench/bench_slurm_jobs.py --jobs 16 --pairs 5 \
  --hsl-python /tmp/hsl/venv-hsl/bin/python --work /tmp/sjo --json $OUT/16x1s-5pairs.json 2>&1
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
