"""The decision records of two-phase commit (``snowshard_txn_decisions``).

A group is decided committed by inserting its row, in a transaction of its own, before any
branch commits; recovery inserts ``abort`` before it rolls a branch back, and the group ID
(the primary key) makes the two exclusive (:mod:`.twophase`, presumed abort).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable, Sequence

from sqlalchemy import BigInteger, Column, Engine, MetaData, String, Table, delete, insert, select
from sqlalchemy.exc import DBAPIError, IntegrityError

__all__ = [
    "DECISIONS_TABLE",
    "decisions",
    "ensure_decisions_table",
    "forget_decision",
    "read_decisions",
    "record_decision",
]

DECISIONS_TABLE = "snowshard_txn_decisions"

decisions = Table(
    DECISIONS_TABLE,
    MetaData(),
    Column("group_id", String(40), primary_key=True),
    Column("outcome", String(8), nullable=False),
    Column("databases", String(2000), nullable=False),
    Column("decided_at_ms", BigInteger, nullable=False),
)
"""The decision records: ``outcome`` is ``commit`` or ``abort``; ``databases`` the keys of
the group's branches, comma-separated (empty for a recovery's ``abort``)."""

_tables_ready: weakref.WeakSet[Engine] = weakref.WeakSet()


def ensure_decisions_table(engine: Engine) -> None:
    """Create ``snowshard_txn_decisions`` in ``engine``'s database if missing (once)."""
    if engine in _tables_ready:
        return
    try:
        decisions.create(engine, checkfirst=True)
    except DBAPIError:  # created meanwhile by another process
        decisions.create(engine, checkfirst=True)
    _tables_ready.add(engine)


def record_decision(engine: Engine, group: str, outcome: str, databases: Sequence[str]) -> str:
    """Insert the decision for ``group`` unless one exists; return the one that holds."""
    ensure_decisions_table(engine)
    row = {
        "group_id": group,
        "outcome": outcome,
        "databases": ",".join(databases),
        "decided_at_ms": time.time_ns() // 1_000_000,
    }
    try:
        with engine.begin() as conn:
            conn.execute(insert(decisions), row)
        return outcome
    except IntegrityError:
        found = read_decisions(engine, [group]).get(group)
        if found is None:
            raise
        return found[0]


def read_decisions(
    engine: Engine, groups: Iterable[str] | None = None
) -> dict[str, tuple[str, tuple[str, ...], int]]:
    """``group -> (outcome, databases, decided_at_ms)``, for ``groups`` (default: all)."""
    ensure_decisions_table(engine)
    query = select(decisions)
    if groups is not None:
        wanted = list(groups)
        if not wanted:
            return {}
        query = query.where(decisions.c.group_id.in_(wanted))
    with engine.connect() as conn:
        return {
            row.group_id: (
                row.outcome,
                tuple(k for k in row.databases.split(",") if k),
                int(row.decided_at_ms),
            )
            for row in conn.execute(query)
        }


def forget_decision(engine: Engine, groups: Iterable[str]) -> None:
    """Delete the decision rows of ``groups``."""
    wanted = list(groups)
    if wanted:
        with engine.begin() as conn:
            conn.execute(delete(decisions).where(decisions.c.group_id.in_(wanted)))
