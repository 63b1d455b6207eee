"""What the Slurm launcher tells the user after submitting, when detaching, and when it stops following."""

from __future__ import annotations

import signal
from pathlib import Path

from sweepit.results._manifest import Manifest


def _arrays(ids: list[str]) -> list[str]:
    """The Slurm job ids to give scancel: an array's id stands for all its tasks."""
    return sorted({i.split("_", 1)[0] for i in ids}, key=int)


def submitted(n_jobs: int, ids: list[str], n_skipped: int, n_adopted: int, sweep_dir: Path) -> str:
    arrays = _arrays(ids)
    parts = [f"Submitted {len(ids)} of {n_jobs} job(s) to Slurm in {len(arrays)} sbatch call(s)"
             + (f" (job ids {', '.join(arrays)})" if arrays else "")]
    if n_skipped:
        parts.append(f"{n_skipped} finished before (skipped)")
    if n_adopted:
        parts.append(f"{n_adopted} still queued or running from before (followed, not submitted again)")
    return "; ".join(parts) + f"; sweep dir {sweep_dir}"


def detached(manifest: Manifest, nums: list[int], sweep_dir: Path) -> str:
    ids = [str(manifest.jobs[n].extra.get("slurm_job_id")) for n in nums]
    lines = [f"Not waiting (hydra.launcher.wait=false): {len(ids)} job(s) in Slurm: {' '.join(ids)}",
             f"  follow:  sweepit status {sweep_dir}",
             f"  resume:  sweepit resume {sweep_dir}   (submits again only the jobs that did not complete)"]
    if ids:
        lines.append(f"  cancel:  scancel {' '.join(_arrays(ids))}")
    return "\n".join(lines)


def stopped(manifest: Manifest, pending: list[int], signum: int | None, sweep_dir: Path) -> str:
    name = signal.Signals(signum or signal.SIGINT).name
    ids = [str(manifest.jobs[n].extra.get("slurm_job_id")) for n in pending]
    return (f"stopped following the sweep ({name}); its {len(ids)} job(s) still in Slurm go on.\n"
            f"  follow:  sweepit status {sweep_dir}\n"
            f"  cancel:  scancel {' '.join(_arrays(ids))}")
