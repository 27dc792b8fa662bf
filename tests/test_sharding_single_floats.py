"""MariaDB FLOAT values (32-bit, handed out with six significant digits) grouped, matched,
ordered and picked by a merge as MariaDB compares them, and PostgreSQL reals compared
with other values, as the unsharded twin, or refused."""

from __future__ import annotations

import random
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Double, Float, String, func, select
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import mapped_column

from snowshard.sharding.single_floats import is_single_float
from tests.twin_world import TwinWorld, twin_world_fixture

_VALUES = [0.1, 0.10000001, 0.1234567, 0.12345671, 0.5, 2.5]
"""Pairs MariaDB stores as two 32-bit values and hands out as one: 0.1, 0.123457."""


def _columns() -> dict[str, Any]:
    return {"v": mapped_column(Float), "tag": mapped_column(String(4))}


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1208)
    return [
        {"user_id": rng.randrange(1, 40), "tag": "xyz"[i % 3], "v": rng.choice(_VALUES)}
        for i in range(60)
    ]


world = twin_world_fixture(
    "floats", _columns, _rows, [pytest.param("mysql", marks=pytest.mark.mysql)]
)


@pytest.mark.parametrize(
    ("type_", "on_mariadb", "on_postgresql"),
    [
        (Float(), True, False),
        (Float(precision=24), True, True),
        (mysql.FLOAT(10, 2), True, True),
        (Float(precision=53), False, False),
        (Double(), False, False),
        (sa.REAL(), False, True),
        (sa.Numeric(10, 2), False, False),
    ],
)
def test_single_floats_are_32_bit_types(type_: Any, on_mariadb: bool, on_postgresql: bool) -> None:
    """FLOAT, FLOAT(p <= 24) and FLOAT(M, D) are 32-bit on MariaDB, where DOUBLE and REAL
    are 64-bit; on PostgreSQL REAL and FLOAT(p <= 24) are, FLOAT is double precision."""
    column = sa.column("x", type_)
    assert is_single_float(column, "mysql") is on_mariadb
    assert is_single_float(column, "postgresql") is on_postgresql
    assert not is_single_float(column, "sqlite")


def test_aggregates_and_arithmetic_of_a_float_are_doubles() -> None:
    """MIN/MAX/COALESCE of FLOATs are FLOATs; SUM, AVG, arithmetic and a DOUBLE among
    COALESCE's values make a DOUBLE (read with every digit)."""
    v, d = sa.column("v", Float()), sa.column("d", Double())
    assert is_single_float(func.max(v), "mysql") and is_single_float(func.coalesce(v, v), "mysql")
    for double in (func.sum(v), func.avg(v), v + 0.0, func.coalesce(v, d)):
        assert not is_single_float(double, "mysql")


def test_floats_read_alike_are_two_values(world: TwinWorld) -> None:
    """The premise: the twin holds 0.1 and 0.10000001 as two values, both read as 0.1."""
    with world.session() as session:
        twin = world.Twin
        found = session.execute(select(twin.v, func.count()).group_by(twin.v)).all()
    read = [value for value, _ in found]
    assert len(read) == len(_VALUES) and len(set(read)) == 4


@pytest.mark.parametrize(
    "build",
    [
        lambda m: select(m.v, func.count()).group_by(m.v),
        lambda m: select(m.v).distinct(),
        lambda m: select(m.tag, m.v, func.count()).group_by(m.tag, m.v),
    ],
    ids=["GROUP BY", "DISTINCT", "GROUP BY two keys"],
)
def test_floats_grouped_and_matched_match_the_twin(world: TwinWorld, build: Any) -> None:
    """GROUP BY and DISTINCT of FLOATs: the twin's groups (the merge made 0.1 and
    0.10000001 one, as read)."""
    world.exact(build)


@pytest.mark.parametrize(
    "build",
    [
        lambda m: select(m.id, m.v).order_by(m.v, m.id.desc()),
        lambda m: select(m.v, func.count()).group_by(m.v).order_by(m.v.desc()),
        lambda m: select(m.tag, func.max(m.v)).group_by(m.tag).order_by(func.max(m.v), m.tag),
    ],
    ids=["rows", "groups", "MAX"],
)
def test_rows_ordered_by_a_float_match_the_twin(world: TwinWorld, build: Any) -> None:
    """ORDER BY a FLOAT, its groups or its MAX: the twin's order (the merge tied 0.1 and
    0.10000001 and ordered them by the next key)."""
    world.exact(build, ordered=True)


def test_a_float_compared_after_the_merge_is_refused(world: TwinWorld) -> None:
    """HAVING max(v) = 0.1 is refused by name (MariaDB compares the 32-bit value, false
    for every 0.1 it holds; the merge compared what it read, true)."""
    world.refused(
        lambda m: select(m.tag).group_by(m.tag).having(func.max(m.v) == 0.1), "FLOAT"
    )


def test_sums_of_floats_are_compared_after_the_merge(world: TwinWorld) -> None:
    """A SUM of FLOATs is a DOUBLE, read with every digit: HAVING on it stays merged, and
    so does MAX(x + 0.0), the rewrite the refusal names."""
    world.exact(lambda m: select(m.tag).group_by(m.tag).having(func.sum(m.v) > 5))
    world.exact(lambda m: select(m.user_id).group_by(m.user_id).having(func.max(m.v + 0.0) > 0.1))


def _real_columns() -> dict[str, Any]:
    return {"r": mapped_column(sa.REAL), "q": mapped_column(Float(precision=24))}


def _real_rows() -> list[dict[str, Any]]:
    rng = random.Random(1209)
    return [
        {"user_id": rng.randrange(1, 40), "r": rng.choice(_VALUES), "q": rng.choice(_VALUES)}
        for _ in range(60)
    ]


reals = twin_world_fixture(
    "reals", _real_columns, _real_rows, [pytest.param("postgresql", marks=pytest.mark.postgres)]
)


@pytest.mark.parametrize(
    "having",
    [
        lambda m: func.max(m.r) == 0.1,
        lambda m: func.max(m.r) > 0.1,
        lambda m: func.min(m.q) <= 0.1,
    ],
    ids=["max = 0.1", "max > 0.1", "min <= 0.1"],
)
def test_a_real_compared_with_a_double_is_refused(reals: TwinWorld, having: Any) -> None:
    """HAVING a PostgreSQL real against a float value is refused by name (PostgreSQL
    compares the 32-bit value: max = 0.1 false, max > 0.1 true for a real 0.1; the merge
    compared the digits read, and kept other groups)."""
    reals.refused(
        lambda m: select(m.user_id).group_by(m.user_id).having(having(m)), "32-bit value"
    )


def test_reals_grouped_ordered_and_compared_with_reals_match_the_twin(reals: TwinWorld) -> None:
    """PostgreSQL hands a real out with the digits that tell it apart: GROUP BY, ORDER BY
    and a comparison of two reals stay merged, as does MAX(CAST(x AS DOUBLE PRECISION))."""
    reals.exact(lambda m: select(m.r, func.count()).group_by(m.r))
    reals.exact(lambda m: select(m.id, m.r).order_by(m.r, m.id.desc()), ordered=True)
    reals.exact(
        lambda m: select(m.user_id).group_by(m.user_id).having(func.max(m.r) > func.min(m.q))
    )
    reals.exact(
        lambda m: select(m.user_id)
        .group_by(m.user_id)
        .having(func.max(sa.cast(m.r, Double)) > 0.1)
    )
