"""What users of Hydra's released Optuna plugin rely on, through real multiruns in this process (Hydra's sweep
runner, sweepit's local launcher forking each job): the search's own bookkeeping never shows as an override."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.test_utils.test_utils import TSweepRunner
from omegaconf import DictConfig

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hydra_default_version_base")]


def _task(cfg: DictConfig) -> float:
    """Writes what the job sees of its trial (the pruning channel) into its directory."""
    out = Path(HydraConfig.get().runtime.output_dir)
    seen = {k: v for k, v in os.environ.items() if k.startswith("SWEEPIT_OPTUNA_")}
    (out / "env.json").write_text(json.dumps(seen))
    return float(cfg.x)


@pytest.mark.parametrize("launcher", ["local", "basic"])
def test_the_trials_environment_is_never_an_override(hydra_sweep_runner: TSweepRunner, tmp_path: Path,
                                                     capfd: pytest.CaptureFixture[str], launcher: str) -> None:
    sweep_dir = tmp_path / "sweep"
    extra = ["hydra.launcher.preload=[]", "hydra.launcher.n_workers=1"] if launcher == "local" else []
    sweep = hydra_sweep_runner(calling_file=None, calling_module="hydra.test_utils.a_module", config_path="configs",
                               config_name=None, task_function=_task, temp_dir=str(sweep_dir),
                               overrides=["hydra/sweeper=optuna", f"hydra/launcher={launcher}", *extra,
                                          "+x=interval(-1, 1)", "hydra.sweeper.n_trials=2",
                                          "hydra.sweeper.sampler.name=random", "hydra.sweeper.sampler.seed=0"])
    with sweep:  # the runner removes the sweep directory at the end of the block
        assert sweep.returns is not None
        returns = [r for batch in sweep.returns for r in batch]
        envs = [json.loads((sweep_dir / str(n) / "env.json").read_text()) for n in (0, 1)]
        hydra_overrides = [yaml.safe_load((sweep_dir / str(n) / ".hydra" / "hydra.yaml").read_text())["hydra"]
                           ["overrides"]["hydra"] for n in (0, 1) if launcher == "local"]
        manifest = json.loads((sweep_dir / "sweep.json").read_text()) if launcher == "local" else {"jobs": []}
    assert len(returns) == 2
    for ret in returns:  # what Hydra and other plugins get back: the searched value, nothing of the search's
        assert len(ret.overrides) == 1 and ret.overrides[0].startswith("+x="), ret.overrides
    assert [e["SWEEPIT_OPTUNA_TRIAL"] for e in envs] == ["0", "1"]  # the job still learns its trial (pruning)
    assert not any("SWEEPIT" in o for overrides in hydra_overrides for o in overrides), hydra_overrides
    if launcher == "local":
        assert [len(j["overrides"]) for j in manifest["jobs"]] == [1, 1], manifest["jobs"]
        printed = capfd.readouterr()
        assert "env_set" not in printed.out + printed.err and "job  x" in printed.out
