"""PostgreSQL ranges and multiranges ordered by a merge as PostgreSQL orders them, as the
unsharded twin (psycopg's ``Range`` orders otherwise: an unbounded end as None)."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from psycopg.types.range import Range as DriverRange
from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import INT4MULTIRANGE, INT4RANGE, NUMRANGE, Range
from sqlalchemy.orm import mapped_column

from snowshard.sharding.ranges import range_key
from tests.twin_world import TwinWorld, twin_world_fixture

_BOUNDS = ["[)", "(]", "()", "[]"]


def _columns() -> dict[str, Any]:
    return {
        "span": mapped_column(INT4RANGE),
        "amounts": mapped_column(NUMRANGE),
        "spans": mapped_column(INT4MULTIRANGE),
        "tag": mapped_column(sa.String(4)),
    }


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1208)
    rows = []
    for i in range(60):
        bounds = rng.choice(_BOUNDS)
        span: Any = Range(rng.choice([None, 1, 2, 3]), rng.choice([None, 4, 5]), bounds=bounds)
        if rng.random() < 0.1:
            span = Range(empty=True)
        low = Decimal(rng.choice(["1.5", "2"]))
        amounts = Range(low, Decimal(rng.choice(["3", "4"])), bounds=bounds)
        spans = [Range(1, rng.choice([2, 3])), Range(rng.choice([5, 6]), None)]
        rows.append({
            "user_id": rng.randrange(1, 40), "tag": "xyz"[i % 3], "span": span,
            "amounts": amounts if rng.random() < 0.8 else None,
            "spans": [s for s in spans if rng.random() < 0.6],
        })  # fmt: skip
    return rows


world = twin_world_fixture(
    "ranges", _columns, _rows, [pytest.param("postgresql", marks=pytest.mark.postgres)]
)

_ONE_TO_TWO = sa.literal(Range(1, 2), INT4RANGE)
"""[1,2) as an int4range (psycopg 3.1 sends a Range of ints as an int8range)."""

_ORDER = ["empty", "(,2)", "(,)", "[1,2)", "[1,2]", "[1,)", "(1,2)", "(1,2]"]
"""numrange values as PostgreSQL 15 orders them (``SELECT ... ORDER BY r``)."""


def _parsed(text: str) -> Range[Any]:
    if text == "empty":
        return Range(empty=True)
    lower, upper = text[1:-1].split(",")
    return Range(
        Decimal(lower) if lower else None,
        Decimal(upper) if upper else None,
        bounds=text[0] + text[-1],  # type: ignore[arg-type]
    )


def test_range_key_orders_as_postgresql() -> None:
    """range_key sorts ranges in the order PostgreSQL gave them, whatever order they come in."""
    shuffled = list(_ORDER)
    random.Random(3).shuffle(shuffled)
    assert sorted(shuffled, key=lambda t: range_key(_parsed(t))) == _ORDER


def test_psycopg_ranges_have_the_keys_of_sqlalchemy_ranges() -> None:
    """The merge reads psycopg's Range (a source's raw value) as SQLAlchemy's."""
    for text in _ORDER:
        ours = _parsed(text)
        theirs = DriverRange(empty=True) if ours.isempty else DriverRange(
            ours.lower, ours.upper, bounds=ours.bounds
        )
        assert range_key(theirs) == range_key(ours)


def test_multiranges_order_range_by_range_shorter_first() -> None:
    """A multirange compares its ranges in turn, a shorter one first where it is a prefix."""
    one, two = Range(1, 2), Range(5, 6)
    assert range_key([]) < range_key([one]) < range_key([one, two]) < range_key([two])


@pytest.mark.parametrize(
    "build",
    [
        lambda m: select(m.id, m.span).order_by(m.span, m.id),
        lambda m: select(m.id, m.amounts).order_by(m.amounts.desc().nulls_first(), m.id),
        lambda m: select(m.id, m.spans).order_by(m.spans, m.id).limit(25),
        lambda m: select(m.id).order_by(func.coalesce(m.span, _ONE_TO_TWO), m.id),
        lambda m: select(m.span, func.count()).group_by(m.span).order_by(m.span.desc()),
    ],
    ids=["range", "numrange desc", "multirange", "coalesce", "grouped"],
)
def test_rows_ordered_by_a_range_match_the_twin(world: TwinWorld, build: Any) -> None:
    """ORDER BY a range or multirange, rows or groups: the twin's order (the merge put
    '(,)' before '(,5)' and ordered unbounded ends as psycopg orders None)."""
    world.exact(build, ordered=True)


def test_grouping_by_a_multirange_is_refused(world: TwinWorld) -> None:
    """GROUP BY a multirange (read as a list) is refused by name, not a TypeError."""
    world.refused(
        lambda m: select(m.spans, func.count()).group_by(m.spans), "array or multirange"
    )


def test_ranges_compared_after_the_merge_are_refused(world: TwinWorld) -> None:
    """HAVING span < a range (compared in Python after the merge) is refused by name."""
    world.refused(
        lambda m: select(m.span).group_by(m.span).having(m.span < Range(2, 4)),
        "compare lower\\(\\) and upper\\(\\)",
    )
