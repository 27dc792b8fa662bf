"""The column type of snowflake IDs: :class:`SnowflakeType`.

A signed 64-bit integer in the database (``BIGINT``; ``INTEGER`` on SQLite, where it is the
same and makes a primary key the rowid). In Python an ``int``, or with
``as_string=True`` a decimal ``str`` (JavaScript's ``Number`` loses IDs above 2**53, so JSON
APIs usually send IDs as strings)::

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[str] = mapped_column(SnowflakeType(as_string=True), primary_key=True)

Values bound to the column (inserts, updates, ``Order.id == x``, ``IN``) are checked before
the statement runs: an ``int`` or decimal ``str`` in ``0..2**63-1``; anything else raises
:class:`~snowshard.InvalidId` or
:class:`~snowshard.IdTypeError`, naming the value.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.sql import operators
from sqlalchemy.types import BigInteger, Integer, TypeDecorator, TypeEngine

from snowshard.layout import parse_decimal
from snowshard.orm.errors import _UnwrappedIdTypeError, _UnwrappedInvalidId

__all__ = ["MAX_ID", "SnowflakeType", "to_id"]

MAX_ID = 2**63 - 1
"""The largest value a signed ``BIGINT`` (and so a snowflake column) holds."""


def to_id(value: object) -> int:
    """``value`` as an ID ``int``: an ``int`` or decimal ``str`` in ``0..2**63-1``.

    ``bool``, ``float``, ``Decimal``, ``None`` and other types raise
    :class:`~snowshard.IdTypeError`; negative, too large or non-decimal
    values raise :class:`~snowshard.InvalidId`.
    """
    if type(value) is int:  # the hot path: a plain int from a generator
        number = value
    elif isinstance(value, str):
        number = parse_decimal(value, what="ID", error=_UnwrappedInvalidId)
    elif isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise _UnwrappedIdTypeError(
            f"a snowflake ID must be an int or a decimal str, got {type(value).__name__} "
            f"{value!r}"
        )
    else:
        number = operator.index(value)  # type: ignore[arg-type]  # numpy ints etc.
    if number < 0:
        raise _UnwrappedInvalidId(f"snowflake ID {value!r} is negative; IDs are in 0..{MAX_ID}")
    if number > MAX_ID:
        raise _UnwrappedInvalidId(
            f"snowflake ID {value!r} exceeds 2**63-1 ({MAX_ID}), the largest signed BIGINT"
        )
    return number


def _sort_key(value: int | str) -> int:
    return int(value)


class SnowflakeType(TypeDecorator[int | str]):
    """A snowflake ID column: ``BIGINT`` in SQL, ``int`` (or decimal ``str``) in Python.

    On SQLite the column is declared ``INTEGER`` (also 64-bit there), so a snowflake
    primary key is the table's rowid instead of a second index.

    :param as_string: return values as decimal ``str`` instead of ``int``. Bound values may
        be either in both modes.

    Arithmetic on the column (``Order.id + 1``, ``Order.id >> 22``) binds its operand as a
    plain ``BigInteger``; comparisons (``==``, ``<``, ``IN`` ...) bind through this type, so
    their values are checked as IDs.
    """

    impl = BigInteger
    cache_ok = True

    # ``as_string`` is deliberately not keyword-only: SQLAlchemy builds a type's cache key
    # from the positional-or-keyword parameters of ``__init__`` (``get_cls_kwargs`` reads
    # ``co_argcount``), so a keyword-only flag would be left out of the key and a statement
    # compiled for ``as_string=False`` would be reused for ``as_string=True``.
    def __init__(self, as_string: bool = False) -> None:
        if not isinstance(as_string, bool):
            raise _UnwrappedIdTypeError(f"as_string must be a bool, got {as_string!r}")
        super().__init__()
        self.as_string = as_string

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            # SQLite's INTEGER is 64-bit already; spelled "INTEGER", a primary key is the
            # table's rowid (one B-tree, not a table plus a unique index on a BIGINT).
            return dialect.type_descriptor(Integer())
        return dialect.type_descriptor(BigInteger())

    @property
    def sort_key_function(self) -> Callable[[Any], Any] | None:  # type: ignore[override]
        # str IDs sort like ints when the ORM orders rows by primary key
        return _sort_key if self.as_string else None

    @property
    def python_type(self) -> type[Any]:
        return str if self.as_string else int

    def process_bind_param(self, value: int | str | None, dialect: Dialect) -> int | None:
        if value is None:
            return None
        return to_id(value)

    def process_result_value(self, value: Any | None, dialect: Dialect) -> int | str | None:
        if value is None:
            return None
        return str(value) if self.as_string else int(value)

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        if not self.as_string:
            return None  # drivers already return int for BIGINT: no per-row call
        return super().result_processor(dialect, coltype)

    def coerce_compared_value(self, op: Any, value: Any) -> TypeEngine[Any]:
        if op is not None and operators.is_comparison(op):
            return self
        return BigInteger()

    def __repr__(self) -> str:
        return "SnowflakeType(as_string=True)" if self.as_string else "SnowflakeType()"
