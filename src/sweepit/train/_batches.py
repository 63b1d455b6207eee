"""Batches for the loop, from data in memory (index slices on the device) or streamed Datasets (a DataLoader): each
rank's share of every global batch, in an order that depends only on the seed, with the same device-side steps
(augmentation, resizing to `task.image_size`, channels-last)."""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset, get_worker_info

from sweepit.errors import ConfigError
from sweepit.train._rank import Rank
from sweepit.train.data import Splits, iterate_batches
from sweepit.train.data.custom import Streamed

EVAL_BATCH = 1024  # validation batch: no gradients, so larger than training batches


def epoch_seed(seed: int, stream: str, epoch: int) -> int:
    """A seed for one random stream (`order`, `augment/<rank>`, ...) of one epoch, from the job's seed alone."""
    digest = hashlib.blake2b(f"{seed}/{stream}/{epoch}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # torch takes seeds below 2**63


class Batches:
    def __init__(self, cfg: Any, data: Splits | Streamed, rank: Rank, device: torch.device,
                 channels_last: bool) -> None:
        self.data, self.rank, self.device, self.channels_last = data, rank, device, channels_last
        self.world = rank.world_size
        self.batch_size = int(cfg.batch_size)
        self.seed = int(cfg.seed)
        regression = data.n_classes == 0
        self.stratified = bool(cfg.data.get("stratified", False)) and not regression
        aug = cfg.data.get("augment") or {}
        self.augment = bool(aug.get("enabled", False))
        self.aug_args = (float(aug.get("rotation_deg", 0.0)), float(aug.get("shift_frac", 0.0)),
                         float(aug.get("zoom_frac", 0.0)))
        image_size = int(cfg.task.get("image_size", 0) or 0) if "task" in cfg else 0
        self.resize = image_size if image_size > 0 and data.input_shape[-1] != image_size else 0
        # Seeded again at each epoch from (seed, epoch) alone: a run resumed at any epoch draws what an uninterrupted
        # run draws there, on every rank, with no generator state to checkpoint.
        self.batch_g = torch.Generator()  # the global order: the same on every rank
        # Each rank's augmentation: its own, drawn on the batches' device (no copy from the host at each step). The
        # meta device, which draws nothing, has no generator of its own.
        self.aug_g = torch.Generator(device if device.type != "meta" else "cpu")
        if (self.augment or self.resize or channels_last) and len(data.input_shape) != 3:
            raise ConfigError(f"data.augment, task.image_size and trainer.channels_last apply to images (C, H, W), but "
                              f"the inputs have shape {data.input_shape}; turn them off for this data.")
        if isinstance(data, Streamed):
            if self.stratified:
                raise ConfigError("data.stratified=true needs the labels in memory, but this data is a streamed "
                                  "Dataset; return (x, y) tensors from data._target_, or set data.stratified=false.")
            loader = cfg.data.get("loader") or {}
            self.num_workers = int(loader.get("num_workers", 2))
            self.pin_memory = bool(loader.get("pin_memory", True)) and device.type == "cuda"
        self._train_loader: DataLoader[Any] | None = None  # built at the first epoch, kept (streamed data)
        self._val_loader: DataLoader[Any] | None = None
        self._epoch = 0  # the last epoch trained: the validation after it reads with its seeds

    def _loader(self, dataset: Dataset[Any], **how: Any) -> DataLoader[Any]:
        """A DataLoader built once, whose workers stay from epoch to epoch (forked again from a CUDA process at each
        epoch they would cost a start each time, and under forkserver or spawn an import of torch). Its own generator:
        a loader draws its workers' seed at its first pass, and from the global generator, which the loop seeds again
        at each epoch, that draw would shift a resumed run's later draws (its first pass is a later epoch)."""
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, f"loader/{self.rank.rank}", 0))
        return DataLoader(dataset, num_workers=self.num_workers, pin_memory=self.pin_memory,
                          persistent_workers=self.num_workers > 0, generator=generator, **how)

    def describe(self) -> str:
        streamed = (f" (streamed: {self.num_workers} loader worker(s) per rank"
                    + (", pinned memory)" if self.pin_memory else ")")) if isinstance(self.data, Streamed) else ""
        return (streamed + (" (augmented)" if self.augment else "")
                + (" (stratified batches)" if self.stratified else ""))

    def steps_per_epoch(self) -> int:
        return max(1, self.data.n_train // (self.batch_size * self.world))

    def prepare(self, xb: torch.Tensor, training: bool) -> torch.Tensor:
        if training and self.augment:
            from sweepit.train.data.augment import augment_images

            xb = augment_images(xb, *self.aug_args, self.aug_g)
        if self.resize:
            xb = F.interpolate(xb, size=(self.resize, self.resize), mode="bilinear", align_corners=False)
        return xb.contiguous(memory_format=torch.channels_last) if self.channels_last else xb

    def sample(self, n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
        """The first few training samples, prepared for the model (no randomness drawn)."""
        d = self.data
        if isinstance(d, Splits):
            return self.prepare(d.x_train[:n], False), d.y_train[:n]
        x, y = next(iter(DataLoader(Subset(d.train, range(min(n, d.n_train))), batch_size=n)))
        return self.prepare(x.to(self.device).float(), False), y.to(self.device)

    def _shards(self, epoch: int, labels: torch.Tensor | None = None,
                device: torch.device | None = None) -> Iterator[torch.Tensor]:
        """This rank's sample indices of each global batch of the epoch, in memory or streamed alike."""
        self.batch_g.manual_seed(epoch_seed(self.seed, "order", epoch))
        for idx in iterate_batches(self.data.n_train, self.batch_size * self.world, self.batch_g, labels=labels,
                                   device=device):
            if len(idx) < self.world:
                break  # too few samples left to give every rank one
            yield torch.tensor_split(idx, self.world)[self.rank.rank]

    def train(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's (inputs, labels) of each training batch of the epoch."""
        self.aug_g.manual_seed(epoch_seed(self.seed, f"augment/{self.rank.rank}", epoch))
        d = self.data
        if isinstance(d, Splits):
            for idx in self._shards(epoch, d.y_train if self.stratified else None, d.x_train.device):
                yield self.prepare(d.x_train[idx], True), d.y_train[idx]
            return
        if self._train_loader is None:
            self._train_loader = self._loader(_EpochSeeded(d.train, self.seed, str(self.rank.rank)),
                                              batch_sampler=_EpochBatches(self._shards))
        self._train_loader.batch_sampler.epoch = self._epoch = epoch  # type: ignore[union-attr]
        for xb, yb in self._train_loader:
            xb, yb = xb.to(self.device, non_blocking=True), yb.to(self.device, non_blocking=True)
            yield self.prepare(xb.float(), True), yb

    def val(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's share of the validation data (every world_size-th sample), in evaluation batches."""
        d, r, w = self.data, self.rank.rank, self.world
        if isinstance(d, Splits):
            x_val, y_val = d.x_val[r::w], d.y_val[r::w]
            for start in range(0, len(x_val), EVAL_BATCH):
                yield self.prepare(x_val[start:start + EVAL_BATCH], False), y_val[start:start + EVAL_BATCH]
            return
        if self._val_loader is None:
            mine, size = torch.arange(r, d.n_val, w), max(self.batch_size, 256)
            self._val_loader = self._loader(_EpochSeeded(d.val, self.seed, f"{r}/val"),
                                            batch_sampler=_EpochBatches(lambda _: iter(mine.split(size))))
        self._val_loader.batch_sampler.epoch = self._epoch  # type: ignore[union-attr]
        for xb, yb in self._val_loader:
            yield self.prepare(xb.to(self.device, non_blocking=True).float(), False), yb.to(self.device)


class _EpochBatches:
    """A kept loader's batch sampler: this rank's batches of the epoch it was last told (`epoch`), as (epoch, index)
    keys, so that a worker knows one epoch from the last (`_EpochSeeded`)."""

    def __init__(self, shards: Callable[[int], Iterator[torch.Tensor]]) -> None:
        self.shards, self.epoch = shards, 0

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch = self.epoch
        return ([(epoch, i) for i in idx.tolist()] for idx in self.shards(epoch))


class _EpochSeeded(Dataset[Any]):
    """A streamed Dataset as a loader's worker reads it: at the first item of each epoch the worker seeds torch,
    random and numpy from (seed, stream: the rank and split, worker, epoch), so that a Dataset that draws (random
    transforms) draws in a resumed run what it drew in an uninterrupted one, though its workers started at another
    epoch. Without workers it draws from the loop's own generators, seeded at each epoch."""

    def __init__(self, dataset: Dataset[Any], seed: int, stream: str) -> None:
        self.dataset, self.seed, self.stream = dataset, seed, stream
        self.epoch: int | None = None

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        epoch, i = key
        worker = get_worker_info()
        if worker is not None and epoch != self.epoch:
            self.epoch = epoch
            seed = epoch_seed(self.seed, f"loader/{self.stream}/{worker.id}", epoch)
            torch.manual_seed(seed)
            random.seed(seed)
            if "numpy" in sys.modules:
                sys.modules["numpy"].random.seed(seed % 2**32)
        return self.dataset[i]
