"""Swept keys that look unread: Hydra lets `+lrr=0.01,0.1` add a key that nothing reads, and every job then trains
alike. A key is flagged when completed jobs that differ only in it end with identical metrics (clock measures left
out); one group of such jobs whose metrics differ clears it. The end-of-sweep summary and the report use this rule."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepit.errors import closest
from sweepit.results._overrides import load_yaml
from sweepit.results._paths import JobPaths
from sweepit.results._status import REPEAT_KEY, JobState

if TYPE_CHECKING:
    from sweepit.results._summary import JobRow


@dataclass(slots=True)  # slots: one per group of jobs, many in a large sweep
class _Group:
    value: str            # the key's value in the group's first job
    metrics: tuple[Any, ...]
    job_dir: Path
    n_same: int = 0       # jobs with another value of the key and the same metrics


def _metrics(result: dict[str, Any]) -> tuple[Any, ...] | None:
    """The job's objective and final metrics, without clock measures (their names end in `_s`: epoch_time_s,
    samples_per_s); None when it has none."""
    final = result.get("final")
    scalars = sorted((k, v) for k, v in final.items() if not k.endswith("_s") and isinstance(v, int | float | str)
                     ) if isinstance(final, dict) else []
    objective = result.get("objective")
    return None if objective is None and not scalars else (objective, *scalars)


class UnreadKeys:
    """The rule, fed one job at a time (`add`, in any order); `lines` says which keys look unread."""

    def __init__(self, jobs: Iterable[JobRow] = ()) -> None:
        self._groups: dict[str, dict[int, _Group]] = {}  # key -> hash of the other overrides -> group
        self._read: set[str] = set()                     # keys some group showed to change the metrics
        for job in jobs:
            self.add(job)

    def add(self, job: JobRow) -> None:
        if job.status != JobState.COMPLETED or self._read.issuperset(job.overrides):
            return  # once every key of a sweep is known to be read (soon, in most), a job costs this test alone
        metrics = _metrics(job.result)
        if metrics is None:
            return
        items = sorted(job.overrides.items())
        for i, (key, value) in enumerate(items):
            if key in self._read or key == REPEAT_KEY:  # repeats of a point train alike on purpose (timing noise)
                continue
            groups = self._groups.setdefault(key, {})
            others = hash((*items[:i], *items[i + 1:]))
            group = groups.get(others)
            if group is None:
                groups[others] = _Group(value, metrics, job.job_dir)
            elif value != group.value:
                if metrics != group.metrics:
                    self._read.add(key)
                    del self._groups[key]  # read, for good: its groups need not be kept
                else:
                    group.n_same += 1

    def lines(self) -> list[str]:
        """A sentence per key that looks unread (in the order keys were first seen), with the number of jobs that show
        it and a known key of a similar name when the job's config has one."""
        lines = []
        for key, groups in self._groups.items():
            shown = [g for g in groups.values() if g.n_same]
            if not shown:
                continue
            keys = _config_keys(load_yaml(JobPaths(shown[0].job_dir).config))
            close = closest(key, keys)
            fix = (f"did you mean {close}?" if close
                   else f"check its name in a job's config ({JobPaths(shown[0].job_dir).config})")
            n = sum(g.n_same + 1 for g in shown)
            lines.append(f"{key} looks unread: the {n} jobs that differ only in {key} ended with identical metrics "
                         f"(Hydra lets `+{key}=...` add a key that nothing reads); {fix}")
        return lines


def _config_keys(node: Any, prefix: str = "") -> Iterator[str]:
    """The dotted keys of a job's composed config (`.hydra/config.yaml`), for a name close to a misspelled one."""
    for k, v in node.items() if isinstance(node, dict) else ():
        yield f"{prefix}{k}"
        yield from _config_keys(v, f"{prefix}{k}.")
