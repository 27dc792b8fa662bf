"""PostgreSQL's intervals, which a merge orders and matches as PostgreSQL compares them.

An interval holds months, days and microseconds apart. PostgreSQL compares two as if a
month were 30 days (a year 360): ``'1 year'`` equals ``'360 days'`` and is less than
``'362 days'``. psycopg reads one as a ``timedelta`` with a year of 365 days and a month
of 30, so a merge comparing what it reads would order ``'1 year'`` after ``'362 days'``
and keep ``'1 year'`` and ``'360 days'`` apart, where one table does neither. (Intervals
written from Python ``timedelta`` values hold no months: only SQL makes them, such as
``age()``, ``justify_days()`` or ``interval '1 month'``.)

So each source sends :func:`interval_key` beside such a value, the number of seconds it
stands for in PostgreSQL's comparison (``EXTRACT(EPOCH ...)`` counts a year as 365.25
days: the key takes 5.25 days off per year), and the merge orders, groups and matches
(DISTINCT, ``count(DISTINCT)``) by it, and picks MIN/MAX by the key of each source's own
MIN/MAX, as it does with strings' weights (:mod:`~snowshard.sharding.collation`).

A SUM adds months, days and microseconds apart, and psycopg splits the months of the
sum into years only when it reads it: two sources' sums of 8 and 9 months read as 240 and
270 days, one table's 17 months as 515. So each source sends the three parts of its SUM
(:func:`interval_parts`), the merge adds them, and reads the total as psycopg would
(:func:`interval_from_parts`).

Where the merge itself compares intervals (HAVING, CASE, ORDER BY a SUM), it compares
these keys too: a source's key for a GROUP BY key or MIN/MAX, the key of a SUM's parts
(:func:`parts_key`), and a ``timedelta``'s seconds (:func:`timedelta_key`).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Numeric, extract, literal_column, type_coerce
from sqlalchemy.dialects.postgresql import INTERVAL
from sqlalchemy.types import Interval

from snowshard._compat import variant_for
from snowshard.sharding.dialect_types import typed_as

__all__ = [
    "interval_from_parts",
    "interval_key",
    "interval_parts",
    "interval_type",
    "is_interval",
    "parts_key",
    "timedelta_key",
]

_SECONDS_OFF_PER_YEAR = literal_column("453600", Numeric())
"""5.25 days in seconds: what ``EXTRACT(EPOCH ...)`` counts in a year beyond 360 days."""


def is_interval(element: Any, dialect: str) -> bool:
    """Whether ``element`` is an interval on PostgreSQL (every value it chooses from, for
    a CASE, COALESCE or MIN/MAX: :func:`~.dialect_types.chosen_values`)."""
    if dialect != "postgresql":
        return False
    return typed_as(element, lambda type_: interval_type(type_, dialect))


def interval_type(type_: Any, dialect: str) -> bool:
    """Whether ``type_`` is declared an interval on ``dialect``: SQLAlchemy's Interval is
    a TypeDecorator (a DATETIME where no database type exists), so the declared type says
    it, not the implementation."""
    return isinstance(variant_for(type_, dialect), (Interval, INTERVAL))


def interval_key(element: Any, dialect: str) -> Any:
    """The seconds PostgreSQL compares an interval ``element`` by (30-day months), as SQL;
    None for anything else."""
    if not is_interval(element, dialect):
        return None
    seconds = extract("epoch", element) - extract("year", element) * _SECONDS_OFF_PER_YEAR
    return type_coerce(seconds, Numeric())


def interval_parts(value: Any) -> tuple[Any, Any, Any]:
    """SQL for the months, days and seconds an interval ``value`` (a SUM) holds apart:
    ``EXTRACT(EPOCH ...)`` counts 365.25 days a year and 30 a month, taken off again."""
    years, months, days = (extract(field, value) for field in ("year", "month", "day"))
    seconds = (
        extract("epoch", value) - years * literal_column("31557600", Numeric())
        - months * literal_column("2592000", Numeric()) - days * 86400
    )  # fmt: skip
    parts = (years * 12 + months, days, seconds)
    return tuple(type_coerce(part, Numeric()) for part in parts)  # type: ignore[return-value]


def interval_from_parts(months: Any, days: Any, seconds: Any) -> timedelta | None:
    """The ``timedelta`` psycopg reads an interval of these parts as (a year of 365 days,
    a month of 30, with the sign of the months); None for a NULL."""
    if months is None:
        return None
    total = int(months)
    years = abs(total) // 12 * (1 if total >= 0 else -1)
    rest = total - 12 * years
    micros = int(Decimal(seconds).scaleb(6))
    return timedelta(days=int(days) + 365 * years + 30 * rest, microseconds=micros)


def parts_key(months: Any, days: Any, seconds: Any) -> Decimal | None:
    """The seconds PostgreSQL compares an interval of these parts by (a month of 30 days,
    a day of 86,400 seconds); None for a NULL."""
    if months is None:
        return None
    return int(months) * 2_592_000 + int(days) * 86_400 + Decimal(seconds)


def timedelta_key(value: timedelta) -> Decimal:
    """The seconds PostgreSQL compares a ``timedelta`` by, sent as an interval of days and
    seconds (it holds no months)."""
    whole = value.days * 86_400 + value.seconds
    return whole + Decimal(value.microseconds).scaleb(-6)
