#!/usr/bin/env bash
# Did main lose the 16-job wall the hsl branch measured (0.83x)? The branch's tip f08a5d9 (its own worktree and venv)
# then main, each against hydra-submitit-launcher 1.2.0 in the same run, 3 alternated pairs each, nothing else running.
set -u
OUT=/work/main/bench/results/slurm-job-overhead
for side in branch main branch main; do
  py=/work/main/.venv/bin/python; [ $side = branch ] && py=/work/wt-f08/.venv/bin/python
  echo "== $side $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  rm -rf /tmp/sjo-ab
  flock /tmp/slurm-bench.lock /work/main/.venv/bin/python /work/main/bench/bench_slurm_jobs.py --jobs 16 --pairs 3 \
    --python $py --hsl-python /tmp/hsl/venv-hsl/bin/python --work /tmp/sjo-ab --json $OUT/ab-$side-$(date -u +%H%M%S).json 2>&1 | tail -5
done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
