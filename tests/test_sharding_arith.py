"""Arithmetic over merged aggregates as the database computes it: MariaDB's division and
AVG under any div_precision_increment (against the server's own quotients and an
unsharded twin), and NUMERIC sums with more digits than Python's default 28."""

from __future__ import annotations

import random
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Integer, Numeric, String, func, select
from sqlalchemy.orm import mapped_column

from snowshard.sharding.arith import mysql_quotient
from snowshard.sharding.errors import UnsupportedShardQuery
from tests.backends import DatabaseFactory
from tests.twin_world import TwinWorld, connected_with, twin_world_fixture


@pytest.mark.parametrize(
    ("a", "b", "increment", "shown"),
    [
        ("5", "2", 0, "2"),  # no fraction digit computed: truncated
        ("-7", "2", 0, "-3"),
        ("5", "2.0", 0, "3"),  # the divisor's fraction gives digits to round from
        ("1.25", "2", 0, "0.63"),
        ("2", "3", 4, "0.6667"),
        ("2", "3", 9, "0.666666666"),  # nine digits computed, nine shown
        ("0.00002", "3", 4, "0.000006666"),  # the default truncates a scale of 5
        ("0.00002", "3.0", 4, "0.000006667"),
        ("0.02", "3", 8, "0.0066666667"),
        ("1.123456789012", "7", 30, "0.16049382700171428571428571428571428571"),  # 38 at most
        ("1", "0", 4, "None"),
    ],
)
def test_worked_quotients(a: str, b: str, increment: int, shown: str) -> None:
    """Quotients MariaDB 10.11 returned for these operands and increments."""
    assert str(mysql_quotient(Decimal(a), Decimal(b), increment)) == shown


def _decimals(max_scale: int) -> Any:
    return st.builds(
        lambda digits, scale: Decimal(digits).scaleb(-scale),
        st.integers(-(10**12), 10**12),
        st.integers(0, max_scale),
    )


@pytest.fixture(scope="module")
def mariadb(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """A connection to a MariaDB test database."""
    factory = DatabaseFactory.for_request(request, tmp_path_factory.mktemp("quotients"))
    try:
        with factory.engine(factory("mysql", 1)[0]).connect() as connection:
            yield connection
    finally:
        factory.cleanup()


@pytest.mark.mysql
@given(a=_decimals(14), b=_decimals(4), increment=st.integers(0, 30))
def test_quotients_match_the_server(mariadb: Any, a: Decimal, b: Decimal, increment: int) -> None:
    """a / b of DECIMAL literals: the server's own quotient, digit for digit."""
    mariadb.exec_driver_sql(f"SET SESSION div_precision_increment = {increment}")
    (expected,) = mariadb.exec_driver_sql(f"SELECT {a:f} / {b:f}").one()
    assert str(mysql_quotient(a, b, increment)) == str(expected)


def _columns() -> dict[str, Any]:
    return {
        "q": mapped_column(Integer),
        "d": mapped_column(Numeric(12, 5)),
        "tag": mapped_column(String(4)),
    }


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1207)
    return [
        {"user_id": rng.randrange(1, 40), "q": rng.randrange(-3, 9),
         "d": Decimal(rng.randrange(-900, 90000)).scaleb(-5), "tag": "wxyz"[i % 4]}
        for i in range(60)
    ]  # fmt: skip


world = twin_world_fixture(
    "quotients", _columns, _rows, [pytest.param("mysql", marks=pytest.mark.mysql)]
)
"""Integers and DECIMAL(12, 5) values over two MariaDB databases and their twin."""


SHAPES = {
    "avg": lambda m: select(m.tag, func.avg(m.q), func.avg(m.d)).group_by(m.tag),
    "division": lambda m: select(m.tag, func.sum(m.d) / func.count(), func.sum(m.q) / 7)
    .group_by(m.tag),
    "floor": lambda m: select(m.tag, func.sum(m.q) // func.count()).group_by(m.tag),
    "avg_distinct": lambda m: select(m.tag, func.avg(m.q.distinct())).group_by(m.tag),
    "ungrouped": lambda m: select(func.avg(m.d), func.sum(m.q) / func.count()),
}


@pytest.mark.parametrize("increment", [0, 4, 9, 12])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_merged_quotients_match_the_twin(world: TwinWorld, shape: str, increment: int) -> None:
    """AVG, a / b and a // b over merged aggregates, under the servers' increment (the
    merge divided to 4 decimals always, and rounded where the server truncates)."""
    with connected_with(world, [f"SET SESSION div_precision_increment = {increment}"] * 3):
        world.exact(SHAPES[shape])


def test_groups_ordered_by_avg_tie_as_the_server_shows_them(world: TwinWorld) -> None:
    """ORDER BY AVG under div_precision_increment 0: groups whose AVGs show alike tie (the
    tiebreaker orders them), as in one table, though their exact averages differ."""

    def build(m: Any) -> Any:
        average = func.avg(m.q)
        return select(m.user_id, average).group_by(m.user_id).order_by(average.desc(), m.user_id)

    with connected_with(world, ["SET SESSION div_precision_increment = 0"] * 3):
        shown = world.exact(build, ordered=True)
    exact: dict[int, list[int]] = {}
    for row in _rows():
        exact.setdefault(row["user_id"], []).append(row["q"])
    by_exact = sorted(exact, key=lambda u: (-Fraction(sum(exact[u]), len(exact[u])), u))
    assert [int(user) for (_, user), _ in shown] != by_exact  # the premise: ties matter


def test_servers_dividing_differently_are_refused(world: TwinWorld) -> None:
    """A merged AVG over databases whose sessions divide to other increments (one changed
    with SET after the session began): a named error, from the rows' own settings."""
    model = world.Model
    with world.session() as session:
        session.execute(select(func.count()).select_from(model)).one()  # both databases
        connection = session.connection(bind_arguments={"bind": world.engines[2]})
        connection.exec_driver_sql("SET SESSION div_precision_increment = 6")
        with pytest.raises(UnsupportedShardQuery, match="div_precision_increment .*4, 6"):
            session.execute(SHAPES["avg"](model))


def _big_columns() -> dict[str, Any]:
    return {"big": mapped_column(Numeric(38, 6)), "tag": mapped_column(String(4))}


def _big_rows() -> list[dict[str, Any]]:
    rng = random.Random(8)
    return [
        {"user_id": rng.randrange(1, 40), "tag": "xyz"[i % 3],
         "big": Decimal(rng.randrange(10**30, 10**31)).scaleb(-6)}
        for i in range(30)
    ]  # fmt: skip


bigs = twin_world_fixture(
    "bigs",
    _big_columns,
    _big_rows,
    [pytest.param("postgresql", marks=pytest.mark.postgres),
     pytest.param("mysql", marks=pytest.mark.mysql)],  # fmt: skip
)
"""NUMERIC(38, 6) values of 31 digits over two databases and their twin (SQLite stores
them as REAL, whose sums may differ in their last digits, as documented)."""

BIG_SHAPES = {
    "sum": lambda m: select(m.tag, func.sum(m.big)).group_by(m.tag),
    "avg": lambda m: select(m.tag, func.avg(m.big)).group_by(m.tag),
    "sum-min": lambda m: select(m.tag, func.sum(m.big) - func.min(m.big)).group_by(m.tag),
    "sum*3": lambda m: select(m.tag, func.sum(m.big) * 3).group_by(m.tag),
    "sum/count": lambda m: select(m.tag, func.sum(m.big) / func.count()).group_by(m.tag),
    "total": lambda m: select(func.sum(m.big)),
}


@pytest.mark.parametrize("shape", list(BIG_SHAPES))
def test_long_numerics_keep_every_digit(bigs: TwinWorld, shape: str) -> None:
    """Merged sums, averages and expressions of 32-digit NUMERICs: the twin's, digit for
    digit (the merge rounded them to 28 significant digits)."""
    assert len(bigs.exact(BIG_SHAPES[shape])) >= 1
