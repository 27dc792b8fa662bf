"""Values of a ``TypeDecorator`` in a merge: compared as the database compares them.

A ``TypeDecorator`` with a ``process_result_value`` hands out values of its own (a status
code read as its label, cents read as a Decimal of dollars, an ID read as a decimal
string), and the database groups, orders, picks MIN/MAX and adds the stored values, not
those. A merge comparing what SQLAlchemy hands it would order labels alphabetically where
one table orders the codes, and add up what the decorator made of each source's SUM.

So where a merge groups, orders or picks by such a value, each source sends the stored
value beside it (:func:`stored_value`: the expression coerced to the decorator's
implementation), and the merge works on that; a ``SUM`` is added up stored and read
through the decorator once (:func:`reads_stored`). A value compared with another after
the merge (HAVING, CASE, arithmetic on merged values) is refused
(:func:`check_decorated_merged`): the other side would have to go through
``process_bind_param`` first.

A decorator that wraps the columns it reads in SQL (``column_expression``) hands out
values of its own too; a ``SUM`` or ``AVG`` of one is refused (:func:`check_decorated_sum`).
Decorators whose values order, match and add as the stored ones do are taken as they are:
those that do not process results, snowshard's own ``SnowflakeType`` (as ints) and
``UtcDateTime``, and SQLAlchemy's ``Interval`` (:mod:`~snowshard.sharding.intervals`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Interval, type_coerce
from sqlalchemy.types import TypeDecorator

from snowshard._compat import variant_for
from snowshard.orm.timerange import UtcDateTime
from snowshard.orm.types import SnowflakeType
from snowshard.sharding.analysis import describe
from snowshard.sharding.dialect_types import dialect_named
from snowshard.sharding.errors import UnsupportedShardQuery

__all__ = [
    "check_decorated_merged",
    "check_decorated_sum",
    "decorated_refusal",
    "decorator_of",
    "reads_stored",
    "stored_reader",
    "stored_type",
    "stored_value",
]


def _keeps_values(type_: TypeDecorator[Any]) -> bool:
    """Whether ``type_``'s values order, match and add as its stored values do."""
    if isinstance(type_, SnowflakeType):
        return not type_.as_string  # decimal strings order by their digits
    if isinstance(type_, (UtcDateTime, Interval)):
        return True
    kind = type(type_)
    return (
        kind.process_result_value is TypeDecorator.process_result_value
        and kind.result_processor is TypeDecorator.result_processor
        and not _computes(type_)
    )


def _computes(type_: TypeDecorator[Any]) -> bool:
    """Whether ``type_`` wraps the columns it reads in SQL (``column_expression``)."""
    return type(type_).column_expression is not TypeDecorator.column_expression


def _decorator(type_: Any, dialect: str) -> TypeDecorator[Any] | None:
    """``type_`` on ``dialect`` where it is a ``TypeDecorator`` whose values are its own."""
    found = variant_for(type_, dialect)
    if isinstance(found, TypeDecorator) and not _keeps_values(found):
        return found
    return None


def decorator_of(element: Any, dialect: str) -> TypeDecorator[Any] | None:
    """The ``TypeDecorator`` of ``element`` on ``dialect`` whose values are its own, not
    the stored ones (module docstring); None for any other type."""
    return _decorator(getattr(element, "type", None), dialect)


def stored_type(decorator: TypeDecorator[Any], dialect: str) -> Any:
    """The type ``decorator`` stores its values as on ``dialect`` (its implementation)."""
    return decorator.load_dialect_impl(dialect_named(dialect))


def stored_value(element: Any, dialect: str) -> Any:
    """``element`` read as its decorator's implementation, so that sources send the stored
    value, where :func:`decorator_of` finds a decorator; None otherwise."""
    decorator = decorator_of(element, dialect)
    if decorator is None:
        return None
    return type_coerce(element, stored_type(decorator, dialect))


def reads_stored(type_: Any, dialect: str) -> TypeDecorator[Any] | None:
    """The decorator through which a merge reads the total it adds up from the stored values
    of a ``SUM`` of ``type_`` (one :func:`decorator_of` finds); None for other types."""
    return _decorator(type_, dialect)


def check_decorated_sum(element: Any, dialect: str) -> None:
    """Refuse ``SUM(x)``/``AVG(x)`` (``element``) typed by a decorator that wraps what it
    reads in SQL (``column_expression``): one table reads the wrapped total, which a merge
    of the sources' totals cannot compute in Python."""
    decorator = decorator_of(element, dialect)
    if decorator is not None and _computes(decorator):
        raise UnsupportedShardQuery(
            f"{describe(element)} across shards: the TypeDecorator {type(decorator).__name__} "
            "wraps the total in SQL (column_expression), which the merge cannot do to the "
            "sources' totals; add up type_coerce(x, <the stored type>) and wrap the total "
            "in Python, or route the query to one shard (a shard key in WHERE)"
        )


def stored_reader(
    decorator: TypeDecorator[Any], dialect: str, inner: Callable[[Any], Any] | None
) -> Callable[[Any], Any]:
    """What SQLAlchemy makes of a value the database computed for ``decorator`` on
    ``dialect``: ``inner`` (what its implementation's type does to it), then the
    decorator's ``process_result_value``; a decorator that overrides ``result_processor``
    only is asked for its processor."""
    found = dialect_named(dialect)
    if type(decorator).process_result_value is TypeDecorator.process_result_value:
        processor = decorator.result_processor(found, None)
        return (lambda value: value) if processor is None else processor

    def read(value: Any) -> Any:
        if inner is not None and value is not None:
            value = inner(value)
        return decorator.process_result_value(value, found)

    return read


def check_decorated_merged(what: str, element: Any, dialect: str) -> None:
    """Refuse computing with a decorator's values after the merge (comparisons in HAVING
    or CASE, arithmetic): the database computes with the stored values."""
    if decorator_of(element, dialect) is not None:
        raise decorated_refusal(what, element, dialect)


def decorated_refusal(what: str, element: Any, dialect: str) -> UnsupportedShardQuery:
    """The error refusing ``what`` of ``element``, whose values a decorator makes its own
    (:func:`check_decorated_merged`)."""
    decorator = decorator_of(element, dialect)
    name = type(decorator).__name__
    return UnsupportedShardQuery(
        f"{what} {describe(element)} across shards: its values are read through the "
        f"TypeDecorator {name}, and the database computes with the stored values, not "
        "those, so a merge computing with what it reads could differ from one table; "
        f"compare type_coerce({describe(element)}, <the stored type>) instead, or route "
        "the query to one shard (a shard key in WHERE)"
    )
