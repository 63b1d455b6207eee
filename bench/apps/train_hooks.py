"""train.py's job with two hooks of bench/gpu_check.py's probes, each set by a variable of the environment:
`STOP_AFTER_EPOCH=N` stops the run after epoch N, as a preemption between epochs would (a KeyboardInterrupt, as
tests/train/test_checkpoint.py stops its runs), so that the same command run again resumes from the checkpoint;
`FAIL_RANK=R` makes rank R's process group fail to start (the `failing_rank` probe's smoke run on the CPU, where gloo
takes two ranks on one device: it stands in for NCCL's refusal of two ranks on one GPU). Its error does not name the
rank: sweepit's record must."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import hydra
import torch.distributed
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sweepit.train import run_job

STOP_AFTER_EPOCH = int(os.environ.get("STOP_AFTER_EPOCH") or 0)
FAIL_RANK = os.environ.get("FAIL_RANK")
if FAIL_RANK is not None:
    started = torch.distributed.init_process_group

    @functools.wraps(started)
    def refused(*args: Any, **kwargs: Any) -> None:
        if kwargs.get("rank") == int(FAIL_RANK or 0):
            raise RuntimeError("the process group refused this process (a stand-in for NCCL's duplicate GPU)")
        started(*args, **kwargs)

    torch.distributed.init_process_group = refused  # sweepit calls it through the module: the ranks, forked, see this


def stop_after(epoch: int, row: dict[str, Any]) -> bool:
    if epoch == STOP_AFTER_EPOCH:
        raise KeyboardInterrupt
    return False


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    return run_job(cfg, Path(HydraConfig.get().runtime.output_dir), stop_after if STOP_AFTER_EPOCH else None)


if __name__ == "__main__":
    main()
