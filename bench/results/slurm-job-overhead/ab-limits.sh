#!/usr/bin/env bash
# The queue limits read at once (main) against one call after another (b3981f8, its own worktree and venv): 16 Slurm
# jobs of 1 s, each side against hydra-submitit-launcher 1.2.0 in the same run, 3 alternated pairs, twice, nothing
# else running.
set -u
OUT=/work/main/bench/results/slurm-job-overhead
for side in before after before after; do
  py=/work/main/.venv/bin/python; [ $side = before ] && py=/work/wt-b398/.venv/bin/python
  echo "== $side $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  rm -rf /tmp/sjo-ab
  flock /tmp/slurm-bench.lock /work/main/.venv/bin/python /work/main/bench/bench_slurm_jobs.py --jobs 16 --pairs 3 \
    --python $py --hsl-python /tmp/hsl/venv-hsl/bin/python --work /tmp/sjo-ab --json $OUT/limits-$side-$(date -u +%H%M%S).json 2>&1 | tail -5
done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
