"""MariaDB FLOAT values (32-bit, handed out with six significant digits) grouped, matched,
ordered and picked by a merge as MariaDB compares them, as the unsharded twin."""

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
    ("type_", "single"),
    [
        (Float(), True),
        (Float(precision=24), True),
        (mysql.FLOAT(10, 2), True),
        (Float(precision=53), False),
        (Double(), False),
        (sa.REAL(), False),
        (sa.Numeric(10, 2), False),
    ],
)
def test_single_floats_are_mariadb_floats(type_: Any, single: bool) -> None:
    """FLOAT, FLOAT(p <= 24) and FLOAT(M, D) are 32-bit on MariaDB; DOUBLE and REAL are not."""
    column = sa.column("x", type_)
    assert is_single_float(column, "mysql") is single
    assert not is_single_float(column, "postgresql")


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
    """A SUM of FLOATs is a DOUBLE, read with every digit: HAVING on it stays merged."""
    world.exact(lambda m: select(m.tag).group_by(m.tag).having(func.sum(m.v) > 5))
