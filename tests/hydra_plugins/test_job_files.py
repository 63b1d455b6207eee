"""A job run by sweepit's local launcher leaves every file Hydra's own `run_job` writes (`.hydra/`, under whatever
`hydra.output_subdir` says, byte for byte; the job's log file, but for its timestamps; the sweep's multirun.yaml) and
its sweeper gets the same JobReturn: for several apps, each run once through Hydra's `run_job` and once as the local
launcher runs it (`job_files_app.py`), into the same sweep directory."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from sweepit_testing import REPO, TINY, run_command

HARNESS = Path(__file__).parents[1] / "job_files_app.py"
TIME = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")  # logging's asctime

APP = '''"""A plain Hydra app that logs, at two levels, where it runs and what its environment holds."""
import logging
import os

import hydra

log = logging.getLogger(__name__)


@hydra.main(version_base={version_base!r}, config_path="conf", config_name="config")
def main(cfg):
    log.info(f"x={{cfg.x}} cwd={{os.getcwd()}} env={{os.environ.get('JOB_FILES_ENV')}}")
    log.debug("a debug line")
    return cfg.x * 2


if __name__ == "__main__":
    main()
'''
CUSTOM_LOGGING = """# The job's log under a name of its own, every level, in a format of its own.
version: 1
formatters:
  plain:
    format: '%(asctime)s %(levelname)s %(name)s: %(message)s'
handlers:
  file:
    class: logging.FileHandler
    formatter: plain
    filename: ${hydra.runtime.output_dir}/custom-${hydra.job.name}.log
root:
  level: INFO
  handlers: [file]
disable_existing_loggers: false
"""


def write_app(folder: Path, version_base: str | None) -> Path:
    (folder / "conf" / "hydra" / "job_logging").mkdir(parents=True)
    (folder / "conf" / "config.yaml").write_text("# The app's one value.\nx: 0\n")
    (folder / "conf" / "hydra" / "job_logging" / "custom.yaml").write_text(CUSTOM_LOGGING)
    app = folder / "app.py"
    app.write_text(APP.format(version_base=version_base))
    return app


# (the app, or the version base of a plain app written for the test; its sweep's arguments; the files its jobs'
# Hydra writes, besides the app's own)
CASES: dict[str, tuple[Path | str | None, list[str], set[str]]] = {
    "train.py": (REPO / "train.py", ["task=linreg", *TINY, "data.n_synthetic=50", "seed=0,1"],
                 {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "train.log"}),
    "fixed_work": (REPO / "bench" / "apps" / "fixed_work.py", ["+work_s=0", "+x=1,2"],
                   {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "fixed_work.log"}),
    "any_hydra_app": (REPO / "examples" / "any_hydra_app" / "app.py", ["x=0,1", "y=2"],
                      {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "app.log"}),
    "version_base=None": (None, ["x=1,2"],
                          {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "app.log"}),
    "version_base=1.1": ("1.1", ["x=1,2"],  # runs its jobs in their directories: hydra.job.chdir is unset
                         {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "app.log"}),
    "hydra settings": ("1.3", ["x=1,2", "+hydra.job.env_set.JOB_FILES_ENV=set", "hydra.output_subdir=saved",
                               "hydra/job_logging=custom", "hydra.verbose=true"],
                       {"saved/config.yaml", "saved/hydra.yaml", "saved/overrides.yaml", "custom-app.log"}),
}


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run(mode: str, app: Path, args: list[str], sweep_dir: Path, cwd: Path) -> list[dict[str, Any]]:
    out = cwd / f"{mode}.json"
    done = run_command([sys.executable, HARNESS, mode, out, app, "-m", "hydra/launcher=local",
                        f"hydra.sweep.dir={sweep_dir}", *args], cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    returns: list[dict[str, Any]] = json.loads(out.read_text())
    return returns


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_job_leaves_the_files_hydras_run_job_writes(case: str, tmp_path: Path) -> None:
    app, args, hydras = CASES[case]
    if not isinstance(app, Path):
        app = write_app(tmp_path / "app", app)
    cwd, sweep_dir, reference = tmp_path / "cwd", tmp_path / "sweep", tmp_path / "reference"
    cwd.mkdir()
    expected = run("hydra", app, args, sweep_dir, cwd)
    sweep_dir.rename(reference)  # the same directory for both: Hydra's files name it
    returned = run("sweepit", app, args, sweep_dir, cwd)

    assert returned == expected
    assert len(expected) == 2 and {r["status"] for r in expected} == {"COMPLETED"}
    assert files(sweep_dir)["multirun.yaml"] == files(reference)["multirun.yaml"]
    job_dirs = sorted(p.name for p in reference.iterdir() if p.is_dir() and p.name[0].isdigit())
    assert len(job_dirs) == 2
    for name in job_dirs:
        theirs, ours = files(reference / name), files(sweep_dir / name)
        written = {f for f in theirs if f.startswith(("saved/", ".hydra/")) or f.endswith(".log")}
        assert written == hydras, "the files Hydra writes for this case"
        for file in sorted(theirs):
            assert file in ours, f"{name}/{file}: Hydra's run_job leaves it, sweepit's job path does not"
            if file.endswith(".log"):
                assert TIME.sub(b"<time>", ours[file]) == TIME.sub(b"<time>", theirs[file]), f"{name}/{file}"
            elif file in written:
                assert ours[file] == theirs[file], f"{name}/{file}"
    if case in ("version_base=1.1", "hydra settings"):  # what the app logs, where its settings say
        log = (sweep_dir / job_dirs[0] / next(f for f in hydras if f.endswith(".log"))).read_text()
        assert "x=1" in log and (case != "hydra settings" or ("env=set" in log and "a debug line" in log)), log
        assert (f"cwd={sweep_dir / job_dirs[0]}" in log) == (case == "version_base=1.1"), log
