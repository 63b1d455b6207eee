"""A researcher's own training loop, swept by sweepit: five calls give it learning curves, Optuna pruning,
exact resume after a Slurm requeue, and the rank and device sweepit assigned.

    python examples/own_loop/train.py -m lr=0.003,0.03 width=8,16                 # a local sweep
    python examples/own_loop/train.py -m hydra/sweeper=optuna 'lr=tag(log, interval(1e-4, 1e-1))' \
        hydra.sweeper.n_trials=12 hydra.sweeper.n_jobs=2 hydra/sweeper/pruner=median
    python examples/own_loop/train.py -m hydra/launcher=slurm lr=0.003,0.03         # on Slurm
"""

from __future__ import annotations

import hydra
import torch
import torch.nn.functional as F
from digitnet.data import make
from digitnet.model import DigitNet
from omegaconf import DictConfig
from torch.utils.data import DataLoader

import sweepit


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    job = sweepit.context()                       # rank, world size, device, job directory
    torch.manual_seed(cfg.seed)
    model = DigitNet(cfg.width, cfg.dropout).to(job.device)
    if job.world_size > 1:                        # one process per GPU under Slurm or torchrun
        job.init_process_group()
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    train_set, val_set = make(cfg.n_train, cfg.noise, cfg.seed), make(1000, cfg.noise, cfg.seed + 1)
    order = torch.Generator().manual_seed(cfg.seed)

    first = 1
    state = sweepit.load_checkpoint()             # a requeued or resumed job goes on where it stopped
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        order.set_state(state["order"])
        first = state["epoch"] + 1

    val_acc = 0.0
    for epoch in range(first, cfg.epochs + 1):
        model.train()
        total = 0.0
        for x, y in DataLoader(train_set, batch_size=cfg.batch_size, shuffle=True, generator=order):
            loss = F.cross_entropy(model(x.to(job.device)), y.to(job.device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(y)
        model.eval()
        with torch.no_grad():
            x, y = val_set.tensors
            logits = model(x.to(job.device))
            val_loss = F.cross_entropy(logits, y.to(job.device)).item()
            val_acc = (logits.argmax(1).cpu() == y).float().mean().item()
        sweepit.report({"train_loss": total / len(train_set), "val_loss": val_loss, "val_acc": val_acc}, epoch=epoch)
        print(f"epoch {epoch}: val_acc {val_acc:.4f}", flush=True)
        if sweepit.should_stop():                 # Optuna's pruner: this trial will not be the best
            break
        sweepit.save_checkpoint({"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict(),
                                 "order": order.get_state()})
    return val_acc


if __name__ == "__main__":
    main()
