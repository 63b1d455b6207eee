"""One error hierarchy: every message states the rule, the value, and the fix."""

from __future__ import annotations


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
