"""Time ranges on snowflake primary keys, and the creation time of an ID in SQL.

A snowflake ID starts with its timestamp, so IDs sort by time and a time range is an ID
range: ``id_between(Order.id, layout, start, end)`` is ``id >= min_id(start) AND
id < min_id(end)``, which the primary key index serves; no ``created_at`` column is needed::

    hour_ago = now - timedelta(hours=1)
    session.scalar(select(func.count()).where(id_between(Order.id, layout, hour_ago, now)))

``id_unix_ms`` and ``id_time`` compute the creation time from the ID in SQL, on SQLite,
PostgreSQL and MariaDB/MySQL, for SELECT, WHERE and GROUP BY::

    select(func.count(), extract("hour", id_time(Order.id, layout))).group_by(...)

Bounds are rounded down to the start of their tick (``layout.tick_ms``), the precision of
the IDs themselves. Filter with :func:`id_between`, not with ``id_time(...) >= x``: the
latter computes a value per row and cannot use the index.

Time zones. :func:`id_time` is the instant the ID's tick began:

* PostgreSQL: ``to_timestamp(ms / 1000.0)``, a ``timestamptz``. Comparisons are correct in
  any session time zone; ``date_trunc``/``extract`` on it follow the session ``TimeZone``
  (``SET TIME ZONE 'UTC'`` or ``date_trunc('hour', x, 'UTC')`` for UTC buckets).
* MariaDB/MySQL: a ``DATETIME(6)`` holding UTC wall-clock time, computed by date arithmetic
  from 1970-01-01 (``TIMESTAMPADD``), not ``FROM_UNIXTIME``, so the session ``time_zone``
  does not shift it.
* SQLite: UTC text ``YYYY-MM-DD HH:MM:SS.ffffff``, the format SQLAlchemy stores
  ``DateTime`` values in, so it compares correctly with bound datetimes and such columns.

In Python the value is always an aware UTC :class:`~datetime.datetime` (type
:class:`UtcDateTime`), and datetimes compared with it must be aware.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, false, literal_column, type_coerce
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import DateTime, String, TypeDecorator, TypeEngine

from snowshard.errors import IdTypeError
from snowshard.layout import Layout, TimeLike, check_layout, to_unix_ms
from snowshard.orm.errors import NaiveDatetimeError, TimeRangeError

__all__ = ["IdColumn", "IdTime", "UtcDateTime", "id_between", "id_since", "id_time", "id_unix_ms"]

IdColumn = ColumnElement[Any] | QueryableAttribute[Any]
"""A snowflake ID column: a Core column or expression, or an ORM attribute (``Order.id``)."""


# --------------------------------------------------------------------------- ranges


def _unix_ms(value: TimeLike, what: str) -> int:
    if isinstance(value, datetime) and (value.tzinfo is None or value.utcoffset() is None):
        raise NaiveDatetimeError(
            f"{what} {value.isoformat()} is a naive datetime; give it a timezone "
            "(e.g. tzinfo=timezone.utc) so it names one instant"
        )
    return to_unix_ms(value, what=what)


def _checked(column: object, layout: object) -> Layout:
    """Refuse, before building SQL, a column that is no column or a layout that is none."""
    if not isinstance(column, (ColumnElement, QueryableAttribute)):
        raise IdTypeError(
            f"column must be a SQLAlchemy column or ORM attribute holding IDs (e.g. Order.id), "
            f"got {type(column).__name__} {column!r}"
        )
    return check_layout(layout)


def _lowest_id(layout: Layout, ms: int) -> int | None:
    """``layout.min_id`` of ``ms``, 0 before the epoch, None past the layout's end."""
    if ms < layout.epoch_ms:
        return 0
    if (ms - layout.epoch_ms) // layout.tick_ms > layout.max_ticks:
        return None
    return layout.min_id(ms)


def id_between(
    column: IdColumn, layout: Layout, start: TimeLike, end: TimeLike
) -> ColumnElement[bool]:
    """IDs issued in ``[start, end)``: ``column >= min_id(start) AND column < min_id(end)``.

    ``start`` and ``end`` are aware datetimes or Unix milliseconds; naive datetimes raise
    :class:`~snowshard.orm.errors.NaiveDatetimeError`, ``start > end``
    :class:`~snowshard.orm.errors.TimeRangeError`. Times before the layout's epoch select
    from the first ID; times past its end select to the last.
    """
    layout = _checked(column, layout)
    lo_ms, hi_ms = _unix_ms(start, "start"), _unix_ms(end, "end")
    if lo_ms > hi_ms:
        raise TimeRangeError(
            f"start {_show(start)} is after end {_show(end)}; swap them (the range is "
            "[start, end))"
        )
    lo, hi = _lowest_id(layout, lo_ms), _lowest_id(layout, hi_ms)
    if lo is None:
        return false()
    if hi is None:
        return column >= lo
    return (column >= lo) & (column < hi)


def id_since(column: IdColumn, layout: Layout, start: TimeLike) -> ColumnElement[bool]:
    """IDs issued at or after ``start``: ``column >= min_id(start)``."""
    layout = _checked(column, layout)
    lo = _lowest_id(layout, _unix_ms(start, "start"))
    if lo is None:
        return false()
    return column >= lo


def _show(value: TimeLike) -> str:
    return value.isoformat() if isinstance(value, datetime) else f"{value} ms"


# --------------------------------------------------------------------------- time of an ID


def _constant(value: int) -> ColumnElement[int]:
    # Inlined, not bound: the same SQL text in SELECT and GROUP BY (PostgreSQL matches
    # grouped expressions textually, and would see two different parameters).
    return literal_column(str(int(value)), BigInteger())


def id_unix_ms(column: IdColumn, layout: Layout) -> ColumnElement[int]:
    """Unix milliseconds of the ID's tick, in SQL: ``(id >> shift) * tick_ms + epoch_ms``.

    A ``BIGINT`` expression on every backend (the ID's sign bit is 0, so the shift is the
    same on signed and unsigned integers).
    """
    layout = _checked(column, layout)
    expr: ColumnElement[int] = type_coerce(column, BigInteger())
    if layout.timestamp_shift:
        expr = expr.bitwise_rshift(_constant(layout.timestamp_shift))
    if layout.tick_ms != 1:
        expr = expr * _constant(layout.tick_ms)
    if layout.epoch_ms:
        expr = expr + _constant(layout.epoch_ms)
    return type_coerce(expr, BigInteger())


class UtcDateTime(TypeDecorator[datetime]):
    """A point in time, returned as an aware UTC datetime on every backend.

    Bound values must be aware datetimes (naive ones raise
    :class:`~snowshard.orm.errors.NaiveDatetimeError`); PostgreSQL receives them as they
    are, backends without a time-zone-aware type (SQLite, MySQL) as naive UTC.

    As a column: ``TIMESTAMP WITH TIME ZONE`` on PostgreSQL, ``DATETIME(6)`` on
    MariaDB/MySQL (plain ``DATETIME`` there drops the fractional seconds), ``DATETIME``
    text with microseconds on SQLite; values keep their microseconds on every backend.
    """

    impl = DateTime
    cache_ok = True

    def __init__(self) -> None:
        super().__init__(timezone=True)

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            # fsp=6: microseconds, as on PostgreSQL and SQLite (the default fsp is 0)
            return dialect.type_descriptor(mysql.DATETIME(timezone=True, fsp=6))
        return dialect.type_descriptor(self.impl_instance)

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return value
        if not isinstance(value, datetime):
            raise NaiveDatetimeError(
                f"a time column takes an aware datetime, got {type(value).__name__} {value!r}; "
                "pass datetime(..., tzinfo=timezone.utc)"
            )
        if value.tzinfo is None or value.utcoffset() is None:
            raise NaiveDatetimeError(
                f"{value.isoformat()} is a naive datetime; give it a timezone "
                "(e.g. tzinfo=timezone.utc) so it names one instant"
            )
        utc = value.astimezone(timezone.utc)
        return utc if dialect.name == "postgresql" else utc.replace(tzinfo=None)

    def process_result_value(self, value: Any | None, dialect: Dialect) -> datetime | None:
        if not isinstance(value, datetime):
            return value
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


class IdTime(FunctionElement[datetime]):
    """``id_time(column, layout)``: when the ID's tick began (see the module docstring).

    Its single argument is the :func:`id_unix_ms` expression.
    """

    name = "id_time"
    type = UtcDateTime()
    inherit_cache = True


def id_time(column: IdColumn, layout: Layout) -> IdTime:
    """The instant the ID's tick began, as a SQL timestamp (aware UTC datetime in Python)."""
    return IdTime(id_unix_ms(column, layout))


def _ms_sql(element: IdTime, compiler: SQLCompiler, **kw: Any) -> str:
    (ms,) = element.clauses.clauses
    return "(" + compiler.process(ms, **kw) + ")"


@compiles(IdTime)
def _id_time_default(element: IdTime, compiler: SQLCompiler, **kw: Any) -> str:
    if compiler.dialect.name == "default":  # str(expression): a readable rendering
        return f"id_time{_ms_sql(element, compiler, **kw)}"
    raise CompileError(
        f"id_time() supports SQLite, PostgreSQL and MySQL/MariaDB, not {compiler.dialect.name}; "
        "use id_unix_ms() there"
    )


@compiles(IdTime, "postgresql")
def _id_time_postgresql(element: IdTime, compiler: SQLCompiler, **kw: Any) -> str:
    # float8 seconds: exact to the microsecond for any millisecond before year 287396
    return f"to_timestamp({_ms_sql(element, compiler, **kw)} / 1000.0)"


@compiles(IdTime, "mysql")
@compiles(IdTime, "mariadb")
def _id_time_mysql(element: IdTime, compiler: SQLCompiler, **kw: Any) -> str:
    # DATETIME arithmetic ignores the session time_zone (FROM_UNIXTIME would apply it)
    epoch = compiler.render_literal_value("1970-01-01 00:00:00", String())
    return (
        f"TIMESTAMPADD(MICROSECOND, {_ms_sql(element, compiler, **kw)} * 1000, "
        f"CAST({epoch} AS DATETIME(6)))"
    )


@compiles(IdTime, "sqlite")
def _id_time_sqlite(element: IdTime, compiler: SQLCompiler, **kw: Any) -> str:
    ms = _ms_sql(element, compiler, **kw)
    seconds = compiler.render_literal_value("%Y-%m-%d %H:%M:%S", String())
    micros = compiler.render_literal_value(".%06d", String())
    unixepoch = compiler.render_literal_value("unixepoch", String())
    # integer arithmetic only: ms // 1000 and ms mod 1000 (no float rounding)
    return (
        f"(strftime({seconds}, {ms} / 1000, {unixepoch}) || "
        f"printf({micros}, ({ms} - ({ms} / 1000) * 1000) * 1000))"
    )
