"""Errors of online resharding: a bad plan, a job in the wrong phase or busy, a failed check."""

from __future__ import annotations

from snowshard.errors import ConfigurationError, SnowshardError

__all__ = ["ReshardError", "ReshardJobBusy", "ReshardPhaseError", "ReshardPlanError", "VerifyFailed"]


class ReshardError(SnowshardError):
    """Base of the reshard errors."""


class ReshardPlanError(ReshardError, ConfigurationError):
    """The move cannot be planned: unknown database, unsupported key, same layout."""


class ReshardPhaseError(ReshardError):
    """The step asked for does not follow from the job's phase (e.g. cutover before copy)."""


class ReshardJobBusy(ReshardError):
    """Another process holds the job's lock (it runs a step of the same job now), or the
    step lost the lock it held; the message names the holder when the server tells."""


class VerifyFailed(ReshardError):
    """Source and target still differ after catching up; ``ranges`` lists where."""

    def __init__(self, message: str, ranges: tuple[tuple[int, int], ...]) -> None:
        super().__init__(message)
        self.ranges = ranges
