"""Shard hints: forcing a statement to named tables or databases.

For admin work, and for queries whose shard key the WHERE clause does not show::

    session.execute(select(Order).execution_options(shard=3))          # orders_03 only
    session.execute(select(Order), execution_options={"shard": [0, 1]})
    session.execute(select(Order).execution_options(database="b"))    # b's tables only
    with shard_hint(session, database="b"):                          # every statement
        session.execute(select(func.count()).select_from(Order))

``shard`` is a table index or several; ``database`` a database key. A statement with its
own hint wins over the ``shard_hint`` block. A hint restricts; it never widens: if the
WHERE clause (or an inserted row) names a shard the hint leaves out, the statement raises
:class:`~snowshard.sharding.errors.ShardHintConflict` before any SQL runs. A shard index
out of range is :class:`~snowshard.sharding.errors.UnknownShard`; a database the model has
no tables in (or, for a statement on unsharded or reference tables, that the session has
no engine for) is :class:`~snowshard.sharding.errors.UnknownDatabase`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Optional, Union

from sqlalchemy import Table
from sqlalchemy.orm import Session

from snowshard.sharding.errors import (
    InvalidShardHint,
    ShardHintConflict,
    UnknownDatabase,
)
from snowshard.sharding.model import ShardedModel
from snowshard.sharding.routing import Route
from snowshard.spec import DEFAULT_DATABASE

__all__ = [
    "DATABASE_OPTION",
    "SHARD_OPTION",
    "Hint",
    "apply_hint",
    "hint_of",
    "names_physical_tables",
    "session_databases",
    "shard_hint",
]

SHARD_OPTION = "shard"
"""Execution option: a table index, or an iterable of them."""

DATABASE_OPTION = "database"
"""Execution option: a database key."""

_active: ContextVar[Optional[tuple[Any, Hint]]] = ContextVar("snowshard_shard_hint", default=None)


@dataclass(frozen=True)
class Hint:
    """A parsed shard hint: table indices and/or a database key (None: not restricted)."""

    shards: Optional[frozenset[int]] = None
    database: Optional[str] = None

    def __str__(self) -> str:
        parts = []
        if self.shards is not None:
            parts.append(f"shard={sorted(self.shards)}")
        if self.database is not None:
            parts.append(f"database={self.database!r}")
        return ", ".join(parts)


def _parse(shard: Any, database: Any) -> Optional[Hint]:
    if shard is None and database is None:
        return None
    shards: Optional[frozenset[int]] = None
    if shard is not None:
        values: Iterable[Any] = [shard] if isinstance(shard, int) else shard
        if isinstance(shard, (str, bytes)) or not isinstance(values, Iterable):
            raise InvalidShardHint(
                f"shard={shard!r}: give a table index (an int) or a list of them"
            )
        items = list(values)
        if not items or any(isinstance(v, bool) or not isinstance(v, int) for v in items):
            raise InvalidShardHint(
                f"shard={shard!r}: give a table index (an int) or a non-empty list of them"
            )
        if any(v < 0 for v in items):
            raise InvalidShardHint(f"shard={shard!r}: table indices are 0 or more")
        shards = frozenset(items)
    if database is not None and not isinstance(database, str):
        raise InvalidShardHint(f"database={database!r}: give a database key (a str)")
    return Hint(shards, database)


@contextmanager
def shard_hint(
    session: Any, *, shard: Union[int, Sequence[int], None] = None, database: Optional[str] = None
) -> Iterator[Hint]:
    """Apply a hint to every statement ``session`` executes inside the block."""
    if not isinstance(session, Session):
        raise InvalidShardHint(
            f"shard_hint() needs the ShardedSession to hint, got {type(session).__name__} "
            f"{session!r}"
        )
    hint = _parse(shard, database)
    if hint is None:
        raise InvalidShardHint("shard_hint() needs shard=... or database=...")
    token = _active.set((session, hint))
    try:
        yield hint
    finally:
        _active.reset(token)


def hint_of(session: Any, options: Mapping[str, Any]) -> Optional[Hint]:
    """The hint of a statement: its execution options, else an active :func:`shard_hint`."""
    shard, database = options.get(SHARD_OPTION), options.get(DATABASE_OPTION)
    if shard is not None or database is not None:
        return _parse(shard, database)
    active = _active.get()
    return active[1] if active is not None and active[0] is session else None


def session_databases(session: Any) -> list[str]:
    """The database keys ``session`` has an engine for (``"default"`` for its bind)."""
    keys = list(getattr(session, "databases", None) or {})
    if getattr(session, "bind", None) is not None and DEFAULT_DATABASE not in keys:
        keys.insert(0, DEFAULT_DATABASE)
    return keys


def names_physical_tables(statement: Any) -> bool:
    """Whether ``statement`` names a physical table of a sharded model (routed already)."""
    stack = [statement]
    while stack:
        item = stack.pop()
        if isinstance(item, Table):
            if "snowshard" in item.info:
                return True
            continue
        stack.extend(item.get_children())
    return False


def apply_hint(hint: Hint, models: Sequence[ShardedModel], route_: Route) -> Route:
    """``route_`` restricted to the hint (for models that bind together), or an error."""
    lead = models[0]
    allowed = frozenset(lead.check_shard(s) for s in hint.shards) if hint.shards else None
    if hint.database is not None:
        in_database = frozenset(
            s for s in range(lead.count) if lead.database_of(s) == hint.database
        )
        if not in_database:
            held = sorted({lead.database_of(s) for s in range(lead.count)})
            raise UnknownDatabase(
                f"database={hint.database!r}: {lead.name} has no tables there; its tables "
                f"are in {held}; name one of those"
            )
        if allowed is not None and not allowed <= in_database:
            raise ShardHintConflict(
                f"shard={sorted(allowed)} and database={hint.database!r} disagree: "
                f"{lead.name}'s shards {sorted(allowed - in_database)} are not in that "
                "database; drop one of the two"
            )
        allowed = in_database if allowed is None else allowed
    assert allowed is not None
    if route_.shards is None:
        return Route(allowed, route_.terms)
    outside = route_.shards - allowed
    if outside:
        raise ShardHintConflict(
            f"the WHERE clause routes {lead.name} to shard(s) {sorted(route_.shards)}, but "
            f"the hint ({hint}) allows only {sorted(allowed)}; the hint would miss rows the "
            "query asks for: drop the hint, or the condition on the shard key"
        )
    return route_
