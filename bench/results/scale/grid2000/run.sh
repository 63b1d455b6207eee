#!/bin/bash
# The 2,000-job grid on the local cluster (issue 14), run under the bench lock.
cd /work/wt-scale
echo "start $(date -Is)"; uptime
export PYTHONUNBUFFERED=1
/usr/bin/time -v .venv/bin/python examples/any_hydra_app/app.py -m 'x=range(2000)' y=0 hydra/launcher=slurm \
  hydra.sweep.dir=/tmp/scale-grid/sweep hydra.launcher.print_summary=false > /tmp/scale-grid/driver.out 2> /tmp/scale-grid/driver.err
echo "rc $? end $(date -Is)"; uptime
