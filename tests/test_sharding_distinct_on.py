"""PostgreSQL's DISTINCT ON across shards: the first row of each value, in ORDER BY order,
exactly as one unsharded table gives it; what the merge cannot do is refused before SQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from snowshard.sharding import UnsupportedShardQuery, explain
from tests.shop_setup import Setup, build_setup

from tests.worlds import distinct_on

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    """The shop's orders over two PostgreSQL databases, and their unsharded twin."""
    yield from build_setup(request, tmp_path_factory.mktemp("on"), "postgresql", 2)


def _both(setup: Setup, build: Any) -> tuple[list[Any], list[Any]]:
    """Rows of ``build`` on the sharded model and on its twin (objects as their IDs)."""
    s = setup.schema
    with setup.session() as session:
        got, twin = (
            [tuple(getattr(v, "id", v) for v in row) for row in session.execute(build(m))]
            for m in (s.Order, s.OrderTwin)
        )
    return got, twin


def test_the_first_row_of_each_value_is_the_tables(setup: Setup) -> None:
    """DISTINCT ON (status) ORDER BY status, id DESC: the newest order of each status, one
    row per status, where each source sends its own newest."""
    got, twin = _both(
        setup,
        lambda m: distinct_on(select(m.status, m.id, m.amount), m.status).order_by(
            m.status, m.id.desc()
        ),
    )
    assert got == twin and len(twin) == 4


def test_objects_with_limit_and_offset_are_the_tables(setup: Setup) -> None:
    """Whole objects, NULLs first, OFFSET 1 LIMIT 2, as one table gives them."""
    got, twin = _both(
        setup,
        lambda m: distinct_on(select(m), m.status)
        .order_by(m.status.nulls_first(), m.id.desc())
        .limit(2)
        .offset(1),
    )
    assert got == twin and len(twin) == 2


def test_values_not_selected_and_several_of_them_are_the_tables(setup: Setup) -> None:
    """DISTINCT ON an expression and a column neither of which is selected, the first row
    picked by a later ORDER BY part (amounts, NULLs last), read in batches of two."""

    def build(m: Any) -> Any:
        bucket = m.user_id % 3
        statement = distinct_on(select(m.id, m.amount), bucket, m.status)
        ordered = statement.order_by(bucket, m.status, m.amount.desc().nulls_last(), m.id)
        return ordered.execution_options(yield_per=2)

    got, twin = _both(setup, build)
    assert got == twin and len(twin) == 7  # (user % 3, status) pairs of the shop's rows


def test_distinct_on_the_shard_key_is_the_tables(setup: Setup) -> None:
    """DISTINCT ON the shard key (each value in one table): one row per user, as one table."""
    got, twin = _both(
        setup,
        lambda m: distinct_on(select(m.user_id, m.id), m.user_id).order_by(m.user_id, m.id.desc()),
    )
    assert got == twin and len(twin) == 8


def test_explain_says_the_first_row_of_each_value_is_kept(setup: Setup) -> None:
    """explain() names the DISTINCT ON step of the merge."""
    order = setup.schema.Order
    with setup.session() as session:
        plan = explain(session, distinct_on(select(order), order.status).order_by(order.status))
    assert any("DISTINCT ON" in line for line in plan.merged)


def test_distinct_on_with_aggregates_is_refused_before_any_sql(setup: Setup) -> None:
    """DISTINCT ON with GROUP BY across shards is refused by name, before any SQL."""
    order = setup.schema.Order
    setup.sent.clear()
    statement = distinct_on(select(order.status, func.count()), order.status).group_by(order.status)
    with setup.session() as session, pytest.raises(UnsupportedShardQuery, match="DISTINCT ON"):
        session.execute(statement)
    assert setup.sent == []
