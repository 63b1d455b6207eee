"""What `make sweep-scaling` runs on this machine: the overrides of sweeps/scaling.yaml for the GPUs the local launcher
can hand out (1..N), on CIFAR-10 where its batches are there, else on synthetic images of its shape; without a GPU,
the study's CPU variant. The overrides go to stdout (the target passes them to train.py), what they mean to stderr.

    python scripts/scaling_plan.py --cifar-root data/cifar10 [--args "$(ARGS)"]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

# The GPUs the local launcher hands out, counted as it counts them (CUDA_VISIBLE_DEVICES, else the NVIDIA driver's
# list): a sweep over more would have jobs refused.
from sweepit.local import visible_gpus

# Gloo ranks of one core each, a small CNN on synthetic CIFAR-shaped data: the study's plumbing on any machine.
CPU_VARIANT = ["task.model=cnn", "task.image_size=32", "data.synthetic=true", "data.n_synthetic=6000", "device=cpu",
               "trainer.threads=1", "epochs=3", "trainer.gpus=1,2", "repeat=0,1,2"]
ONE_GPU = ("one GPU here: the sweep measures the 1-GPU point (epoch time and samples/s, their spread over the "
           "repeats), the baseline every speedup is divided by. It cannot show a speedup, an efficiency, nor what the "
           "gradients' all-reduce costs between GPUs (NCCL over NVLink or the network): those need a machine with 2 "
           "GPUs or more (`make sweep-scaling` there, or hydra/launcher=<cluster profile>: docs/gpu.md).")


def missing_batches(root: Path) -> tuple[Path, list[str]]:
    """CIFAR-10's own answer (sweepit.train.data.cifar), imported only with a GPU: it imports torch, and the CPU
    variant reads no CIFAR."""
    from sweepit.train.data import cifar

    return cifar.missing_batches(root)


def has_cifar(root: Path) -> bool:
    return not missing_batches(root)[1]


def plan(n_gpus: int, cifar_root: Path) -> tuple[list[str], list[str]]:
    """(overrides, lines saying what they measure) for `n_gpus` GPUs and CIFAR-10 where `cifar_root` may hold it."""
    if n_gpus == 0:
        return CPU_VARIANT, [f"no GPU on this machine: running the CPU variant of the scaling study "
                             f"({' '.join(CPU_VARIANT)})"]
    gpus = ",".join(str(n) for n in range(1, n_gpus + 1))
    lines = [f"{n_gpus} GPU(s) here: the scaling study on trainer.gpus={gpus}, one job at a time"]
    if has_cifar(cifar_root):
        data = [f"data.root={cifar_root}"]
        lines.append(f"data: CIFAR-10 from {cifar_root}")
    else:
        data = ["data.synthetic=true"]
        folder = missing_batches(cifar_root)[0]
        lines.append(f"data: synthetic CIFAR-shaped images, since {folder} holds no CIFAR-10 "
                     f"(`sweepit data download cifar10 --root {cifar_root}`, or CIFAR_ROOT=DIR, for the real one): "
                     "epoch times and speedups hold, accuracies mean nothing")
    if n_gpus == 1:
        lines.append(ONE_GPU)
    return [f"trainer.gpus={gpus}", *data], lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cifar-root", type=Path, default=Path("data/cifar10"), help="where CIFAR-10 may be")
    p.add_argument("--args", default="", help="the target's ARGS: a data.root=DIR there is where CIFAR-10 may be")
    args = p.parse_args()
    roots = [w.split("=", 1)[1] for w in shlex.split(args.args) if w.startswith("data.root=")]
    root = Path(roots[-1]) if roots else args.cifar_root
    if len(str(root).split()) != 1:
        print(f"sweepit: error: the CIFAR-10 folder must be a path without spaces (the target passes it to train.py as "
              f"one word), but got {str(root)!r}. Link it from a path without any: ln -s '{root}' data/cifar10",
              file=sys.stderr)
        return 2
    overrides, lines = plan(len(visible_gpus()), root)
    for line in lines:
        print(f"sweepit: {line}", file=sys.stderr)
    print(" ".join(overrides))
    return 0


if __name__ == "__main__":
    sys.exit(main())
