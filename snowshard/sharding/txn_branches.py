"""The statements of two-phase commit on each kind of server: prepared transactions on
PostgreSQL, XA on MariaDB/MySQL; finding the in-doubt branches a crash left, finishing one.

They run outside the session's naming of driver errors (:func:`protocol_execute`), so
their failures become the commit errors of :mod:`.twophase`, which say what committed.
"""

from __future__ import annotations

import weakref
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import Connection

from snowshard.sharding.commit_errors import TwoPhaseUnavailable
from snowshard.sharding.driver_errors import DATABASE_OPTION
from snowshard.sharding.txn_ids import Xid

__all__ = [
    "autocommit",
    "backend_of",
    "check_prepared_transactions",
    "finish_branch",
    "in_doubt_branches",
    "is_unknown_branch",
    "protocol_execute",
]


def backend_of(dialect_name: str) -> str | None:
    """``"postgresql"`` or ``"mysql"`` (MariaDB too) for dialects that can prepare, else None."""
    if dialect_name == "postgresql":
        return "postgresql"
    if dialect_name in ("mysql", "mariadb"):
        return "mysql"
    return None


_prepared_limit: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()


def check_prepared_transactions(connection: Connection, database: str) -> None:
    """Raise :class:`TwoPhaseUnavailable` if this PostgreSQL server cannot prepare.

    Reads ``max_prepared_transactions`` once per engine (then cached).
    """
    engine = connection.engine
    limit = _prepared_limit.get(engine)
    if limit is None:
        value = connection.exec_driver_sql("SHOW max_prepared_transactions").scalar()
        limit = int(str(value))
        _prepared_limit[engine] = limit
    if limit <= 0:
        raise TwoPhaseUnavailable(
            f"twophase=True needs prepared transactions, but the PostgreSQL server of "
            f"database {database!r} has max_prepared_transactions = {limit}; enable them "
            f"with ALTER SYSTEM SET max_prepared_transactions = N (N > 0, at least "
            f"max_connections is usual) and restart the server, or use twophase=False"
        )


def autocommit(engine: Engine) -> Connection:
    return engine.connect().execution_options(isolation_level="AUTOCOMMIT")


def in_doubt_branches(connection: Connection) -> list[Xid]:
    """snowshard's prepared branches visible from ``connection``.

    PostgreSQL: those of the connection's database (``pg_prepared_xacts``); MariaDB/MySQL:
    every one on the server (``XA RECOVER``).
    """
    backend = backend_of(connection.dialect.name)
    found: list[Xid] = []
    if backend == "postgresql":
        rows = connection.exec_driver_sql(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).scalars()
        found = [xid for xid in map(Xid.parse_gid, rows) if xid is not None]
    elif backend == "mysql":
        for row in connection.exec_driver_sql("XA RECOVER").mappings():
            data = row["data"]
            text = data.decode("latin-1") if isinstance(data, bytes) else str(data)
            cut = int(row["gtrid_length"])
            xid = Xid.parse(text[:cut], text[cut:cut + int(row["bqual_length"])])
            if xid is not None:
                found.append(xid)
    return found


def protocol_execute(connection: Connection, sql: str) -> None:
    """Run a statement of the commit protocol; a failure stays the driver's error.

    The session names the driver errors of its work (:mod:`.driver_errors`: "nothing was
    committed, retry"); during a commit only the coordinator knows what committed, so its
    statements opt out and their failures become the commit errors of this module.
    """
    connection.exec_driver_sql(sql, execution_options={DATABASE_OPTION: None})


def finish_branch(connection: Connection, xid: Xid, *, commit: bool) -> None:
    """Commit or roll back the prepared branch ``xid`` (``connection`` in autocommit mode)."""
    backend = backend_of(connection.dialect.name) or ""
    if backend == "mysql":
        verb = "XA COMMIT" if commit else "XA ROLLBACK"
    else:
        verb = "COMMIT PREPARED" if commit else "ROLLBACK PREPARED"
    protocol_execute(connection, f"{verb} {xid.literal(backend)}")


def is_unknown_branch(error: BaseException) -> bool:
    """Whether a driver error says the branch does not exist (finished by someone else)."""
    orig = getattr(error, "orig", error)
    if getattr(orig, "sqlstate", None) == "42704":  # PostgreSQL undefined_object
        return True
    args: Any = getattr(orig, "args", ())
    return bool(args) and args[0] == 1397  # MySQL XAER_NOTA
