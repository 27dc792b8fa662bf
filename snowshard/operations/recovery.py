"""Recovery of two-phase groups left in doubt by a crashed writer: :func:`recover`.

::

    report = recover({"a": engine_a, "b": engine_b}, decisions=engine_a, grace=60)
    print(report)                  # one line per branch: what was done
    assert not report.unresolved

Each engine is asked for snowshard's prepared branches (``pg_prepared_xacts`` of its
database; ``XA RECOVER`` of its MariaDB server, which lists other applications' branches
too). A branch whose XID names another decisions database (its *scope*,
:mod:`snowshard.sharding.txn_ids`) is left alone and reported as ``not ours``: only the
recovery given that decisions database knows what its group decided. A branch of a group
younger than ``grace`` seconds is left alone (its writer may still be finishing). For the
others, the group's decision row in ``snowshard_txn_decisions`` of ``decisions`` says what
to do: ``commit`` commits the branch; no row means *presumed abort*, so recovery first
inserts an ``abort`` row (a late writer's ``commit`` insert then fails) and rolls the
branch back. A branch finished meanwhile by someone else is reported as ``gone``. Finally,
decision rows older than ``grace`` whose group has no branch left are deleted: ``abort``
rows always, ``commit`` rows only when every database they list was given as a key of
``engines`` (another database may still hold a branch to commit). See
:mod:`snowshard.sharding.twophase` for the protocol.

Safe at any time, concurrently with live traffic and with another recovery.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Union

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from snowshard.redaction import redact_sqlalchemy_url, scrub, url_secrets
from snowshard.sharding.commit_errors import TwoPhaseConfigError
from snowshard.sharding.twophase import DEFAULT_GRACE
from snowshard.sharding.txn_branches import finish_branch, in_doubt_branches, is_unknown_branch
from snowshard.sharding.txn_decisions import forget_decision, read_decisions, record_decision
from snowshard.sharding.txn_ids import Xid, group_created_ms, scope_of
from snowshard.spec import DEFAULT_DATABASE

__all__ = ["RecoveryAction", "RecoveryReport", "recover"]

Engines = Union[Mapping[str, Engine], Iterable[Engine]]  # noqa: UP007 - a runtime alias, Python 3.10

COMMITTED = "committed"
ROLLED_BACK = "rolled back"
WOULD_COMMIT = "would commit"
WOULD_ROLL_BACK = "would roll back"
WAITING = "waiting"  # younger than the grace period
GONE = "gone"  # finished by someone else meanwhile
FAILED = "failed"
NOT_OURS = "not ours"  # its group's decision is kept in another decisions database


@dataclass(frozen=True)
class RecoveryAction:
    """What recovery did with one in-doubt branch."""

    xid: Xid
    server: str
    """The URL of the engine it was found on, password masked."""
    outcome: str
    """``committed``, ``rolled back``, ``would commit``, ``would roll back`` (dry run),
    ``waiting`` (younger than the grace period), ``gone``, ``failed``, or ``not ours``
    (another decisions database's group, left alone)."""
    age_s: float
    detail: str = ""

    @property
    def group(self) -> str:
        return self.xid.group

    @property
    def database(self) -> str:
        return self.xid.database


@dataclass
class RecoveryReport:
    """What :func:`recover` found and did."""

    actions: list[RecoveryAction] = field(default_factory=list)
    decisions_removed: list[str] = field(default_factory=list)
    decisions_kept: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def unresolved(self) -> list[RecoveryAction]:
        """Branches past the grace period still in doubt (failed, or only reported)."""
        return [a for a in self.actions if a.outcome in (FAILED, WOULD_COMMIT, WOULD_ROLL_BACK)]

    @property
    def not_ours(self) -> list[RecoveryAction]:
        """Branches left alone because their decisions live in another decisions database."""
        return [a for a in self.actions if a.outcome == NOT_OURS]

    @property
    def waiting(self) -> list[RecoveryAction]:
        """Branches left alone because their group is younger than the grace period."""
        return [a for a in self.actions if a.outcome == WAITING]

    def lines(self) -> list[str]:
        """One line per branch, then one for the decision records."""
        out = [
            f"{a.outcome:<15} {a.xid}  ({a.age_s:.0f} s old, on {a.server})"
            + (f": {a.detail}" if a.detail else "")
            for a in self.actions
        ]
        out.append(
            f"decision records removed: {len(self.decisions_removed)}, kept: "
            f"{len(self.decisions_kept)}"
        )
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _keyed(engines: Engines) -> tuple[list[Engine], set[str]]:
    if isinstance(engines, Mapping):
        listed, keys = list(engines.values()), {str(k) for k in engines}
    elif isinstance(engines, (str, bytes)) or not isinstance(engines, Iterable):
        raise TwoPhaseConfigError(
            f"recover() takes a mapping of database key -> Engine (or a list of engines), "
            f"got {type(engines).__name__} {engines!r}"
        )
    else:
        listed, keys = list(engines), set()
    for engine in listed:
        if not isinstance(engine, Engine):
            raise TwoPhaseConfigError(
                f"recover() needs sqlalchemy Engines, got {type(engine).__name__} {engine!r}; "
                "use create_engine(url)"
            )
    return listed, keys


def _default_decisions(engines: Engines, listed: list[Engine]) -> Engine:
    if isinstance(engines, Mapping) and DEFAULT_DATABASE in engines:
        found: Engine = engines[DEFAULT_DATABASE]
        return found
    if not listed:
        raise TwoPhaseConfigError("recover() needs at least one engine to look for branches in")
    return listed[0]


def recover(
    engines: Engines,
    *,
    decisions: Engine | None = None,
    grace: float = DEFAULT_GRACE,
    dry_run: bool = False,
    clock: Callable[[], float] = time.time,
) -> RecoveryReport:
    """Finish every in-doubt two-phase branch on ``engines`` (module docstring).

    :param engines: database key -> engine (as given to ``ShardedSession``), or engines.
        With keys, ``commit`` decision rows of groups that only used those databases are
        cleaned up too.
    :param decisions: the database holding ``snowshard_txn_decisions`` (the sessions'
        ``bind``, or their ``TwoPhase(decisions=...)``); default the ``"default"`` engine,
        else the first.
    :param grace: seconds after its creation during which a group is left alone.
    :param dry_run: report what would be done, and do nothing.
    :param clock: the time in Unix seconds (for tests).
    """
    if not grace >= 0:
        raise TwoPhaseConfigError(
            f"grace={grace!r}: the grace period must be zero or more seconds "
            f"(default {DEFAULT_GRACE:g})"
        )
    listed, keys = _keyed(engines)
    decision_engine = decisions if decisions is not None else _default_decisions(engines, listed)
    now_ms = int(clock() * 1000)
    report = RecoveryReport(dry_run=dry_run)
    scope = scope_of(decision_engine.url.database)
    found: dict[Xid, Engine] = {}
    for engine in listed:
        with engine.connect() as conn:
            for xid in in_doubt_branches(conn):
                found.setdefault(xid, engine)
    due: dict[Xid, Engine] = {}
    for xid, engine in found.items():
        age_s = (now_ms - (group_created_ms(xid.group) or 0)) / 1000
        if xid.scope and xid.scope != scope:
            detail = (
                f"its decision is kept in another decisions database (scope {xid.scope}; "
                f"this one's is {scope or 'none'}); recover it with that one"
            )
            report.actions.append(RecoveryAction(xid, _server(engine), NOT_OURS, age_s, detail))
        elif age_s < grace:
            report.actions.append(RecoveryAction(xid, _server(engine), WAITING, age_s))
        else:
            due[xid] = engine
    outcomes = {g: d[0] for g, d in read_decisions(decision_engine, {x.group for x in due}).items()}
    for xid, engine in sorted(due.items(), key=lambda item: str(item[0])):
        age_s = (now_ms - (group_created_ms(xid.group) or 0)) / 1000
        outcome = outcomes.get(xid.group)
        if outcome is None:
            outcome = "abort" if dry_run else record_decision(decision_engine, xid.group, "abort", ())
            outcomes[xid.group] = outcome
        commit = outcome == "commit"
        if dry_run:
            done = WOULD_COMMIT if commit else WOULD_ROLL_BACK
            report.actions.append(RecoveryAction(xid, _server(engine), done, age_s))
            continue
        report.actions.append(_finish(engine, xid, commit, age_s))
    if not dry_run:
        _clean_decisions(report, decision_engine, found, keys, now_ms, grace)
    return report


def _finish(engine: Engine, xid: Xid, commit: bool, age_s: float) -> RecoveryAction:
    server = _server(engine)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            finish_branch(conn, xid, commit=commit)
    except DBAPIError as exc:
        if is_unknown_branch(exc):
            return RecoveryAction(xid, server, GONE, age_s, "finished by someone else")
        detail = scrub(str(exc.orig).strip().splitlines()[0], url_secrets(engine.url))
        return RecoveryAction(xid, server, FAILED, age_s, f"{type(exc.orig).__name__}: {detail}")
    return RecoveryAction(xid, server, COMMITTED if commit else ROLLED_BACK, age_s)


def _clean_decisions(
    report: RecoveryReport,
    engine: Engine,
    found: Mapping[Xid, Engine],
    keys: set[str],
    now_ms: int,
    grace: float,
) -> None:
    left = {a.group for a in report.actions if a.outcome in (WAITING, FAILED)}
    removable: list[str] = []
    for group, (outcome, databases, decided_ms) in read_decisions(engine).items():
        created = group_created_ms(group) or decided_ms
        if group in left or now_ms - max(created, decided_ms) < grace * 1000:
            continue
        if outcome == "commit" and not set(databases) <= keys:
            report.decisions_kept.append(group)
            continue
        removable.append(group)
    forget_decision(engine, removable)
    report.decisions_removed.extend(removable)


def _server(engine: Engine) -> str:
    return redact_sqlalchemy_url(engine.url)
