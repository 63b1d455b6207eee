"""Optuna pruning from inside a job: report the objective after each epoch to the job's trial, stop when told. A job
learns its trial from three environment variables (out of its overrides, directory name and reproduce command) and
rebuilds the pruner the sweeper stored in the study. optuna is imported only when a job is part of a study."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sweepit.errors import ConfigError
from sweepit.search._samplers import build, resolve

# Called after each epoch with (epoch, metrics row); True: the pruner says stop.
EpochCallback = Callable[[int, dict[str, Any]], bool]

ENV_STORAGE = "SWEEPIT_OPTUNA_STORAGE"   # storage URL, or the path of a journal file
ENV_STUDY = "SWEEPIT_OPTUNA_STUDY"       # study name
ENV_TRIAL = "SWEEPIT_OPTUNA_TRIAL"       # trial number
PRUNER_ATTR = "sweepit_pruner"           # study user attribute: the pruner spec (see build_pruner)
# Short name -> Optuna class; the Hydra plugin's config groups (hydra/sweeper/pruner=<name>) use the same names.
PRUNER_CLASSES = {
    "none": "optuna.pruners.NopPruner", "median": "optuna.pruners.MedianPruner",
    "percentile": "optuna.pruners.PercentilePruner", "successive_halving": "optuna.pruners.SuccessiveHalvingPruner",
    "hyperband": "optuna.pruners.HyperbandPruner", "threshold": "optuna.pruners.ThresholdPruner",
    "patient": "optuna.pruners.PatientPruner", "wilcoxon": "optuna.pruners.WilcoxonPruner",
}
PRUNER_KEY = "hydra.sweeper.pruner"
_DRIVERS = {"postgresql": "psycopg2-binary", "mysql": "PyMySQL"}


def open_storage(url: str) -> Any:
    """An Optuna storage: a database URL, `redis://...` (a journal on Redis), or a journal file's path."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalRedisBackend

    if "://" not in url:
        path = Path(url).absolute()
        if not path.parent.is_dir():
            raise ConfigError(f"the journal file's folder must exist, but {path.parent} does not; create it or give "
                              "another path in hydra.sweeper.storage.")
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    if url.startswith("redis"):
        return optuna.storages.JournalStorage(JournalRedisBackend(url))
    try:
        return optuna.storages.RDBStorage(url)
    except ModuleNotFoundError as e:
        scheme = url.split(":", 1)[0].split("+", 1)[0]
        package = _DRIVERS.get(scheme, e.name or "the database driver")
        raise ConfigError(f"the storage URL {url!r} needs the Python module {e.name!r}, which is not installed; "
                          f"pip install {package}, or leave hydra.sweeper.storage unset for a journal file.") from e
    except Exception as e:  # sqlalchemy's OperationalError and friends: the database cannot be reached
        raise ConfigError(f"the Optuna storage must be reachable, but {url!r} is not "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:300]}); check the URL and that "
                          "the database server runs, or leave hydra.sweeper.storage unset for a journal "
                          "file in the sweep directory.") from e


def resolve_pruner(spec: Mapping[str, Any]) -> dict[str, Any]:
    """`{"_target_": ..., keywords}` (no pruner without `_target_`); a resolved spec (a study's) stays as it is."""
    return resolve(spec, PRUNER_CLASSES, "none")


def build_pruner(spec: Mapping[str, Any]) -> Any:
    """An Optuna pruner from a spec; steps are epochs."""
    node = resolve_pruner(spec)
    return build(node, PRUNER_KEY, node["_target_"])


def require_metric(spec: Mapping[str, Any], metric: str | None) -> None:
    """A pruner judges the values a job reports each epoch, and a job reports to its trial only its config's `metric`
    (sweepit.train's session): without one the pruner would silently prune nothing, so the search is refused."""
    target = resolve_pruner(spec)["_target_"]
    if metric is not None or target == PRUNER_CLASSES["none"]:
        return
    name = next((k for k, v in PRUNER_CLASSES.items() if v == target), target)
    raise ConfigError(
        "a pruner stops trials on the metric their jobs report each epoch, but the app's config names no `metric`, so "
        f"no job reports one and hydra/sweeper/pruner={name} would prune nothing.\n"
        "Add `metric: NAME` and `direction: maximize` or `minimize` to the config, or use hydra/sweeper/pruner=none.\n"
        "See docs/troubleshooting.md#pruner-without-metric")


class TrialReporter:
    """The `on_epoch` callback of one job. The storage is opened at the first epoch's end, inside the job's own error
    handling, so that an unreachable storage is recorded as the job's failure in `result.json`."""

    def __init__(self, storage_url: str, study_name: str, trial_number: int, metric: str,
                 n_epochs: int | None = None, log: Callable[[str], None] = print) -> None:
        self.storage_url, self.study_name, self.trial_number = storage_url, study_name, trial_number
        self.metric, self.n_epochs, self.log = metric, n_epochs, log
        self.trial: Any = None

    def _open(self) -> None:
        import optuna

        storage = open_storage(self.storage_url)
        study_id = storage.get_study_id_from_name(self.study_name)
        spec = storage.get_study_user_attrs(study_id).get(PRUNER_ATTR) or {}
        study = optuna.load_study(study_name=self.study_name, storage=storage, pruner=build_pruner(spec))
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, self.trial_number)
        self.trial = optuna.trial.Trial(study, trial_id)
        # Optuna reports and prunes single-objective trials only; a multi-objective job trains without reporting.
        multi = len(study.directions) > 1
        self.active = storage.get_trial(trial_id).state == optuna.trial.TrialState.RUNNING and not multi
        if not self.active and not multi:
            self.log(f"sweepit: trial {self.trial_number} of study {self.study_name!r} is finished already; this job "
                     "trains without reporting to it")

    def __call__(self, epoch: int, row: dict[str, Any]) -> bool:
        if self.trial is None:
            self._open()
        value = row.get(self.metric)
        if not self.active or not isinstance(value, int | float) or not math.isfinite(value):
            return False
        self.trial.report(float(value), step=epoch)
        if self.n_epochs is not None and epoch >= self.n_epochs:
            return False  # trained in full: a result for the sampler, not a trial to prune
        if self.trial.should_prune():
            self.log(f"sweepit: trial {self.trial_number} pruned after epoch {epoch} ({self.metric}={value:.4g})")
            return True
        return False


def trial_env(info: Mapping[str, Any], number: int) -> dict[str, str]:
    """The environment of a job of trial `number` of the study `info` (its `storage` and `study_name`)."""
    return {ENV_STORAGE: str(info["storage"]), ENV_STUDY: str(info["study_name"]), ENV_TRIAL: str(number)}


def pruning_callback(cfg: Any, env: Mapping[str, str] | None = None) -> EpochCallback | None:
    """The job's `on_epoch` when the Optuna sweeper launched it (its variables are set), else None."""
    env = os.environ if env is None else env
    if not all(env.get(k) for k in (ENV_STORAGE, ENV_STUDY, ENV_TRIAL)):
        return None
    try:
        number = int(env[ENV_TRIAL])
    except ValueError:
        raise ConfigError(f"{ENV_TRIAL} must be a trial number, but got {env[ENV_TRIAL]!r}; it is set by the "
                          "Optuna sweeper: unset it to train outside a study.") from None
    epochs = getattr(cfg, "epochs", None)
    return TrialReporter(env[ENV_STORAGE], env[ENV_STUDY], number, str(cfg.metric),
                         epochs if isinstance(epochs, int) else None)
