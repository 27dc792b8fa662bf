"""PostgreSQL's ranges and multiranges, which a merge orders as PostgreSQL orders them.

PostgreSQL orders ranges by their lower bounds, then their upper bounds: an empty range
first, an unbounded lower end before every value, an inclusive lower end before an
exclusive one at the same value; an unbounded upper end after every value, an exclusive
upper end before an inclusive one (``'(,2)' < '(,)' < '[1,2)' < '[1,2]' < '[1,)' <
'(1,2)'``). A multirange compares its ranges one by one, the shorter first where one is
the start of the other. The values read (psycopg's or SQLAlchemy's ``Range``) order
otherwise, or not at all, so a merge orders them by :func:`range_key`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.dialects.postgresql.ranges import AbstractRange

from snowshard.sharding.dialect_types import type_for, typed_as

__all__ = ["is_range", "range_key", "range_keyed"]


def is_range(element: Any, dialect: str) -> bool:
    """Whether ``element`` is a range or multirange on PostgreSQL (every value it chooses
    from, for a CASE or COALESCE: :func:`~.dialect_types.typed_as`)."""
    if dialect != "postgresql":
        return False
    # a multirange type is an AbstractRange too in SQLAlchemy
    return typed_as(element, lambda type_: isinstance(type_for(type_, dialect), AbstractRange))


def _one_key(value: Any) -> tuple[Any, ...]:
    if value.isempty:
        return (0,)
    lower = (0,) if value.lower is None else (1, value.lower, 0 if value.lower_inc else 1)
    upper = (2,) if value.upper is None else (1, value.upper, 1 if value.upper_inc else 0)
    return (1, lower, upper)


def range_key(value: Any) -> Any:
    """What orders ``value`` (a range, a multirange's sequence of ranges, or None) among
    others of its type as PostgreSQL orders them; None for None."""
    if value is None:
        return None
    if hasattr(value, "isempty"):
        return _one_key(value)
    return tuple(_one_key(part) for part in value)  # a multirange, ranges in order


def range_keyed(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``read``, giving the :func:`range_key` of the range it reads."""
    return lambda row: range_key(read(row))
