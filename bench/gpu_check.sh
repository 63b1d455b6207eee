#!/usr/bin/env bash
# The GPU checks of a machine lent for minutes (one H100 or H200, a CUDA torch, no Hydra, no network), in one call:
#   bash bench/gpu_check.sh pack            here (make gpu-pack): Hydra, OmegaConf, ANTLR's runtime, PyYAML, packaging,
#                                           cloudpickle
#                                           as this .venv installed them into .devpkgs/, MNIST (MNIST_ROOT, default
#                                           ../shared/data/mnist) into .devdata/ (both git-ignored; carry both with the tree)
#   bash bench/gpu_check.sh run [DIR]       there, from the repository root: every probe of bench/gpu_check.py, each
#                                           under its own time limit (9 minutes in all), into DIR (default $OUT, else
#                                           bench/out): gpu_check.json, gpu_check.txt (a line a probe), gpu_check.log
#   bash bench/gpu_check.sh run --smoke     the same, tiny, on the CPU: the plumbing only (a test runs it)
# A probe that fails or hangs costs only its own figures: its exit status goes into the JSON and the run goes on; the
# script exits 0 once the JSON and the table are written. Knobs: PY (python3), GPU_CHECK_PROBES=name,name (a subset),
# GPU_CHECK_LIMIT_SCALE (each limit times this; the smoke run's default is 4), TMPDIR (where the probes' runs go).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true
if [ "$mode" = pack ]; then
  exec "${PY:-.venv/bin/python}" bench/gpu_check.py pack --mnist-root "${MNIST_ROOT:-../shared/data/mnist}"
fi
if [ "$mode" != run ]; then
  echo "usage: bash bench/gpu_check.sh pack | run [--smoke] [DIR]" >&2
  exit 2
fi
smoke=
if [ "${1:-}" = --smoke ]; then smoke=--smoke; shift; fi
out=${1:-${OUT:-bench/out}}
PY=${PY:-python3}
# What `pack` copied comes first: the GPU machine's image has no Hydra; sweepit runs from the tree.
export PYTHONPATH="$PWD/src:$PWD/.devpkgs${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
started=$(date +%s.%N)
command="bash bench/gpu_check.sh run${smoke:+ $smoke}${1:+ $1}"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || exit 1
mkdir -p "$out" || exit 1
: >"$out/gpu_check.log"
plan=$("$PY" bench/gpu_check.py plan $smoke --only "${GPU_CHECK_PROBES:-}" ${GPU_CHECK_LIMIT_SCALE:+--scale "$GPU_CHECK_LIMIT_SCALE"}) \
  || exit 2
echo "gpu_check: probes' runs in $work, results in $out"
while IFS=$'\t' read -r name limit; do
  t0=$(date +%s%N)
  timeout -k 5 "$limit" "$PY" bench/gpu_check.py probe "$name" --work "$work" $smoke </dev/null >"$work/$name.log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  seconds=$((ms / 1000)).$(printf %03d $((ms % 1000)))
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$seconds" "$limit" >>"$work/steps.tsv"
  { echo "== $name: exit $rc after $seconds s (limit $limit s)"; cat "$work/$name.log"; } >>"$out/gpu_check.log"
  echo "== $name: exit $rc after ${seconds%.*} s (limit $limit s): $(tail -1 "$work/$name.log" | cut -c1-150)"
  # The JSON and the table after each probe: a run cut short keeps the lines of the probes that ended.
  "$PY" bench/gpu_check.py report --quiet --work "$work" --out "$out" --started "$started" $smoke --command "$command"
done <<<"$plan"
"$PY" bench/gpu_check.py report --work "$work" --out "$out" --started "$started" $smoke \
  --command "$command"
