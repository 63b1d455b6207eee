"""Paths and helpers shared by the tests (a module name no other test folder uses)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
SHARED_MNIST = REPO.parent / "shared" / "data" / "mnist"  # real MNIST beside the checkout, where there is one
CLUSTER_SCRIPT = REPO / "scripts" / "slurm-cluster.sh"
PACKAGE_CONF = REPO / "src" / "hydra_plugins" / "sweepit" / "conf"  # the cluster profiles, for any Hydra app
SWEEPIT = str(Path(sys.executable).parent / "sweepit")  # the command as installed, as a user types it
HELD_JOBS = REPO / "tests" / "local" / "app"  # held_jobs: the built-in models, held mid-training (class Hold)

# Shrinks a job to a few steps: one epoch, CPU, one thread.
TINY = ["epochs=1", "device=cpu", "trainer.threads=1"]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a test's subprocess: this process's, with Hydra's short errors and one OpenMP thread."""
    return {**os.environ, "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1", **extra}


def run_command(argv: Sequence[str | Path], cwd: Path | None = None, env: Mapping[str, str] | None = None,
        timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """`argv` in a subprocess, to its end, its output captured as text: the one runner of the tests' `python
    <script> ...` and `sweepit ...`. `env` is its whole environment (default: child_env())."""
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=child_env() if env is None else dict(env),
                          capture_output=True, text=True, timeout=timeout_s)


def run_train(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real entry point in a subprocess, with outputs/ under `cwd`."""
    return run_command([sys.executable, REPO / "train.py", *args], cwd, timeout_s=timeout)


def sweep_once(tmp_path_factory: pytest.TempPathFactory, name: str, args: list[str]) -> Path:
    """A real sweep of train.py with `args`, made in a fresh folder (for a session-scoped fixture)."""
    cwd = tmp_path_factory.mktemp(name)
    proc = run_train(args, cwd, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (cwd / "outputs" / "multirun").iterdir()
    return sweep


def private_copy(sweep: Path, tmp_path: Path, *ignore: str) -> Path:
    """A copy of `sweep` under tmp_path/outputs/multirun/, as a sweep is, without `ignore`'s names: a test may break
    its jobs."""
    copy = tmp_path / "outputs" / "multirun" / sweep.name
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns(*ignore))
    return copy


def write_conf(root: Path, files: Mapping[str, str]) -> Path:
    """A config directory `root/conf` holding `files` (name under conf/ -> text, leading blank lines dropped)."""
    for name, text in files.items():
        path = root / "conf" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip())
    return root / "conf"


def write_cpu_loop(root: Path) -> Path:
    """A user's own loop that never touches a GPU (no torch: it starts in a second), reporting two epochs through
    sweepit's calls, on sweepit's local launcher; `root/app.py`."""
    (root / "app.py").write_text(
        "import hydra\nimport sweepit\n\n\n"
        "@hydra.main(version_base='1.3', config_path='.', config_name='config')\n"
        "def main(cfg) -> float:\n"
        "    for epoch in range(2):\n"
        "        sweepit.report({'loss': cfg.x / (epoch + 1)})\n"
        "    return float(cfg.x)\n\n\n"
        "if __name__ == '__main__':\n    main()\n")
    (root / "config.yaml").write_text("defaults:\n  - override hydra/launcher: local\n  - _self_\n\n"
                                      "x: 0.0\ntrainer:\n  gpus: 1  # what the launchers ask for (no GPU is used)\n")
    return root / "app.py"


def write_scaling_sweep(root: Path, epoch_times: dict[int, list[float]], samples: int = 50_000,
                        device: str | None = None, config: Mapping[str, object] | None = None) -> Path:
    """Job dirs as train.py leaves them for `trainer.gpus=N repeat=R` with these mean epoch times (epoch 1 a slow
    warm-up epoch); `device`: the one result.json records (none: a launcher's record); `config`: keys of the jobs'
    .hydra/config.yaml beside their study, GPUs and repeat (none: no config.yaml)."""
    num = 0
    for gpus, times in epoch_times.items():
        for repeat, t in enumerate(times):
            job = root / f"{num}_repeat={repeat},trainer.gpus={gpus}"
            (job / ".hydra").mkdir(parents=True)
            (job / ".hydra" / "overrides.yaml").write_text(f"- trainer.gpus={gpus}\n- repeat={repeat}\n")
            if config is not None:
                job_config = {"study": "scaling", "trainer": {"gpus": gpus}, "repeat": repeat, **config}
                (job / ".hydra" / "config.yaml").write_text(json.dumps(job_config))  # JSON is YAML
            rows = [{"epoch": e, "epoch_time_s": t * (3 if e == 1 else 1), "samples_per_s": samples / t,
                     "train_loss": 1.0, "val_acc": 0.5, "val_loss": 1.0} for e in (1, 2, 3)]
            rows[0]["samples_per_s"] = samples / (3 * t)
            (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (job / "result.json").write_text(json.dumps({
                "status": "completed", "objective": 0.5, "metric": "val_acc", "direction": "maximize",
                "world_size": gpus, "final": rows[-1], "wall_time_s": 5 * t, "samples_per_s_mean": samples / t,
                **({"device": device} if device else {}),
            }))
            num += 1
    return root


def read_by_every_reader(sweep_dir: Path) -> dict[str, str]:
    """What each reader of a sweep says of it: `sweepit summary`, `status` and `report` (their stdout; a failure's
    stderr), and the report's results.csv."""
    said = {}
    for command in ("summary", "status", "report"):
        done = run_command([SWEEPIT, command, sweep_dir], timeout_s=120)
        said[command] = done.stdout if done.returncode == 0 else f"exit {done.returncode}: {done.stderr}"
    csv = Path(sweep_dir) / "report" / "results.csv"
    said["results.csv"] = csv.read_text() if csv.is_file() else "(no results.csv)"
    return said


class Hold:
    """A folder through which a test holds the jobs of a train.py sweep mid-training, as an event rather than a time:
    jobs whose model is one of tests/local/app/held_jobs.py's (`model._target_=held_jobs.linear`), run with `env()`,
    wait after their second epoch until `release()`; `held(num)` says that job `num` (None: any job) waits."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder

    def env(self) -> dict[str, str]:
        """The environment of a process that runs the held jobs (a driver, `sweepit resume`): child_env()'s."""
        path = os.pathsep.join(p for p in (str(HELD_JOBS), os.environ.get("PYTHONPATH", "")) if p)
        return child_env(PYTHONPATH=path, SWEEPIT_TEST_HOLD=str(self.folder))

    def held(self, num: int | None = None) -> bool:
        return any(num is None or p.name == f"held-{num}" for p in self.folder.glob("held-*"))

    def release(self) -> None:
        (self.folder / "release").touch()


def processes_mentioning(marker: str) -> list[int]:
    """The processes but this one whose command line holds `marker`: a sweep's folder names every process of it (a
    forked job's command line is its driver's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_until(predicate: Callable[[], bool], what: str | Callable[[], str], timeout_s: float,
               interval_s: float = 0.2) -> None:
    """Poll `predicate` until it holds; fail the test, naming `what` (or what it returns then), after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what() if callable(what) else what}")
        time.sleep(interval_s)


@contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A real file system of `size` (tmpfs, e.g. "64k") at `mount`, to fill up; the test is skipped where mounting
    is not permitted."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({done.stderr.strip() or done.returncode}): the "
                    "full-disk test needs root or CAP_SYS_ADMIN")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def remount(mount: Path, mode: str) -> None:
    """A `tmpfs` mount made read-only (`mode="ro"`) or writable again ("rw"), as a real file system is."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mount)], check=True, capture_output=True, timeout=30)


def fill(mount: Path) -> Path:
    """Every free block of the file system at `mount` taken by one file (returned, to delete for space again)."""
    filler = mount / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError:
            pass
    return filler


def write_mnist_subset(root: Path, n_train: int, n_test: int) -> Path:
    """The first `n_train` training and `n_test` test images of the real MNIST as its four IDX files in `root`
    (random pixels of the same shape where ../shared/data is not beside the checkout): read as MNIST is read."""
    import numpy as np

    from sweepit.train.data import mnist as mnist_files

    root.mkdir(parents=True, exist_ok=True)
    sizes = {"train_images": n_train, "train_labels": n_train, "test_images": n_test, "test_labels": n_test}
    rng = np.random.default_rng(0)
    for key, name in mnist_files.FILES.items():
        path = mnist_files.find_file(SHARED_MNIST, name)
        if path is not None:
            arr = mnist_files.read_idx(path)[:sizes[key]]
        elif key.endswith("images"):
            arr = rng.integers(0, 256, (sizes[key], 28, 28), dtype=np.uint8)
        else:
            arr = (np.arange(sizes[key]) % 10).astype(np.uint8)
        arr = np.ascontiguousarray(arr, dtype=np.uint8)
        header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
        (root / name).write_bytes(header + arr.tobytes())
    return root


def require_slurm() -> None:
    """Skip the calling test unless the local Slurm cluster takes jobs (`make slurm-up`); under
    SWEEPIT_REQUIRE_SLURM=1 (CI) fail instead, so a broken cluster can never pass as skipped tests."""
    try:
        status = subprocess.run([str(CLUSTER_SCRIPT), "status"], capture_output=True, text=True, timeout=60)
        usable, report = status.returncode == 0, status.stdout + status.stderr
    except (OSError, subprocess.TimeoutExpired) as err:
        usable, report = False, str(err)
    if not usable:
        message = "the local Slurm cluster is not usable: run `make slurm-up` (as root)"
        if os.environ.get("SWEEPIT_REQUIRE_SLURM") == "1":
            pytest.fail(f"SWEEPIT_REQUIRE_SLURM=1 but {message}; {CLUSTER_SCRIPT.name} status says:\n{report}",
                        pytrace=False)
        pytest.skip(message)


# -- one local cluster, many test processes ----------------------------------------------------------------------
# `make test` runs tests in parallel processes (pytest-xdist). Tests that use the cluster share it; tests that
# reconfigure it, stop its controller or take its node down (marker `exclusive_cluster`) need it alone. A
# readers-writer lock on two files does that across processes: every cluster test holds the room shared, a test
# that needs it alone holds it exclusively, and holds the gate while it waits, so that no new test comes in
# meanwhile (flock alone would let shared holders starve it). Tests that need no cluster take no lock and run on.
_LOCKS = Path(tempfile.gettempdir()) / "sweepit-tests-slurm-cluster"
_hold = {"exclusive": False, "depth": 0}  # this process's hold


_kept: list[IO[str]] = []  # the room, held alone past a test whose process runs another exclusive test next
# Whether the next test of this process needs the cluster alone (tests/conftest.py sets it before each test).
next_test_alone = {"yes": False}


@contextmanager
def cluster_access(exclusive: bool) -> Iterator[None]:
    """Hold the local cluster shared (`exclusive=False`) or alone; re-entrant within one process (an exclusive
    hold covers a shared request; a shared hold cannot be raised to exclusive). An exclusive hold outlives the block
    when the next test of this process needs the cluster alone too (`next_test_alone`), whichever hold ends last (a
    class's cluster variant, the test's own): a test sharing the cluster that came in between would hold the tests
    needing it alone back by its whole length."""
    if _hold["depth"]:
        if exclusive and not _hold["exclusive"]:
            raise RuntimeError("a test holding the cluster shared asked for it alone: mark it exclusive_cluster")
        _hold["depth"] += 1
        try:
            yield
        finally:
            _hold["depth"] -= 1
        return
    held_alone = bool(_kept)  # kept by the test before: alone, whatever this one asks
    if _kept:
        room = _kept.pop()
    else:
        _LOCKS.mkdir(exist_ok=True)
        room = open(_LOCKS / "room", "a+")  # noqa: SIM115 (held across tests when kept)
        with open(_LOCKS / "gate", "a+") as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)
            try:
                fcntl.flock(room, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
    _hold.update(exclusive=exclusive or held_alone, depth=1)
    try:
        yield
    finally:
        _hold.update(exclusive=False, depth=0)
        if next_test_alone["yes"] and (exclusive or held_alone):
            _kept.append(room)
        else:
            fcntl.flock(room, fcntl.LOCK_UN)
            room.close()
