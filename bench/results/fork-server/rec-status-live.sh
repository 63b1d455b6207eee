#!/bin/bash
# Alternated pairs: the new records (wt-rec) and main's (base-rec), the same bench script, each code's Python.
cd /work/wt-rec/bench
for round in 1 2; do
  for side in new base; do
    if [ $side = new ]; then py=/work/wt-rec/.venv/bin/python; else py=/work/base-rec/.venv/bin/python; fi
    echo "== round $round $side $(date -u +%H:%M:%S) $(uptime)"
    $py bench_scale.py --live 10000,100000 --repeat 3 --work /tmp/wt-rec-bench \
      --json results/fork-server/rec-status-live-$side-$round.json 2>&1
  done
done
echo DONE
