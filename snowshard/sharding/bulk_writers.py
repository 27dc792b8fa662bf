"""How a batch of prepared rows reaches one physical table: ``COPY`` or multi-row INSERT.

:func:`write_rows` gets rows whose values already went through each column type's bind
processor (:mod:`~.bulk_load` prepares them), a connection of the session's transaction,
and the table's columns, and writes them in batches:

* PostgreSQL with psycopg 3 (sync): one ``COPY table (columns) FROM STDIN`` per batch,
  each row sent with psycopg's ``Copy.write_row`` (text format; psycopg's own adapters turn
  each value into text, as they would for a parameter). The COPY runs on the driver
  connection under SQLAlchemy's, so it is part of the session's transaction (two-phase
  included) but fires no ``before_cursor_execute`` event; a driver error is raised as
  :class:`~.driver_errors.ShardOperationError` naming the database and table.
* Every other driver (SQLite, MariaDB/MySQL, asyncio drivers through ``run_sync``):
  ``INSERT INTO table (columns) VALUES (...), (...), ...`` with as many rows per statement
  as the batch allows and the driver's parameter limit (SQLite's
  ``SQLITE_LIMIT_VARIABLE_NUMBER``, else 65,535 parameters) permits, sent with
  ``Connection.exec_driver_sql``, so SQLAlchemy's events and snowshard's naming of driver
  errors apply. Measured on SQLite, one multi-row statement beats ``executemany`` of the
  same rows by about 1.8x; on MariaDB with PyMySQL (which rewrites ``executemany`` into
  multi-row statements itself) they are even.

The SQL is built from the dialect's identifier preparer (quoting, schema) and paramstyle;
values are never put into the SQL text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

from sqlalchemy import Column, Table
from sqlalchemy.engine import Connection, Dialect

from snowshard.redaction import scrub, url_secrets
from snowshard.sharding.driver_errors import ShardOperationError

__all__ = ["MAX_PARAMETERS", "uses_copy", "write_rows"]

MAX_PARAMETERS = 65_535
"""Parameters per statement on drivers without a limit of their own to read (PostgreSQL's
and MySQL's prepared statements both stop there)."""

_SQLITE_VARIABLE_LIMIT = 9  # sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER
_SQLITE_OLD_LIMIT = 999  # the limit of SQLite builds before 3.32, when it cannot be read

OnBatch = Callable[[int], None]
"""Called with the number of rows of each batch once it is written."""


def uses_copy(dialect: Dialect) -> bool:
    """Whether rows for ``dialect`` go through ``COPY`` (PostgreSQL with sync psycopg 3)."""
    return dialect.name == "postgresql" and dialect.driver == "psycopg"


def write_rows(
    connection: Connection,
    table: Table,
    columns: Sequence[Column[Any]],
    rows: Sequence[Sequence[Any]],
    *,
    batch_size: int,
    database: str,
    on_batch: OnBatch,
) -> None:
    """Write ``rows`` (values in the order of ``columns``) into ``table``, batch by batch."""
    dialect = connection.dialect
    preparer = dialect.identifier_preparer
    names = ", ".join(preparer.format_column(table.c[column.key]) for column in columns)
    target = f"{preparer.format_table(table)} ({names})"
    if uses_copy(dialect):
        _copy(connection, target, table, rows, batch_size, database, on_batch)
    else:
        _insert(connection, target, len(columns), rows, batch_size, on_batch)


def _copy(
    connection: Connection,
    target: str,
    table: Table,
    rows: Sequence[Sequence[Any]],
    batch_size: int,
    database: str,
    on_batch: OnBatch,
) -> None:
    statement = f"COPY {target} FROM STDIN"
    driver_connection: Any = connection.connection.driver_connection
    dbapi_error: Any = connection.dialect.loaded_dbapi.Error
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        try:
            with driver_connection.cursor() as cursor, cursor.copy(statement) as copy:
                write = copy.write_row
                for row in batch:
                    write(row)
        except dbapi_error as error:
            raise _named(connection, error, database, table) from error
        on_batch(len(batch))


def _named(
    connection: Connection, error: Any, database: str, table: Table
) -> ShardOperationError:
    """The driver's error as the session would name it (:mod:`~.driver_errors`)."""
    dialect = connection.dialect
    lost = bool(dialect.is_disconnect(error, connection.connection.dbapi_connection, None))
    if lost:
        connection.invalidate(error)
    cause = scrub(
        f"{type(error).__module__}.{type(error).__name__}: {error}".strip(),
        url_secrets(connection.engine.url),
    )
    where = f"database {database!r}, table {table.name}"
    what = (
        f"the connection to {where} was lost during a bulk load ({cause})"
        if lost
        else f"{where} refused a bulk load (COPY): {cause}"
    )
    return ShardOperationError(
        f"{what}. Nothing of this transaction was committed: roll the session back; running "
        "the whole transaction again is safe (it stores nothing twice)",
        database=database,
        tables=(table.name,),
        disconnect=lost,
    )


def _insert(
    connection: Connection,
    target: str,
    width: int,
    rows: Sequence[Sequence[Any]],
    batch_size: int,
    on_batch: OnBatch,
) -> None:
    paramstyle = connection.dialect.paramstyle
    head = f"INSERT INTO {target} VALUES "
    if paramstyle == "named":  # no driver snowshard is tested with: one row per parameter set
        one = "(" + ", ".join(f":v{i}" for i in range(width)) + ")"
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            named = [{f"v{i}": value for i, value in enumerate(row)} for row in batch]
            connection.exec_driver_sql(head + one, named)
            on_batch(len(batch))
        return
    per_statement = max(1, min(batch_size, _parameter_limit(connection) // width))
    full = ""  # the SQL of a full statement, built once
    for start in range(0, len(rows), per_statement):
        batch = rows[start : start + per_statement]
        if len(batch) == per_statement and full:
            sql = full
        else:
            sql = head + _value_lists(paramstyle, width, len(batch))
            if len(batch) == per_statement:
                full = sql
        connection.exec_driver_sql(sql, tuple(chain.from_iterable(batch)))
        on_batch(len(batch))


def _parameter_limit(connection: Connection) -> int:
    if connection.dialect.name != "sqlite":
        return MAX_PARAMETERS
    getlimit = getattr(connection.connection.driver_connection, "getlimit", None)
    if getlimit is None:  # Python < 3.11, or aiosqlite's wrapper
        return _SQLITE_OLD_LIMIT
    return min(int(getlimit(_SQLITE_VARIABLE_LIMIT)), MAX_PARAMETERS)


def _value_lists(paramstyle: str, width: int, count: int) -> str:
    """``(?, ?), (?, ?)`` for ``count`` rows of ``width`` values, in the driver's style."""
    if paramstyle in ("numeric", "numeric_dollar"):
        sign = ":" if paramstyle == "numeric" else "$"
        return ", ".join(
            "(" + ", ".join(f"{sign}{row * width + i + 1}" for i in range(width)) + ")"
            for row in range(count)
        )
    mark = "?" if paramstyle == "qmark" else "%s"  # format, pyformat
    one = "(" + ", ".join([mark] * width) + ")"
    return ", ".join([one] * count)
