"""PostgreSQL's NaN in merged results: one group, sorted after every number, equal to
itself, absorbing in arithmetic; as the unsharded twin returns it."""

from __future__ import annotations

import math
import operator
import random
from decimal import Decimal, InvalidOperation
from typing import Any

import pytest
from sqlalchemy import Double, Integer, Numeric, String, case, cast, func, select, type_coerce
from sqlalchemy.orm import mapped_column

from snowshard.sharding.driver_errors import ShardOperationError
from snowshard.sharding.nan import (
    NAN_DECIMAL,
    NAN_FLOAT,
    MergedNaNCast,
    canonical,
    canonical_key,
    pg_computed,
    restore,
)
from tests.twin_world import TwinWorld, twin_world_fixture


def test_every_nan_is_one_value() -> None:
    """Float and Decimal NaNs become one value each, equal and hashed alike."""
    floats = {canonical(float("nan")), canonical(float("nan"))}
    assert floats == {NAN_FLOAT} and canonical(Decimal("NaN")) is NAN_DECIMAL
    assert NAN_FLOAT == NAN_DECIMAL and hash(NAN_FLOAT) == hash(NAN_DECIMAL)
    assert NAN_FLOAT == float("nan") and float("nan") == NAN_FLOAT


def test_nan_sorts_after_every_number() -> None:
    """NaN is greater than any number, Decimals included (which raise on NaN otherwise)."""
    values = [Decimal("3.5"), NAN_DECIMAL, Decimal("-1"), Decimal("2")]
    assert sorted(values) == [Decimal("-1"), Decimal("2"), Decimal("3.5"), NAN_DECIMAL]
    assert max(values) is NAN_DECIMAL and min(values) == Decimal("-1")
    assert max([1.5, NAN_FLOAT, 9.0]) is NAN_FLOAT and not NAN_FLOAT < 9.0


def test_arithmetic_on_nan_is_nan() -> None:
    """Sums, products and negation of NaN are NaN, of the kind the driver returned."""
    assert NAN_DECIMAL + Decimal(1) is NAN_DECIMAL and 2 * NAN_FLOAT is NAN_FLOAT
    assert Decimal(4) - NAN_DECIMAL is NAN_DECIMAL and -NAN_FLOAT is NAN_FLOAT


def test_restore_gives_the_drivers_nan() -> None:
    """restore() hands out a float or Decimal NaN, and other values unchanged."""
    assert math.isnan(restore(NAN_FLOAT)) and isinstance(restore(NAN_FLOAT), float)
    assert restore(NAN_DECIMAL).is_nan() and restore(7) == 7


def test_canonical_key_maps_tuples() -> None:
    """A key of several values makes each NaN one value."""
    key = canonical_key(lambda row: (row[0], row[1]))
    assert key((float("nan"), 2)) == key((float("nan"), 2)) == (NAN_FLOAT, 2)
    assert canonical_key(lambda row: row[0])((Decimal("NaN"),)) is NAN_DECIMAL


def _columns() -> dict[str, Any]:
    return {
        "f": mapped_column(Double),
        "n": mapped_column(Numeric(10, 2)),
        "tag": mapped_column(String(4)),
    }


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1130)
    rows = []
    for i in range(48):
        f = float("nan") if i % 5 == 0 else None if i % 7 == 3 else float(rng.randrange(6))
        n = Decimal("NaN") if i % 6 == 0 else None if i % 8 == 3 else Decimal(rng.randrange(6)) / 4
        rows.append({"user_id": rng.randrange(1, 40), "f": f, "n": n, "tag": "xyz"[i % 3]})
    return rows


world = twin_world_fixture(
    "vals", _columns, _rows, [pytest.param("postgresql", marks=pytest.mark.postgres)]
)
"""Values holding NaNs over two PostgreSQL databases and their twin."""


@pytest.mark.postgres
def test_nan_keys_make_one_group(world: TwinWorld) -> None:
    """GROUP BY a float or NUMERIC with NaNs: one NaN group, counted as one table does."""
    for column in ("f", "n"):
        got = world.exact(lambda m: select(getattr(m, column), func.count()).group_by(
            getattr(m, column)
        ))  # fmt: skip
        assert sum(1 for row in got if row[0][1].lower() == "nan") == 1


@pytest.mark.postgres
def test_aggregates_over_nan_match_the_twin(world: TwinWorld) -> None:
    """MIN, MAX, SUM, AVG and COUNT per group, with NaNs among the values."""
    got = world.exact(
        lambda m: select(
            m.tag, func.max(m.f), func.min(m.n), func.max(m.n), func.sum(m.n),
            func.avg(m.n), func.avg(m.f), func.count(m.f),
        ).group_by(m.tag),
    )  # fmt: skip
    assert any("nan" in str(row).lower() for row in got)


@pytest.mark.postgres
def test_order_by_nan_matches_the_twin(world: TwinWorld) -> None:
    """ORDER BY floats and NUMERICs holding NaNs and NULLs, with LIMIT, OFFSET, yield_per."""
    for build in (
        lambda m: select(m.id, m.f).order_by(m.f.desc().nulls_first(), m.id).limit(20),
        lambda m: select(m.id, m.f, m.n).order_by(m.f.asc(), m.n.desc(), m.id).limit(30),
        lambda m: select(m.id, m.f).order_by(m.f, m.id).offset(5).limit(10),
        lambda m: select(m.id, m.n).order_by(m.n.desc(), m.id).execution_options(yield_per=3),
        lambda m: select(m.tag, func.max(m.f))
        .group_by(m.tag)
        .order_by(func.max(m.f).desc(), m.tag),
    ):
        world.exact(build, ordered=True)


DISGUISED: dict[str, Any] = {
    "greatest": lambda m: func.greatest(m.n, m.n),
    "type_coerce": lambda m: type_coerce(m.n, Integer),
    "nullif": lambda m: func.nullif(m.f, 1.0),
    "abs": lambda m: func.abs(m.f),
}
"""Numbers SQLAlchemy does not type as numbers: untyped functions, a type_coerce()."""


@pytest.mark.postgres
@pytest.mark.parametrize("form", list(DISGUISED))
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
def test_order_by_disguised_nan_matches_the_twin(
    world: TwinWorld, form: str, descending: bool
) -> None:
    """ORDER BY a number holding NaNs behind another type: the twin's order (the merge
    raised Decimal's InvalidOperation, or put NaNs among the numbers)."""

    def build(m: Any) -> Any:
        key = DISGUISED[form](m)
        return select(m.id).order_by(key.desc() if descending else key, m.id).limit(30)

    world.exact(build, ordered=True)


@pytest.mark.postgres
def test_distinct_and_union_keep_one_nan(world: TwinWorld) -> None:
    """DISTINCT and UNION keep one row of NaNs, as one table does."""
    for build in (
        lambda m: select(m.f).distinct(),
        lambda m: select(m.f, m.n).distinct().order_by(m.f, m.n),
        lambda m: select(m.n).union(select(m.n)),
    ):
        world.exact(build)


@pytest.mark.postgres
def test_expressions_over_nan_match_the_twin(world: TwinWorld) -> None:
    """HAVING, comparisons, CASE, COALESCE and arithmetic over aggregates that are NaN."""
    for build in (
        lambda m: select(m.tag).group_by(m.tag).having(func.max(m.f) > 4),
        lambda m: select(m.tag, func.max(m.f) == float("nan")).group_by(m.tag),
        lambda m: select(m.tag, case((func.max(m.f) > 3, "big"), else_="small")).group_by(m.tag),
        lambda m: select(m.tag, func.coalesce(func.max(m.n), 0), func.max(m.f) * 2).group_by(
            m.tag
        ),
        lambda m: select(m.tag, func.max(m.n) / func.count(), func.max(m.n) - 1).group_by(m.tag),
    ):
        world.exact(build)


@pytest.mark.postgres
def test_cast_of_nan_to_integer_is_a_named_error(world: TwinWorld) -> None:
    """CAST(max(f) AS INTEGER) over a NaN raises MergedNaNCast; one table refuses it too."""
    with world.session() as session:
        with pytest.raises(MergedNaNCast, match="NaN"):
            session.execute(select(cast(func.max(world.Model.f), Integer))).all()
        with pytest.raises(ShardOperationError, match="out of range"):
            session.execute(select(cast(func.max(world.Twin.f), Integer))).all()


def test_infinite_arithmetic_gives_nan() -> None:
    """Infinity - Infinity and Infinity * 0 are PostgreSQL's NaN, for Decimals (which
    refuse them) and floats; other invalid Decimal operations still raise."""
    infinity = Decimal("Infinity")
    assert pg_computed(operator.sub, infinity, infinity) is NAN_DECIMAL
    assert pg_computed(operator.mul, float("inf"), 0.0) is NAN_FLOAT
    assert pg_computed(operator.add, infinity, Decimal(1)) == infinity
    with pytest.raises(InvalidOperation):
        pg_computed(Decimal, "not a number")


def _infinite_columns() -> dict[str, Any]:
    return {
        "n": mapped_column(Numeric()),
        "f": mapped_column(Double),
        "tag": mapped_column(String(4)),
    }


def _infinite_rows() -> list[dict[str, Any]]:
    rng = random.Random(3)
    specials = [Decimal("Infinity"), Decimal("-Infinity"), Decimal("NaN"), None]
    rows = []
    for i in range(48):
        n = specials[i % 4] if i % 5 == 0 else Decimal(rng.randrange(-500, 500)).scaleb(-2)
        f = float(n) if n is not None and i % 3 else float(rng.randrange(9))
        rows.append({"user_id": rng.randrange(1, 40), "n": n, "f": f, "tag": "wxyz"[i % 4]})
    # group "v": Infinity in database a (table 0), -Infinity in database b (table 2)
    return rows + [
        {"user_id": 4, "n": Decimal("Infinity"), "f": math.inf, "tag": "v"},
        {"user_id": 2, "n": Decimal("-Infinity"), "f": -math.inf, "tag": "v"},
    ]


infinities = twin_world_fixture(
    "infs",
    _infinite_columns,
    _infinite_rows,
    [pytest.param("postgresql", marks=pytest.mark.postgres)],
)
"""NUMERIC and double precision values holding Infinity, -Infinity and NaN (PostgreSQL 14
and later) over two databases and their twin."""

INFINITE = {
    "sum": lambda m: select(m.tag, func.sum(m.n)).group_by(m.tag),
    "avg": lambda m: select(m.tag, func.avg(m.n)).group_by(m.tag),
    "division": lambda m: select(
        m.tag, func.sum(m.n) / func.count(), func.max(m.n) / 3, 1 / func.max(m.n)
    ).group_by(m.tag),
    "difference": lambda m: select(
        m.tag, func.max(m.n) - func.min(m.n), func.max(m.f) - func.min(m.f), func.max(m.n) * 0
    ).group_by(m.tag),
    "having": lambda m: select(m.tag).group_by(m.tag).having(func.max(m.n) - func.min(m.n) > 0),
    "total": lambda m: select(func.sum(m.n), func.avg(m.n), func.max(m.f) - func.min(m.f)),
    "order": lambda m: select(m.id, m.n, m.f).order_by(m.n.desc(), m.f, m.id).limit(30),
}


@pytest.mark.parametrize("shape", list(INFINITE))
def test_infinities_match_the_twin(infinities: TwinWorld, shape: str) -> None:
    """Sums, averages, divisions and differences of infinities: PostgreSQL's values, NaN
    for Infinity - Infinity (the merge raised decimal's InvalidOperation, or OverflowError
    dividing an infinity)."""
    infinities.exact(INFINITE[shape], ordered=shape == "order")


def test_cast_of_infinity_to_integer_is_a_named_error(infinities: TwinWorld) -> None:
    """CAST(max(n) AS INTEGER) over an Infinity raises MergedNaNCast (an OverflowError
    before); one table refuses it too."""
    with infinities.session() as session:
        statement = select(infinities.Model.tag, cast(func.max(infinities.Model.n), Integer))
        with pytest.raises(MergedNaNCast, match="Infinity"):
            session.execute(statement.group_by(infinities.Model.tag)).all()
