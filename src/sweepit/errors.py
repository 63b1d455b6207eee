"""One error hierarchy: every message states the rule, the value, and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class SweepitError(Exception):
    """Base class of every error sweepit raises on purpose."""


class ConfigError(SweepitError, ValueError):
    """A configuration value breaks a rule (checked before any training starts)."""


class DataMissingError(SweepitError, FileNotFoundError):
    """A data set's files are not where the config says they are."""


class ChecksumError(SweepitError):
    """A downloaded file does not have the expected checksum."""


class DivergedError(SweepitError, ArithmeticError):
    """The training loss became NaN or infinite."""


class PausedAtRung(SweepitError):
    """Raised by `save_checkpoint` at the epoch where the halving sweeper pauses the job, its checkpoint saved: the
    job ends `paused`. A loop that catches every exception lets this one pass (`except sweepit.PausedAtRung: raise`)."""


class ManifestError(SweepitError):
    """A sweep directory has no readable `sweep.json`, so it cannot be resumed or followed."""


class OutputWriteError(SweepitError, OSError):
    """A file sweepit writes could not be written (a full disk, a used-up quota, a read-only or forbidden folder);
    the message names the file and says its old content is intact. `errno` is the system's."""


class SweepLockedError(SweepitError):
    """Another driver is running the sweep in this directory."""


class SlurmError(SweepitError):
    """Slurm cannot be reached, or one of its commands refused a request."""


class QueueLimitError(SlurmError):
    """sbatch refused jobs for a limit on the user's jobs in the queue (QoS MaxSubmitJobsPerUser, ...): a driver that
    has jobs in flight waits for room and submits again. `limit` is the limit sbatch named."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


class SweepFailedError(SweepitError):
    """A sweep ended with failed or interrupted jobs; the message says where the logs are and how to resume."""


class SweepStoppedError(SweepFailedError):
    """A sweep (or the following of one) was stopped by a signal its driver got (Ctrl-C, SIGTERM): not a crash. The
    message names the signal, says what was kept and how to go on, and is all that is printed."""


class RankFailedError(SweepitError):
    """A rank of a multi-rank job (a local rank, a Slurm task) ended with an error; the message names the rank, its
    error and its log."""


def require(ok: bool, message: str) -> None:
    """A config value's check: a ConfigError with `message` (the rule, the value, the fix) unless `ok`."""
    if not ok:
        raise ConfigError(message)


def is_count(value: Any, least: int) -> bool:
    """Whether a config value is an integer >= `least` (YAML's true and false are not counts)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def closest(name: str, names: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The one of `names` nearest to a misspelt `name` (for "did you mean ...?"), None when none is near enough;
    `cutoff=0` always names one."""
    close = difflib.get_close_matches(name, [n for n in names if n != name], n=1, cutoff=cutoff)
    return close[0] if close else None


def with_causes(error: BaseException) -> str:
    """`error` as `Type: message`, followed by the messages of its causes (Hydra's compose errors say what was wrong
    in their cause: "Error merging override mode=7" is caused by "Invalid value '7', expected one of ...")."""
    parts, seen = [f"{type(error).__name__}: {error}"], {id(error)}
    cause = error.__cause__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        parts.append(str(cause).split("\n")[0])
        cause = cause.__cause__
    return ": ".join(parts)
