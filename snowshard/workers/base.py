"""What a generator and a worker ID lease say to each other: :class:`WorkerLease`.

A lease grants a worker ID for a limited time. The generator (:class:`~snowshard.Snowflake`)
calls three methods of it:

1. ``attach(generator)`` when it is built, so the lease can refuse a second generator (two
   generators on one worker ID issue the same IDs);
2. ``claim(high_water)`` at construction, whenever its claim's deadline passes and after
   ``fork()``, for a :class:`WorkerClaim`; ``high_water()`` gives the Unix ms of its last
   ID, which the lease stores for the next holder of the worker ID;
3. ``detach(generator)`` if its construction fails after attaching.

This module imports nothing but the standard library, so the generator and every lease
implementation can depend on it without depending on each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from snowshard.errors import WorkerIdError

__all__ = ["WorkerClaim", "WorkerLease"]


class WorkerClaim:
    """What a lease grants: a worker ID, until when, and the lowest time it may issue at.

    ``expires_ns`` is a :func:`time.monotonic_ns` deadline after which the lease may have
    lapsed (``None``: never). ``floor_unix_ms`` is the last time the previous holder of the
    worker ID issued at; the new holder issues only after it.
    """

    __slots__ = ("expires_ns", "floor_unix_ms", "worker")

    def __init__(self, worker: int, expires_ns: int | None = None, floor_unix_ms: int = 0):
        if isinstance(worker, bool) or not isinstance(worker, int) or worker < 0:
            raise WorkerIdError(f"a claimed worker ID must be an int >= 0, got {worker!r}")
        self.worker = worker
        self.expires_ns = expires_ns
        self.floor_unix_ms = floor_unix_ms

    def __repr__(self) -> str:
        return (
            f"WorkerClaim(worker={self.worker}, expires_ns={self.expires_ns}, "
            f"floor_unix_ms={self.floor_unix_ms})"
        )


@runtime_checkable
class WorkerLease(Protocol):
    """A worker ID source that can lapse (Redis or database leases, ``snowshard.workers``).

    ``attach(generator)`` binds the lease to the one generator issuing IDs under it and
    raises :class:`~snowshard.WorkerIdError` if another generator, still alive, is attached.
    ``detach(generator)`` undoes it (a no-op for any other generator).
    ``claim(high_water)`` returns the current claim, renewing or re-acquiring as needed, or
    raises :class:`~snowshard.WorkerIdError`. ``high_water()`` gives the Unix ms of the
    generator's last ID, which the lease stores so the next holder never issues at or below
    it.
    """

    def attach(self, generator: object) -> None: ...

    def detach(self, generator: object) -> None: ...

    def claim(self, high_water: Callable[[], int]) -> WorkerClaim: ...
