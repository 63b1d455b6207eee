#!/usr/bin/env bash
# The GPU checks of a lent GPU machine, in one call (its time is short): `bench/gpu_check.sh pack` here, then
# `bench/gpu_check.sh run` there from the repository root, carrying .devpkgs and .devdata (both git-ignored).
#   pack: copies the pure-Python packages the GPU machine's image lacks (Hydra, OmegaConf, ANTLR's runtime) from
#         .venv, and MNIST from ../shared/data, into .devpkgs/ and .devdata/.
#   run:  bench/bench_gpu.py (mnist_best to 99.4% on real MNIST, ResNet-50 throughput against a plain loop, the
#         scaling study through `make sweep-scaling`: on the GPUs there, 1..N), then the GPU-paths probes: `make
#         sweep-scaling` as a user types it (its report included), and
#         an app that touches CUDA before the local launcher forks its jobs. Raw output under $OUT (default bench/out).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
if [ "$mode" = pack ]; then
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -rf .devpkgs .devdata && mkdir -p .devpkgs .devdata/mnist
  for pkg in hydra omegaconf antlr4; do cp -r "$site/$pkg" .devpkgs/; done
  cp ../shared/data/mnist/*.gz .devdata/mnist/
  du -sh .devpkgs .devdata
  exit 0
fi
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src:$PWD/.devpkgs${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=4
PY=${PY:-python3}
log() { echo "== $* ($(date +%T))"; }
{
  log machine
  nvidia-smi -L
  $PY -c 'import torch, hydra, omegaconf; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0), "hydra", hydra.__version__)'
  nproc
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

log bench_gpu
timeout 420 $PY bench/bench_gpu.py --mnist-root .devdata/mnist --json "$OUT/bench_gpu.json" \
  --work /tmp/gpu-bench >"$OUT/bench_gpu.log" 2>&1
echo "bench_gpu rc=$?"; tail -25 "$OUT/bench_gpu.log"

log "probe: make sweep-scaling as typed (1..N GPUs, the data there or synthetic: it says which)"
timeout 150 make sweep-scaling PY=$PY >"$OUT/sweep_scaling.log" 2>&1
echo "make sweep-scaling rc=$?"; tail -12 "$OUT/sweep_scaling.log"

log "probe: CUDA touched in the driver before the local launcher forks"
probe=/tmp/cuda-parent && rm -rf $probe && mkdir -p $probe
cat >$probe/app.py <<'PY'
import os, sys, hydra, torch
if os.environ.get("TOUCH") == "tensor":
    torch.zeros(1, device="cuda")          # a CUDA context in the parent
elif os.environ.get("TOUCH") == "available":
    print("parent sees cuda:", torch.cuda.is_available())   # the common import-time device pick

@hydra.main(version_base="1.3", config_path=None, config_name=None)
def main(cfg) -> float:
    return float(torch.ones(2, device="cuda").sum().item())

if __name__ == "__main__":
    main()
PY
for touch in none available tensor; do
  TOUCH=$touch timeout 120 $PY $probe/app.py -m +x=1,2 hydra/launcher=local hydra.sweep.dir=$probe/$touch \
    >"$OUT/fork_$touch.log" 2>&1
  echo "TOUCH=$touch rc=$?"; tail -6 "$OUT/fork_$touch.log"
  for r in $probe/$touch/*/result.json; do [ -f "$r" ] && $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-2], d.get('status'), str(d.get('error'))[:200])" "$r"; done
done
log done
