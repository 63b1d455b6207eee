"""Submission: one sbatch call per job array (the jobs of one request, at most MaxArraySize of them), each in a fresh
submitit folder `<sweep dir>/.submitit/NNNN/`, never reused: job ids restart at 1 after a cluster's cold start, and
submitit names its files by job id. Also a dry run's text, and what a job's task returned (submitit's result pickle).
"""

from __future__ import annotations

import logging
import secrets
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sweepit._host import now_iso
from sweepit.errors import QueueLimitError, SlurmError
from sweepit.results import JobEntry, JobPaths, JobState, Ledger, SweepPaths
from sweepit.slurm._budget import Gate, dry_run_line, refusal, throttles
from sweepit.slurm._cluster import base_ids
from sweepit.slurm._limits import Room, dry_run_lines, refused_for_limit
from sweepit.slurm._plan import PlannedJob, by_request
from sweepit.slurm._request import Request, SlurmOptions, gpu_hours, sbatch_parameters
from sweepit.slurm._task_files import link_task_logs, relink, start_job_dir

log = logging.getLogger(__name__)
Task = Callable[[], Any]


def arrays(jobs: list[PlannedJob], max_array_size: int) -> list[list[PlannedJob]]:
    """Jobs of the same request together, in job order, cut at `max_array_size`."""
    return [group[i:i + max_array_size] for group in by_request(jobs).values()
            for i in range(0, len(group), max_array_size)]


def next_folder(sweep_dir: Path, offset: int = 0) -> Path:
    root = SweepPaths(sweep_dir).submitit
    used = [int(p.name) for p in root.iterdir() if p.name.isdigit()] if root.is_dir() else []
    return root / f"{max(used, default=0) + 1 + offset:04d}"


def fresh_folder(sweep_dir: Path) -> Path:
    """A submitit folder no submission has used."""
    while True:
        folder = next_folder(sweep_dir)
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue  # another driver took it a moment ago


def sbatch_script(params: dict[str, Any], folder: Path, n_jobs: int, python: str | None) -> str:
    """The sbatch script submitit writes for these parameters (an array when n_jobs > 1)."""
    from submitit.slurm.slurm import _make_sbatch_string

    command = " ".join([python or shlex.quote(sys.executable), "-u -m submitit.core._submit", shlex.quote(str(folder))])
    return str(_make_sbatch_string(command=command, folder=folder, map_count=n_jobs if n_jobs > 1 else None,
                                   **params))


def job_name(o: SlurmOptions) -> str:
    """The Slurm job name of one submission: a suffix tells sweeps of the same app apart."""
    return f"{o.job_name}-{secrets.token_hex(3)}"


def dry_run_text(jobs: list[PlannedJob], sweep_dir: Path, max_array_size: int,
                 o: SlurmOptions) -> tuple[str, str | None]:
    """Each request's sbatch script (its first array's), the job count and the GPU-hours if every job ran to
    its time limit; and why the budget would refuse the sweep (None when it would not)."""
    name = job_name(o)
    out: list[str] = []
    n_calls = 0
    groups = by_request(jobs)
    throttle = throttles([(c[0].request, len(c)) for c in arrays(jobs, max_array_size) if c[0].request], o)
    for request, group in groups.items():
        assert request is not None
        chunks = arrays(group, max_array_size)
        sizes = ", ".join(str(len(chunk)) for chunk in chunks)
        out.append(f"# {len(group)} job(s) with {request.describe()}: {len(chunks)} sbatch call(s) "
                   f"(array sizes {sizes}; jobs {', '.join(str(j.num) for j in group)})")
        folder = next_folder(sweep_dir, n_calls)
        out.append(sbatch_script(sbatch_parameters(request, o, name, throttle.get(request)), folder, len(chunks[0]),
                                 o.python))
        n_calls += len(chunks)
    hours = gpu_hours([r for r, group in groups.items() if r is not None for _ in group])
    out += dry_run_lines(o) + dry_run_line(o, hours)
    out.append(f"dry run: {len(jobs)} job(s) in {n_calls} sbatch call(s), at most {hours:.2f} GPU-hours (every job "
               "to its time limit); nothing submitted. Drop hydra.launcher.dry_run=true to submit.")
    return "\n".join(out), refusal(o, [(j.num, j.request) for j in jobs if j.request is not None])


def submit(tasks: Sequence[Task], params: dict[str, Any], folder: Path, max_num_timeout: int,
           python: str | None) -> list[str]:
    """Submit `tasks` with one sbatch call (an array of them, or one job); their Slurm job ids in order."""
    import submitit

    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=max_num_timeout, python=python)
    executor.update_parameters(**params)
    try:
        jobs = executor.submit_array(tasks)
    except Exception as e:  # submitit's FailedJobError carries sbatch's own message
        said = str(e).strip().replace("\n", " ")[-800:]
        limit = refused_for_limit(said)
        if limit is not None:
            raise QueueLimitError(limit,
                f"sbatch refused {len(tasks)} job(s) for a limit on the Slurm jobs one user may have in the queue "
                f"({limit}).\n"
                "Set hydra.launcher.max_queued=M to that limit, or pack the jobs with hydra.launcher.workers=N.\n"
                f"See docs/troubleshooting.md#queue-limit\nsbatch said: {said}") from e
        raise SlurmError(f"sbatch must accept the jobs, but refused them: {said}. Check the hydra.launcher values it "
                         f"names (partition, account, qos, ...); the script is in {folder}.") from e
    return [str(j.job_id) for j in jobs]


def submit_jobs(jobs: list[PlannedJob], manifest: Ledger, o: SlurmOptions, make_task: Callable[[PlannedJob], Task],
                before: Sequence[str] = (), throttle: dict[Request, int] | None = None) -> list[str]:
    """One sbatch call for `jobs` (of one request, at most MaxArraySize), recorded in the manifest; a refusal says
    which jobs of the sweep's went out `before`. `throttle`: each request's array throttle under max_gpus."""
    sweep_dir = Path(manifest.sweep_dir)
    name = job_name(o)
    tasks = []
    for job in jobs:
        start_job_dir(job.job_dir)
        assert job.request is not None
        job.gate = Gate(sweep_dir, job.request, job.num, job.job_dir) if o.budget_gpu_hours is not None else None
        tasks.append(make_task(job))
    folder = fresh_folder(sweep_dir)
    request = jobs[0].request
    assert request is not None
    try:
        ids = submit(tasks, sbatch_parameters(request, o, name, (throttle or {}).get(request)), folder,
                     o.max_num_timeout, o.python)
    except SlurmError as e:
        done = (f" {len(before)} job(s) were submitted before (Slurm job(s) {', '.join(base_ids(before))}): follow "
                f"them with `sweepit status {sweep_dir}`." if before else " Nothing was submitted.")
        what, lines, rest = str(e).partition("\n")  # what happened, then what to do: the jobs out belong to the first
        if isinstance(e, QueueLimitError):
            raise QueueLimitError(e.limit, f"{what}{done}{lines}{rest}") from None
        raise SlurmError(f"{what}{done}{lines}{rest}") from None
    submitted_at = now_iso()
    for job, job_id in zip(jobs, ids, strict=True):
        stdout, stderr = log_paths(folder, job_id)
        link_logs(job.job_dir, stdout, stderr)
        n_tasks = job.request.nodes * job.request.tasks_per_node if job.request else 1
        link_task_logs(job.job_dir, [log_paths(folder, job_id, task) for task in range(n_tasks)])
        array_id, _, index = job_id.partition("_")
        manifest.move(job.num, JobState.QUEUED, again=True, pid=None, started_at=None, ended_at=None, extra={
            "slurm_job_id": job_id, "slurm_array_job_id": array_id,
            "slurm_array_index": int(index) if index else None, "slurm_job_name": name,
            "submitit_folder": str(folder), "stdout": str(stdout), "stderr": str(stderr),
            "submitted_at": submitted_at, **job.planned(o),
        })
    manifest.write([job.num for job in jobs])
    return ids


class Feeder:
    """A sweep's jobs submitted within the user's queue limits (`room`): at every `feed()` as many as there is room
    for, one sbatch call per array, the rest held (queued in `sweep.json`, without a Slurm id)."""

    def __init__(self, jobs: list[PlannedJob], manifest: Ledger, o: SlurmOptions, max_array_size: int,
                 make_task: Callable[[PlannedJob], Task], room: Room,
                 throttle: dict[Request, int] | None = None) -> None:
        self.held = list(jobs)
        self.throttle = throttle
        self.manifest, self.o, self.max_array_size, self.make_task, self.room = (manifest, o, max_array_size,
                                                                                 make_task, room)
        self.ids: list[str] = []
        self._said = ""

    def feed(self, in_queue: Callable[[], set[str]]) -> list[PlannedJob]:
        """Submit what there is room for now (`in_queue()`: the Slurm ids of the sweep's jobs in the queue); the jobs
        submitted."""
        if not self.held:
            return []
        out: list[PlannedJob] = []
        first = len(self.ids)

        def submit_arrays(n: int) -> list[str]:
            for chunk in arrays(self.held[:n], self.max_array_size):
                self.ids.extend(submit_jobs(chunk, self.manifest, self.o, self.make_task, self.ids, self.throttle))
                out.extend(chunk)
            return self.ids[first:]

        self.room.submit(len(self.held), submit_arrays, lambda: in_queue() | set(self.ids[first:]), "more jobs")
        if out:
            done = {j.num for j in out}
            self.held = [j for j in self.held if j.num not in done]
        why = self.room.refusal or (self.room.limits.full() if self.room.limits is not None else "")
        if self.held and why and why != self._said:
            self._hold(why)
        return out

    def _hold(self, why: str) -> None:
        for job in self.held:
            self.manifest.move(job.num, JobState.QUEUED, extra={"held": why})
        self.manifest.write([j.num for j in self.held])
        log.warning(f"sweepit: {len(self.held)} job(s) held back: {why}")
        self._said = why

    def leave(self) -> None:
        """The driver does not follow (wait=false): the held jobs are `not started`, for `sweepit resume`."""
        for job in self.held:
            self.manifest.move(job.num, JobState.NOT_STARTED)
            self.manifest.jobs[job.num].extra.pop("held", None)
        self.manifest.write([j.num for j in self.held])


def log_paths(folder: Path, job_id: str, task: int = 0) -> tuple[Path, Path]:
    """stdout and stderr of the job's task `task` (rank 0 by default), as submitit names them."""
    from submitit.core import utils

    paths = utils.JobPaths(folder, job_id=job_id, task_id=task)
    return paths.stdout, paths.stderr


def link_logs(job_dir: Path, stdout: Path, stderr: Path) -> None:
    """`stdout.log` and `stderr.log` in the job directory point at the Slurm logs, as the local launcher's
    files are there."""
    job_dir.mkdir(parents=True, exist_ok=True)
    relink(JobPaths(job_dir).stdout, stdout)
    relink(JobPaths(job_dir).stderr, stderr)


def result_pickle(entry: JobEntry) -> Path | None:
    """Where submitit keeps what rank 0's task returned (or raised); None for a job never submitted."""
    from submitit.core.utils import JobPaths

    folder, job_id = entry.extra.get("submitit_folder"), entry.extra.get("slurm_job_id")
    return JobPaths(folder, job_id=str(job_id), task_id=0).result_pickle if folder and job_id else None


def returned(entry: JobEntry) -> tuple[bool, Any]:
    """(True, value) when rank 0's task returned `value`; (False, None) when it raised, was killed before it
    returned, or its result cannot be read (then the sweeper gets the objective in result.json instead)."""
    from submitit.core.utils import pickle_load

    path = result_pickle(entry)
    if path is None or not path.exists():
        return False, None
    try:
        outcome, value = pickle_load(path)
    except Exception as e:  # a class the driver cannot import, a truncated file
        log.warning(f"job {entry.num}: its return value in {path} cannot be read ({type(e).__name__}: {e}); the "
                    "sweeper gets the objective from its result.json instead.")
        return False, None
    return (True, value) if outcome == "success" else (False, None)
