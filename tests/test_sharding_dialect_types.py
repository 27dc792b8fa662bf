"""The types the database gives an expression, as a merge reads them before any SQL runs."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import Integer, String, func
from sqlalchemy.dialects.postgresql import INET

from snowshard.sharding.dialect_types import chosen_values, sql_expression, sql_types, type_for

_ADDRESS = sa.column("ip", INET())
_NAME = sa.column("name", String(20))


def test_a_variant_is_read_for_its_dialect() -> None:
    """with_variant() gives each dialect its own type."""
    varying = Integer().with_variant(String(8), "sqlite")
    assert isinstance(type_for(varying, "sqlite"), String)
    assert isinstance(type_for(varying, "postgresql"), Integer)


def test_type_coerce_is_its_expression() -> None:
    """A type_coerce() renders its expression alone: that is what the database types."""
    coerced = sa.type_coerce(_ADDRESS, String).label("x")
    assert sql_expression(coerced) is _ADDRESS
    assert [type(t) for t in sql_types(coerced, "postgresql")] == [INET]


def test_chosen_values_leave_nulls_out() -> None:
    """A CASE without ELSE chooses among its results; NULLIF its first argument only."""
    assert chosen_values(sa.case((_NAME == "a", _ADDRESS))) == [_ADDRESS]
    assert chosen_values(func.nullif(_ADDRESS, _NAME)) == [_ADDRESS]
    assert chosen_values(func.ifnull(_ADDRESS, None)) == [_ADDRESS]
    assert chosen_values(func.lower(_NAME)) is None


def test_an_untyped_choice_has_its_values_types() -> None:
    """An untyped GREATEST() of an address and a string may be either."""
    found = {type(t) for t in sql_types(func.greatest(_ADDRESS, _NAME), "postgresql")}
    assert found == {INET, String}
