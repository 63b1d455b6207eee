"""bench/gpu_check.sh's Python side: `plan` lists the probes and their time limits, `probe NAME` runs one (its figures
to WORK/NAME.json, exit 0 when its check held), `report` gathers every probe's exit status and figures into
gpu_check.json and gpu_check.txt, and `pack` copies the pure-Python distributions a lent GPU machine's image lacks into
.devpkgs/ and MNIST into .devdata/.

Each probe runs in a process of its own under the shell script's time limit, so that one that fails or hangs costs only
its own figures. A probe's process asks CUDA nothing while the jobs it starts run: they and bench_gpu.py's plain loop
hold the GPU (one in exclusive-process mode takes a single context).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import bench_gpu
from machine import code_version

# The environment as the user's shell gave it, before a probe imports sweepit (which sets
# PYTORCH_NVML_BASED_CUDA_CHECK=1 for this process and its children; the imports above do not): the apps a probe
# sweeps start from this one, as they would from that shell.
USER_ENV = dict(os.environ)
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# What sweepit's local sweeps need beyond a GPU machine's image (Python, torch and numpy): pure Python (PyYAML's
# compiled part is optional; built for another Python it is skipped). cloudpickle carries a GPU job to a fresh
# interpreter where the app initialised CUDA before the fork server (the fork probe's tensor case).
PACKED = ("hydra-core", "omegaconf", "antlr4-python3-runtime", "PyYAML", "packaging", "cloudpickle")
CARRY_LIMIT_MIB = 64
# What to do where the python probe finds a module missing: the pack carries the pure-Python ones; numpy and torch are
# compiled for one Python, so the image (or PY, the Python the check runs) must bring them.
MISSING_FIX = {
    "numpy": "the pack cannot carry numpy (compiled for one Python version, and with its BLAS above the 64 MiB a "
             "call carries): use an image whose Python has it, or install it there (`PY -m pip install numpy`)",
    "torch": "set PY to the Python that has the image's CUDA torch (`PY=/path/to/python bash bench/gpu_check.sh run`)",
    "yaml": "run `make gpu-pack` where sweepit's .venv is, and carry .devpkgs and .devdata with the tree",
}
FORK_ERROR = "Cannot re-initialize CUDA in forked subprocess"  # torch's words for a job forked after CUDA started
FORK_CASES = HERE / "apps" / "fork_cases.json"  # recorded sweeps of the fork probe, with the right verdict of each
APP_SAYS = "cuda_at_import: PYTORCH_NVML_BASED_CUDA_CHECK at import: "  # bench/apps/cuda_at_import.py's first line
# Batches of 128 an epoch: about 1.5 s of ResNet-50 at 32 px in bf16 on an H200, where 50 (bench_gpu.py's default)
# gave epochs too short to time (bench/RESULTS.md).
THROUGHPUT_STEPS = 80


@dataclass
class Probe:
    """One probe's run: its own folder, the CPU (`smoke`) or the GPU, and MNIST where it was packed."""

    work: Path
    smoke: bool

    def save(self, figures: dict[str, Any]) -> None:
        """The probe's figures so far, kept should its limit stop it before it returns (run_probe writes the last)."""
        (self.work.parent / f"{self.work.name}.json").write_text(json.dumps(figures, indent=1, default=str) + "\n")

    @property
    def device(self) -> str:
        return "cpu" if self.smoke else "cuda"

    @property
    def mnist_root(self) -> str | None:
        """.devdata/mnist where `pack` filled it (the smoke run trains on a few synthetic images instead)."""
        root = REPO / ".devdata" / "mnist"
        return None if self.smoke or not root.is_dir() else str(root)


def nvidia_smi(p: Probe) -> dict[str, Any]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"ok": False, "summary": "nvidia-smi is not on PATH"}
    query = "--query-gpu=name,memory.total,driver_version,compute_cap,compute_mode"
    listed = subprocess.run([exe, query, "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    full = subprocess.run([exe], capture_output=True, text=True, timeout=20)
    print(full.stdout, full.stderr)
    if listed.returncode or full.returncode:
        said = (full.stdout + full.stderr).strip().splitlines() or [""]
        return {"ok": False, "summary": f"nvidia-smi exited {full.returncode or listed.returncode}: {said[0][:200]}"}
    gpus = listed.stdout.strip().splitlines()
    return {"ok": True, "summary": "; ".join(gpus), "gpus": gpus, "nvidia_smi": full.stdout}


def python(p: Probe) -> dict[str, Any]:
    """torch and the packed packages as this Python imports them, and the GPU as torch sees it. numpy and yaml come
    first: an image may lack them, and the fix differs by module (MISSING_FIX)."""
    import importlib

    for module in ("numpy", "yaml", "torch", "hydra", "omegaconf"):
        try:
            importlib.import_module(module)
        except ImportError as e:
            return {"ok": False, "missing": module,
                    "summary": f"{module} does not import here ({e}): {MISSING_FIX.get(module, MISSING_FIX['yaml'])}"}
    import hydra
    import omegaconf
    import torch

    from machine import machine_info

    facts = {**machine_info(), "torch_cuda": torch.version.cuda, "hydra": hydra.__version__,
             "omegaconf": omegaconf.__version__}
    gpu = "no GPU"
    if torch.cuda.is_available():
        facts["capability"] = "{}.{}".format(*torch.cuda.get_device_capability(0))
        gpu = f"{facts['cuda']} (compute capability {facts['capability']})"
    summary = (f"{gpu}, torch {torch.__version__} (CUDA {torch.version.cuda}), hydra {hydra.__version__}, "
               f"omegaconf {omegaconf.__version__}, Python {facts['python']}, {facts['nproc']} cores")
    ok = p.smoke or facts["cuda"] is not None
    if not ok:
        summary += ": torch sees no CUDA device (`bash bench/gpu_check.sh run --smoke` checks the plumbing on the CPU)"
    return {"ok": ok, "summary": summary, "facts": facts}


def mnist(p: Probe) -> dict[str, Any]:
    m = bench_gpu.mnist_part(p.mnist_root, p.device, p.smoke, p.work)
    target = f"{bench_gpu.TARGET_ACC:.1%}"
    reached = (f"{target} at epoch {m['reached']['epoch']} after {m['reached']['seconds']:.1f} s of training"
               if m["reached"] else f"{target} not reached in {m['epochs']} epoch(s)")
    data = "real MNIST" if p.mnist_root else "synthetic data: the target means nothing"
    return {"ok": m["met"] or not p.mnist_root, "summary": f"{reached}; final {m['final_acc']:.4f} ({data})", **m}


def throughput(precision: str) -> Callable[[Probe], dict[str, Any]]:
    def probe(p: Probe) -> dict[str, Any]:
        t = bench_gpu.throughput_part(None, p.device, p.smoke, p.work, precision=precision, steps=THROUGHPUT_STEPS)
        sweepit, plain = (sum(r[1:]) / len(r[1:]) for r in (t["sweepit_samples_per_s"], t["plain_samples_per_s"]))
        return {"ok": True, **t, "summary": f"{t['precision']}: sweepit {sweepit:,.0f} / plain loop {plain:,.0f} "
                f"samples/s = {t['ratio_sweepit_over_plain']:.2f}x (ResNet-50, {t['image_size']} px, batch "
                f"{t['batch_size']}, {t['steps']} steps an epoch, epochs 2-{len(t['sweepit_samples_per_s'])})"}

    return probe


def fork(p: Probe) -> dict[str, Any]:
    """A 2-job local sweep of trainer.gpus=1 jobs of an app that asked CUDA something at import, before importing
    sweepit (bench/apps/cuda_at_import.py): `available` asks torch.cuda.is_available(), `tensor` puts a tensor on the
    GPU. Each runs in the environment of the shell that started the check (USER_ENV): this process has imported
    sweepit, whose NVML setting the app must not inherit. The smoke run, on a CPU, stands a CUDA context in for
    `tensor` (torch's initialised flag, and a GPU id for the launcher to hand out). Verdict: `fork_verdict`."""
    from sweepit.local import FRESH_FOR_CUDA
    from sweepit.reporting import load_sweep

    out: dict[str, Any] = {}
    for touch in ("available", "tensor"):
        sweep = p.work / touch
        cmd = [sys.executable, str(HERE / "apps" / "cuda_at_import.py"), "-m", "+x=1,2", "+trainer.gpus=1",
               "hydra/launcher=local", f"hydra.sweep.dir={sweep}"]
        env = {**USER_ENV, "CUDA_AT_IMPORT": touch}
        if p.smoke and touch == "tensor":
            env.update(CUDA_AT_IMPORT_STAND_IN="1", CUDA_VISIBLE_DEVICES="0")
        print("$ CUDA_AT_IMPORT=" + touch + " " + " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        print(proc.stdout, proc.stderr, flush=True)
        jobs = load_sweep(sweep).jobs if sweep.is_dir() else []
        said = [line.split(APP_SAYS, 1)[1] for line in proc.stdout.splitlines() if APP_SAYS in line]
        out[touch] = {"rc": proc.returncode, "statuses": [j.status for j in jobs],
                      "errors": [str(j.result.get("error") or "")[:300] for j in jobs],
                      "nvml_check_at_import": said[0] if said else None,
                      "driver_said": proc.stderr.strip().splitlines()[-5:],
                      # sweepit's word that it started the GPU jobs in fresh interpreters (CUDA before the fork)
                      "fresh_interpreters": FRESH_FOR_CUDA[:100] in proc.stdout + proc.stderr}
    ok, summary = fork_verdict(out)
    # The verdict itself, on recorded sweeps whose right verdict is known (sweepit's own message, which quotes torch's
    # words, is no job that died): a wrong one fails the probe, in the smoke run too.
    recorded = {name: fork_verdict(case["cases"])[0] == case["ok"]
                for name, case in json.loads(FORK_CASES.read_text()).items() if name != "about"}
    wrong = sorted(name for name, right in recorded.items() if not right)
    if wrong:
        ok, summary = False, summary + f"; the verdict is wrong on recorded case(s) {', '.join(wrong)}"
    return {"ok": ok, **out, "recorded_cases_judged_right": recorded, "summary": summary}


def fork_verdict(cases: dict[str, Any]) -> tuple[bool, str]:
    """Whether the fork probe's sweeps (`cases`: per app, its jobs' statuses and errors) show sweepit's rule held:
    each job completed, or was recorded failed with sweepit's own message (FORKED_AFTER_CUDA, which quotes torch's
    words: it is not a job that died), and none died of torch's fork error; and each case ran both its jobs."""
    from sweepit.train import FORKED_AFTER_CUDA

    words, bad = [], []
    for touch, case in cases.items():
        kinds = {"completed": 0, "recorded": 0, "died": 0, "other": 0}
        for status, error in zip(case["statuses"], case["errors"], strict=True):
            kind = ("completed" if status == "completed" else
                    "recorded" if error and error[:120] == FORKED_AFTER_CUDA[:120] else
                    "died" if FORK_ERROR in error else "other")
            kinds[kind] += 1
        said = [f"{n} {kind}" for kind, n in kinds.items() if n]
        words.append(f"{touch}: " + ", ".join(said or ["no jobs"]))
        if kinds["died"] or kinds["other"] or len(case["statuses"]) != 2:
            bad.append(touch)
    summary = "; ".join(words) + " (recorded: failed with sweepit's message, not run)"
    if bad:
        summary += f"; wrong in {', '.join(bad)} (died: of '{FORK_ERROR}')"
    return not bad, summary


def _result(run: Path) -> dict[str, Any]:
    return dict(json.loads((run / "result.json").read_text()))


# A job of several ranks whose rank fails must end long before its collectives' timeout (10 minutes): sweepit's
# supervisor stops the other ranks at once. Well under the minute the check allows, and the probe's limit.
RANK_FAILS_END_S = 30
RANK_NAMED = re.compile(r"\brank (\d+)\b")


def failing_rank(p: Probe) -> dict[str, Any]:
    """One run of trainer.gpus=2 on one GPU: both ranks on cuda:0, which NCCL refuses ("Duplicate GPU detected"). The
    smoke run on the CPU, where gloo takes two ranks on one device, makes rank 1's process group fail to start
    instead (bench/apps/train_hooks.py's FAIL_RANK). Its limit is RANK_FAILS_END_S: the run is stopped there, its
    ranks with it. Verdict: `failing_rank_verdict`."""
    app = HERE / "apps" / "train_hooks.py" if p.smoke else REPO / "train.py"
    cmd = [sys.executable, str(app), "trainer.gpus=2", f"device={p.device}", "epochs=1", "trainer.checkpoint=false",
           "trainer.save_model=none", f"hydra.run.dir={p.work / 'run'}", *(["trainer.threads=1"] if p.smoke else [])]
    env = {**os.environ, **({"FAIL_RANK": "1"} if p.smoke else {})}
    print("$ " + " ".join(cmd), flush=True)
    limit = RANK_FAILS_END_S * (SMOKE_SCALE if p.smoke else 1)
    # The run and its ranks are a process group of their own, stopped at once at the bound; the probe's own limit
    # (`timeout`'s SIGTERM, which reaches only the probe's group) stops them the same way.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, text=True, start_new_session=True)
    try:
        rc: int | None = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the ranks too, had any been left
        proc.wait()
    seconds = time.monotonic() - started
    result_file = p.work / "run" / "result.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else {}
    case = {"run_rc": rc, "run_s": round(seconds, 1), "run_limit_s": limit, "status": result.get("status"),
            "error": str(result.get("error") or "")[:600]}
    ok, summary = failing_rank_verdict(case)
    return {"ok": ok, "summary": summary, **case}


def failing_rank_verdict(case: dict[str, Any]) -> tuple[bool, str]:
    """Whether the run ended within its bound, recorded failed with an error that names a rank: sweepit's "rank 1 of 2
    failed", or the failure's own words where rank 0 failed first ("rank 0 and rank 1 both on CUDA device"). `case`:
    its exit status (None: stopped at its bound), seconds and bound, named apart from the probe's own, which the report
    adds; its result.json's status and error."""
    ranks = RANK_NAMED.findall(case["error"])
    said = f"{case['status'] or 'no result.json'} after {case['run_s']:.0f} s"
    if case["run_rc"] is None:
        return False, f"did not end within {case['run_limit_s']} s (stopped: its collectives' timeout would hold it)"
    if case["status"] != "failed":
        return False, f"{said}: a rank's failure should have failed the job: {case['error'][:200]}"
    if not ranks:
        return False, f"{said}, its error names no rank: {case['error'][:200]}"
    return True, f"{said}, naming rank {ranks[0]}: {case['error'][:160]}"


def resume(p: Probe) -> dict[str, Any]:
    """mnist_best for 2 epochs with trainer.deterministic=true, each run a process of its own: once uninterrupted, once
    stopped after epoch 1 (bench/apps/train_hooks.py's STOP_AFTER_EPOCH, as a preemption between epochs) and run again,
    which resumes from its checkpoint. Every epoch's metrics but the clock's are the same, bit for bit, as in
    tests/train/test_checkpoint.py. Synthetic images: resuming needs no real data."""
    from sweepit.results import read_metrics

    args = ["--config-dir", str(REPO / "sweeps"), "--config-name", "mnist_best", "epochs=2", f"device={p.device}",
            "trainer.deterministic=true", "trainer.save_model=none", "data.synthetic=true",
            f"data.n_synthetic={128 if p.smoke else 2048}", *(["trainer.threads=1"] if p.smoke else [])]
    app = str(HERE / "apps" / "train_hooks.py")

    def run(name: str, stop_after: int = 0) -> tuple[dict[str, Any], str]:
        """The run's result.json and what it printed."""
        cmd = [sys.executable, app, *args, f"hydra.run.dir={p.work / name}"]
        print(f"$ STOP_AFTER_EPOCH={stop_after} " + " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "STOP_AFTER_EPOCH": str(stop_after)},
                              capture_output=True, text=True)
        print(proc.stdout, proc.stderr, flush=True)
        return (_result(p.work / name) if (p.work / name / "result.json").is_file() else {}), proc.stdout

    straight, _ = run("straight")
    p.save({"ok": False, "summary": f"the uninterrupted run ended {straight.get('status')}; the others did not end"})
    stopped, _ = run("resumed", stop_after=1)
    resumed, said = run("resumed")
    # The loop's word that it resumed: a run that trained again from scratch would give the same metrics too.
    after = re.findall(r"^sweepit: resumed from .* after epoch (\d+)$", said, re.MULTILINE)
    rows = [[{k: v for k, v in row.items() if not k.endswith("_s")} for row in read_metrics(p.work / name)[0]]
            for name in ("straight", "resumed")]
    statuses = {"straight": straight.get("status"), "stopped": stopped.get("status"), "resumed": resumed.get("status")}
    same = len(rows[0]) == 2 and rows[0] == rows[1]
    ok = statuses == {"straight": "completed", "stopped": "interrupted", "resumed": "completed"} and after == ["1"]
    ok = ok and same
    if ok:
        summary = f"stopped after epoch 1 and resumed: {len(rows[0])} epochs of metrics bit-identical to a straight run"
    else:
        summary = (f"runs {', '.join(f'{k} {v}' for k, v in statuses.items())}; resumed after epoch "
                   f"{after[0] if after else 'none'}; metrics {'same' if same else 'differ'}")
    return {"ok": ok, "summary": summary, "statuses": statuses, "resumed_after_epoch": after, "metrics": rows}


def precision(p: Probe) -> dict[str, Any]:
    """mnist_best for one epoch in fp16 (autocast and GradScaler) and in `auto` (bf16 from compute capability 8.0, fp16
    on 7.x; fp32 on the CPU), each a run of its own: both complete, in the precision they name."""
    data = ([f"data.root={p.mnist_root}"] if p.mnist_root else
            ["data.synthetic=true", f"data.n_synthetic={128 if p.smoke else 2048}"])
    out: dict[str, Any] = {}
    for name in ("fp16", "auto"):
        args = ["--config-dir", str(REPO / "sweeps"), "--config-name", "mnist_best", "epochs=1", f"device={p.device}",
                f"trainer.precision={name}", "trainer.checkpoint=false", "trainer.save_model=none", *data,
                *(["trainer.threads=1"] if p.smoke else [])]
        result = _result(bench_gpu.train(args, p.work / name, multirun=False))
        out[name] = {k: result.get(k) for k in ("status", "precision", "objective", "epoch_time_s_mean")}
        p.save({"ok": False, **out, "summary": f"{name} ended {result.get('status')}; the next did not end"})
    # auto on the CPU (the smoke run) is fp32; on a GPU of tensor cores, bf16 or fp16.
    auto_ok = out["auto"]["precision"] == "fp32" if p.smoke else out["auto"]["precision"] in ("bf16", "fp16")
    ok = (all(r["status"] == "completed" for r in out.values()) and out["fp16"]["precision"] == "fp16"
          and auto_ok)
    summary = "; ".join(f"{name}: {r['status']} in {r['precision']}, objective {r['objective']}"
                        for name, r in out.items())
    return {"ok": ok, "summary": summary, **out}


def streamed(p: Probe) -> dict[str, Any]:
    """Map-style Datasets (bench/apps/streamed_data.py) read by 2 loader workers per rank, over 2 epochs: the loaders
    built once, their workers kept from epoch to epoch."""
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE / "apps"), os.environ.get("PYTHONPATH", "")])
    args = ["task=custom", "data._target_=streamed_data.make", "model._target_=torch.nn.Linear",
            "+model.in_features=16", "+model.out_features=4", "data.loader.num_workers=2", "epochs=2",
            "batch_size=64", f"device={p.device}", "trainer.checkpoint=false", "trainer.save_model=none",
            *(["trainer.threads=1", "+data.n=256"] if p.smoke else [])]
    result = _result(bench_gpu.train(args, p.work / "run", multirun=False))
    figures = {k: result.get(k) for k in ("status", "device", "epochs_completed", "objective", "epoch_time_s_mean",
                                          "samples_per_s_mean")}
    ok = figures["status"] == "completed" and figures["epochs_completed"] == 2
    return {"ok": ok, **figures, "summary": f"{figures['status']} on {figures['device']}, 2 loader workers: objective "
            f"{figures['objective']}, {figures['samples_per_s_mean'] or 0:,.0f} samples/s"}


def deterministic(p: Probe) -> dict[str, Any]:
    """mnist_best twice with trainer.deterministic=true, each run a process of its own: every epoch's metrics but the
    clock's (their names end in `_s`, as the unread-key rule of sweepit.results takes them) and the last weights."""
    from sweepit.results import read_metrics

    data = ([f"data.root={p.mnist_root}"] if p.mnist_root else
            ["data.synthetic=true", f"data.n_synthetic={128 if p.smoke else 512}"])
    args = ["--config-dir", str(REPO / "sweeps"), "--config-name", "mnist_best", "epochs=2", f"device={p.device}",
            "trainer.deterministic=true", "trainer.save_model=last", "trainer.checkpoint=false", *data,
            *(["trainer.threads=1"] if p.smoke else [])]
    runs = [bench_gpu.train(args, p.work / name, multirun=False) for name in ("first", "second")]
    rows = [[{k: v for k, v in row.items() if not k.endswith("_s")} for row in read_metrics(run)[0]] for run in runs]
    same_rows = bool(rows[0]) and rows[0] == rows[1]
    weights = [run / "model_last.pt" for run in runs]
    if weights[0].read_bytes() == weights[1].read_bytes():
        # The same file holds the same tensors: torch, whose import would be most of this process's time, is loaded
        # only to name those that differ.
        differ: list[str] = []
        said = "the last weights byte for byte"
    else:
        import torch  # on the CPU, once both runs have ended

        first, second = (torch.load(w, map_location="cpu", weights_only=True)["model"] for w in weights)
        differ = [k for k in [*first, *(k for k in second if k not in first)]
                  if k not in first or k not in second or not torch.equal(first[k], second[k])]
        said = (f"{len(differ)} of {len(first)} weight tensors differ ({', '.join(differ[:3])})" if differ else
                f"{len(first)} weight tensors")
    ok = same_rows and not differ
    summary = (f"two runs bit-identical: {len(rows[0])} epochs of metrics, {said}" if ok else
               f"two runs differ: metrics {'same' if same_rows else 'differ'}, {said}")
    return {"ok": ok, "summary": summary, "metrics": rows, "differing_weights": differ, "data": data[0]}


def shared(p: Probe) -> dict[str, Any]:
    """Two local jobs on one GPU. The local launcher gives each job of a sweep its own GPUs (a second job waits for
    one), so two jobs share a GPU when two sweeps run at once: one job alone first, then two sweeps of one job side
    by side, their epoch times against the lone job's."""
    from sweepit.reporting import load_sweep

    # Two epochs at least: an epoch time leaves the first out.
    size = (["task.model=cnn", "batch_size=16", "data.n_synthetic=64", "epochs=2", "trainer.threads=1",
             "trainer.precision=fp32"] if p.smoke else
            ["task.model=resnet50", "batch_size=128", "data.n_synthetic=8000", "epochs=3", "trainer.precision=bf16"])
    base = [sys.executable, str(REPO / "train.py"), "-m", "task=cifar10", "task.image_size=32", "data.synthetic=true",
            f"device={p.device}", "trainer.checkpoint=false", "trainer.save_model=none",
            "hydra.callbacks.summary.report=false", *size]

    def sweep(name: str, seed: int) -> subprocess.Popen[str]:
        cmd = [*base, f"seed={seed}", f"hydra.sweep.dir={p.work / name}"]
        print("$ " + " ".join(cmd), flush=True)
        return subprocess.Popen(cmd, cwd=REPO, text=True)

    sweep("alone", 0).wait()
    alone = load_sweep(p.work / "alone").jobs[0]
    p.save({"ok": False, "alone": {"status": alone.status, "epoch_time_s": alone.epoch_time_s},
            "summary": f"alone {alone.status}, {alone.epoch_time_s or 0:.3g} s/epoch; the two at once did not end"})
    side_by_side = [sweep(f"shared_{seed}", seed) for seed in (0, 1)]
    for proc in side_by_side:
        proc.wait()
    jobs = {name: load_sweep(p.work / name).jobs[0] for name in ("alone", "shared_0", "shared_1")}
    times = {name: job.epoch_time_s for name, job in jobs.items()}
    out = {name: {"status": job.status, "device": job.result.get("device"), "epoch_time_s": times[name]}
           for name, job in jobs.items()}
    ok = all(job.status == "completed" for job in jobs.values())
    if ok and all(times.values()):
        alone, a, b = (float(t or 0) for t in times.values())
        summary = (f"alone {alone:.3g} s/epoch; two at once {a:.3g} and {b:.3g} s/epoch ({(a + b) / 2 / alone:.2f}x), "
                   f"on {', '.join(sorted({str(v['device']) for v in out.values()}))}")
    else:
        summary = "; ".join(f"{name}: {v['status']}" for name, v in out.items())
    return {"ok": ok, "summary": summary, **out}


def scaling(p: Probe) -> dict[str, Any]:
    s = bench_gpu.scaling_part(None, p.device, p.smoke, p.work)
    points = "; ".join(f"{q['gpus']} {'GPU' if not p.smoke else 'rank'}(s): {q['epoch_time_s']:.3g} s/epoch, "
                       f"{q['samples_per_s']:,.0f} samples/s, speedup {q['speedup']:.2f}" for q in s["points"])
    one = " (a speedup needs 2 GPUs or more)" if len(s["points"]) == 1 else ""
    data = str(s["data"]).split(":")[0]  # "synthetic cifar10-shaped data: 128 images ..." up to its colon
    return {"ok": bool(s["points"]), "summary": f"{points}{one}; {data}", **s}


# Each probe and its time limit in seconds on one H100 or H200, in the order they run: those that have never run on a
# GPU first, the throughput next, mnist_best and the scaling plan last, so that a run cut short loses the figures
# already known. Together, with the 5 s each may take to stop, under the 9 minutes of a 10-minute call that leaves for
# the report. Sized from the H200's times of mnist, throughput and scaling (bench/RESULTS.md), with room for a slower
# GPU; the smoke run multiplies them by SMOKE_SCALE (a loaded CPU, where they are no figure). failing_rank's is its
# run's bound (RANK_FAILS_END_S) and the probe's own start.
PROBES: dict[str, tuple[Callable[[Probe], dict[str, Any]], int]] = {
    "nvidia_smi": (nvidia_smi, 10), "python": (python, 15), "fork": (fork, 35),
    "failing_rank": (failing_rank, RANK_FAILS_END_S + 10), "resume": (resume, 35), "precision": (precision, 30),
    "streamed": (streamed, 20), "deterministic": (deterministic, 40), "shared": (shared, 60),
    "throughput_bf16": (throughput("bf16"), 45), "throughput_fp32": (throughput("fp32"), 50), "mnist": (mnist, 50),
    "scaling": (scaling, 40),
}
SMOKE_SCALE = 4


def plan(only: str, scale: float | None, smoke: bool) -> int:
    """The probes to run and their limits, a line each (name, tab, seconds), for the shell script's loop: `only`
    (comma-separated names; empty: all), each limit times `scale` (default 1, SMOKE_SCALE for the smoke run)."""
    names = [n for n in only.split(",") if n] or list(PROBES)
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        print(f"gpu_check: GPU_CHECK_PROBES takes {','.join(PROBES)}, but got {','.join(unknown)}", file=sys.stderr)
        return 2
    factor = scale if scale is not None else SMOKE_SCALE if smoke else 1
    for name in names:
        print(f"{name}\t{PROBES[name][1] * factor:g}")
    return 0


def run_probe(name: str, work: Path, smoke: bool) -> int:
    (work / name).mkdir(parents=True, exist_ok=True)
    figures = PROBES[name][0](Probe(work / name, smoke))
    (work / f"{name}.json").write_text(json.dumps(figures, indent=1, default=str) + "\n")
    print(f"{name}: {'ok' if figures['ok'] else 'FAILED'}: {figures['summary']}", flush=True)
    return 0 if figures["ok"] else 1


def report(work: Path, out: Path, smoke: bool, command: str, wall_s: float, quiet: bool = False) -> None:
    """gpu_check.json (each probe's exit status, seconds, limit and figures) and gpu_check.txt (a line per probe),
    from the steps the shell script ran (WORK/steps.tsv: name, exit status, seconds, limit). The script writes them
    after each probe (`quiet`: the table is printed at the end only), so that a run cut short keeps what ended."""
    from sweepit.results import aligned

    probes: dict[str, dict[str, Any]] = {}
    for line in (work / "steps.tsv").read_text().splitlines():
        name, rc, seconds, limit = line.split("\t")
        figures_file = work / f"{name}.json"
        figures = json.loads(figures_file.read_text()) if figures_file.is_file() else {}
        entry = {**figures, "rc": int(rc), "ok": rc == "0", "seconds": float(seconds), "limit_s": float(limit)}
        if rc != "0":
            log = (work / f"{name}.log").read_text(errors="replace").strip().splitlines()
            entry["log_tail"] = log[-30:]
            stopped = rc in ("124", "137")
            if not figures:
                entry["summary"] = (f"stopped at its limit of {limit} s" if stopped else
                                    f"exited {rc} before its figures: {log[-1][:200] if log else 'no output'}")
            elif stopped:  # what it saved before its limit (Probe.save)
                entry["summary"] = f"stopped at its limit of {limit} s; so far: {figures.get('summary', '')}"
        probes[name] = entry
    facts = probes.get("python", {}).get("facts", {})
    record = {"command": command, "smoke": smoke, "code_version": code_version(),
              "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "wall_s": round(wall_s, 1),
              "gpu": facts.get("cuda"), "machine": facts, "failed": [n for n, e in probes.items() if not e["ok"]],
              "probes": probes}
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    rows = [[name, str(e["rc"]), "ok" if e["ok"] else "FAILED", f"{e['seconds']:.0f}/{e['limit_s']:.0f}",
             str(e.get("summary", ""))] for name, e in probes.items()]
    head = (f"GPU check{' (smoke: CPU, tiny)' if smoke else ''}, {record['finished_at']}, {record['gpu'] or 'no GPU'}, "
            f"code {record['code_version']}, {wall_s:.0f} s: {command}")
    text = [head, "", *aligned(["probe", "rc", "check", "s/limit", "result"], rows)]
    (out / "gpu_check.txt").write_text("\n".join(text) + "\n")
    if not quiet:
        print("\n".join(text))


def pack(mnist_root: Path) -> int:
    """PACKED's files as installed here (their RECORD, bytecode left out) into .devpkgs/, which the run puts first on
    PYTHONPATH, and MNIST's four files into .devdata/mnist/."""
    pkgs, data = REPO / ".devpkgs", REPO / ".devdata"
    for folder in (pkgs, data):
        shutil.rmtree(folder, ignore_errors=True)
    for name in PACKED:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file)))
            if file.suffix == ".pyc" or ".." in file.parts or not source.is_file():
                continue  # bytecode, and scripts installed outside site-packages
            (pkgs / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, pkgs / file)
        print(f"packed {name} {dist.version}")
    from sweepit.train.data import mnist as mnist_files

    found = [mnist_files.find_file(mnist_root, name) for name in mnist_files.FILES.values()]
    if all(found):
        (data / "mnist").mkdir(parents=True)
        for f in found:
            shutil.copy2(f, data / "mnist" / f.name)  # type: ignore[union-attr]
        print(f"packed MNIST from {mnist_root}")
    else:
        print(f"gpu_check pack: no MNIST in {mnist_root} (MNIST_ROOT=DIR names its four IDX files): the mnist probe "
              "will train on synthetic data, where its 99.4% target means nothing", file=sys.stderr)
    sizes = {f.name: sum(x.stat().st_size for x in f.rglob("*") if x.is_file()) / 2**20 for f in (pkgs, data)}
    total = sum(sizes.values())
    print(f"{', '.join(f'{k} {v:.1f} MiB' for k, v in sizes.items())}: {total:.1f} MiB together, at most "
          f"{CARRY_LIMIT_MIB} MiB (a lent machine's call carries them and the tree within {CARRY_LIMIT_MIB} MiB)")
    if total > CARRY_LIMIT_MIB:
        print(f"gpu_check pack: .devpkgs and .devdata must stay within {CARRY_LIMIT_MIB} MiB together, but hold "
              f"{total:.1f} MiB. Pack fewer distributions or a smaller data set.", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("pack").add_argument("--mnist-root", type=Path, required=True)
    listing = sub.add_parser("plan")
    listing.add_argument("--only", default="")
    listing.add_argument("--scale", type=float, default=None)
    one = sub.add_parser("probe")
    one.add_argument("name", choices=PROBES)
    gather = sub.add_parser("report")
    gather.add_argument("--out", type=Path, required=True)
    gather.add_argument("--command", required=True)
    gather.add_argument("--started", type=float, required=True, help="the run's start, in seconds since the epoch")
    gather.add_argument("--quiet", action="store_true", help="write the files, print nothing (after each probe)")
    for parser in (one, gather):
        parser.add_argument("--work", type=Path, required=True)
    for parser in (listing, one, gather):
        parser.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    if args.cmd == "pack":
        return pack(args.mnist_root)
    if args.cmd == "plan":
        return plan(args.only, args.scale, args.smoke)
    if args.cmd == "probe":
        return run_probe(args.name, args.work, args.smoke)
    report(args.work, args.out, args.smoke, args.command, time.time() - args.started, args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
