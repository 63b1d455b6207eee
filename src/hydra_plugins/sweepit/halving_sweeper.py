"""sweepit's halving sweeper (`hydra/sweeper=halving`): a grid in the basic sweeper's grammar, parsed by Hydra's own
override parser and expanded as Hydra's BasicSweeper expands it, run rung by rung by `sweepit.search.Halving`. This
class holds what is Hydra's: the grid, the check that its jobs compose, the launcher (whose resume becomes the sweeper's
own), the refusal of an app that cannot resume from a checkpoint, and a job's stop epoch as its environment.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import CompactHydraException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.sweepit._launcher import SweepitLauncher, compact_errors, plain_options, runs_sweepits_loop
from sweepit.errors import ConfigError, SweepFailedError
from sweepit.results import JobState, SweepPaths, job_folders, objective_direction, read_record, summarize
from sweepit.search import Halving, HalvingOptions

_HOWTO = "See docs/troubleshooting.md#halving-needs-checkpoints"


class HalvingInputError(ConfigError, CompactHydraException):
    """Bad sweeper input, or an app the sweeper cannot pause; Hydra prints the message alone."""


class HalvingSweeper(Sweeper):
    def __init__(self, params: dict[str, str] | None = None, **options: Any) -> None:
        try:
            self.options = HalvingOptions(**plain_options(options))
        except ConfigError as e:
            raise HalvingInputError(str(e)) from None
        self.params = dict(params or {})
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.launcher: Any = None
        self.fail_on_error = True
        self.resume = False

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config, self.task_function = hydra_context, config, task_function
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)
        # The sweeper judges the jobs at each rung and prints one table at the end. On a resume it alone says which
        # jobs run again: the launcher's resume would skip a paused job it promotes.
        if isinstance(self.launcher, SweepitLauncher):
            self.fail_on_error = self.launcher.options.fail_on_error
            self.launcher.options.fail_on_error = self.launcher.options.print_summary = False
            self.resume = bool(getattr(self.launcher.options, "resume", False))
            self.launcher.options.resume = False

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        with compact_errors():
            points = self._grid(arguments)
            try:
                halving = self._halving(points, sweep_dir)
            except ConfigError:
                if isinstance(self.launcher, SweepitLauncher):
                    self.launcher.end_dry_run()  # refused before any job: no empty sweep folder is left
                raise
            self.validate_batch_is_legal(points)  # unknown keys, bad values: before any job runs
            sweep_dir.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(self.config, SweepPaths(sweep_dir).multirun)
            launcher = self.launcher

            def set_env(num: int, env: dict[str, str]) -> None:
                launcher.job_env[num] = env  # beside its overrides: the job's folder and fingerprint stay its own

            try:
                returns = halving.run(launcher, set_env, resume=self.resume)
            finally:
                launcher.close()
                print(summarize(sweep_dir), flush=True)
            self._check_failures(sweep_dir, list(range(len(points))))
        return [[ret for _, ret in returns]]

    def _halving(self, points: list[list[str]], sweep_dir: Path) -> Halving:
        """The sweep's rungs over `points`, or HalvingInputError before any job runs."""
        assert self.config is not None
        self._check_app()
        metric = OmegaConf.select(self.config, "metric", default=None)
        if metric is None:
            raise HalvingInputError("hydra/sweeper=halving ranks the jobs at each rung by the config's `metric`, "
                                    "but the config has none. Add `metric: NAME` (and `direction`) to it.")
        halving = Halving(self.options, points, sweep_dir, str(metric),
                          objective_direction(OmegaConf.select(self.config, "direction", default=None)),
                          OmegaConf.select(self.config, "epochs", default=None))
        try:
            halving.plan(self.resume)  # the rungs, and on a resume the sweep's own
        except ConfigError as e:
            raise HalvingInputError(str(e)) from None
        return halving

    def _grid(self, arguments: list[str]) -> list[list[str]]:
        """The grid's points, in the order (and so the job numbers) Hydra's BasicSweeper gives them."""
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*(f"{k}={v}" for k, v in self.params.items()), *arguments])
        return BasicSweeper.split_arguments(overrides, None)[0]

    def _check_app(self) -> None:
        """Refuse, before any job runs, a launcher that cannot start a job by its number (packed Slurm workers take
        theirs from a fixed plan), and an app that cannot pause at a rung and resume from there: sweepit's loop with
        `trainer.checkpoint=false`, or a task of its own whose module never calls `sweepit.save_checkpoint` and
        `sweepit.load_checkpoint`."""
        from hydra_plugins.sweepit.local_launcher import LocalLauncher
        from hydra_plugins.sweepit.slurm_launcher import SlurmLauncher

        assert self.config is not None
        if not isinstance(self.launcher, LocalLauncher | SlurmLauncher):
            raise HalvingInputError(
                "hydra/sweeper=halving runs its rungs on sweepit's local or Slurm launcher, but the launcher is "
                f"{type(self.launcher).__name__}. Add hydra/launcher=local or hydra/launcher=slurm.")
        if isinstance(self.launcher, SlurmLauncher) and self.launcher.options.workers:
            raise HalvingInputError(
                "hydra/sweeper=halving runs each job as its own Slurm job, but hydra.launcher.workers="
                f"{self.launcher.options.workers} packs them into workers.\nDrop hydra.launcher.workers.")
        if runs_sweepits_loop(self.task_function):
            if not OmegaConf.select(self.config, "trainer.checkpoint", default=False):
                raise HalvingInputError(
                    "hydra/sweeper=halving resumes promoted jobs from their checkpoints, but trainer.checkpoint=false."
                    f"\nAdd trainer.checkpoint=true.\n{_HOWTO}")
            return
        module = sys.modules.get(getattr(self.task_function, "__module__", "") or "")
        try:
            source = inspect.getsource(module) if module is not None else ""
        except (OSError, TypeError):
            source = ""
        missing = [f"sweepit.{name}" for name in ("save_checkpoint", "load_checkpoint") if name not in source]
        if missing:
            raise HalvingInputError(
                "hydra/sweeper=halving pauses each job at a rung and resumes it from its checkpoint, but the task's "
                f"module never calls {' or '.join(missing)}.\nLoad the checkpoint before the first epoch, and save it "
                f"after each epoch's sweepit.report.\n{_HOWTO}")

    def _check_failures(self, sweep_dir: Path, nums: list[int]) -> None:
        """A job that failed fails the sweep, as on the launcher alone (unless `hydra.launcher.fail_on_error=false`).
        So does one that left no record of its end: a sweep whose job ended unseen has not run its rungs."""
        folders = job_folders(sweep_dir)
        failed = [n for n in nums if not JobState.is_settled(read_record(folders.get(n)).status)]
        if failed and self.fail_on_error:
            raise SweepFailedError(f"{len(failed)} job(s) of the halving sweep failed, were interrupted or left no "
                                   "record of their end: "
                                   f"{', '.join(map(str, failed))}.\n`sweepit status {sweep_dir}` shows each error.")
