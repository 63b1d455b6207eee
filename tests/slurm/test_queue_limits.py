"""The user's queue limits on the local cluster (`slurm-cluster.sh up --qos-limit=3`: limits enforced, and a plain
user `sweepit-user` whose default QoS allows 3 jobs queued or running; root's jobs are never held to limits, so the
drivers here run as that user). A sweep of more jobs than the limit keeps within it, in both modes, and submits the
rest as earlier jobs end; where the limits cannot be read, sbatch's refusal is a paragraph naming the limit and
`hydra.launcher.max_queued`, and that key keeps the sweep within it."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from slurm_cluster_testing import SlurmCluster, cluster_variant
from slurm_launcher_testing import APP, ROOT, driver_env, manifest, result

from sweepit.slurm._limits import Cap, QueueLimits, read_limits, refused_for_limit

pytestmark = pytest.mark.exclusive_cluster
USER = "sweepit-user"  # scripts/slurm-cluster.sh's QOS_USER
LIMIT = 3


@contextmanager
def reachable_by_others(path: Path) -> Iterator[None]:
    """Every folder above `path` searchable by other users (o+x) while inside: the plain user runs this checkout's
    interpreter, which may live under root's home (mode 700). Put back as it was after."""
    changed: list[tuple[Path, int]] = []
    try:
        for folder in [path.resolve(), *path.resolve().parents]:
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH:
                os.chmod(folder, mode | stat.S_IXOTH)
                changed.append((folder, mode))
        yield
    finally:
        for folder, mode in changed:
            os.chmod(folder, stat.S_IMODE(mode))


@pytest.fixture(scope="module")
def qos_cluster() -> Iterator[SlurmCluster]:
    with cluster_variant(f"--qos-limit={LIMIT}") as described, reachable_by_others(Path(sys.executable).parent), \
            reachable_by_others(Path(os.path.realpath(sys.executable)).parent):
        yield described


@pytest.fixture
def user_dir(qos_cluster: SlurmCluster) -> Iterator[Path]:
    """A scratch folder the plain user owns (pytest's own are root's, mode 700)."""
    folder = Path(tempfile.mkdtemp(prefix="sweepit-qos-"))
    info = pwd.getpwnam(USER)
    os.chown(folder, info.pw_uid, info.pw_gid)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def hidden_limits(folder: Path) -> Path:
    """A folder whose `sacctmgr` answers as on a site that does not let users read accounting: put first on PATH, the
    driver cannot see the QoS limit (sbatch still enforces it)."""
    shim = folder / "no-accounting"
    shim.mkdir()
    (shim / "sacctmgr").write_text("#!/bin/sh\necho 'sacctmgr: error: Access/permission denied' >&2\nexit 1\n")
    (shim / "sacctmgr").chmod(0o755)
    return shim


def as_user(sweep: Path, *overrides: str, path_first: Path | None = None,
            timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """A sweep driver run by the plain user, to its end."""
    info = pwd.getpwnam(USER)
    env = driver_env(HOME=info.pw_dir, USER=USER, LOGNAME=USER)
    if path_first is not None:
        env["PATH"] = f"{path_first}:{env['PATH']}"
    return subprocess.run([sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep}", "hydra/launcher=slurm",
                           *overrides], capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, env=env,
                          user=info.pw_uid, group=info.pw_gid, extra_groups=[])


def sbatch_calls(sweep: Path) -> int:
    return len([p for p in (sweep / ".submitit").iterdir() if p.is_dir()])


def test_the_cluster_refuses_the_plain_users_jobs_beyond_the_limit(user_dir: Path) -> None:
    """The variant itself: sbatch refuses an array of LIMIT + 1 tasks from the plain user (each task counts)."""
    info = pwd.getpwnam(USER)
    proc = subprocess.run(["sbatch", f"--array=0-{LIMIT}", "--wrap=true", "-o", "/dev/null"], capture_output=True,
                          text=True, cwd=user_dir, user=info.pw_uid, group=info.pw_gid, extra_groups=[], timeout=30)
    assert proc.returncode != 0 and "QOSMaxSubmitJobPerUserLimit" in proc.stderr, proc.stderr


def test_a_grid_larger_than_the_limit_keeps_within_it_and_submits_the_rest_as_jobs_end(user_dir: Path) -> None:
    sweep = user_dir / "grid"
    dry = as_user(sweep, "x=1,2,3,4,5,6,7,8", "hydra.launcher.dry_run=true")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert f"# queue limit: at most {LIMIT} Slurm job(s) of {USER}'s in the queue at once (QoS capped: " \
           f"MaxSubmitJobsPerUser={LIMIT}" in dry.stdout, dry.stdout[-2000:]
    proc = as_user(sweep, "x=1,2,3,4,5,6,7,8", "sleep_s=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "8 jobs: 8 completed" in proc.stdout
    # sbatch enforces the limit: had the driver gone over it, it would have refused (and the driver said so).
    said = proc.stdout + proc.stderr
    assert "refused" not in said, said[-3000:]
    assert "5 held back by the queue limit" in said and "job(s) held back: QoS capped" in said, said[-3000:]
    assert sbatch_calls(sweep) >= 3, "8 jobs, at most 3 in the queue: at least three submissions"
    m = manifest(sweep)
    assert len({str(e.extra["slurm_job_id"]) for e in m.jobs.values()}) == 8
    assert all(result(Path(e.job_dir))["status"] == "completed" and "held" not in e.extra for e in m.jobs.values())


def test_a_packed_sweep_submits_no_more_workers_than_the_limit_allows(user_dir: Path) -> None:
    sweep = user_dir / "packed"
    proc = as_user(sweep, "x=1,2,3,4,5,6,7,8", "hydra.launcher.workers=5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout + proc.stderr
    assert "8 jobs: 8 completed" in proc.stdout and "refused" not in said, said[-3000:]
    arrays = manifest(sweep).workers["arrays"]
    first = arrays[min(arrays, key=int)]
    assert len(first["ids"]) == LIMIT, arrays
    assert "more workers as the queue limit allows" in said


@pytest.mark.parametrize("mode", ["hydra.sweeper.n_jobs=5", "hydra.sweeper.workers=5"])
def test_an_optuna_search_keeps_within_the_limit_in_both_modes(user_dir: Path, mode: str) -> None:
    """A trial per job, 5 at once: the sixth waits for room; 5 workers asked: 3 are submitted, and share the trials."""
    sweep = user_dir / "optuna"
    proc = as_user(sweep, "hydra/sweeper=optuna", "x=choice(0,1,2,3)", "hydra.sweeper.n_trials=6", mode)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    assert "6 jobs: 6 completed" in proc.stdout and "refused" not in said, said[-3000:]
    if "workers" in mode:
        assert len(manifest(sweep).workers["ids"]) == LIMIT
    else:
        assert "wait to be submitted: QoS capped: MaxSubmitJobsPerUser=3" in said, said[-3000:]


def test_where_the_limit_cannot_be_read_the_refusal_names_it_and_max_queued_keeps_within_it(user_dir: Path) -> None:
    shim = hidden_limits(user_dir)
    sweep = user_dir / "hidden"
    proc = as_user(sweep, "x=1,2,3,4,5", path_first=shim)
    assert proc.returncode == 1
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said, said[-3000:]
    refused = ("sbatch refused 5 job(s) for a limit on the Slurm jobs one user may have in the queue "
               "(QOSMaxSubmitJobPerUserLimit). Nothing was submitted.\nSet hydra.launcher.max_queued=M")
    assert refused in said, said[-3000:]
    assert "See docs/troubleshooting.md#queue-limit\nsbatch said: " in said
    assert {e.state for e in manifest(sweep).jobs.values()} == {"not started"}
    again = as_user(sweep, "x=1,2,3,4,5", f"hydra.launcher.max_queued={LIMIT}", path_first=shim)
    assert again.returncode == 0, again.stderr[-3000:]
    said = again.stdout + again.stderr
    assert "5 jobs: 5 completed" in again.stdout and "refused" not in said, said[-3000:]
    assert "hydra.launcher.max_queued=3 allows 3 Slurm job(s)" in said


@pytest.mark.no_cluster
def test_a_refusal_for_a_limit_on_jobs_is_told_apart_from_other_refusals() -> None:
    said = ("sbatch: error: QOSMaxSubmitJobPerUserLimit sbatch: error: Batch job submission failed: Job violates "
            "accounting/QOS policy (job submit limit, user's size and/or time limits)")  # as sbatch said it here
    assert refused_for_limit(said) == "QOSMaxSubmitJobPerUserLimit"
    assert refused_for_limit("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
                             "(job submit limit, user's size and/or time limits)") == "a limit on jobs per user"
    assert refused_for_limit("sbatch: error: Batch job submission failed: Invalid account or account/partition "
                             "combination specified") is None


@pytest.mark.no_cluster
def test_the_tightest_limit_on_queued_jobs_is_the_one_kept() -> None:
    limits = QueueLimits(submit=(Cap(10, "QoS normal: MaxSubmitJobsPerUser=10"), Cap(4, "hydra.launcher.max_queued=4")),
                         running=(Cap(2, "QoS normal: MaxJobsPerUser=2"),), user="ana")
    assert limits.cap == Cap(4, "hydra.launcher.max_queued=4")
    assert limits.describe() == ("at most 4 Slurm job(s) of ana's in the queue at once (hydra.launcher.max_queued=4; "
                                 "each array task counts, other sweeps' jobs too): the driver submits the rest as "
                                 "earlier ones end; at most 2 run at once (QoS normal: MaxJobsPerUser=2)")
    assert QueueLimits(user="ana").describe() == ""


@pytest.mark.no_cluster
@pytest.mark.parametrize(("account", "qos", "expected"), [
    (None, None, ("association of ana in account b: MaxSubmitJobs=7", "QoS long: MaxSubmitJobsPerUser=5")),
    ("a", None, ("association of ana in account a: MaxSubmitJobs=9", "QoS normal: MaxSubmitJobsPerUser=20")),
    ("B", "Normal", ("association of ana in account b: MaxSubmitJobs=7", "QoS normal: MaxSubmitJobsPerUser=20")),
    ("c", None, ("QoS normal: MaxSubmitJobsPerUser=20",)),
])
def test_the_limits_are_those_of_the_jobs_account_and_qos_among_the_users_several(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, account: str | None, qos: str | None,
        expected: tuple[str, ...]) -> None:
    """sacctmgr is asked for all the user's associations and every QoS at once, and the driver picks: the launcher's
    account (else the user's default), not a partition's own association, and its QoS (else the association's
    default), names compared as Slurm compares them (without case). A `sacctmgr` on PATH answers as a site with two
    accounts would."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "sacctmgr").write_text("""#!/bin/sh
case "$*" in
  *DefaultAccount*) echo 'b' ;;
  *"show assoc"*) printf 'a||normal,long|normal|9|\\nb|gpu|long|long|1|\\nb||normal,long|long|7|3\\n' ;;
  *"show qos"*) printf 'normal|20|\\nlong|5|2\\n' ;;
  *) exit 1 ;;
esac
""")
    (shim / "sacctmgr").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: type("Pw", (), {"pw_name": "ana"})())
    options = type("Options", (), {"account": account, "qos": qos, "max_queued": None})()
    limits = read_limits(options)  # type: ignore[arg-type]
    assert tuple(cap.name for cap in limits.submit) == expected
