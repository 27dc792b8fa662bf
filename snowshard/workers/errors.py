"""Errors of the worker ID providers and leases (all are :class:`~snowshard.WorkerIdError`).

A generator whose lease fails raises one of these from ``next_id``; ``except WorkerIdError``
catches them all.
"""

from __future__ import annotations

from snowshard.errors import ConfigurationError, WorkerIdError

__all__ = ["LeaseBackendError", "LeaseLost", "WorkerConfigError", "WorkerIdsExhausted"]


class WorkerConfigError(WorkerIdError, ConfigurationError):
    """A worker ID setting is invalid: an environment variable, a hostname, a TTL, ..."""


class WorkerIdsExhausted(WorkerIdError):
    """Every worker ID of the layout is leased by a live holder; none is free to take."""


class LeaseLost(WorkerIdError):
    """The lease lapsed (renewal failed, process paused, lease closed) and none is held now."""


class LeaseBackendError(WorkerIdError):
    """The lease's store (Redis or the database) failed or could not be reached."""
