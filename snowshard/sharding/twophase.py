"""Committing a session over several databases: recoverable two-phase commit, named failures.

::

    ShardedSession(bind=main, databases={"a": engine_a, "b": engine_b}, twophase=True)
    ShardedSession(..., twophase=TwoPhase(decisions="a", grace=60, on_step=print))
    recover({"a": engine_a, "b": engine_b})          # snowshard.operations; after a crash

**The protocol** (PostgreSQL prepared transactions, MariaDB/MySQL XA). A session's
transaction is a *group* with an ID ``<Unix ms>-<12 hex digits>`` (its creation time, then
randomness); each database it writes is a *branch* with the transaction ID
``snowshard-<scope>.<group>:<database key>`` (PostgreSQL GID, under 200 bytes; on MariaDB
the XID ``'snowshard-<scope>.<group>', '<database key>'``, each part at most 64 bytes), so
an operator reading ``pg_prepared_xacts`` or ``XA RECOVER`` can pair the branches of a
group. The scope (8 hex digits, :func:`~.txn_ids.scope_of`) names the decisions database
(below) by the name its URL gives it, so recovery acts only on groups it holds the
decisions of.

1. Each branch is begun with its XID (``XA START`` on MariaDB) when the session first uses
   that database; PostgreSQL's ``max_prepared_transactions`` is checked then (once per
   engine), so a server that cannot prepare fails before any work, with
   :class:`~.commit_errors.TwoPhaseUnavailable`.
2. Commit flushes, then prepares every branch (``PREPARE TRANSACTION`` / ``XA END`` +
   ``XA PREPARE``). A failure rolls every branch back: nothing committed.
3. The decision is made durable: a row ``(group, 'commit', databases)`` is inserted, in its
   own transaction, into ``snowshard_txn_decisions`` of the *decisions database* (the
   session's ``bind`` unless configured). The group ID is its primary key.
4. Every branch is committed (``COMMIT PREPARED`` / ``XA COMMIT``), retried on a new
   connection if the first attempt fails; then the decision row is deleted. Once every
   database committed, ``commit()`` succeeds even if SQLAlchemy's closing ``COMMIT`` (which
   has nothing left to commit) meets a connection killed meanwhile: the session is then
   closed, its objects detached, instead of reporting a failure that a retry would repeat.

The protocol's own statements run outside the session's naming of driver errors
(:mod:`.driver_errors`), so their failures become the commit errors below, which say what
committed; a rollback of a branch whose connection broke never raises (the server rolls an
unprepared branch back when the connection closes).

**Why it is safe.** *Presumed abort*: a branch without a decision row was never decided
committed, because the row is committed before any branch commits. Recovery
(:func:`snowshard.operations.recover`) therefore commits every in-doubt branch of a group
with a ``commit`` row and rolls back the others, which leaves each group wholly committed or
wholly absent, whenever the writer died. A group that may still be finishing (younger than
the *grace period*, read from its ID) is never touched. A writer slower than that races
recovery through the primary key: recovery inserts ``(group, 'abort')`` before rolling a
branch back, so the writer's ``commit`` insert fails and it rolls back too (a writer also
refuses to decide once half the grace period has passed). Recovery deletes decision rows
when no branch of their group is left in the databases it was given.

Without two-phase commit, a session over several databases commits them one after the other;
a failure after some committed raises :class:`~.commit_errors.PartialCommitError` naming
what committed, what failed and what was rolled back (see :mod:`.commit_errors`).

Replica connections (:mod:`~snowshard.sharding.replicas`) are never branches: a hot
standby refuses ``PREPARE TRANSACTION`` and XA, and they only read. SQLAlchemy's closing
``COMMIT`` ends their transactions after every branch committed; when that fails (the
replica broke), or when a transaction read replicas only, the session is closed instead of
reporting a failure: nothing written is lost.

Limits: recovery must be given a decisions engine whose URL names the same database as the
sessions' (it leaves branches of any other scope alone, reporting them); branches written
before scopes existed are recovered by any decisions database. Changes made by
``before_commit`` listeners are flushed before the databases commit only if the listener
flushes them itself (the session flushes, then commits the databases, then runs
SQLAlchemy's commit bookkeeping).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from snowshard._compat import fire_twophase_event
from snowshard.sharding.txn_branches import (
    autocommit,
    backend_of,
    check_prepared_transactions,
    finish_branch,
    in_doubt_branches,
    is_unknown_branch,
    protocol_execute,
)
from snowshard.sharding.txn_decisions import (
    DECISIONS_TABLE,
    decisions,
    ensure_decisions_table,
    forget_decision,
    read_decisions,
    record_decision,
)
from snowshard.sharding.txn_ids import (
    PREFIX,
    Xid,
    branch_name,
    group_created_ms,
    new_group,
    scope_of,
)
from snowshard.redaction import scrub, url_secrets
from snowshard.sharding.commit_errors import (
    CommitError,
    CommitFailed,
    CommitUnfinished,
    PartialCommitError,
    TwoPhaseConfigError,
    TwoPhaseUnavailable,
)
from snowshard.sharding.driver_errors import ShardOperationError
from snowshard.spec import DEFAULT_DATABASE

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, SessionTransaction

__all__ = [
    "DECISIONS_TABLE",
    "DEFAULT_GRACE",
    "PREFIX",
    "CommitCoordinator",
    "StepListener",
    "TwoPhase",
    "Xid",
    "backend_of",
    "decisions",
    "ensure_decisions_table",
    "finish_branch",
    "forget_decision",
    "group_created_ms",
    "in_doubt_branches",
    "new_group",
    "read_decisions",
    "record_decision",
]

DEFAULT_GRACE = 60.0
"""Seconds recovery leaves a group alone after its creation (it may still be finishing)."""

_RETRIES = (0.05, 0.25)  # pauses before the 2nd and 3rd attempt of a phase-2 commit

StepListener = Callable[[str, str, str | None], None]
"""``on_step(step, group, database)``: ``"prepared"`` and ``"committed"`` once per database,
``"decided"`` once (database None), each right after the step is durable."""

# --------------------------------------------------------------------------- the coordinator


@dataclass(frozen=True)
class TwoPhase:
    """Settings of ``ShardedSession(twophase=TwoPhase(...))`` (``True`` means the defaults).

    :param decisions: where decision rows go: a database key of the session, an engine, or
        None for the session's ``bind``.
    :param grace: the recovery grace period (seconds) this writer expects; it refuses to
        decide commit once half of it has passed since the group began.
    :param on_step: a :data:`StepListener` called after each durable step.
    """

    decisions: str | Engine | None = None
    grace: float = DEFAULT_GRACE
    on_step: StepListener | None = None

    def __post_init__(self) -> None:
        if not self.grace > 0:
            raise TwoPhaseConfigError(
                f"TwoPhase(grace={self.grace!r}): the grace period must be a positive number "
                f"of seconds (default {DEFAULT_GRACE:g})"
            )


@dataclass
class _Branch:
    key: str
    xid: Xid
    connection: Connection
    backend: str | None
    managed: bool
    state: str = "active"  # active, prepared, done

    @property
    def engine(self) -> Engine:
        return self.connection.engine


class CommitCoordinator:
    """Commits one :class:`ShardedSession` (module docstring); made by the session itself."""

    def __init__(self, session: Session, twophase: bool | TwoPhase) -> None:
        self.session = session
        self.settings: TwoPhase | None = (
            TwoPhase() if twophase is True else (twophase or None)
        )
        self.branches: list[_Branch] = []
        self.group = ""
        self.scope = ""
        """The scope of the group's XIDs: its decisions database's (:func:`scope_of`)."""
        self.reads_replicas = False
        """Whether the current transaction holds replica connections (never branches)."""
        self._transaction: SessionTransaction | None = None

    # ----------------------------------------------------------------- tracking

    def _key_of(self, connection: Connection) -> str:
        engine = connection.engine
        for key, bind in getattr(self.session, "databases", {}).items():
            if bind is connection or getattr(bind, "engine", None) is engine:
                return str(key)
        bind = self.session.bind
        if bind is connection or getattr(bind, "engine", None) is engine:
            return DEFAULT_DATABASE
        return str(engine.url.database or DEFAULT_DATABASE)

    def began(self, transaction: Any, connection: Connection) -> None:
        """The session began ``connection`` in ``transaction`` (its ``after_begin``)."""
        root = transaction
        while root.parent is not None:
            root = root.parent
        if root is not self._transaction:
            self._transaction = root
            self.branches = []
            self.group = new_group()
            self.scope = self._scope()
            self.reads_replicas = False
        router = getattr(self.session, "replica_router", None)
        if router is not None and router.replica_key(connection) is not None:
            # a replica only reads (a hot standby refuses PREPARE and XA): no branch
            self.reads_replicas = True
            return
        key = self._key_of(connection)
        backend = backend_of(connection.dialect.name)
        managed = connection is not self.session.bind and all(
            connection is not bind for bind in getattr(self.session, "databases", {}).values()
        )
        xid = Xid(self.group, branch_name(key, (b.xid.database for b in self.branches)), self.scope)
        branch = _Branch(key, xid, connection, backend, managed)
        self.branches.append(branch)
        if self.settings is None:
            return
        if backend is None:
            raise TwoPhaseUnavailable(
                f"twophase=True needs databases that can prepare transactions "
                f"(PostgreSQL, MariaDB/MySQL), but database {key!r} is "
                f"{connection.dialect.name}; use twophase=False for it"
            )
        if backend == "postgresql":
            check_prepared_transactions(connection, key)
        else:
            connection.exec_driver_sql(f"XA START {xid.literal(backend)}")
            event.listen(connection, "rollback", lambda conn: _xa_rollback(branch))
        # SQLAlchemy's two-phase events fire as for its own two-phase transactions
        fire_twophase_event(connection, "begin_twophase", str(xid))

    # ----------------------------------------------------------------- commit

    def commit(self, base: Callable[[], None]) -> None:
        """Commit the session's databases (module docstring), then ``base`` (Session.commit)."""
        if self.session.get_transaction() is None:
            base()
            return
        session = self.session
        for _ in range(100):
            if not (session.new or session.dirty or session.deleted):
                break
            session.flush()
        branches = [b for b in self.branches if b.state == "active"]
        if not branches and self.reads_replicas:
            self._commit_reads(base)
            return
        if not branches or not all(b.managed for b in branches):
            base()
            return
        try:
            if self.settings is not None and len(branches) > 1:
                self._two_phase(self.settings, branches)
            else:
                self._one_by_one(branches)
        except Exception:
            for branch in branches:
                _detach(branch)  # a prepared branch is recovery's now (presumed abort)
            try:
                session.rollback()
            except SQLAlchemyError:
                pass  # a broken connection: the commit error above says what happened
            raise
        try:
            base()
        except Exception as exc:
            if not all(b.state == "done" for b in branches) or not _from_driver(branches, exc):
                raise
            # Every database committed; SQLAlchemy's own COMMIT, which had nothing left to
            # commit, met a connection that broke since. The commit succeeded: close the
            # session (its objects stay loaded, detached) rather than report a failure.
            session.close()

    def _commit_reads(self, base: Callable[[], None]) -> None:
        """Commit a transaction that only read replicas: a broken replica closes the session.

        Nothing was written, so a replica whose connection broke since its last read has
        nothing to lose: the session is closed (its objects stay loaded, detached) instead
        of reporting a commit failure.
        """
        try:
            base()
        except (DBAPIError, ShardOperationError):
            self.session.close()

    def _one_by_one(self, branches: list[_Branch]) -> None:
        """Commit each branch in turn (one phase); SQLAlchemy's own COMMIT then finds none."""
        committed: list[str] = []
        for index, branch in enumerate(branches):
            try:
                if self.settings is not None and branch.backend == "mysql":
                    literal = branch.xid.literal("mysql")
                    protocol_execute(branch.connection, f"XA END {literal}")
                    branch.state = "ended"
                    protocol_execute(branch.connection, f"XA COMMIT {literal} ONE PHASE")
                else:
                    branch.connection.connection.commit()
                branch.state = "done"
            except Exception as exc:
                if not _is_driver_error(branch, exc):
                    raise
                rest = [b.key for b in branches[index + 1:]]
                if _outcome_unknown(branch, exc):
                    branch.connection.invalidate()  # broken: SQLAlchemy must not reuse it
                raise _commit_error(branch, exc, committed, rest) from exc
            committed.append(branch.key)

    def _step(self, settings: TwoPhase, step: str, database: str | None) -> None:
        if settings.on_step is not None:
            settings.on_step(step, self.group, database)

    def _scope(self) -> str:
        """The scope of this session's groups: its decisions database's, when two-phase."""
        if self.settings is None:
            return ""
        try:
            return scope_of(self._decisions_engine(self.settings).url.database)
        except TwoPhaseConfigError:
            return ""  # the commit raises it, saying what to give

    def _decisions_engine(self, settings: TwoPhase) -> Engine:
        target: Any = settings.decisions
        if isinstance(target, str):
            found = getattr(self.session, "databases", {}).get(target)
            if found is None:
                raise TwoPhaseConfigError(
                    f"TwoPhase(decisions={target!r}) names no database of this session; "
                    f"use one of {sorted(getattr(self.session, 'databases', {}))} or an engine"
                )
            target = found
        if target is None:
            target = self.session.bind
        engine = getattr(target, "engine", None)
        if not isinstance(engine, Engine):
            raise TwoPhaseConfigError(
                "twophase=True needs a database for its decision records: give the session "
                "a bind, or TwoPhase(decisions=<database key or engine>)"
            )
        return engine

    def _two_phase(self, settings: TwoPhase, branches: list[_Branch]) -> None:
        engine = self._decisions_engine(settings)
        keys = [b.key for b in branches]
        for index, branch in enumerate(branches):
            try:
                _prepare(branch)
            except DBAPIError as exc:
                self._abort(branches)
                raise CommitFailed(
                    f"could not prepare database {branch.key!r} of two-phase group "
                    f"{self.group} ({_cause(branch, exc)}); nothing was committed: every "
                    f"database rolled back, so retrying the transaction is safe",
                    failed=branch.key, not_attempted=keys[index + 1:], retry_safe=True,
                    group=self.group,
                ) from exc
            self._step(settings, "prepared", branch.key)
        created = group_created_ms(self.group) or 0
        if time.time_ns() // 1_000_000 - created > settings.grace * 500:
            self._abort(branches)
            raise CommitFailed(
                f"two-phase group {self.group} took longer than half the recovery grace "
                f"period ({settings.grace:g} s) to prepare, so it was rolled back; nothing was "
                f"committed and retrying the transaction is safe",
                not_attempted=keys, retry_safe=True, group=self.group,
            )
        try:
            outcome = record_decision(engine, self.group, "commit", keys)
        except DBAPIError as exc:
            for branch in branches:
                _detach(branch)
            raise CommitUnfinished(
                f"could not record the commit decision of two-phase group {self.group} "
                f"({type(exc).__name__}); every database is prepared and keeps its row locks "
                f"until recovery (snowshard txn recover), which commits them if the decision "
                f"was stored and rolls them back otherwise; do not retry before it ran",
                not_attempted=keys, retry_safe=False, group=self.group,
            ) from exc
        if outcome != "commit":
            self._abort(branches)
            raise CommitFailed(
                f"recovery rolled back two-phase group {self.group} before it could commit "
                f"(it took longer than the grace period); nothing was committed and retrying "
                f"the transaction is safe",
                not_attempted=keys, retry_safe=True, group=self.group,
            )
        self._step(settings, "decided", None)
        committed: list[str] = []
        pending: list[tuple[_Branch, DBAPIError]] = []
        for branch in branches:
            try:
                _commit_prepared(branch)
            except DBAPIError as failure:
                pending.append((branch, failure))
                continue
            committed.append(branch.key)
            fire_twophase_event(branch.connection, "commit_twophase", str(branch.xid), True)
            self._step(settings, "committed", branch.key)
        if pending:
            first, error = pending[0]
            names = [b.key for b, _ in pending]
            raise CommitUnfinished(
                f"two-phase group {self.group} is decided committed; databases {committed} "
                f"committed but {names} could not ({_cause(first, error)}); their prepared "
                f"branches keep their row locks until recovery (snowshard txn recover) "
                f"commits them; do not retry the transaction",
                committed=committed, failed=first.key, not_attempted=names[1:],
                retry_safe=False, group=self.group,
            ) from error
        try:
            forget_decision(engine, [self.group])
        except DBAPIError:
            pass  # recovery deletes it later

    def _abort(self, branches: list[_Branch]) -> None:
        """Roll back every prepared branch (best effort: recovery presumes abort anyway)."""
        for branch in branches:
            if branch.state != "prepared":
                continue
            try:
                if branch.backend == "mysql":
                    finish_branch(branch.connection, branch.xid, commit=False)
                else:
                    with autocommit(branch.engine) as conn:
                        finish_branch(conn, branch.xid, commit=False)
                branch.state = "done"
                fire_twophase_event(branch.connection, "rollback_twophase", str(branch.xid), True)
            except DBAPIError:
                _detach(branch)


def _prepare(branch: _Branch) -> None:
    """Prepare ``branch`` on its own connection (SQLAlchemy's COMMIT later finds nothing)."""
    connection = branch.connection
    if branch.backend == "mysql":
        literal = branch.xid.literal("mysql")
        protocol_execute(connection, f"XA END {literal}")
        branch.state = "ended"
        protocol_execute(connection, f"XA PREPARE {literal}")
    else:
        protocol_execute(connection, f"PREPARE TRANSACTION {branch.xid.literal('postgresql')}")
    branch.state = "prepared"
    fire_twophase_event(connection, "prepare_twophase", str(branch.xid))


def _commit_prepared(branch: _Branch) -> None:
    """Commit a prepared branch: on its connection (MySQL) or a new one; 3 attempts."""
    last: DBAPIError | None = None
    if branch.backend == "mysql":
        try:
            finish_branch(branch.connection, branch.xid, commit=True)
            branch.state = "done"
            return
        except DBAPIError as exc:
            last = exc
        _detach(branch)
    pauses = (0.0, *_RETRIES) if last is None else _RETRIES
    for pause in pauses:
        time.sleep(pause)
        try:
            with autocommit(branch.engine) as conn:
                finish_branch(conn, branch.xid, commit=True)
            branch.state = "done"
            return
        except DBAPIError as exc:
            if is_unknown_branch(exc) and last is not None:
                # an earlier attempt committed it and its answer was lost
                branch.state = "done"
                return
            last = exc
    assert last is not None
    raise last


def _detach(branch: _Branch) -> None:
    """Leave a prepared branch to recovery: close its connection (MySQL keeps the branch)."""
    if branch.state == "prepared" and branch.backend == "mysql":
        branch.state = "detached"
        branch.connection.invalidate()


def _xa_rollback(branch: _Branch) -> None:
    """SQLAlchemy rolls back a MySQL branch's connection: end and roll back an active XA.

    Never raises: when the connection is broken (or breaks now) it is invalidated, so
    SQLAlchemy skips its own ROLLBACK, and the server rolls back the unprepared branch as
    the connection closes (a branch that was prepared stays, for recovery).
    """
    if branch.state not in ("active", "ended"):
        return
    ended = branch.state == "ended"
    branch.state = "done"
    connection = branch.connection
    if connection.invalidated:
        return
    literal = branch.xid.literal("mysql")
    try:
        if not ended:
            protocol_execute(connection, f"XA END {literal}")
        protocol_execute(connection, f"XA ROLLBACK {literal}")
    except SQLAlchemyError:
        if not connection.invalidated:
            connection.invalidate()


def _cause(branch: _Branch, error: BaseException) -> str:
    text = str(getattr(error, "orig", error)).strip().splitlines()
    first = text[0] if text else ""
    message = scrub(f"{type(getattr(error, 'orig', error)).__name__}: {first}",
                    url_secrets(branch.engine.url))
    return message


def _is_driver_error(branch: _Branch, error: BaseException) -> bool:
    dbapi = branch.connection.dialect.loaded_dbapi
    return isinstance(error, (DBAPIError, dbapi.Error))


def _from_driver(branches: Sequence[_Branch], error: BaseException) -> bool:
    """Whether ``error`` comes from SQLAlchemy or a driver (not from a listener's code)."""
    cause = error.__cause__
    return isinstance(error, SQLAlchemyError) or any(
        cause is not None and _is_driver_error(branch, cause) for branch in branches
    )


def _outcome_unknown(branch: _Branch, error: BaseException) -> bool:
    """Whether a failed COMMIT may have committed: the connection broke, not a rejection."""
    dbapi = branch.connection.dialect.loaded_dbapi
    orig = error.orig if isinstance(error, DBAPIError) else error
    return not isinstance(orig, dbapi.IntegrityError) and (
        isinstance(orig, (dbapi.OperationalError, dbapi.InterfaceError))
        or (isinstance(error, DBAPIError) and error.connection_invalidated)
    )


def _commit_error(
    branch: _Branch, error: BaseException, committed: Sequence[str], rest: Sequence[str]
) -> CommitError:
    """The error of a failed one-phase COMMIT in ``branch`` (module docstring)."""
    unknown = _outcome_unknown(branch, error)
    where = f"commit failed in database {branch.key!r} ({_cause(branch, error)})"
    if unknown:
        fate = f"whether {branch.key!r} committed is unknown (its connection broke)"
    else:
        fate = f"{branch.key!r} did not commit"
    skipped = f"; {list(rest)} were rolled back" if rest else ""
    if committed:
        return PartialCommitError(
            f"{where}: a partial commit: {list(committed)} committed, {fate}{skipped}; "
            f"do not retry the whole transaction (it would store the committed part twice); "
            f"use twophase=True to commit all databases or none",
            committed=committed, failed=branch.key, not_attempted=rest, retry_safe=False,
        )
    if unknown:
        return CommitFailed(
            f"{where}: {fate}{skipped}; check that database before retrying",
            failed=branch.key, not_attempted=rest, retry_safe=False,
        )
    return CommitFailed(
        f"{where}: nothing was committed{skipped}, so retrying the transaction is safe",
        failed=branch.key, not_attempted=rest, retry_safe=True,
    )
