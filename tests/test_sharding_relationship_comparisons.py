"""Relationship comparisons (.any(), .has()) of sharded models: run as EXISTS, equal to the twin.

Each statement is run on the twin shop's sharded models over two databases and on their
unsharded twins, where SQLAlchemy's own EXISTS reads one plain table.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import and_, exists, or_, select
from sqlalchemy.orm import with_loader_criteria

from snowshard.sharding import UnsupportedShardQuery
from snowshard.sharding.relationship_comparisons import explicit_comparisons
from tests.twin_setups import TWIN_BACKENDS, Filled, both_rows
from tests.worlds import Models, declare_twin_shop

SHOP = declare_twin_shop(4, databases=2)
"""Models for the tests that only build statements."""


def test_any_becomes_the_exists_written_out() -> None:
    """Order.items.any(qty > 3) reads as exists().where(the relationship's ON, qty > 3)."""
    m, i = SHOP.sharded.Order, SHOP.sharded.Item
    tie = and_(i.user_id == m.user_id, i.order_id == m.id)
    by_hand = select(m.id).where(exists().where(tie, i.qty > 3))
    made = explicit_comparisons(select(m.id).where(m.items.any(i.qty > 3)))
    assert str(made.compile()) == str(by_hand.compile())


def test_statement_without_comparisons_is_kept() -> None:
    """A statement whose EXISTS is written out is returned as it is."""
    m, i = SHOP.sharded.Order, SHOP.sharded.Item
    written = select(m.id).where(exists().where(i.user_id == m.user_id))
    assert explicit_comparisons(written) is written


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
@pytest.mark.parametrize("negated", [False, True], ids=["any", "not any"])
def test_any_across_databases_equals_twin(filled: Filled, backend: str, negated: bool) -> None:
    """Orders with (or without) an item of qty > 3, over two databases, equal the twin."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        test = w.Order.items.any(w.Item.qty > 3)
        return select(w.Order.id, w.Order.amount).where(~test if negated else test)

    got, twin = both_rows(world, shop, build)
    assert got == twin and 0 < len(twin) < 40


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_has_of_reference_table_equals_twin(filled: Filled, backend: str) -> None:
    """Orders whose status row has rank > 1 (a reference table) equal the twin."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        return select(w.Order.id).where(w.Order.status_row.has(w.Status.rank > 1))

    got, twin = both_rows(world, shop, build)
    assert got == twin and 0 < len(twin) < 40


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_any_in_an_or_routed_by_key_equals_twin(filled: Filled, backend: str) -> None:
    """.any() inside an OR, with the shard key in WHERE, equals the twin."""
    shop, world = filled(backend, 2)
    user = shop.sharded.Order.user_id
    with world.session() as session:
        first = session.scalars(select(user).order_by(user).limit(1)).one()

    def build(w: Models) -> Any:
        either = w.Order.items.any(w.Item.qty == 1) | (w.Order.amount > 8)
        return select(w.Order.id).where(w.Order.user_id == first, either)

    got, twin = both_rows(world, shop, build)
    assert got == twin and twin


def test_comparison_with_loader_criteria_is_refused(filled: Filled) -> None:
    """With with_loader_criteria(), .any() keeps SQLAlchemy's marks: refused before any SQL."""
    shop, world = filled("sqlite", 2)
    m, i = shop.sharded.Order, shop.sharded.Item
    statement = select(m.id).where(m.items.any(i.qty > 3))
    statement = statement.options(with_loader_criteria(m, lambda cls: cls.amount > 1))
    with world.session() as session:
        world.log.clear()
        with pytest.raises(UnsupportedShardQuery, match="with_loader_criteria"):
            session.execute(statement)
    assert len(world.log) == 0


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_any_of_a_model_the_query_joins_equals_twin(filled: Filled, backend: str) -> None:
    """.any() of items in a query joining items too reads its own items (not the joined
    row's), as SQLAlchemy's EXISTS does: equal to the twin."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        m, i = w.Order, w.Item
        tie = and_(i.user_id == m.user_id, i.order_id == m.id)
        return select(m.id, i.id).join(i, tie).where(i.qty == 1, m.items.any(i.qty > 1))

    got, twin = both_rows(world, shop, build)
    assert got == twin and twin


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_any_with_or_criteria_equals_twin(filled: Filled, backend: str) -> None:
    """.any(or_(...)), whose criteria SQLAlchemy puts in parentheses, equals the twin."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        either = or_(w.Item.qty == 1, w.Item.qty > 4)
        return select(w.Order.id).where(w.Order.items.any(either), w.Order.amount > 2)

    got, twin = both_rows(world, shop, build)
    assert got == twin and 0 < len(twin) < 40
