"""Every command README.md shows, run as written: the same words, from a scratch copy of the checkout as the working
directory, with the default output folders (`outputs/...`), the Slurm ones on the local cluster.

- The first command (`make install && .venv/bin/python train.py -m ...`) runs in a copy of its own with no venv,
  once per test run however many parallel test processes there are, and the trackers extra goes into the `.venv` it
  made. Each other command gets a fresh copy whose `.venv` is the test run's own (as after `source
  .venv/bin/activate`: the same `make install`, which CI has just run in a fresh clone), and runs in whichever
  process is free.
- Each command is run by `make test` or by `make test-slow` (`@shows(..., tier_slow=True)`: marked `tier_slow`):
  the fresh install, the studies at their README size and the commands whose path a `make test` test elsewhere
  covers are in `make test-slow`.
- Only the README's own placeholders are filled in (`PLACEHOLDERS`: a data path, a sweep's time stamp).
- Work is shrunk only where the README says it can be: a `make sweep-*` study takes extra overrides from `ARGS`
  (here from the environment, so the command's words stay the README's), and the data path is a small MNIST.
- `test_every_readme_command_is_run_here` fails on a command of the README that no test here runs, or that neither
  tier runs, so a command added to the README cannot go untested; `make test` itself is the command CI runs
  (`.ci/run`).
"""

from __future__ import annotations

import fcntl
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import optuna
import pytest
import yaml
from readme_commands import README, code_blocks, readme_commands, sample_output

from sweepit.results._manifest import iter_manifest
from sweepit.results._summary import collect
from sweepit_testing import CLUSTER_SCRIPT, REPO, require_slurm, run_train, wait_until, write_mnist_subset

MNIST_TRAIN = 200  # MNIST's training images in the data path: a few steps an epoch, all that the checks need
# The README's placeholders, and what fills each in here (the only words of a command a test may change).
PLACEHOLDERS = {
    "/data/mnist": f"a folder of MNIST's four IDX files (here its first {MNIST_TRAIN} training and 100 test images)",
    "/scratch/stripes": "where the example's on-disk data goes (a temporary folder)",
    "<time>": "the time stamp of the sweep the commands before made",
    "<timestamp>": "the time stamp of the sweep the commands before made",
    "<time2>": "the time stamp of a second sweep, made after the first (`<time>`)",
}
SHOWN: dict[str, str] = {}  # README command -> the test that runs it
TIER = {False: "make test", True: "make test-slow"}
SHOWN_BY: dict[str, str] = {}  # README command -> the make target whose tier runs its test
Test = TypeVar("Test", bound=Callable[..., Any])


def shows(*commands: str, slurm: bool = False, tier_slow: bool = False) -> Callable[[Test], Test]:
    """Registers the README commands a test runs (word for word); the test is a slow one, with `slurm` one that
    needs the local cluster (marked so, and skipped or failed as tests/slurm/ are without one), and with `tier_slow`
    one of `make test-slow` (marked `tier_slow`), not of `make test`."""

    def register(test: Test) -> Test:
        for command in commands:
            assert command not in SHOWN, f"{command!r} is run by {SHOWN[command]} already"
            SHOWN[command], SHOWN_BY[command] = test.__name__, TIER[tier_slow]
        marked = pytest.mark.slow(test)
        marked = pytest.mark.tier_slow(marked) if tier_slow else marked
        return pytest.mark.usefixtures("slurm")(pytest.mark.slurm(marked)) if slurm else marked

    return register


def _copy_checkout(dest: Path) -> Path:
    """The checkout's files as a clone has them (tracked, and new files git does not ignore)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _user_env(venv: Path | None) -> dict[str, str]:
    """The environment of a user's shell: none of the test run's own (its venv, PYTHONPATH, Hydra's settings);
    with `venv`, as after `source .venv/bin/activate`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "HYDRA_FULL_ERROR", "ARGS", "PYTHONHOME")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "activate").is_file()]
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        path.insert(0, str(venv / "bin"))
    env["PATH"] = os.pathsep.join(path)
    return env


@dataclass
class Shell:
    """A scratch copy of the checkout and a shell in it."""

    root: Path
    env: dict[str, str]

    def command(self, shown: str, **fill: str) -> str:
        """`shown` with its placeholders filled in (each must be one of PLACEHOLDERS, and be in the command)."""
        assert shown in SHOWN, f"{shown!r} is not a command of the README registered with @shows"
        for placeholder, value in fill.items():
            assert placeholder in PLACEHOLDERS and placeholder in shown, (placeholder, shown)
            shown = shown.replace(placeholder, value)
        return shown

    def run(self, shown: str, timeout_s: float = 600, env: dict[str, str] | None = None,
            **fill: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["bash", "-c", self.command(shown, **fill)], cwd=self.root,
                              env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout_s)
        print(f"$ {proc.args[2]}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")  # shown when the test fails
        return proc

    def start(self, shown: str, **fill: str) -> subprocess.Popen[str]:
        return subprocess.Popen(["bash", "-c", f"exec {self.command(shown, **fill)}"], cwd=self.root, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def sweep(self, study: str = "multirun") -> Path:
        """The one sweep directory under outputs/<study>/."""
        sweeps = sorted((self.root / "outputs" / study).iterdir())
        assert len(sweeps) == 1, sweeps
        return sweeps[0]


def epochs_of(job_dir: Path) -> int:
    """The job's `epochs`, as Hydra composed its config (a task's file sets its own)."""
    return int(yaml.safe_load((job_dir / ".hydra" / "config.yaml").read_text())["epochs"])


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """stdout and stderr of a command that must have succeeded, without a traceback."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    return out


def statuses(sweep: Path) -> dict[int, str]:
    return {row.num: row.status for row in collect(sweep)}


def results(sweep: Path) -> dict[int, dict[str, Any]]:
    return {row.num: row.result for row in collect(sweep)}


# -- the environment the commands run in ------------------------------------------------------------------------
INSTALL = "make install && .venv/bin/python train.py -m optimizer=adam,sgd lr=0.01,0.1"


TRACKERS_EXTRA = "pip install -e '.[tensorboard]'"


@dataclass
class Installed:
    root: Path
    proc: subprocess.CompletedProcess[str]
    extra: subprocess.CompletedProcess[str]  # the trackers extra installed into the same venv, right after

    @property
    def venv(self) -> Path:
        return self.root / ".venv"


def _install(root: Path) -> Installed:
    """The README's set-up command in a fresh copy of the checkout with no venv (it installs, then sweeps), then the
    trackers extra into that venv, as the README shows it: both before any other command uses the venv (pip
    reinstalling the editable package would pull it from under a command running meanwhile)."""
    shell = Shell(_copy_checkout(root), _user_env(None))
    proc = shell.run(INSTALL, timeout_s=900)
    extra = Shell(root, _user_env(root / ".venv")).run(TRACKERS_EXTRA) if proc.returncode == 0 else proc
    return Installed(root, proc, extra)


def _saved(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return {"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


# A fresh install (pip, torch from local disk) shares 2 cores with make test-slow's other processes: it has taken
# 5 minutes alone and over 10 under load, past pytest's default limit (pyproject.toml).
INSTALL_TIMEOUT_S = 1800


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Installed:
    """Made once per test run: the first of the parallel test processes (pytest-xdist) to need it installs under a
    lock in the run's shared temporary folder and writes what the commands printed; the others wait for it and read
    that (as pytest-xdist's documentation does for session fixtures)."""
    if worker_id == "master":  # not in parallel: this process alone
        return _install(tmp_path_factory.mktemp("install"))
    shared = tmp_path_factory.getbasetemp().parent  # one folder per run, the parent of each process's own
    root, record = shared / "readme-install", shared / "readme-install.json"
    with open(shared / "readme-install.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.is_file():
            made = _install(root)
            record.write_text(json.dumps({"proc": _saved(made.proc), "extra": _saved(made.extra)}))
        saved = json.loads(record.read_text())
    return Installed(root, *(subprocess.CompletedProcess(**saved[k]) for k in ("proc", "extra")))


@pytest.fixture
def shell(tmp_path: Path) -> Shell:
    """A fresh copy of the checkout whose `.venv` is the test run's own (`make install`'s), activated."""
    venv = Path(sys.prefix)
    root = _copy_checkout(tmp_path / "checkout")
    (root / ".venv").symlink_to(venv)
    return Shell(root, _user_env(venv))


@pytest.fixture(scope="module")
def mnist(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_mnist_subset(tmp_path_factory.mktemp("mnist"), MNIST_TRAIN, 100))


@pytest.fixture
def slurm() -> None:
    require_slurm()


# -- the registry itself ----------------------------------------------------------------------------------------
def test_every_readme_command_is_run_here() -> None:
    shown = readme_commands()
    missing = [c for c in shown if c not in SHOWN and c != "make test"]
    assert not missing, (f"README.md or a page under docs/ shows commands no test runs; add each, word for word, to "
                         f"a test of {Path(__file__).name} with @shows: {missing}")
    stale = sorted(set(SHOWN) - set(shown))
    assert not stale, f"these commands are no longer in README.md nor docs/; drop them from the tests: {stale}"
    # Run by neither tier: a test whose mark is not the tier it registered, or targets that leave some tests out.
    for command, test in SHOWN.items():
        marks = {mark.name for mark in getattr(globals()[test], "pytestmark", [])}
        assert ("tier_slow" in marks) == (SHOWN_BY[command] == "make test-slow"), (command, test, marks)
    dry = subprocess.run(["make", "-n", "test", "test-slow"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    selected = re.findall(r"-m pytest .* -m (\"[^\"]*\"|\S+)", dry.stdout)  # each target's marker expression
    assert selected == ['"not tier_slow"', "tier_slow"], dry.stdout


@shows("make docs")
def test_make_docs_builds_the_site_strictly_and_ci_runs_it(shell: Shell) -> None:
    """`make docs` in a fresh copy with the set-up command's venv: every page of the nav
    built, the benchmarks page from bench/RESULTS.md, and CI runs the same target."""
    out = ok(shell.run("make docs", timeout_s=300))
    assert not re.search(r"^WARNING\b", out, re.MULTILINE), out[-4000:]  # mkdocs' own warnings (none in --strict)
    site = shell.root / "site"
    for page in ("getting-started", "own-code", "slurm", "optuna", "faults", "configuration", "benchmarks"):
        assert (site / page / "index.html").is_file(), page
    tutorial = (site / "getting-started" / "index.html").read_text()  # the README's quickstart, included
    shown = [html.escape(line, quote=False) for line in sample_output() if line.strip()]
    assert all(line in tutorial for line in shown), "the quickstart's output, included from the README"
    assert "--8&lt;--" not in tutorial and "[start:quickstart]" not in tutorial
    benchmarks = (site / "benchmarks" / "index.html").read_text()
    assert "bench/results/packing/" in benchmarks and "Packed sweeps" in benchmarks
    assert re.search(r"^make docs$", (REPO / ".ci" / "run").read_text(), re.MULTILINE)


def test_the_documentation_pages_are_all_in_the_site() -> None:
    """A page under docs/ that the nav of mkdocs.yml leaves out is a page no reader finds."""
    import yaml

    def pages(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [p for v in node.values() for p in pages(v)]
        if isinstance(node, list):
            return [p for v in node for p in pages(v)]
        return []

    nav = pages(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])
    assert sorted(p.name for p in (REPO / "docs").glob("*.md")) == sorted(p for p in nav if p != "benchmarks.md")
    assert "[docs/development.md](docs/development.md)" in (REPO / "README.md").read_text()


def test_make_test_is_what_ci_runs() -> None:
    """The README's test command is run by CI itself (a test running the whole suite would run itself), and the slow
    tier after it: the README commands of `make test-slow` are run in CI too."""
    assert "make test" in readme_commands()
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci.index("make test") < ci.index("make test-slow") < ci.index("make test-floors"), ci


@shows(INSTALL, tier_slow=True)
@pytest.mark.timeout(INSTALL_TIMEOUT_S)
def test_the_set_up_command_installs_sweeps_and_prints_what_the_readme_shows(installed: Installed) -> None:
    out = ok(installed.proc)
    assert re.search(r"^sweepit \S+ with torch \S+, hydra 1\.3\.\d+$", out, re.MULTILINE), out[-3000:]
    # The README's sample output, line by line, with its numbers, times and paths left open.
    lines = iter(out.splitlines())
    for sample in filter(str.strip, sample_output()):
        pattern = re.escape(sample)
        pattern = re.sub(r"/path/to/sweepit", ".+", pattern)
        pattern = re.sub(r"\d{4}\\-\d\d\\-\d\d_\d\d\\-\d\d\\-\d\d", r"[\\d_-]+", pattern)
        pattern = re.sub(r"(?<![a-z_])\d+(\\\.\d+)?(e\\-\d+)?(?![a-z_])", r"[-+\\d.e]+", pattern)
        pattern = re.sub(r"(\\ )+", r"\\s+", pattern)
        assert any(re.fullmatch(pattern, line.rstrip()) for line in lines), (
            f"the README's sample line {sample!r} is not in the output, in order:\n{out[-3000:]}")
    sweep = Shell(installed.root, {}).sweep()
    assert statuses(sweep) == dict.fromkeys(range(4), "completed")
    assert (sweep / "report" / "index.html").is_file()


# The machine the README's sample run names ("on this project's 2-core AMD EPYC (AVX2) with torch 2.13.0+cpu"): the
# instruction set is torch's CPU capability, whose kernels round differently (AVX512 gave Adam at lr 0.1 0.9554, not
# 0.9721, on the same 2-core EPYC model name).
SAMPLE_MACHINE = re.compile(r"on this project's (\d+)-core (AMD EPYC|Intel Xeon) \((\w+)\) with torch ([^\s):]+)")
METRIC_COLUMNS = ("objective", "train_loss", "val_loss", "val_acc")


def _metric_cells(lines: list[str]) -> dict[str, list[str]]:
    """The metric cells of the results table in `lines` (the end-of-sweep table's layout), row by row."""
    start = next(i for i, line in enumerate(lines) if line.startswith("job "))
    header, rows = lines[start].split(), []
    for line in lines[start + 2:]:  # below the header's dashes, to the blank line that ends the table
        if not line.strip():
            break
        rows.append(line.split())
    return {row[0]: [row[header.index(c)] for c in METRIC_COLUMNS] for row in rows}


# -- Install into your environment (docs/install.md) ----------------------------------------------------------
USER_INSTALL = "pip install '.[analysis]'"
USER_CHECK = "python -c \"import torch, sweepit; print(sweepit.__version__, torch.__version__)\""


@shows(USER_INSTALL, USER_CHECK, tier_slow=True)
@pytest.mark.timeout(INSTALL_TIMEOUT_S)
def test_a_user_install_into_an_environment_with_a_torch_keeps_that_torch(tmp_path: Path) -> None:
    """A fresh environment that already holds a torch (the Makefile's TORCH_SPEC, from local disk), as a cluster's
    conda env or module does: the page's install leaves that torch's files as they were, and a sweep runs."""
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=120)
    spec = re.search(r"^TORCH_SPEC \?= (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert spec, "the Makefile's TORCH_SPEC default"
    got = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", spec.group(1)],
                         capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    torch_init = next((env_dir / "lib").glob("python3*/site-packages/torch/__init__.py"))
    before = torch_init.stat()
    shell = Shell(_copy_checkout(tmp_path / "clone"), _user_env(env_dir))
    ok(shell.run(USER_INSTALL, timeout_s=900))
    after = torch_init.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "pip replaced the torch"
    version = spec.group(1).split("==")[1]
    assert re.search(rf"^\S+ {re.escape(version)}\S*$", ok(shell.run(USER_CHECK)), re.MULTILINE)
    assert "4 jobs: 4 completed" in ok(shell.run("python train.py -m optimizer=adam,sgd lr=0.01,0.1"))


@pytest.mark.slow  # it reads the set-up command's sweep: `make test-fast` would make the fresh install for it
@pytest.mark.tier_slow
@pytest.mark.timeout(INSTALL_TIMEOUT_S)
def test_the_readme_sample_run_has_this_machines_digits(installed: Installed) -> None:
    """The README says its sample table is one run on a machine it names, and that the same seed, torch build,
    threads and CPU give the same metrics: on that machine, the set-up command's sweep prints its digits."""
    said = SAMPLE_MACHINE.search(README.read_text())
    assert said, "the README must say which machine its sample run is from (cores, CPU, instruction set, torch)"
    cores, cpu, isa, torch_version = int(said.group(1)), said.group(2), said.group(3), said.group(4)
    out = ok(installed.proc)
    here_torch = re.search(r"with torch (\S+),", out)
    here_isa = subprocess.run([str(installed.venv / "bin" / "python"), "-c", "import torch; print(torch.backends.cpu"
                               ".get_cpu_capability())"], capture_output=True, text=True, check=True).stdout.strip()
    model = next((line.split(":", 1)[1] for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "")
    if ((os.cpu_count(), here_torch and here_torch.group(1), cpu.split()[0] in model, here_isa)
            != (cores, torch_version, True, isa)):
        pytest.skip(f"the README's sample run is from a {cores}-core {cpu} ({isa}) with torch {torch_version}; this "
                    f"is a {os.cpu_count()}-core {model.strip()} ({here_isa}) with torch "
                    f"{here_torch and here_torch.group(1)}")
    assert _metric_cells(out.splitlines()) == _metric_cells(sample_output()), (
        "the README's sample table must be this machine's: run its set-up command and copy the table\n" + out[-3000:])


# -- Running ------------------------------------------------------------------------------------------------------
@shows("python train.py")
def test_one_job(shell: Shell) -> None:
    out = ok(shell.run("python train.py"))
    (run,) = (shell.root / "outputs" / "runs").iterdir()
    epochs = epochs_of(run)
    assert f"Epoch {epochs}/{epochs}" in out and "task=digits" in out
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "completed" and result["epochs_completed"] == epochs


@shows("python train.py task=linreg optimizer=sgd lr=0.1", tier_slow=True)  # its path: tests/test_sweep.py
def test_one_job_with_keys_changed(shell: Shell) -> None:
    ok(shell.run("python train.py task=linreg optimizer=sgd lr=0.1"))
    (run,) = (shell.root / "outputs" / "runs").iterdir()
    config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    assert (config["task"]["name"], config["optimizer"]["name"], config["lr"]) == ("linreg", "sgd", 0.1)
    assert json.loads((run / "result.json").read_text())["status"] == "completed"


@shows("python train.py -m optimizer=adam,sgd lr=0.01,0.1")
def test_a_sweep_leaves_four_complete_job_dirs(shell: Shell) -> None:
    out = ok(shell.run("python train.py -m optimizer=adam,sgd lr=0.01,0.1"))
    sweep = shell.sweep()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name[0].isdigit())
    assert [p.name.split("_", 1)[0] for p in jobs] == ["0", "1", "2", "3"]
    seen = set()
    for job in jobs:
        assert "optimizer=" in job.name and "lr=" in job.name  # the listing says which job is which
        assert (job / ".hydra" / "config.yaml").is_file()
        result = json.loads((job / "result.json").read_text())
        lines = (job / "metrics.jsonl").read_text().splitlines()
        assert result["status"] == "completed" and len(lines) == epochs_of(job)
        assert result["objective"] == json.loads(lines[-1])["val_acc"]
        seen.add((job.name.split("lr=")[1].split(",")[0], job.name.split("optimizer=")[1].split(",")[0]))
    assert seen == {("0.01", "adam"), ("0.01", "sgd"), ("0.1", "adam"), ("0.1", "sgd")}
    assert "4 jobs: 4 completed" in out and "best (maximize val_acc)" in out
    assert re.search(r"^reproduce: python train\.py optimizer=\w+ lr=[\d.]+$", out, re.MULTILINE), out
    assert (sweep / "report" / "index.html").is_file()


LOAD = "python -c \"import sweepit; print(sweepit.load('outputs/multirun/<time>'))\""


@shows(LOAD, tier_slow=True)  # its path: tests/analysis/test_load.py
def test_a_sweep_read_into_pandas_in_python(shell: Shell) -> None:
    made = run_train(["-m", "task=linreg", "epochs=2", "optimizer=adam,sgd", "lr=0.01,0.1"], shell.root)
    assert made.returncode == 0, made.stderr[-3000:]
    out = ok(shell.run(LOAD, **{"<time>": shell.sweep().name}))
    assert "4 jobs: 4 completed" in out and re.search(r"^ job optimizer +lr +status +objective$", out, re.M), out
    assert len(re.findall(r"^ +[0-3] +(adam|sgd) +0\.\d+ completed +[\d.]+$", out, re.MULTILINE)) == 4, out
    assert re.search(r"^best \(minimize val_loss\): job [0-3] = ", out, re.MULTILINE), out


@shows("python train.py -m task=mnist data.root=/data/mnist 'batch_size=range(32,257,32)'",
       tier_slow=True)  # its path: tests/trackers/test_entry_paths.py (MNIST's files), tests/train
def test_a_batch_size_range_on_mnist(shell: Shell, mnist: str) -> None:
    out = ok(shell.run("python train.py -m task=mnist data.root=/data/mnist 'batch_size=range(32,257,32)'",
                       **{"/data/mnist": mnist}))
    sweep = shell.sweep()
    assert "8 jobs: 8 completed" in out
    rows = collect(sweep)
    assert sorted(int(r.overrides["batch_size"]) for r in rows) == list(range(32, 257, 32))
    assert {r.result["n_train"] for r in rows} == {MNIST_TRAIN}, "the MNIST in data.root, not another data set"


# -- Sweep your own code ------------------------------------------------------------------------------------------
CONFIG_ONLY = ("PYTHONPATH=examples/config_only python train.py -m --config-dir examples/config_only/conf "
               "--config-name stripes")


@shows(f"{CONFIG_ONLY} model.width=4,16", tier_slow=True)  # its path: tests/examples/test_examples.py
def test_config_only_sweeps_a_users_model_width(shell: Shell) -> None:
    out = ok(shell.run(f"{CONFIG_ONLY} model.width=4,16"))
    done = results(shell.sweep("stripes"))
    assert [done[n]["status"] for n in (0, 1)] == ["completed", "completed"]
    assert {done[n]["model"] for n in (0, 1)} == {"mypkg.nets.StripeNet"}
    assert done[0]["n_params"] < done[1]["n_params"]  # width 4 vs 16: the swept argument reached the model
    assert done[0]["data"] == "mypkg.data.make()" and done[0]["n_train"] == 1600
    assert "best (maximize val_acc)" in out and "model.width" in out


@shows(f"{CONFIG_ONLY} data._target_=mypkg.data.on_disk +data.root=/scratch/stripes",
       tier_slow=True)  # its path: tests/examples/test_examples.py
def test_config_only_streams_datasets_from_disk(shell: Shell, tmp_path: Path) -> None:
    data = tmp_path / "stripes"
    out = ok(shell.run(f"{CONFIG_ONLY} data._target_=mypkg.data.on_disk +data.root=/scratch/stripes",
                       **{"/scratch/stripes": str(data)}))
    (result,) = results(shell.sweep("stripes")).values()
    assert result["status"] == "completed" and result["data"] == "mypkg.data.on_disk()"
    assert any(data.rglob("*.npy")), "the data function wrote its files under data.root"
    assert ("reproduce: PYTHONPATH=examples/config_only python train.py --config-dir examples/config_only/conf "
            "--config-name stripes") in out


@shows("PYTHONPATH=examples/config_only python train.py model._target_=mypkg.nets.StripeNet",
       tier_slow=True)  # its path: tests/train/test_own_code.py
def test_a_users_model_on_a_built_in_task(shell: Shell) -> None:
    out = ok(shell.run("PYTHONPATH=examples/config_only python train.py model._target_=mypkg.nets.StripeNet"))
    (run,) = (shell.root / "outputs" / "runs").iterdir()
    epochs = epochs_of(run)
    assert "model=mypkg.nets.StripeNet" in out and "UCI digits" in out and f"Epoch {epochs}/{epochs}" in out


@shows("python examples/own_loop/train.py -m lr=0.003,0.03 width=8,16",
       tier_slow=True)  # its path: tests/examples/test_examples.py, tests/trackers/test_entry_paths.py
def test_own_loop_local_sweep_leaves_curves_results_and_the_summary(shell: Shell) -> None:
    out = ok(shell.run("python examples/own_loop/train.py -m lr=0.003,0.03 width=8,16"))
    sweep = shell.sweep("own_loop")
    done = results(sweep)
    assert sorted(done) == [0, 1, 2, 3]
    for num, result in done.items():
        assert result["status"] == "completed" and result["recorded_by"] == "sweepit", result
        assert result["metric"] == "val_acc" and result["epochs_completed"] == 6
        assert result["objective"] == result["final"]["val_acc"]  # what the function returned
        rows = [json.loads(line) for line in next(sweep.glob(f"{num}_*/metrics.jsonl")).read_text().splitlines()]
        assert [r["epoch"] for r in rows] == list(range(1, 7)) and {"train_loss", "val_loss", "val_acc"} <= set(rows[0])
        assert next(sweep.glob(f"{num}_*/checkpoint.pt")).is_file()  # the user's loop owns its checkpoint: kept
    assert "best (maximize val_acc)" in out and "reproduce: python examples/own_loop/train.py " in out
    assert (sweep / "report" / "learning_curves.png").is_file()
    assert "python examples/own_loop/train.py " in (sweep / "report" / "summary.md").read_text()


OWN_LOOP_OPTUNA = ("python examples/own_loop/train.py -m hydra/sweeper=optuna 'lr=tag(log, interval(1e-4, 1e-1))' "
                   "hydra.sweeper.n_trials=12 hydra.sweeper.n_jobs=2 hydra/sweeper/pruner=median")


@shows(OWN_LOOP_OPTUNA, tier_slow=True)  # its path: tests/examples/test_examples.py
def test_own_loop_optuna_search_with_median_pruning(shell: Shell) -> None:
    out = ok(shell.run(OWN_LOOP_OPTUNA))
    sweep = shell.sweep("own_loop")
    study = optuna.load_study(study_name="sweepit", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(sweep / "optuna.journal"))))
    assert len(study.trials) == 12 and {t.state.name for t in study.trials} <= {"COMPLETE", "PRUNED"}
    assert set(statuses(sweep).values()) <= {"completed", "pruned"} and len(statuses(sweep)) == 12
    assert (sweep / "best_params.yaml").is_file() and "Optuna: best trial" in out


@shows("python examples/own_loop/train.py -m hydra/launcher=slurm lr=0.003,0.03", slurm=True,
       tier_slow=True)  # its path: tests/slurm/test_examples_on_slurm.py
def test_own_loop_on_slurm(shell: Shell) -> None:
    out = ok(shell.run("python examples/own_loop/train.py -m hydra/launcher=slurm lr=0.003,0.03"))
    sweep = shell.sweep("own_loop")
    assert statuses(sweep) == {0: "completed", 1: "completed"} and "2 jobs: 2 completed" in out
    assert all(p.name.endswith("_log.out") for p in (sweep / ".submitit").rglob("*_log.out"))
    assert any((sweep / ".submitit").rglob("*_log.out")), "the jobs ran as Slurm jobs"


@shows("python examples/any_hydra_app/app.py -m x=-1,0,1 y=0,2",
       tier_slow=True)  # its path: tests/results/test_job_dir_names.py
def test_any_hydra_app_on_local_workers(shell: Shell) -> None:
    out = ok(shell.run("python examples/any_hydra_app/app.py -m x=-1,0,1 y=0,2"))
    assert "6 jobs: 6 completed" in out and "best (minimize objective): job 4 = 1.154" in out


@shows("python examples/any_hydra_app/app.py -m x=-1,0,1 y=0,2 hydra/launcher=slurm", slurm=True,
       tier_slow=True)  # its path: tests/slurm/test_slurm_launcher_sweep.py
def test_any_hydra_app_on_slurm_cpu_only(shell: Shell) -> None:
    """No trainer.gpus, no timeout_min in the app's config: the launcher's defaults make CPU-only requests."""
    out = ok(shell.run("python examples/any_hydra_app/app.py -m x=-1,0,1 y=0,2 hydra/launcher=slurm"))
    assert "6 jobs: 6 completed" in out and "best (minimize objective): job 4 = 1.154" in out
    script = next((shell.sweep("any_hydra_app") / ".submitit").rglob("*.sh")).read_text()
    assert "--gpus" not in script and "gres" not in script


ANY_APP_OPTUNA = ("python examples/any_hydra_app/app.py -m hydra/sweeper=optuna 'x=interval(-2, 2)' 'y=range(0, 4)' "
                  "hydra.sweeper.n_trials=12 hydra.sweeper.direction=minimize")


@shows(ANY_APP_OPTUNA, tier_slow=True)  # its path: tests/search/test_optuna_on_any_launcher.py
def test_any_hydra_app_under_optuna(shell: Shell) -> None:
    out = ok(shell.run(ANY_APP_OPTUNA))
    values = [r["objective"] for r in results(shell.sweep("any_hydra_app")).values()]
    assert len(values) == 12 and f"= {min(values):.4g}" in out.split("best (minimize objective)")[1]


# -- Slurm --------------------------------------------------------------------------------------------------------
@shows("python train.py -m optimizer=adam,sgd lr=0.01,0.1 hydra/launcher=slurm", slurm=True,
       tier_slow=True)  # its path: tests/slurm/test_slurm_launcher_sweep.py
def test_the_sweep_on_slurm(shell: Shell) -> None:
    """It crashed at its end without hydra.sweep.dir (ReadonlyConfigError), after the table."""
    out = ok(shell.run("python train.py -m optimizer=adam,sgd lr=0.01,0.1 hydra/launcher=slurm"))
    sweep = shell.sweep()
    assert statuses(sweep) == dict.fromkeys(range(4), "completed") and "4 jobs: 4 completed" in out
    assert (sweep / "report" / "index.html").is_file() and "reproduce: python train.py" in out
    ids = [e["extra"].get("slurm_job_id") for e in iter_manifest(sweep)[1]]
    assert all(ids), ids


PACKED = "python train.py -m optimizer=adam,sgd lr=0.01,0.1 hydra/launcher=slurm hydra.launcher.workers=2"


@shows(PACKED, slurm=True, tier_slow=True)  # its path: tests/slurm/test_packed.py
def test_the_sweep_packed_into_two_workers(shell: Shell) -> None:
    out = ok(shell.run(PACKED))
    sweep = shell.sweep()
    assert statuses(sweep) == dict.fromkeys(range(4), "completed") and "4 jobs: 4 completed" in out
    assert "packed into 2 worker(s) in 1 sbatch call(s)" in out
    manifest, jobs = iter_manifest(sweep)
    workers = {e["extra"]["slurm_job_id"] for e in jobs}
    assert workers <= set(manifest["workers"]["ids"]) and len(manifest["workers"]["ids"]) == 2, manifest["workers"]
    assert all("Epoch" in (p / "stdout.log").read_text() for p in sweep.iterdir() if (p / "result.json").exists())


MN5 = ("python train.py -m trainer.gpus=1,2,4 hydra/launcher=marenostrum5 hydra.launcher.account=bsc12345 "
       "hydra.launcher.qos=acc_debug hydra.launcher.dry_run=true")


@shows(MN5, slurm=True)
def test_a_gpu_count_study_on_marenostrum5_as_a_dry_run(shell: Shell) -> None:
    out = ok(shell.run(MN5))
    assert "dry run: 3 job(s) in 3 sbatch call(s), at most 7.00 GPU-hours" in out
    sbatch = {line.removeprefix("#SBATCH ") for line in out.splitlines() if line.startswith("#SBATCH ")}
    assert {"--account=bsc12345", "--qos=acc_debug", "--gpus-per-node=4", "--ntasks-per-node=4"} <= sbatch, sbatch
    assert not any(line.startswith("--gpus-per-task") for line in sbatch), sbatch
    assert "module purge" not in out and " --gpu-bind=none " in out  # the jobs keep your modules, see all their GPUs
    assert not any((shell.root / "outputs").rglob("multirun.yaml")), "a dry run leaves no sweep behind"


# -- Slurm on your cluster (docs/howto-slurm.md): the local cluster with a site's own names ------------------------
SITE = ("python train.py -m optimizer=adam,sgd lr=0.01,0.1 hydra/launcher=slurm hydra.launcher.gpus_key=null "
        "hydra.launcher.partition=long hydra.launcher.account=lab hydra.launcher.qos=short")
SITE_DRY = f"{SITE} hydra.launcher.dry_run=true"
LAUNCHER_KEYS = "python train.py --cfg hydra -p hydra.launcher hydra/launcher=slurm"
PROFILE_DRY = "python train.py -m optimizer=adam,sgd lr=0.01,0.1 hydra/launcher=mysite hydra.launcher.dry_run=true"
PROFILE_RUN = "python train.py -m optimizer=adam,sgd lr=0.01,0.1 hydra/launcher=mysite"
PROFILE_FILE = "conf/hydra/launcher/mysite.yaml"


def _cluster_up(*flags: str) -> None:
    proc = subprocess.run([str(CLUSTER_SCRIPT), "up", *flags], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"slurm-cluster.sh up {' '.join(flags)} failed:\n{proc.stdout}{proc.stderr}"


@shows(SITE_DRY, SITE, LAUNCHER_KEYS, PROFILE_DRY, PROFILE_RUN, slurm=True,
       tier_slow=True)  # its path: tests/slurm/test_slurm_launcher_sweep.py; the names: make test's MN5 dry run
@pytest.mark.exclusive_cluster
def test_the_sweep_on_your_cluster_with_its_partition_account_and_qos(shell: Shell) -> None:
    """On `slurm-cluster.sh up --site` (a non-default partition, a second account and QoS, checked by Slurm): the
    README's and the how-to's commands, and the how-to's profile file as the page shows it."""
    if os.geteuid() != 0:
        pytest.skip("reconfiguring the local cluster (--site) needs root")
    try:
        _cluster_up("--site")
        dry = ok(shell.run(SITE_DRY))
        sbatch = {line.removeprefix("#SBATCH ") for line in dry.splitlines() if line.startswith("#SBATCH ")}
        assert {"--partition=long", "--account=lab", "--qos=short"} <= sbatch, sbatch
        assert not any("gpu" in line for line in sbatch), sbatch  # the digits model asks for no GPU
        assert not (shell.root / "outputs").exists() or not any((shell.root / "outputs").rglob("multirun.yaml"))
        out = ok(shell.run(SITE))
        assert "4 jobs: 4 completed" in out, out[-3000:]
        ids = [str(e["extra"]["slurm_job_id"]) for e in iter_manifest(shell.sweep())[1]]
        acct = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "Partition,Account,QOS", "-j", ",".join(ids)],
                              capture_output=True, text=True, timeout=60).stdout.split()
        assert set(acct) == {"long|lab|short"}, acct  # Slurm ran them there, under those names
        keys = ok(shell.run(LAUNCHER_KEYS))
        assert all(f"{key}:" in keys for key in ("partition", "account", "qos", "timeout_min", "gpus_key")), keys
        profile = next(lines for language, lines in code_blocks((REPO / "docs" / "howto-slurm.md").read_text())
                       if language == "yaml")
        (shell.root / PROFILE_FILE).parent.mkdir(parents=True)
        (shell.root / PROFILE_FILE).write_text("\n".join(profile) + "\n")
        dry = ok(shell.run(PROFILE_DRY))
        assert {"#SBATCH --partition=long", "#SBATCH --account=lab", "#SBATCH --qos=short"} <= set(dry.splitlines())
        shutil.rmtree(shell.root / "outputs")
        assert "4 jobs: 4 completed" in ok(shell.run(PROFILE_RUN))
    finally:
        _cluster_up()


# -- Stop a grid's losers early (docs/howto-halving.md) ----------------------------------------------------------
HALVING = "python train.py -m hydra/sweeper=halving optimizer=adam,sgd,rmsprop lr=0.001,0.01,0.1 epochs=9"


@shows(HALVING, tier_slow=True)
def test_the_halving_pages_grid_pauses_six_jobs_at_epoch_1_two_at_3_and_trains_one_to_9(shell: Shell) -> None:
    """The page's grid as it says: 9 jobs to epoch 1, the best 3 to epoch 3, the best of those to epoch 9."""
    ok(shell.run(HALVING))
    ended = sorted((row.status, row.result.get("epochs_completed")) for row in collect(shell.sweep()))
    assert ended == [("completed", 9), *[("paused", 1)] * 6, *[("paused", 3)] * 2], ended


HALVING_ON_SLURM = ("python train.py -m hydra/sweeper=halving hydra/launcher=slurm optimizer=adam,sgd lr=0.01,0.1 "
                    "epochs=3")


@shows(HALVING_ON_SLURM, slurm=True, tier_slow=True)  # its path: tests/slurm/test_halving_on_slurm.py
def test_the_halving_pages_grid_on_slurm_pauses_three_jobs_at_epoch_1_and_trains_one_to_3(shell: Shell) -> None:
    """epochs=3 and eta 3 cut at epoch 1, and keep one of the four jobs; each start of a job is a Slurm job."""
    ok(shell.run(HALVING_ON_SLURM))
    ended = sorted((row.status, row.result.get("epochs_completed")) for row in collect(shell.sweep()))
    assert ended == [("completed", 3), *[("paused", 1)] * 3], ended
    completed = [p for p in shell.sweep().iterdir() if (p / "result.1.json").exists()]
    assert len(completed) == 1 and (completed[0] / "stdout.1.log").resolve().name.endswith("_log.out")


# -- Coming from Hydra's plugins (docs/howto-hydra-plugins.md) ---------------------------------------------------
PLUGINS_PAGE = REPO / "docs" / "howto-hydra-plugins.md"
SWEEPER_KEYS = "python train.py --cfg hydra -p hydra.sweeper hydra/sweeper=optuna"


def differing_defaults() -> dict[str, Any]:
    """The how-to's tables of defaults that differ from the released plugins': each key and sweepit's value."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in PLUGINS_PAGE.read_text().splitlines()
            if line.startswith("| `hydra.")]
    return {key.strip("`"): yaml.safe_load(ours.strip("`")) for key, _, ours, _ in rows}


def test_the_defaults_the_how_to_says_differ_are_sweepits_defaults() -> None:
    """docs/howto-hydra-plugins.md's sweepit column holds what the schemas (and the sampler's defaults) set."""
    from hydra_plugins.sweepit.config import OptunaSweeperConf, SlurmLauncherConf, TPESamplerConf

    schemas = {"hydra.launcher.": SlurmLauncherConf, "hydra.sweeper.sampler.": TPESamplerConf,
               "hydra.sweeper.": OptunaSweeperConf}
    shown = differing_defaults()
    assert len(shown) == 9, shown
    for key, value in shown.items():
        prefix = next(p for p in schemas if key.startswith(p) and "." not in key.removeprefix(p))
        assert getattr(schemas[prefix](), key.removeprefix(prefix)) == value, key


@shows(SWEEPER_KEYS, tier_slow=True)  # prints a config only; LAUNCHER_KEYS runs in the --site test above
def test_the_sweeper_keys_printed_by_hydra_have_the_defaults_the_how_to_gives(shell: Shell) -> None:
    printed = yaml.safe_load(ok(shell.run(SWEEPER_KEYS)).split("# @package hydra.sweeper", 1)[1])
    for key, value in differing_defaults().items():
        if key.startswith("hydra.sweeper."):
            node = printed
            for part in key.removeprefix("hydra.sweeper.").split("."):
                node = node[part]
            assert node == value, (key, node)


def test_the_submitit_keys_the_how_to_says_are_refused_are_those_the_launcher_refuses() -> None:
    """docs/howto-hydra-plugins.md lists hydra-submitit-launcher's keys that sweepit refuses: the launcher's own
    list."""
    from sweepit.slurm._request import _SUBMITIT_ONLY

    page = PLUGINS_PAGE.read_text()
    listed = page.split("are refused by name")[1].split("\n\n", 2)[1]
    named = {key for line in listed.splitlines() for key in re.findall(r"`(\w+)`", line.split(":")[0])}
    assert named == set(_SUBMITIT_ONLY), (named, set(_SUBMITIT_ONLY))


DETACHED = "python train.py -m optimizer=adam,sgd lr=0.01,0.1 hydra/launcher=slurm hydra.launcher.wait=false"


@shows(DETACHED, "sweepit status outputs/multirun/<time>", "sweepit status outputs/multirun/<time> --watch",
       "sweepit resume outputs/multirun/<time>", slurm=True,
       tier_slow=True)  # its path: tests/slurm/test_slurm_launcher_follow.py
def test_a_detached_sweep_followed_reported_and_resumed(shell: Shell) -> None:
    out = ok(shell.run(DETACHED))
    sweep = shell.sweep()
    assert "Not waiting (hydra.launcher.wait=false): 4 job(s) in Slurm" in out
    assert f"sweepit status {sweep} --watch" in out and not (sweep / "report").exists()
    stamp = {"<time>": sweep.name}
    looked = ok(shell.run("sweepit status outputs/multirun/<time>", **stamp))
    assert "4 jobs:" in looked and "sweep directory:" in looked
    watched = ok(shell.run("sweepit status outputs/multirun/<time> --watch", timeout_s=300, **stamp))
    assert "4 jobs: 4 completed" in watched and (sweep / "report" / "index.html").is_file()
    assert "sweepit: report in" in watched
    resumed = ok(shell.run("sweepit resume outputs/multirun/<time>", timeout_s=300, **stamp))
    assert "4 jobs: 4 completed" in resumed and "hydra.launcher.wait=true" in resumed


COMPARE = "sweepit compare outputs/multirun/<time> outputs/multirun/<time2>"
COMPARE_BY = "sweepit compare outputs/multirun/<time> --by optimizer"


@shows(COMPARE, COMPARE_BY, tier_slow=True)  # its path: tests/reporting/test_compare.py
def test_two_sweeps_compared_and_one_along_a_key(shell: Shell) -> None:
    """Two small linreg grids that share the jobs of lr=0.1 and differ in their epochs (made by commands of no page)."""
    for grid in ("epochs=2 lr=0.01,0.1", "epochs=3 lr=0.1,0.5"):
        made = subprocess.run(["bash", "-c", f"python train.py -m task=linreg optimizer=adam,sgd {grid}"],
                              cwd=shell.root, env=shell.env, capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stderr[-3000:]
    first, second = sorted((shell.root / "outputs" / "multirun").iterdir())
    stamps = {"<time>": first.name, "<time2>": second.name}
    out = ok(shell.run(COMPARE, **stamps))
    assert "epochs=2 in A, 3 in B" in out and "B against A on 2 matched job(s)" in out
    assert "only in A (2 job(s)): optimizer=adam lr=0.01; optimizer=sgd lr=0.01" in out
    assert (first / "report" / f"compare_{second.name}" / "compare.html").is_file()
    out = ok(shell.run(COMPARE_BY, **{"<time>": first.name}))
    assert "sgd against adam on 2 matched job(s)" in out
    assert (first / "report" / "compare_by_optimizer" / "compare.png").is_file()


BUDGET = ("python train.py -m optimizer=adam,sgd lr=0.01,0.1 hydra/launcher=slurm hydra.launcher.budget_gpu_hours=5 "
          "hydra.launcher.max_gpus=2")
MORE_BUDGET = "sweepit resume outputs/multirun/<time> hydra.launcher.budget_gpu_hours=8"


@shows(BUDGET, MORE_BUDGET, slurm=True, tier_slow=True)  # its path: tests/slurm/test_budget.py
def test_a_gpu_hour_budget_and_a_ceiling_on_gpus_in_use(shell: Shell) -> None:
    """Four jobs of one GPU for 60 min: 4 GPU-hours at most, within 5; two at a time (one array, throttled)."""
    out = ok(shell.run(BUDGET))
    sweep = shell.sweep()
    assert "4 jobs: 4 completed" in out and "GPU budget: " in out and "GPU-hours billed (sacct)" in out, out
    assert ", of 5" in out.split("GPU budget: ")[1].splitlines()[0]
    scripts = [p.read_text() for p in (sweep / ".submitit").glob("*/*_submission.sh")]
    assert len(scripts) == 1 and "#SBATCH --array=0-3%2\n" in scripts[0], scripts
    resumed = ok(shell.run(MORE_BUDGET, timeout_s=300, **{"<time>": sweep.name}))
    assert "4 jobs: 4 completed" in resumed and "hydra.launcher.budget_gpu_hours=8" in resumed
    assert ", of 8" in resumed.split("GPU budget: ")[1].splitlines()[0], resumed


# -- Experiment trackers ------------------------------------------------------------------------------------------
@shows(TRACKERS_EXTRA, tier_slow=True)
@pytest.mark.timeout(INSTALL_TIMEOUT_S)
def test_installing_a_trackers_extra(installed: Installed) -> None:
    """Run in the checkout the venv was made from (an editable install points at the folder it is run in), right
    after the set-up command (the `installed` fixture)."""
    ok(installed.extra)
    assert subprocess.run([str(installed.venv / "bin" / "python"), "-c", "import tensorboard, sweepit"],
                          timeout=120).returncode == 0


@shows("python train.py -m optimizer=adam,sgd lr=0.01,0.1 logger=tensorboard",
       "tensorboard --logdir outputs/multirun/<timestamp>")
def test_tensorboard_runs_and_its_server_shows_them(shell: Shell) -> None:
    ok(shell.run("python train.py -m optimizer=adam,sgd lr=0.01,0.1 logger=tensorboard"))
    sweep = shell.sweep()
    assert all(any((job / "tensorboard").glob("events.out.tfevents.*")) for job in sweep.glob("[0-3]_*"))
    server = shell.start("tensorboard --logdir outputs/multirun/<timestamp>", **{"<timestamp>": sweep.name})
    seen: list[str] = []
    try:
        def serving() -> bool:
            assert server.stdout is not None and server.poll() is None, "tensorboard exited"
            seen.append(server.stdout.readline())
            return "http://localhost:6006/" in seen[-1]

        wait_until(serving, lambda: f"tensorboard serving (it said: {''.join(seen)[-2000:]})", 90, interval_s=0)
        runs: list[str] = []

        def listed() -> bool:
            nonlocal runs
            with urllib.request.urlopen("http://localhost:6006/data/runs", timeout=10) as page:
                runs = json.loads(page.read())
            return len(runs) == 4

        wait_until(listed, lambda: f"four runs in tensorboard, got {runs}", 60, interval_s=1)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


@shows("python train.py -m lr=0.01,0.1 'logger=[tensorboard,mlflow]'",
       tier_slow=True)  # its path: tests/trackers/test_trackers.py
def test_two_trackers_at_once(shell: Shell) -> None:
    ok(shell.run("python train.py -m lr=0.01,0.1 'logger=[tensorboard,mlflow]'"))
    sweep = shell.sweep()
    assert (sweep / "mlruns").is_dir() and len(list(sweep.glob("[01]_*/tensorboard"))) == 2


# -- Optuna -------------------------------------------------------------------------------------------------------
OPTUNA = ("python train.py -m hydra/sweeper=optuna 'optimizer=choice(adam,sgd,rmsprop)' "
          "'lr=tag(log, interval(1e-4, 1))' hydra.sweeper.n_trials=40 hydra.sweeper.n_jobs=4")


@shows(OPTUNA, tier_slow=True)  # its path: tests/search/test_optuna_sweep.py
def test_the_optuna_search(shell: Shell) -> None:
    out = ok(shell.run(OPTUNA))
    sweep = shell.sweep()
    assert len(statuses(sweep)) == 40 and set(statuses(sweep).values()) <= {"completed", "pruned", "diverged"}
    assert (sweep / "best_params.yaml").is_file() and (sweep / "trials.csv").read_text().count("\n") == 41
    assert "Optuna: best trial" in out and "categorical units" not in out


# -- The studies ----------------------------------------------------------------------------------------------------
# Long studies shrunk through make's ARGS (the README: "extra overrides in ARGS"), from the environment.
SHRUNK = {"scaling": "data.n_synthetic=600 epochs=2 repeat=0", "optimizers": "epochs=3", "optuna_lr": "epochs=2",
          "optimizer_lr": "epochs=2", "halving": "epochs=3"}
STUDY_JOBS = {"optimizers": 40, "optuna_lr": 40, "scaling": 2, "optimizer_lr": 20, "mnist_best": 1, "batch_size": 9,
              "halving": 40}


def _study(shell: Shell, study: str, command: str, paused: bool = False, **fill: str) -> str:
    """`paused`: a halving study's, whose cut jobs end paused."""
    out = ok(shell.run(command, env={"ARGS": SHRUNK[study]} if study in SHRUNK else None, **fill))
    sweep = shell.sweep(study)
    assert len(statuses(sweep)) == STUDY_JOBS[study], statuses(sweep)
    assert set(statuses(sweep).values()) <= {"completed", "pruned", "diverged", *(["paused"] if paused else [])}, \
        statuses(sweep)
    assert f"study: {study}" in (sweep / "multirun.yaml").read_text()  # the study's own file composed
    assert (sweep / "report" / "index.html").is_file()
    return out


@shows("make sweep-optimizers", tier_slow=True)
def test_make_sweep_optimizers(shell: Shell) -> None:
    _study(shell, "optimizers", "make sweep-optimizers")


@shows("make sweep-optuna", tier_slow=True)
def test_make_sweep_optuna(shell: Shell) -> None:
    out = _study(shell, "optuna_lr", "make sweep-optuna")
    assert "--config-name optuna_lr" in out


@shows("make sweep-scaling", tier_slow=True)
def test_make_sweep_scaling(shell: Shell) -> None:
    out = _study(shell, "scaling", "make sweep-scaling")
    assert "no GPU on this machine: running the CPU variant" in out
    assert "speedup" in (shell.sweep("scaling") / "report" / "summary.md").read_text()
    # Its end says what it measured, of CPU ranks, with the threads its jobs ran: not a best val_acc of random data.
    assert "Launching 2 jobs on 1 local worker(s), 1 torch thread(s) each" in out
    assert "\nScaling over CPU ranks:\nranks  jobs  epoch_time_s" in out and "efficiency" in out, out[-3000:]
    assert "best (" not in out and not list((shell.sweep("scaling") / "report").glob("objective_*.png"))
    # and the count to use per job, by the study's efficiency floor (README: "the GPU count to use per job")
    assert re.search(r"Recommendation: (1 CPU rank|2 CPU ranks) per job, .*\(min_efficiency=0\.7\)", out), out[-3000:]


@shows("make sweep-optimizer_lr", tier_slow=True)
def test_make_sweep_optimizer_lr(shell: Shell) -> None:
    _study(shell, "optimizer_lr", "make sweep-optimizer_lr")


@shows("make sweep-halving", tier_slow=True)
def test_make_sweep_halving(shell: Shell) -> None:
    """Shrunk to 3 epochs: one rung, at epoch 1, keeps the best 13 of 40 (eta 3)."""
    out = _study(shell, "halving", "make sweep-halving", paused=True)
    assert sorted(Counter(statuses(shell.sweep("halving")).values()).items()) == [("completed", 13), ("paused", 27)]
    assert "\n40 jobs: 13 completed, 27 paused\nhalving: 66 of 120 epochs, " in out, out[-3000:]


@shows("make sweep-mnist_best ARGS='data.root=/data/mnist'", tier_slow=True)
def test_make_sweep_mnist_best(shell: Shell, mnist: str) -> None:
    _study(shell, "mnist_best", "make sweep-mnist_best ARGS='data.root=/data/mnist'", **{"/data/mnist": mnist})


@shows("make sweep-batch_size ARGS='data.root=/data/mnist'", tier_slow=True)
def test_make_sweep_batch_size(shell: Shell, mnist: str) -> None:
    _study(shell, "batch_size", "make sweep-batch_size ARGS='data.root=/data/mnist'", **{"/data/mnist": mnist})


def test_the_readme_lists_every_study_with_its_make_target() -> None:
    studies = sorted(p.stem for p in (REPO / "sweeps").glob("*.yaml"))
    shown = " ".join(readme_commands())
    assert [s for s in studies if f"make sweep-{s if s != 'optuna_lr' else 'optuna'}" not in shown] == []
    assert sorted(STUDY_JOBS) == studies, "a new study in sweeps/ needs its job count here"

