"""Joins through relationship attributes: read as their explicit joins, equal to the twin.

The twin shop's ``Order.items`` (on the shard key and ``order_id``) and
``Order.status_row`` (to the reference table) exist on both sides; each statement is run
on the sharded models and on their unsharded twins, where SQLAlchemy joins the
relationship itself.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import and_, func, select
from sqlalchemy.orm import aliased, with_loader_criteria

from snowshard.sharding import UnsupportedShardQuery, explain, sharded_model
from snowshard.sharding.relationship_joins import explicit_joins, explicit_nested_joins
from tests.twin_setups import TWIN_BACKENDS, Filled, both_rows
from tests.worlds import Models, declare_twin_shop

SHOP = declare_twin_shop(4, databases=2)
"""Models for the tests that only build statements."""


def _sql(statement: Any) -> str:
    return str(statement.compile())


def test_relationship_join_becomes_the_explicit_join() -> None:
    """join(Order.items) reads as join_from(Order, Item, the relationship's ON clause)."""
    m, i = SHOP.sharded.Order, SHOP.sharded.Item
    by_hand = select(m.id).join_from(m, i, and_(i.user_id == m.user_id, i.order_id == m.id))
    assert _sql(explicit_joins(select(m.id).join(m.items))) == _sql(by_hand)


def test_and_criteria_and_outer_join_are_kept() -> None:
    """outerjoin(Order.items.and_(...)) keeps LEFT OUTER and adds the criteria to ON."""
    m, i = SHOP.sharded.Order, SHOP.sharded.Item
    tie = and_(i.user_id == m.user_id, i.order_id == m.id)
    by_hand = select(m.id).join_from(m, i, and_(tie, i.qty > 1), isouter=True)
    made = explicit_joins(select(m.id).outerjoin(m.items.and_(i.qty > 1)))
    assert _sql(made) == _sql(by_hand)


def test_target_with_relationship_on_clause() -> None:
    """join(Item, Order.items) reads as the same explicit join as join(Order.items)."""
    m, i = SHOP.sharded.Order, SHOP.sharded.Item
    made = explicit_joins(select(m.id, i.id).join(i, m.items))
    assert _sql(made) == _sql(explicit_joins(select(m.id, i.id).join(m.items)))
    assert "orders.user_id" in _sql(made) and "items.order_id = orders.id" in _sql(made)


def test_statement_without_relationship_joins_is_kept() -> None:
    """A statement with explicit joins, or joins of unsharded models only, is returned as is."""
    m, i = SHOP.sharded.Order, SHOP.sharded.Item
    explicit = select(m.id).join(i, i.user_id == m.user_id)
    twin = select(SHOP.twin.Order.id).join(SHOP.twin.Order.items)
    assert explicit_joins(explicit) is explicit
    assert explicit_nested_joins(twin) is twin


def test_subquery_joins_are_made_explicit() -> None:
    """A relationship join inside an IN subquery is made explicit too."""
    m, i = SHOP.sharded.Order, SHOP.sharded.Item
    inner = select(m.user_id).join(m.items).where(i.qty > 1)
    made = explicit_nested_joins(select(m.id).where(m.user_id.in_(inner)))
    assert "JOIN items ON items.user_id = orders.user_id AND items.order_id = orders.id" in _sql(
        made
    )


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_join_through_binding_relationship_across_databases(filled: Filled, backend: str) -> None:
    """Orders joined to their items through Order.items over two databases equal the twin."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        return select(w.Order.id, w.Item.id, w.Item.qty).join(w.Order.items)

    got, twin = both_rows(world, shop, build)
    assert got == twin and len(twin) == 60


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_outer_join_with_criteria_counted(filled: Filled, backend: str) -> None:
    """A count per user over outerjoin(Order.items.and_(qty > 2)) equals the twin."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        joined = w.Order.items.and_(w.Item.qty > 2)
        return select(w.Order.user_id, func.count(w.Item.id)).outerjoin(joined).group_by(
            w.Order.user_id
        )

    got, twin = both_rows(world, shop, build)
    assert got == twin and sum(count for _, count in twin) > 0


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_join_through_reference_relationship_ordered(filled: Filled, backend: str) -> None:
    """Orders outer-joined to statuses through Order.status_row, ordered, equal the twin."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        statement = select(w.Order.id, w.Status.grp).outerjoin(w.Order.status_row)
        return statement.order_by(w.Order.id.desc()).limit(7)

    with world.session() as session:
        twin = session.execute(build(shop.twin)).all()
        got = session.execute(build(shop.sharded)).all()
    assert got == twin and len(twin) == 7 and any(grp is None for _, grp in twin)


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_keyed_relationship_join_reads_one_table(filled: Filled, backend: str) -> None:
    """A relationship join with the shard key in WHERE runs on one table and equals the twin."""
    shop, world = filled(backend, 2)
    user = shop.sharded.Order.user_id

    def build(w: Models) -> Any:
        statement = select(w.Order.id, w.Item.qty).join(w.Order.items)
        return statement.where(w.Order.user_id == world_user)

    with world.session() as session:
        world_user = session.scalars(select(user).order_by(user).limit(1)).one()
        plan = explain(session, build(shop.sharded))
    got, twin = both_rows(world, shop, build)
    assert got == twin and twin
    assert plan.refused is None and len(plan.statements) == 1


def test_physical_class_relationship_is_refused(filled: Filled) -> None:
    """join() through a physical class's relationship is refused before any SQL runs."""
    shop, world = filled("sqlite", 2)
    physical = sharded_model(shop.sharded.Order).classes[0]
    with world.session() as session:
        world.log.clear()
        with pytest.raises(UnsupportedShardQuery, match="explicit ON clause"):
            session.execute(select(physical.id).join(physical.items))
    assert len(world.log) == 0


def test_relationship_of_an_alias_is_refused(filled: Filled) -> None:
    """join() through an aliased Order's relationship is refused before any SQL runs."""
    shop, world = filled("sqlite", 2)
    alias = aliased(shop.sharded.Order)
    with world.session() as session:
        world.log.clear()
        with pytest.raises(UnsupportedShardQuery, match="alias"):
            session.execute(select(alias.id).join(alias.items))
    assert len(world.log) == 0


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
@pytest.mark.parametrize("outer", [False, True], ids=["inner", "outer"])
@pytest.mark.parametrize("form", ["expression", "lambda"])
@pytest.mark.parametrize("side", ["target", "parent"])
def test_loader_criteria_reach_a_relationship_join(
    filled: Filled, backend: str, outer: bool, form: str, side: str
) -> None:
    """with_loader_criteria() on Item (the target) or on Order (the parent) restricts a
    count over join(Order.items) as on one table, over two databases, on every SQLAlchemy
    version (before 2.0.22 the ORM gave a relationship join those criteria, but not the
    explicit join it is written as)."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        if side == "target":
            model, condition, made = w.Item, w.Item.qty > 2, lambda cls: cls.qty > 2
        else:
            model, condition, made = w.Order, w.Order.amount > 2, lambda cls: cls.amount > 2
        option = with_loader_criteria(model, made if form == "lambda" else condition)
        statement = select(func.count(), func.count(w.Item.id)).select_from(w.Order)
        return statement.join(w.Order.items, isouter=outer).options(option)

    def unfiltered(w: Models) -> Any:
        statement = select(func.count(), func.count(w.Item.id)).select_from(w.Order)
        return statement.join(w.Order.items, isouter=outer)

    got, twin = both_rows(world, shop, build)
    everything, _ = both_rows(world, shop, unfiltered)
    assert got == twin and twin != everything


def _joined_from_item(w: Models, outer: bool, through: str) -> Any:
    """Counts over items joined to orders by hand, then orders to statuses: through the
    relationship Order.status_row, or by hand with Order as the explicit left side."""
    tie = and_(w.Order.user_id == w.Item.user_id, w.Order.id == w.Item.order_id)
    statement = select(func.count(), func.count(w.Order.id), func.count(w.Status.code))
    statement = statement.select_from(w.Item).join(w.Order, tie, isouter=outer)
    if through == "relationship":
        return statement.join(w.Order.status_row, isouter=outer)
    on = w.Order.status == w.Status.code
    return statement.join_from(w.Order, w.Status, on, isouter=outer)


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
@pytest.mark.parametrize("outer", [False, True], ids=["inner", "outer"])
@pytest.mark.parametrize("through", ["relationship", "join_from"])
def test_join_from_a_joined_model_counted(
    filled: Filled, backend: str, outer: bool, through: str
) -> None:
    """Counts over items JOIN orders JOIN statuses, the second join leaving from Order
    (join(Order.status_row) or join_from(Order, Status)), merged over two databases equal
    the twin (the merge's per-database SELECT once listed orders twice in its FROM, which
    the ORM refused)."""
    shop, world = filled(backend, 2)
    got, twin = both_rows(world, shop, lambda w: _joined_from_item(w, outer, through))
    assert got == twin and twin[0][2] > 0


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
@pytest.mark.parametrize("outer", [False, True], ids=["inner", "outer"])
def test_loader_criteria_of_a_joined_parent(filled: Filled, backend: str, outer: bool) -> None:
    """with_loader_criteria(Order) over items JOIN orders JOIN Order.status_row counts as
    on one table, on every SQLAlchemy version (before 2.0.22 the ORM gives a relationship
    join's parent its criteria in WHERE, except a parent that is itself a join's target)."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        option = with_loader_criteria(w.Order, lambda cls: cls.amount > 2)
        return _joined_from_item(w, outer, "relationship").options(option)

    got, twin = both_rows(world, shop, build)
    assert got == twin


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
@pytest.mark.parametrize("shape", ["count", "reference", "columns"])
def test_relationship_join_before_with_only_columns(
    filled: Filled, backend: str, shape: str
) -> None:
    """A relationship join made before with_only_columns() replaced the columns (which
    SQLAlchemy keeps aside with the old columns) is read as its explicit join too."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        if shape == "count":
            return select(w.Order).join(w.Order.items).with_only_columns(func.count())
        if shape == "reference":
            joined = select(w.Order.id).join(w.Order.status_row)
            return joined.with_only_columns(func.count(), func.count(w.Status.grp))
        joined = select(w.Order.id).join(w.Order.items)
        return joined.with_only_columns(w.Item.id, w.Order.amount)

    got, twin = both_rows(world, shop, build)
    assert got == twin and len(twin) > 0


def test_legacy_query_with_entities_after_a_relationship_join(filled: Filled) -> None:
    """Query(Order).join(Order.items).with_entities(func.count()) counts as on one table."""
    shop, world = filled("sqlite", 2)
    with world.session() as session:
        counted = [
            session.query(w.Order).join(w.Order.items).with_entities(func.count()).scalar()
            for w in (shop.sharded, shop.twin)
        ]
    assert counted[0] == counted[1] == 60


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
@pytest.mark.parametrize("then", ["join_from", "join", "relationship"])
def test_loader_criteria_of_a_parent_joined_on(filled: Filled, backend: str, then: str) -> None:
    """with_loader_criteria(Order) over orders JOIN Order.items, then statuses joined on
    (join_from(Order, Status), join(Status), or Order.status_row), counts as on one table on
    every SQLAlchemy version (before 2.0.22 a join_from() after the relationship join takes
    the parent's criteria out of the ORM's WHERE)."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        statement = select(func.count(), func.count(w.Status.code)).select_from(w.Order)
        statement = statement.join(w.Order.items)
        on = w.Order.status == w.Status.code
        if then == "join_from":
            statement = statement.join_from(w.Order, w.Status, on, isouter=True)
        elif then == "join":
            statement = statement.join(w.Status, on, isouter=True)
        else:
            statement = statement.outerjoin(w.Order.status_row)
        return statement.options(with_loader_criteria(w.Order, w.Order.amount > 5))

    got, twin = both_rows(world, shop, build)
    assert got == twin


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
@pytest.mark.parametrize("side", ["target", "parent"])
def test_loader_criteria_beside_a_relationship_join_in_a_subquery(
    filled: Filled, backend: str, side: str
) -> None:
    """with_loader_criteria() on Item or Order, with join(Order.items) inside an IN
    subquery, counts as on one table (the rewrite once tried to copy the option, which
    SQLAlchemy cannot, and raised AttributeError)."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        if side == "target":
            option = with_loader_criteria(w.Item, lambda cls: cls.qty > 2)
        else:
            option = with_loader_criteria(w.Order, lambda cls: cls.amount > 5)
        inner = select(w.Order.user_id).join(w.Order.items).where(w.Item.qty > 1)
        statement = select(func.count()).select_from(w.Order)
        return statement.where(w.Order.user_id.in_(inner)).options(option)

    got, twin = both_rows(world, shop, build)
    assert got == twin
