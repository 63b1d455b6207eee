"""MNIST CNN training samples/s: sweepit's in-memory pipeline against a plain torch DataLoader loop, like for like.

Run: python bench/bench_throughput.py [--root DIR] [--batch-size 128] [--steps 20] [--rounds 6]
                                      [--precision both|fp32|bf16] [--json PATH]
     (or: make bench-throughput ARGS='--root DIR'; the root defaults to $MNIST_ROOT, then data/mnist)

Same model (`build_model("cnn", (1, 28, 28), 10)`, the mnist_best hidden size and dropout), same seed, same
Adam learning rate, same batch size, same first `steps * batch_size` training images, in the same process:
- sweepit: the real `sweepit.train._loop.train` on a config composed like the job's (sweeps/mnist_best.yaml),
  its data cut to the benchmark's subset; its own per-epoch `samples_per_s` is the figure.
- DataLoader, num_workers 0 and 2: a Dataset whose __getitem__ returns one normalised sample (randomly
  rotated, shifted and zoomed in the augmented variant, as torchvision's RandomAffine does on a tensor),
  default collate, shuffle=True; the loop a course script writes.
- compute only: the same training step on one fixed batch, no data work at all: the ceiling for any
  input pipeline on this machine.
Every pipeline runs in each precision asked for: `fp32` (the default of both), and `bf16` = bf16 autocast with
the model and the batches in channels_last (NHWC), which is sweepit's `trainer.precision=bf16
trainer.channels_last=true` and the same two lines in the DataLoader loop. The verdict (target: sweepit >= 2x
the faster DataLoader loop) compares pipelines of the same precision and layout only; what bf16 itself gains
(bf16 / fp32, each pipeline against itself) is a row of its own, and sweepit-bf16 / DataLoader-fp32, which
multiplies the two, is printed for reference and never judged.
Each round runs one epoch of every pipeline in turn, in a rotating order (each sweepit `train()` runs in a
thread of its own that the round hands the turn to, one pipeline at a time, so they never overlap), so that load
from other processes hits them alike; round 1 is warm-up; the median and the best (least disturbed) of the
other rounds are shown; each ratio three ways: paired (the median of the per-round ratios, the two pipelines
measured in the same round under the same load: the verdict's), median over median, and best over best.
`--json PATH` writes every epoch's figure, the ratios, the command and the machine (load average at start and end).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from torch import nn
from torch.utils.data import DataLoader, Dataset

from machine import machine_info, machine_line, write_json
from sweepit.train import _loop as training
from sweepit.train import _session
from sweepit.train.data import Splits, iterate_batches, load_splits
from sweepit.train.data import mnist as mnist_files
from sweepit.train.data.augment import augment_images
from sweepit.train.models import build_model

REPO = Path(__file__).resolve().parents[1]
N_VAL = 1024  # sweepit's loop evaluates after each epoch (not timed); keep that short
TARGET_RATIO = 2.0
DATA_PASSES = 5  # the input pipelines alone take milliseconds: best of several passes, against noise
PRECISIONS = {"fp32": False, "bf16": True}  # bf16 = bf16 autocast + channels_last (NHWC), in every pipeline
SWEEPIT, LOADER, COMPUTE = "sweepit train()", "DataLoader w={}", "compute only"


def name(kind: str, precision: str) -> str:
    """A pipeline's name: `sweepit train() [bf16]`, `DataLoader w=2 [fp32]`, `compute only [fp32]`."""
    return f"{kind} [{precision}]"


# ---------------------------------------------------------------- the baseline a course script writes
class MnistDataset(Dataset[tuple[torch.Tensor, int]]):
    """One sample per __getitem__: (RandomAffine), ToTensor, Normalize, as torchvision's MNIST + transforms."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, scale: float, mean: float, std: float,
                 aug: dict[str, float] | None) -> None:
        self.images, self.labels = images, labels  # images (N, 1, 28, 28): uint8 for real MNIST
        self.scale, self.mean, self.std, self.aug = scale, mean, std, aug

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = self.images[i].float() / self.scale
        if self.aug is not None:
            x = random_affine(x, **self.aug)
        return (x - self.mean) / self.std, int(self.labels[i])


def random_affine(x: torch.Tensor, rotation_deg: float, shift_frac: float, zoom_frac: float) -> torch.Tensor:
    """One image (C, H, W) rotated, shifted, zoomed, filled with 0: RandomAffine's tensor path, by hand."""
    u = torch.rand(4) * 2 - 1
    angle, zoom = float(u[0]) * math.radians(rotation_deg), 1 + float(u[3]) * zoom_frac
    dx, dy = float(u[1]) * 2 * shift_frac, float(u[2]) * 2 * shift_frac
    cos, sin = math.cos(angle) / zoom, math.sin(angle) / zoom
    theta = torch.tensor([[[cos, -sin, -dx], [sin, cos, -dy]]], dtype=x.dtype)
    grid = F.affine_grid(theta, [1, *x.shape], align_corners=False)
    return F.grid_sample(x[None], grid, mode="bilinear", padding_mode="zeros", align_corners=False)[0]


def train_step(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: nn.Module,
               xb: torch.Tensor, yb: torch.Tensor, bf16: bool = False) -> tuple[float, int]:
    if bf16:
        xb = xb.contiguous(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(xb)
        loss = loss_fn(logits, yb)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item(), int((logits.argmax(1) == yb).sum())


class Trainer:
    """A model, its optimizer and one way of feeding it; `epoch()` returns samples/s over one epoch."""

    def __init__(self, cfg: DictConfig, batches: Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]],
                 n_samples: int, bf16: bool = False) -> None:
        torch.manual_seed(int(cfg.seed))
        t = cfg.task
        self.model = build_model(t.model, (1, 28, 28), 10, hidden=int(t.hidden), dropout=float(t.dropout))
        self.bf16 = bf16
        if bf16:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=float(cfg.lr))
        self.loss_fn = nn.CrossEntropyLoss()
        self.batches, self.n_samples = batches, n_samples

    def epoch(self) -> float:
        self.model.train()
        t0 = time.perf_counter()
        n = 0
        for xb, yb in self.batches():
            train_step(self.model, self.opt, self.loss_fn, xb, yb, self.bf16)
            n += len(yb)
        assert n == self.n_samples, (n, self.n_samples)
        return n / (time.perf_counter() - t0)


# ---------------------------------------------------------------- data
def compose_cfg(root: Path, synthetic: bool, n_synthetic: int, batch_size: int, epochs: int, augmented: bool,
                threads: int, model: str = "cnn", precision: str = "fp32") -> DictConfig:
    """The mnist_best job config as `train.py --config-dir sweeps --config-name mnist_best` composes it."""
    overrides = [
        f"hydra.searchpath=[file://{REPO / 'conf'}]", f"data.root={root}", "device=cpu",
        f"data.synthetic={str(synthetic).lower()}", f"data.n_synthetic={n_synthetic}",
        f"batch_size={batch_size}", f"epochs={epochs}", f"trainer.threads={threads}",
        "trainer.log_every_epoch=false", f"task.model={model}", f"trainer.precision={precision}",
        f"trainer.channels_last={str(precision == 'bf16').lower()}",
        # Plain variant: no augmentation, plain shuffling; augmented variant: mnist_best as it stands.
        f"data.augment.enabled={str(augmented).lower()}", f"data.stratified={str(augmented).lower()}",
    ]
    with initialize_config_dir(config_dir=str(REPO / "sweeps"), version_base="1.3"):
        return compose(config_name="mnist_best", overrides=overrides)


def has_mnist(root: Path) -> bool:
    return all(mnist_files.find_file(root, name) is not None for name in mnist_files.FILES.values())


def subset(s: Splits, n_train: int) -> Splits:
    if len(s.x_train) < n_train:
        raise SystemExit(f"--steps x --batch-size must be at most the {len(s.x_train):,} training images, "
                         f"but is {n_train:,}. Fix: lower --steps.")
    return Splits(s.x_train[:n_train], s.y_train[:n_train], s.x_val[:N_VAL], s.y_val[:N_VAL],
                  s.n_classes, s.source)


def baseline_images(root: Path, real: bool, splits: Splits) -> tuple[torch.Tensor, float, float, float]:
    """What the baseline Dataset holds: MNIST's raw uint8 pixels (scale, mean, std applied per sample)."""
    n = len(splits.x_train)
    if real:
        path = mnist_files.find_file(root, mnist_files.FILES["train_images"])
        assert path is not None
        raw = torch.from_numpy(mnist_files.read_idx(path)[:n].copy()).unsqueeze(1)
        return raw, 255.0, mnist_files.MEAN, mnist_files.STD
    return splits.x_train.clone(), 1.0, 0.0, 1.0  # synthetic images are generated normalised


@contextmanager
def only(splits: Splits) -> Iterator[None]:
    """sweepit's `train` sees the benchmark's subset instead of the whole data set."""
    with mock.patch.object(training, "load_data", lambda cfg, device: splits):
        yield


# ---------------------------------------------------------------- measurements
class SweepitRun(threading.Thread):
    """sweepit's real `train()`, one epoch per turn: `epoch()` lets it train one epoch and returns its samples/s.

    The training runs in this thread while the caller waits, so it never overlaps another pipeline; it pauses in
    its epoch callback until the next turn. Each run has a session of its own (no job directory: nothing written).
    """

    def __init__(self, cfg: DictConfig) -> None:
        super().__init__(daemon=True)
        self.cfg = cfg
        self.rates: list[float] = []
        self.error: BaseException | None = None
        self.turn, self.yielded = threading.Semaphore(0), threading.Semaphore(0)
        self.threads = torch.get_num_threads()  # torch's thread count is per thread (OpenMP): pass it on

    def run(self) -> None:
        torch.set_num_threads(self.threads)
        self.turn.acquire()
        try:
            session = _session.Session(job_dir=None, config=self.cfg)
            training.train(self.cfg, on_epoch=self._on_epoch, log=lambda line: print("  " + line, flush=True),
                           session=session)
        except BaseException as e:  # handed to the caller's epoch(), which re-raises it
            self.error = e
            self.yielded.release()

    def _on_epoch(self, epoch: int, row: dict[str, Any]) -> bool:
        self.rates.append(float(row["samples_per_s"]))
        self.yielded.release()
        if epoch < int(self.cfg.epochs):
            self.turn.acquire()
        return False

    def epoch(self) -> float:
        self.turn.release()
        self.yielded.acquire()
        if self.error is not None:
            raise RuntimeError(f"sweepit's train() failed: {self.error!r}") from self.error
        return self.rates[-1]


def measure_group(cfgs: dict[str, DictConfig], splits: Splits, raw: torch.Tensor, scale: float, mean: float,
                  std: float, rounds: int) -> dict[str, list[float]]:
    """samples/s per round for every pipeline in every precision, the rounds interleaved; round 1 included."""
    cfg = next(iter(cfgs.values()))
    augmented = bool(cfg.data.augment.enabled)
    a = cfg.data.augment
    aug = {"rotation_deg": float(a.rotation_deg), "shift_frac": float(a.shift_frac),
           "zoom_frac": float(a.zoom_frac)} if augmented else None
    n, bs = len(splits.x_train), int(cfg.batch_size)
    ds = MnistDataset(raw, splits.y_train, scale, mean, std, aug)
    loaders = {w: DataLoader(ds, batch_size=bs, shuffle=True, num_workers=w, persistent_workers=w > 0)
               for w in (0, 2)}
    xb, yb = splits.x_train[:bs].clone(), splits.y_train[:bs].clone()
    pipelines: dict[str, Callable[[], float]] = {}
    runs = []
    for precision, pcfg in cfgs.items():
        bf16 = PRECISIONS[precision]
        run = SweepitRun(pcfg)
        runs.append(run)
        pipelines[name(SWEEPIT, precision)] = run.epoch
        for w, dl in loaders.items():
            pipelines[name(LOADER.format(w), precision)] = Trainer(pcfg, lambda dl=dl: iter(dl), n, bf16).epoch
        pipelines[name(COMPUTE, precision)] = Trainer(
            pcfg, lambda: ((xb, yb) for _ in range(n // bs)), n // bs * bs, bf16).epoch
    rates: dict[str, list[float]] = {k: [] for k in pipelines}
    names = list(pipelines)
    with only(splits):
        for run in runs:
            run.start()
        for r in range(rounds):
            shift = r % len(names)  # rotate the order so no pipeline always runs right after the same one
            for k in names[shift:] + names[:shift]:
                rates[k].append(pipelines[k]())
            print(f"  round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()),
                  flush=True)
        for run in runs:
            run.join()
    return rates


def data_only(cfg: DictConfig, splits: Splits, raw: torch.Tensor, scale: float, mean: float,
              std: float) -> dict[str, float]:
    """samples/s of each input pipeline alone (no model): best of DATA_PASSES passes."""
    augmented, a, bs = bool(cfg.data.augment.enabled), cfg.data.augment, int(cfg.batch_size)
    n = len(splits.x_train)
    g, aug_g = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)

    def sweepit_pass() -> None:  # what the loop does per batch: slice by index, augment the whole batch
        labels = splits.y_train if cfg.data.stratified else None
        for idx in iterate_batches(n, bs, g, labels=labels, device=torch.device("cpu")):
            xb, _ = splits.x_train[idx], splits.y_train[idx]
            if augmented:
                augment_images(xb, float(a.rotation_deg), float(a.shift_frac), float(a.zoom_frac), aug_g)

    aug = {"rotation_deg": float(a.rotation_deg), "shift_frac": float(a.shift_frac),
           "zoom_frac": float(a.zoom_frac)} if augmented else None
    ds = MnistDataset(raw, splits.y_train, scale, mean, std, aug)
    passes: dict[str, Callable[[], None]] = {SWEEPIT: sweepit_pass}
    for w in (0, 2):
        dl = DataLoader(ds, batch_size=bs, shuffle=True, num_workers=w, persistent_workers=w > 0)
        passes[LOADER.format(w)] = lambda dl=dl: drain(dl)
    out = {}
    for label, run in passes.items():
        best = 0.0
        for _ in range(DATA_PASSES):
            t0 = time.perf_counter()
            run()
            best = max(best, n / (time.perf_counter() - t0))
        out[label] = best
    return out


def drain(loader: DataLoader[Any]) -> None:
    for _ in loader:
        pass


def profile_compute(cfg: DictConfig, splits: Splits, n_steps: int = 10) -> None:
    """The training step's top operators, and what bf16 autocast with channels_last would make of it.

    The bf16 lines show what `trainer.precision=bf16 trainer.channels_last=true` does to the step alone on
    this CPU (AMX / AVX-512 BF16 units).
    """
    from torch.profiler import profile

    bs = int(cfg.batch_size)
    xb, yb = splits.x_train[:bs].clone(), splits.y_train[:bs].clone()
    trainer = Trainer(cfg, lambda: iter(()), 0)
    for _ in range(3):
        train_step(trainer.model, trainer.opt, trainer.loss_fn, xb, yb)
    with profile() as prof:
        for _ in range(n_steps):
            train_step(trainer.model, trainer.opt, trainer.loss_fn, xb, yb)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    for label, bf16, channels_last in (("fp32", False, False), ("fp32 channels_last", False, True),
                                       ("bf16 autocast", True, False), ("bf16 autocast + channels_last", True, True)):
        t = Trainer(cfg, lambda: iter(()), 0)
        x = xb.contiguous(memory_format=torch.channels_last) if channels_last else xb
        if channels_last:
            t.model = t.model.to(memory_format=torch.channels_last)
        times = []
        for i in range(3 + 3 * n_steps):
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = t.model(x)
                loss = t.loss_fn(logits, yb)
            t.opt.zero_grad(set_to_none=True)
            loss.backward()
            t.opt.step()
            if i >= 3:
                times.append(time.perf_counter() - t0)
        print(f"compute only, {label}: median {bs / statistics.median(times):,.0f} samples/s, "
              f"best {bs / min(times):,.0f} samples/s")


# ---------------------------------------------------------------- report
def summarize(groups: dict[str, tuple[dict[str, list[float]], dict[str, float]]], precisions: list[str],
              bs: int) -> list[dict[str, Any]]:
    """Print the table and the ratios; return the ratios as records (median and best of the timed epochs)."""
    print(f"\n{'augmentation':<14} {'pipeline':<28} {'median samples/s':>16} {'best samples/s':>14} "
          f"{'ms/step (best)':>14} {'data-only samples/s':>19}")
    for group, (rates, data_rates) in groups.items():
        for label, values in rates.items():
            timed = values[1:] or values
            med, best = statistics.median(timed), max(timed)
            data_col = data_rates.get(label.split(" [")[0])
            data_text = f"{data_col:>19,.0f}" if data_col is not None else f"{'-':>19}"
            print(f"{group:<14} {label:<28} {med:>16,.0f} {best:>14,.0f} {bs / best * 1000:>14.1f} {data_text}")
    ratios: list[dict[str, Any]] = []

    def ratio(group: str, rates: dict[str, list[float]], kind: str, top: str, bottom: str, target: float | None,
              what: str) -> None:
        """Three statistics of top / bottom over the timed rounds; the verdict is on the paired one (the median
        of the per-round ratios: the two ran in the same round, under the same load)."""
        t, b = rates[top][1:] or rates[top], rates[bottom][1:] or rates[bottom]
        paired = statistics.median(x / y for x, y in zip(t, b, strict=True))
        medians, bests = statistics.median(t) / statistics.median(b), max(t) / max(b)
        met = None if target is None else paired >= target
        ratios.append({"augmentation": group, "kind": kind, "numerator": top, "denominator": bottom,
                       "paired_median": paired, "median_over_median": medians, "best_over_best": bests,
                       "per_round": [x / y for x, y in zip(t, b, strict=True)], "target": target, "met": met})
        verdict = "" if target is None else f" (target >= {target:g}x: {'MET' if met else 'MISSED'})"
        print(f"{group}, {what}: {top} / {bottom} = {paired:.2f}x paired{verdict}; "
              f"median/median {medians:.2f}x, best/best {bests:.2f}x")

    for group, (rates, data_rates) in groups.items():
        print()
        med = {k: statistics.median(r[1:] or r) for k, r in rates.items()}

        def faster_loader(precision: str, med: dict[str, float] = med) -> str:
            return max((name(LOADER.format(w), precision) for w in (0, 2)), key=med.__getitem__)

        for p in precisions:
            ratio(group, rates, "verdict, like for like", name(SWEEPIT, p), faster_loader(p), TARGET_RATIO,
                  f"{p}, like for like")
            ratio(group, rates, "ceiling", name(COMPUTE, p), faster_loader(p), None,
                  f"{p}, ceiling for any input pipeline")
        if {"fp32", "bf16"} <= set(precisions):
            for kind in (SWEEPIT, COMPUTE):
                ratio(group, rates, "bf16 gain", name(kind, "bf16"), name(kind, "fp32"), None, "bf16 gain")
            ratio(group, rates, "bf16 gain", faster_loader("bf16"), faster_loader("fp32"), None, "bf16 gain")
            ratio(group, rates, "mixed (not a verdict)", name(SWEEPIT, "bf16"), faster_loader("fp32"), None,
                  "mixed precisions, for reference only")
        for p in precisions:
            step_ms = bs / max(rates[name(COMPUTE, p)][1:] or rates[name(COMPUTE, p)]) * 1000
            print(f"{group}: per step of {bs}: model step {p} {step_ms:.1f} ms (best)")
        print(f"{group}: input pipeline alone per step: "
              + ", ".join(f"{k} {bs / r * 1000:.2f} ms" for k, r in data_rates.items()))
    return ratios


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default=os.environ.get("MNIST_ROOT") or "data/mnist",
                   help="folder with MNIST's IDX files; synthetic MNIST-shaped data when they are absent")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=20, help="training steps per epoch (a subset of the data)")
    p.add_argument("--rounds", type=int, default=6, help="timed epochs per pipeline, after one warm-up")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--model", default="cnn", choices=("cnn", "mlp", "softmax"),
                   help="the issue's figure is the CNN; mlp/softmax show where the input pipeline dominates")
    p.add_argument("--no-augment", action="store_true", help="skip the augmented variant")
    p.add_argument("--precision", default="both", choices=("both", "fp32", "bf16"),
                   help="the precision of every pipeline (bf16: autocast + channels_last); both: each pipeline in "
                        "both, and the bf16 gain (default)")
    p.add_argument("--profile", action="store_true", help="also print the training step's top operators")
    p.add_argument("--json", type=Path, default=None, help="write the raw figures, command and machine here")
    args = p.parse_args()
    started = machine_info()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    precisions = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    root = Path(args.root).resolve()
    real = has_mnist(root)
    n_train = args.steps * args.batch_size
    n_synthetic = math.ceil(max(n_train / 0.8, N_VAL / 0.2)) + 10  # synthetic data split 80/20
    print(f"machine: {machine_line()}")
    print(f"model: {args.model}; precisions: {', '.join(precisions)} (bf16 = autocast + channels_last, in every "
          "pipeline alike)")
    data_text = f"real MNIST from {root}" if real else f"SYNTHETIC MNIST-shaped data (no IDX files in {root})"
    print(f"data: {data_text}; first {n_train:,} training images; batch {args.batch_size}, {args.steps} steps per "
          f"epoch, 1 warm-up + {args.rounds} timed epochs per pipeline", flush=True)
    t_start = time.perf_counter()
    groups: dict[str, tuple[dict[str, list[float]], dict[str, float]]] = {}
    for augmented in (False,) if args.no_augment else (False, True):
        label = "rot/shift/zoom" if augmented else "none"
        cfgs = {prec: compose_cfg(root, not real, n_synthetic, args.batch_size, args.rounds + 1, augmented,
                                  args.threads, args.model, prec) for prec in precisions}
        cfg = cfgs[precisions[0]]
        splits = subset(load_splits(cfg, torch.device("cpu")), n_train)
        raw, scale, mean, std = baseline_images(root, real, splits)
        print(f"\naugmentation: {label}" + (" (sweepit: stratified batches, as mnist_best)" if augmented else ""))
        rates = measure_group(cfgs, splits, raw, scale, mean, std, args.rounds + 1)
        groups[label] = (rates, data_only(cfg, splits, raw, scale, mean, std))
        if args.profile and not augmented:
            profile_compute(cfg, splits)
    ratios = summarize(groups, precisions, args.batch_size)
    wall_s = time.perf_counter() - t_start
    print(f"\nmachine at end: {machine_line()}; benchmark wall {wall_s:.0f} s")
    if args.json is not None:
        write_json(args.json, {
            "benchmark": "throughput", "settings": {**vars(args), "root": str(root), "real_mnist": real,
                                                    "n_train": n_train, "precisions": precisions},
            "wall_s": wall_s, "epochs_samples_per_s": {g: r for g, (r, _) in groups.items()},
            "data_only_samples_per_s": {g: d for g, (_, d) in groups.items()},
            "note": "epochs_samples_per_s: one list per pipeline, round 1 (warm-up) first; ratios leave it out",
            "ratios": ratios}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
