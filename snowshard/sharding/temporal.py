"""Which expressions over dates and times a merge computes in Python as the database does.

A merge computes expressions over merged aggregates (``max(at) - min(at)``, ``CASE``,
``COALESCE``) in Python (:mod:`~snowshard.sharding.evaluate`). Python's arithmetic on
``date``, ``datetime`` and ``timedelta`` is not SQL's:

* PostgreSQL: ``timestamp - timestamp`` is an interval (a ``timedelta``, as in Python),
  but ``date - date`` is an integer number of days, ``date + 1`` a date (Python refuses
  it), ``date + interval`` a timestamp and ``timestamptz + interval`` adds calendar days in
  the session's time zone;
* MariaDB/MySQL compute ``+``/``-`` on dates and times as numbers
  (``DATE '2025-02-01' - DATE '2024-01-01'`` is 10100) and give ``CASE``/``COALESCE`` of
  a DATE and a bound value the type of text;
* SQLite stores them as text: ``-`` subtracts the leading numbers (the years), and the
  type's result processor expects text where the merge has ``date`` objects.

So the merge refuses, before any SQL runs, arithmetic with a date/time operand or result
(except ``DateTime - DateTime`` of one time zone kind on PostgreSQL), and ``CASE`` or
``COALESCE`` giving dates or times except on PostgreSQL and, without bound values among
their branches, on MariaDB/MySQL. Comparisons of dates and times of one kind stay merged:
they order alike in Python and in each database. With text, or of two kinds (a date and
a timestamp, a naive and an aware timestamp, which the database converts to one type and
Python refuses to compare), comparisons are refused (:func:`check_comparison`), and so
are CASE and COALESCE choosing among two kinds; so is AVG of an interval on PostgreSQL
(:func:`check_average`).
The ``check_*`` functions are what :mod:`~snowshard.sharding.evaluate` calls.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.types import Date, DateTime, Interval, Time

from snowshard.sharding.dialect_types import type_for
from snowshard.sharding.intervals import interval_type

__all__ = [
    "check_arithmetic",
    "check_average",
    "check_choice",
    "check_comparison",
    "is_temporal",
]

Refuse = Callable[[Any, str], Exception]

_TEMPORAL = (Date, DateTime, Time, Interval)


def is_temporal(type_: Any, dialect: str) -> bool:
    """Whether ``type_`` is, on ``dialect``, a date, time, date-and-time or interval type."""
    return isinstance(type_for(type_, dialect), _TEMPORAL)


def _type(element: Any) -> Any:
    return getattr(element, "type", None)


def _elapsed(element: Any, dialect: str) -> bool:
    """PostgreSQL's ``timestamp - timestamp`` of one time zone kind: an interval of the
    elapsed time, as Python's ``datetime - datetime``."""
    if dialect != "postgresql" or element.operator is not operators.sub:
        return False
    left, right = type_for(_type(element.left), dialect), type_for(_type(element.right), dialect)
    return (
        isinstance(left, DateTime)
        and isinstance(right, DateTime)
        and bool(left.timezone) == bool(right.timezone)
    )


def check_arithmetic(element: Any, dialect: str, refuse: Refuse) -> None:
    """Refuse ``element`` (``+ - * / //`` or unary ``-``) if it computes on dates or times
    in a way Python does not (module docstring)."""
    operands = [getattr(element, "left", None), getattr(element, "right", None)]
    operands.append(getattr(element, "element", None))
    types = [_type(element), *(_type(o) for o in operands if o is not None)]
    if not any(is_temporal(t, dialect) for t in types if t is not None):
        return
    if getattr(element, "left", None) is not None and _elapsed(element, dialect):
        return
    raise refuse(
        element,
        f"arithmetic on dates and times is merged only as timestamp - timestamp on "
        f"PostgreSQL ({dialect or 'this database'} computes it otherwise than Python: "
        "MariaDB/MySQL as numbers, SQLite on text, PostgreSQL's date - date as days)",
    )


def check_average(element: Any, arguments: Iterable[Any], dialect: str, refuse: Refuse) -> None:
    """Refuse ``element``, an AVG, of an interval (or date/time) on PostgreSQL: there it is
    PostgreSQL's own division of an interval's days and time, which the merge's division
    of summed ``timedelta`` values does not reproduce (MariaDB and SQLite average the
    numbers they make of dates, which the merge reproduces)."""
    if dialect != "postgresql":
        return
    if any(is_temporal(_type(a), dialect) for a in arguments if _type(a) is not None):
        raise refuse(
            element,
            "AVG of an interval or date/time is PostgreSQL's own interval division; select "
            "sum(x) and count(x) and divide the timedelta in Python",
        )


_TEMPORAL_VALUES = (dt.date, dt.time, dt.timedelta)
"""Python values a date/time compares with as the database does (datetime is a date)."""


def check_comparison(
    element: Any, sides: Iterable[Any], dialect: str, refuse: Refuse
) -> None:
    """Refuse ``element``, a comparison of ``sides`` (without labels or parentheses), if it
    compares a date or time with a bound value that is not one (text, say): the merge
    would compare a ``datetime`` with a ``str``, which Python refuses and each database
    does its own way (SQLite compares text)."""
    sides = list(sides)
    if not any(is_temporal(_type(side), dialect) for side in sides if _type(side) is not None):
        return
    for side in sides:
        if isinstance(side, BindParameter):
            value = side.effective_value
            if value is not None and not isinstance(value, _TEMPORAL_VALUES):
                raise refuse(
                    element,
                    f"it compares a date or time with {type(value).__name__} {value!r}; "
                    "compare with a date, datetime or time value",
                )
    _check_one_kind(element, sides, dialect, refuse, "compares")


def _kind(element: Any, dialect: str) -> str | None:
    """What Python holds for ``element`` (a bound value, or an expression of a date/time
    type as ``dialect`` hands it out): "a date", "a date and time", "an aware date and
    time" (with an offset), "a time of day", "an interval"; None for anything else."""
    if isinstance(element, BindParameter):
        value = element.effective_value
        if isinstance(value, dt.datetime):
            return "an aware date and time" if value.utcoffset() is not None else "a date and time"
        for python, name in _VALUE_KINDS:
            if isinstance(value, python):
                return name
        return None
    if interval_type(_type(element), dialect):
        return "an interval"
    type_ = type_for(_type(element), dialect)
    if isinstance(type_, DateTime):  # only PostgreSQL hands out aware ones
        aware = bool(type_.timezone) and dialect == "postgresql"
        return "an aware date and time" if aware else "a date and time"
    for sql, name in _TYPE_KINDS:
        if isinstance(type_, sql):
            return name
    return None


_VALUE_KINDS = ((dt.date, "a date"), (dt.time, "a time of day"), (dt.timedelta, "an interval"))
_TYPE_KINDS = ((Date, "a date"), (Time, "a time of day"))


def _check_one_kind(
    element: Any, sides: Iterable[Any], dialect: str, refuse: Refuse, verb: str
) -> None:
    """Refuse ``element`` if ``sides`` hold dates and times of different kinds (a date and
    a timestamp, an aware and a naive timestamp): the database converts one to the other
    (a date to its midnight, a timestamp to the session's time zone), where Python
    refuses to compare them."""
    kinds = sorted({kind for side in sides if (kind := _kind(side, dialect)) is not None})
    if len(kinds) > 1:
        raise refuse(
            element,
            f"it {verb} {(' with ' if verb == 'compares' else ' and ').join(kinds)}, which "
            "the database converts to one type and "
            "Python cannot compare; cast() one side to the other's type in the statement",
        )


def check_choice(element: Any, branches: Iterable[Any], dialect: str, refuse: Refuse) -> None:
    """Refuse ``element``, a ``CASE`` or ``COALESCE`` choosing among ``branches`` (without
    labels or parentheses), if it gives dates or times the merge cannot give as the
    database does (module docstring)."""
    branches = list(branches)
    types = (_type(element), *map(_type, branches))
    if not any(is_temporal(t, dialect) for t in types if t is not None):
        return
    _check_one_kind(element, branches, dialect, refuse, "chooses among")
    if dialect == "postgresql":
        return
    bound = [b for b in branches if isinstance(b, BindParameter)]
    if dialect in ("mysql", "mariadb") and not any(b.effective_value is not None for b in bound):
        return
    why = (
        "MariaDB/MySQL give a CASE or COALESCE of dates and a bound value as text"
        if dialect in ("mysql", "mariadb")
        else "SQLite keeps them as text"
        if dialect == "sqlite"
        else f"{dialect or 'this database'} is not known to give them as Python does"
    )
    raise refuse(element, f"CASE and COALESCE giving dates or times are not merged here: {why}")
