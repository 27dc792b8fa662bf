"""Values of TypeDecorators with values of their own (a code read as its label, cents read
as dollars, text read lower-cased, IDs read as decimal strings) grouped, ordered, picked
and added by a merge as the database does with the stored values, as the unsharded twin,
or refused where the merge would compute with them."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import func, select
from sqlalchemy.orm import mapped_column

from snowshard.orm import SnowflakeType
from snowshard.sharding.decorated import decorator_of, reads_stored, stored_value
from tests.twin_world import TwinWorld, twin_world_fixture

_LABELS = {1: "shipped", 2: "cancelled", 3: "paid", 4: "new"}
"""Stored codes and their labels: the labels sort otherwise than the codes."""


class Status(sa.types.TypeDecorator[str]):
    """An order status stored as its code, read as its label."""

    impl = sa.Integer
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return None if value is None else {v: k for k, v in _LABELS.items()}[value]

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else _LABELS[value]


class Cents(sa.types.TypeDecorator[Decimal]):
    """An amount stored in cents, read as a Decimal of dollars."""

    impl = sa.Integer
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return None if value is None else int(value * 100)

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else Decimal(value) / 100


class Dollars(sa.types.TypeDecorator[str]):
    """An amount stored as a NUMERIC, read as text: sums of the text would be joined."""

    impl = sa.Numeric(10, 2)
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else f"${value}"


class Folded(sa.types.TypeDecorator[str]):
    """Text stored as given, read lower-cased: two stored values may read as one."""

    impl = sa.String(8)
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else value.lower()


class Tens(sa.types.TypeDecorator[int]):
    """A score stored as a number, read as its tens: 31 and 35 read as 3."""

    impl = sa.Integer
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else value // 10


class Lowered(sa.types.TypeDecorator[str]):
    """Text read through lower() in SQL (a column_expression): 'AB' and 'ab' read alike."""

    impl = sa.String(8)
    cache_ok = True

    def column_expression(self, column: Any) -> Any:
        return func.lower(column, type_=sa.String(8))


class Scaled(sa.types.TypeDecorator[int]):
    """A number read times ten in SQL (a column_expression)."""

    impl = sa.Integer
    cache_ok = True

    def column_expression(self, column: Any) -> Any:
        return sa.type_coerce(column * 10, sa.Integer)


class Plain(sa.types.TypeDecorator[int]):
    """A decorator that reads values as they are stored."""

    impl = sa.Integer
    cache_ok = True


def _columns() -> dict[str, Any]:
    return {
        "status": mapped_column(Status),
        "price": mapped_column(Cents),
        "paid": mapped_column(Dollars),
        "word": mapped_column(Folded),
        "score": mapped_column(Tens),
        "lowered": mapped_column(Lowered),
        "scaled": mapped_column(Scaled),
        "ref": mapped_column(SnowflakeType(as_string=True)),
        "flag": mapped_column(sa.Boolean),
        "tag": mapped_column(sa.String(4)),
    }


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1208)
    spread = [  # one status per user: each database holds other codes
        {"user_id": user, "tag": "w", "status": _LABELS[user % 4 + 1]} for user in range(1, 5)
    ]
    return spread + [
        {
            "user_id": rng.randrange(1, 40),
            "tag": "xyz"[i % 3],
            "status": rng.choice([*_LABELS.values(), None]),
            "price": Decimal(rng.randrange(0, 900)) / 100,
            "paid": Decimal(rng.randrange(0, 900)) / 100,
            "word": rng.choice(["Ab", "ab", "AB", "cd", "Cd"]),
            "score": rng.choice([31, 35, 38, 42, 47]),
            "lowered": rng.choice(["Ab", "ab", "AB", "cd", "Cd"]),
            "scaled": rng.choice([1, 2, 3]),
            "ref": str(rng.choice([9, 10, 85, 120, 7])),
            "flag": rng.choice([True, False, None]),
        }
        for i in range(60)
    ]


world = twin_world_fixture("decorated", _columns, _rows)


def test_decorators_with_values_of_their_own_are_found() -> None:
    """A decorator that processes results is found; plain ones and integer IDs are not."""
    column = sa.column("x", Status())
    assert decorator_of(column, "postgresql") is not None
    assert decorator_of(sa.column("x", SnowflakeType(as_string=True)), "sqlite") is not None
    assert decorator_of(sa.column("x", SnowflakeType()), "sqlite") is None
    assert decorator_of(sa.column("x", Plain()), "sqlite") is None
    assert isinstance(stored_value(column, "postgresql").type, sa.Integer)
    assert reads_stored(Cents(), "mysql") is not None
    assert reads_stored(sa.Integer(), "mysql") is None


def test_labels_sort_otherwise_than_the_codes(world: TwinWorld) -> None:
    """Premise: one table orders the statuses by their codes, not their labels."""
    with world.session() as session:
        twin = session.scalars(
            select(world.Twin.status).where(world.Twin.status.is_not(None)).order_by(
                world.Twin.status
            ).distinct()
        ).all()
    assert twin == ["shipped", "cancelled", "paid", "new"]
    assert sorted(twin) != twin


@pytest.mark.parametrize(
    "build",
    [
        lambda M: select(M.status, func.count()).group_by(M.status).order_by(M.status),
        lambda M: select(M.tag, func.min(M.status)).group_by(M.tag).order_by(M.tag),
        lambda M: select(M.tag, func.max(M.status)).group_by(M.tag).order_by(
            func.max(M.status).desc(), M.tag
        ),
        lambda M: select(func.min(M.status), func.max(M.status)).where(M.tag == "w"),
        lambda M: select(func.max(M.ref), func.min(M.ref)),
        lambda M: select(M.ref, func.count()).group_by(M.ref).order_by(M.ref.desc()),
    ],
    ids=["group-order", "min", "order-by-max", "spread", "id-strings", "id-strings-grouped"],
)
def test_grouped_order_and_extremes_follow_the_stored_values(world: TwinWorld, build: Any) -> None:
    """GROUP BY order and MIN/MAX of decorated values are the twin's, by the stored values."""
    world.exact(build, ordered=True)


@pytest.mark.parametrize(
    "build",
    [
        lambda M: select(M.word, func.count()).group_by(M.word),
        lambda M: select(M.word).distinct(),
        lambda M: select(M.tag, func.count(M.word.distinct())).group_by(M.tag),
        lambda M: select(M.score).group_by(M.score).distinct(),
        lambda M: select(M.score, func.count()).group_by(M.score, M.tag).distinct(),
        lambda M: select(func.max(M.score)).group_by(M.tag, M.user_id).distinct(),
        lambda M: select(M.lowered, func.count()).group_by(M.lowered),
        lambda M: select(M.tag, func.max(M.scaled)).group_by(M.tag),
    ],
    ids=[
        "group-by", "distinct", "count-distinct", "grouped-distinct",
        "grouped-distinct-count", "distinct-max", "column-expression",
        "column-expression-max",
    ],
)
def test_values_read_alike_stay_apart_as_stored(world: TwinWorld, build: Any) -> None:
    """Stored values a decorator reads alike group and count as the twin's stored values."""
    world.exact(build)


def test_values_read_alike_are_stored_apart(world: TwinWorld) -> None:
    """Premise: one table groups the five stored words as its collation says (PostgreSQL
    and SQLite apart, MariaDB's default case-blind), though they read as two."""
    with world.session() as session:
        words = session.scalars(
            select(world.Twin.word).where(world.Twin.word.is_not(None)).group_by(world.Twin.word)
        ).all()
    assert set(words) == {"ab", "cd"}
    assert len(words) == (2 if world.backend == "mysql" else 5)


@pytest.mark.parametrize(
    "build",
    [
        lambda M: select(M.tag, func.sum(M.price)).group_by(M.tag),
        lambda M: select(M.tag, func.sum(M.price)).group_by(M.tag).order_by(
            func.sum(M.price).desc()
        ),
        lambda M: select(M.tag, func.sum(M.price).label("t")).group_by(M.tag).order_by(
            sa.desc("t")
        ),
        lambda M: select(M.tag, func.sum(M.paid)).group_by(M.tag),
        lambda M: select(func.sum(M.paid), func.sum(M.ref)),
    ],
    ids=["sum", "order-by-sum", "order-by-label", "sum-of-numeric", "sum-of-id-strings"],
)
def test_decorated_sums_are_read_once(world: TwinWorld, build: Any) -> None:
    """A decorated SUM adds the stored values and reads the total once, as the twin."""
    world.exact(build, ordered=True)


def test_boolean_sums_are_read_as_one_table_reads_them(world: TwinWorld) -> None:
    """SUM of a Boolean (SQLite, MariaDB) reads the added 0s and 1s as a bool, as the twin."""
    if world.backend == "postgresql":
        pytest.skip("PostgreSQL has no sum(boolean)")
    rows = world.exact(
        lambda M: select(M.tag, func.sum(M.flag)).where(M.tag != "w").group_by(M.tag)
    )
    assert {kind for _, (kind, _) in rows} == {"bool"}


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (
            lambda M: select(M.tag).group_by(M.tag).having(func.max(M.status) > "new"),
            "comparison max.*TypeDecorator Status",
        ),
        (
            lambda M: select(M.tag).group_by(M.tag).having(func.sum(M.price) > 50),
            "comparison sum.*TypeDecorator Cents",
        ),
        (
            lambda M: select(M.tag, func.coalesce(func.max(M.status), "new")).group_by(M.tag),
            "column coalesce.*TypeDecorator Status",
        ),
        (
            lambda M: select(M.tag, func.sum(M.price) * 2).group_by(M.tag),
            "column sum.*TypeDecorator Cents",
        ),
        (
            lambda M: select(M.tag).group_by(M.tag).order_by(
                func.coalesce(func.max(M.status), "new")
            ),
            "ORDER BY coalesce.*TypeDecorator Status",
        ),
        (
            lambda M: select(func.sum(M.score)).group_by(M.tag).distinct(),
            "DISTINCT sum.*TypeDecorator Tens",
        ),
        (
            lambda M: select(M.tag, func.sum(M.scaled)).group_by(M.tag),
            "sum.*TypeDecorator Scaled wraps the total in SQL",
        ),
    ],
    ids=[
        "having-max", "having-sum", "coalesce", "arithmetic", "order-by-coalesce",
        "distinct-sum", "sum-of-column-expression",
    ],
)
def test_computing_with_decorated_values_is_refused(
    world: TwinWorld, build: Any, match: str
) -> None:
    """Comparing or computing with a decorator's values after the merge is refused."""
    world.refused(build, match)


def test_rows_ordered_by_decorated_values_match_the_twin(world: TwinWorld) -> None:
    """Rows ordered by a decorated column (no grouping) come in the twin's order."""
    world.exact(
        lambda M: select(M.status, M.ref).order_by(M.status.desc(), M.ref).limit(25),
        ordered=True,
    )
