"""The errors of committing a session: where a commit failed, what committed, retry or not.

Every commit error names the database (the key of ``ShardedSession(databases=...)``,
``"default"`` for ``bind``) where it happened, is chained to the driver's error, and
carries:

* ``committed``: databases whose commit succeeded (their rows are stored);
* ``failed``: the database whose commit failed (None if none did);
* ``not_attempted``: databases never asked to commit (their rows were rolled back);
* ``retry_safe``: whether running the whole transaction again cannot store a row twice.

:class:`CommitFailed` means nothing was committed (in doubt only when ``retry_safe`` is
False: the connection broke during COMMIT, so that database may have committed);
:class:`PartialCommitError` means some databases committed and others did not (a session
without ``twophase=True``); :class:`CommitUnfinished` means a two-phase group was decided
committed but some databases still hold their prepared branch, which recovery will commit.
"""

from __future__ import annotations

from collections.abc import Sequence

from snowshard.errors import ConfigurationError
from snowshard.sharding.errors import ShardingError

__all__ = [
    "CommitError",
    "CommitFailed",
    "CommitUnfinished",
    "PartialCommitError",
    "TwoPhaseConfigError",
    "TwoPhaseUnavailable",
]


class CommitError(ShardingError):
    """A session's commit failed (see the module docstring for the attributes)."""

    def __init__(
        self,
        message: str,
        *,
        committed: Sequence[str] = (),
        failed: str | None = None,
        not_attempted: Sequence[str] = (),
        retry_safe: bool = False,
        group: str | None = None,
    ) -> None:
        super().__init__(message)
        self.committed: tuple[str, ...] = tuple(committed)
        self.failed = failed
        self.not_attempted: tuple[str, ...] = tuple(not_attempted)
        self.retry_safe = retry_safe
        self.group = group
        """The two-phase group ID (``snowshard txn recover`` names it), or None."""


class CommitFailed(CommitError):
    """Nothing was committed (unless ``retry_safe`` is False: then ``failed`` is in doubt)."""


class PartialCommitError(CommitError):
    """Some databases committed, one failed, the rest were rolled back: not atomic."""


class CommitUnfinished(CommitError):
    """A two-phase group was decided committed; some databases are still to commit it.

    Their prepared branches keep their row locks until recovery (``snowshard txn recover``
    or :func:`snowshard.operations.recover`) commits them. Never retry the transaction.
    """


class TwoPhaseUnavailable(ShardingError):
    """``twophase=True`` with a database that cannot prepare transactions (says how to fix)."""


class TwoPhaseConfigError(ShardingError, ConfigurationError):
    """A two-phase setting that cannot work (a bad decisions database, grace, ...)."""
