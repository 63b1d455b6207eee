"""The GPU figures of the courses' studies, on one GPU node: run it there (`make bench-gpu`), record its JSON.

Run: python bench/bench_gpu.py [--mnist-root DIR] [--cifar-root DIR] [--json PATH] [--parts mnist,throughput,scaling]
     [--precision auto|bf16|fp32] [--steps N]
     (on Slurm: srun -N1 --gres=gpu:4 --exclusive make bench-gpu ARGS='--mnist-root DIR --json out.json')

Three parts, each the real entry point (`train.py`) in a subprocess, its figures read from the jobs' files:
- mnist: the mnist_best study (sweeps/mnist_best.yaml) on one GPU: its test accuracy per epoch and the time
  until it first reaches 99.4% (the epochs' own times summed; the first epoch's start-up included).
- throughput: CIFAR-10 ResNet-50 on one GPU, sweepit's loop (`train.py task=cifar10`) against a plain
  DataLoader loop (TensorDataset, shuffle, 4 workers, pinned memory) with the same model, batch, precision
  (`--precision`; auto: bf16 autocast on GPUs of compute capability 8 or more, else fp32) and channels_last;
  the ratio is like for like. `--steps` batches an epoch; epoch times leave out the first (warm-up) epoch.
- scaling: `make sweep-scaling` as a user runs it (sweeps/scaling.yaml, ResNet-50 at 128 px, 1..N GPUs of the
  node, one job at a time) and its report's speedup and efficiency table.
Without --mnist-root / --cifar-root the data are synthetic images of the same shapes (the accuracy target
then means nothing, and the JSON says so). Without CUDA it stops with a message, except `--smoke`, which runs
every part tiny on the CPU to check the plumbing (what `make test` does).
The bench process itself imports no torch: the plain loop and the machine's facts at the start run in child processes
(at the end, the load is read again beside them), so that no CUDA context of its own sits on GPU 0 while the jobs it
starts run (a GPU in exclusive-process mode takes one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from machine import machine_info_at_end, write_json

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TARGET_ACC = 0.994
OUT = REPO / "outputs" / "bench" / "gpu"


def run(cmd: list[str], capture: bool = False) -> str:
    """Run a command from the repository root, its output streaming through (or captured and returned)."""
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE if capture else None, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench-gpu: the command above failed with exit status {proc.returncode}")
    return proc.stdout or ""


def train(args: list[str], sweep_dir: Path, multirun: bool = True) -> Path:
    """Run train.py; return the sweep (or run) directory."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    run([sys.executable, str(REPO / "train.py"), *(["-m"] if multirun else []), *args, f"{key}={sweep_dir}"])
    return sweep_dir


def machine_facts() -> dict[str, Any]:
    """machine.py's line and facts, asked in a child process (they import torch and name the GPU), at the start."""
    return dict(json.loads(run([sys.executable, str(HERE / "machine.py")], capture=True)))


def rows_of(job_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((p for p in sweep_dir.iterdir() if (p / "result.json").is_file()),
                  key=lambda p: int(p.name.split("_")[0]))


def mnist_part(root: str | None, device: str, smoke: bool, work: Path) -> dict[str, Any]:
    data = [f"data.root={root}"] if root else ["data.synthetic=true"]
    tiny = ["epochs=1", "data.n_synthetic=512", "trainer.threads=1"] if smoke else []
    sweep = train(["--config-dir", str(REPO / "sweeps"), "--config-name", "mnist_best", f"device={device}",
                   "hydra.callbacks.summary.report=false", *data, *tiny], work / "mnist_best")
    (job,) = job_dirs(sweep)
    rows = rows_of(job)
    elapsed, reached = 0.0, None
    for row in rows:
        elapsed += float(row["epoch_time_s"])
        if reached is None and float(row["val_acc"]) >= TARGET_ACC:
            reached = {"epoch": row["epoch"], "seconds": elapsed}
    result = json.loads((job / "result.json").read_text())
    return {"data": root or "synthetic (the accuracy target means nothing)", "target_acc": TARGET_ACC,
            "final_acc": rows[-1]["val_acc"], "reached": reached, "epochs": len(rows),
            "train_s": elapsed, "wall_time_s": result.get("wall_time_s"), "device": result.get("device"),
            "met": reached is not None, "job_dir": str(job)}


def plain_loop(device: str, batch_size: int, steps: int, epochs: int, image_size: int, workers: int,
               precision: str = "auto", threads: int = 0) -> dict[str, Any]:
    """The course's loop on the same model and synthetic data, in its own process (`--plain-loop`): its precision
    (auto: bf16 from compute capability 8 on) and samples/s per epoch; `threads` torch CPU threads (0: torch's own)."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from sweepit.train.models import resnet50

    if threads:
        torch.set_num_threads(threads)
    if precision == "auto":
        bf16 = device == "cuda" and torch.cuda.is_available() and torch.cuda.get_device_capability(0)[0] >= 8
        precision = "bf16" if bf16 else "fp32"
    torch.manual_seed(0)
    n = batch_size * steps
    data = TensorDataset(torch.randn(n, 3, image_size, image_size), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=workers,
                        pin_memory=device == "cuda", persistent_workers=workers > 0, drop_last=True)
    model = resnet50(10, image_size).to(device).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rates = []
    for _ in range(epochs):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for x, y in loader:
            x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
            y = y.to(device, non_blocking=True)
            with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        rates.append(n / (time.perf_counter() - t0))
    return {"precision": precision, "samples_per_s": rates}


def throughput_part(root: str | None, device: str, smoke: bool, work: Path, precision: str = "auto",
                    steps: int = 50) -> dict[str, Any]:
    # The smoke run's images are 8 px: ResNet-50's CIFAR stem keeps them full size through its first stage, where 32 px
    # cost seconds of one core a batch. Its loops run on one thread each, like for like, as its jobs do.
    batch, steps, epochs, size = (8, 2, 2, 8) if smoke else (128, steps, 4, 32)
    loop = [device, batch, steps, epochs, size, 0 if smoke else 4, precision, 1 if smoke else 0]
    plain = json.loads(run([sys.executable, str(Path(__file__).resolve()), "--plain-loop", json.dumps(loop)],
                           capture=True).splitlines()[-1])
    precision = plain["precision"]
    # The synthetic set's training split (80%) is the plain loop's `batch * steps` images.
    n_synthetic = max(40, batch * steps * 5 // 4)
    data = [f"data.root={root}"] if root else ["data.synthetic=true", f"data.n_synthetic={n_synthetic}"]
    run_dir = train(["task=cifar10", "task.model=resnet50", f"task.image_size={size}", f"batch_size={batch}",
                     f"epochs={epochs}", f"device={device}", f"trainer.precision={precision}",
                     "trainer.channels_last=true", "trainer.checkpoint=false", "trainer.save_model=none",
                     "optimizer=momentum", "lr=0.1", *data, *(["trainer.threads=1"] if smoke else [])],
                    work / "throughput_sweepit", multirun=False)
    sweepit_rates = [float(r["samples_per_s"]) for r in rows_of(run_dir)]

    def mean_after_first(rates: list[float]) -> float:
        timed = rates[1:] or rates
        return sum(timed) / len(timed)

    s, p = mean_after_first(sweepit_rates), mean_after_first(plain["samples_per_s"])
    return {"precision": precision, "channels_last": True, "batch_size": batch, "steps": steps, "image_size": size,
            "data": root or "synthetic", "sweepit_samples_per_s": sweepit_rates,
            "plain_samples_per_s": plain["samples_per_s"],
            "ratio_sweepit_over_plain": s / p, "note": "plain loop on synthetic tensors of the same shape"}


def scaling_part(root: str | None, device: str, smoke: bool, work: Path) -> dict[str, Any]:
    """`make sweep-scaling`: its plan (scripts/scaling_plan.py) takes the GPUs there are and the data that is there."""
    from sweepit.reporting import load_sweep
    from sweepit.reporting.scaling import scaling_points

    sweep_dir = work / "scaling"
    tiny = (["epochs=2", "task.image_size=32", "task.model=cnn", "batch_size=16", "data.n_synthetic=128",
             f"device={device}", "trainer.threads=1", "repeat=0"] if smoke else [])
    args = ["hydra.callbacks.summary.report=false", *tiny, f"hydra.sweep.dir={sweep_dir}"]
    # On make's command line: under `make bench-gpu ARGS=...` its own ARGS would reach this make through MAKEFLAGS.
    run(["make", "--no-print-directory", "sweep-scaling", f"PY={sys.executable}", f"ARGS={' '.join(args)}",
         *([f"CIFAR_ROOT={root}"] if root else [])])
    sweep = load_sweep(sweep_dir)
    points = scaling_points(sweep)
    return {"gpus": ",".join(str(p.n_gpus) for p in points), "data": sweep.jobs[0].result.get("data"),
            "points": [{"gpus": p.n_gpus, "epoch_time_s": p.epoch_time_s, "samples_per_s": p.samples_per_s,
                        "speedup": p.speedup, "efficiency": p.efficiency} for p in points]}


PARTS = {"mnist": mnist_part, "throughput": throughput_part, "scaling": scaling_part}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mnist-root", default=os.environ.get("MNIST_ROOT"), help="MNIST IDX files (else synthetic)")
    p.add_argument("--cifar-root", default=os.environ.get("CIFAR_ROOT"), help="CIFAR-10 batches (else synthetic)")
    p.add_argument("--parts", default="mnist,throughput,scaling", help="which parts, comma-separated")
    p.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                   help="the throughput part's, both loops (auto: bf16 from compute capability 8.0, else fp32)")
    p.add_argument("--steps", type=int, default=50, help="the throughput part's batches an epoch (of 128 images)")
    p.add_argument("--smoke", action="store_true", help="every part tiny on the CPU: checks the plumbing only")
    p.add_argument("--json", type=Path, default=None, help="write the raw figures, command and machine here")
    p.add_argument("--work", type=Path, default=OUT, help=f"where the runs' outputs go (default {OUT})")
    p.add_argument("--plain-loop", help=argparse.SUPPRESS)  # the child process of the throughput part
    args = p.parse_args()
    if args.plain_loop:
        print(json.dumps(plain_loop(*json.loads(args.plain_loop))))
        return 0
    parts = [x for x in args.parts.split(",") if x]
    unknown = [x for x in parts if x not in PARTS]
    if unknown:
        p.error(f"--parts takes {', '.join(PARTS)}, but got {', '.join(unknown)}")
    machine = machine_facts()
    if not args.smoke and machine["info"]["cuda"] is None:
        print("bench-gpu: error: this benchmark measures GPU figures, but torch sees no CUDA device here "
              f"(torch {machine['info']['torch']}). Run it on a GPU node, e.g. `srun -N1 --gres=gpu:4 make bench-gpu`; "
              "`--smoke` runs it tiny on the CPU to check that it works.", file=sys.stderr)
        return 2
    device = "cpu" if args.smoke else "cuda"
    print(machine["line"], flush=True)
    out: dict[str, Any] = {"smoke": args.smoke}
    roots = {"mnist": args.mnist_root, "throughput": args.cifar_root, "scaling": args.cifar_root}
    for name in parts:
        tuned = {"precision": args.precision, "steps": args.steps} if name == "throughput" else {}
        out[name] = PARTS[name](roots[name], device, args.smoke, args.work, **tuned)
        print(f"bench-gpu {name}: {json.dumps(out[name], default=str)[:600]}", flush=True)
    if "mnist" in out:
        m = out["mnist"]
        reached = f"epoch {m['reached']['epoch']}, {m['reached']['seconds']:.1f} s" if m["reached"] else "not reached"
        print(f"mnist_best: {TARGET_ACC:.1%} {reached}; final {m['final_acc']:.4f} "
              f"(target: {'MET' if m['met'] else 'MISSED'})")
    if "throughput" in out:
        t = out["throughput"]
        print(f"CIFAR-10 ResNet-50 ({t['precision']}, channels_last): sweepit / plain DataLoader loop = "
              f"{t['ratio_sweepit_over_plain']:.2f}x")
    if "scaling" in out:
        for point in out["scaling"]["points"]:
            print(f"scaling: {point['gpus']} device(s): {point['epoch_time_s']:.3g} s/epoch, speedup "
                  f"{point['speedup']:.2f}, efficiency {point['efficiency']:.0%}")
    if args.json:
        write_json(args.json, out, machine["info"], machine_info_at_end(machine["info"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
