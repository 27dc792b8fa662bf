"""Random UPDATE and DELETE statements on sharded models change exactly the rows they change
on one plain table, or raise a named refusal before any SQL runs.

The configurations are those of the read differential (``tests/twin_setups.py``). Each
example builds one statement from a grammar for both sides of the twin shop (one in four
writes the items, reading their orders in subqueries; the rest write the orders): UPDATE (of
non-key columns, from constants, the row's own columns, CASE, a correlated count of its
items or the reference table; or of the shard key) or DELETE, as an ORM or a Core statement,
with or without RETURNING and a ``synchronize_session`` strategy, filtered by key and
non-key conditions, ID time ranges, and IN/EXISTS/scalar subqueries over the items, the
orders themselves, the reference table and the unsharded ``notes``. It runs the twin's
statement, then the sharded one, in one session, and compares the rowcount, the rows
returned and every row of both tables afterwards; then rolls back. A statement the twin's
database itself rejects (MariaDB's UPDATE ... RETURNING, a subquery on the table being
changed, an unevaluable ``synchronize_session='evaluate'``) says nothing about sharding and
is skipped. ``SNOWSHARD_DIFFERENTIAL_EXAMPLES`` and ``SNOWSHARD_DIFFERENTIAL_SEED`` work as
for the read differential.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event, given, reject
from hypothesis import strategies as st
from sqlalchemy import case, delete, exists, func, select, update
from sqlalchemy.orm import aliased

from snowshard.orm import id_since
from snowshard.sharding import ShardKeyChanged, UnsupportedShardQuery
from tests.shop_setup import rows_of, sort_rows
from tests.twin_setups import CONFIGS, Setup, build_setup, differential
from tests.worlds import LAYOUT, TWIN_SWITCH, TWIN_USERS, Models

USERS = list(TWIN_USERS)
REFUSALS = (UnsupportedShardQuery, ShardKeyChanged)
"""What a sharded write may raise instead of answering: named, and before any SQL."""


@pytest.fixture(scope="module", params=CONFIGS)
def setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    yield from build_setup(request, tmp_path_factory.mktemp("writes"), *request.param)


# --------------------------------------------------------------------------- the grammar

_FILTERS: list[Callable[[Models], Any]] = [
    lambda w: w.Order.user_id == USERS[1],
    lambda w: w.Order.user_id.in_([USERS[0], USERS[3], USERS[5]]),
    lambda w: w.Order.amount > 5,
    lambda w: w.Order.status == "paid",
    lambda w: w.Order.status.is_(None),
    lambda w: w.Order.user_id.is_(None),
    lambda w: w.Order.user_id == USERS[2],
    lambda w: id_since(w.Order.id, LAYOUT, TWIN_SWITCH),
]
"""Plain conditions on the orders: key equality, key IN, non-key columns, an ID time range."""

_SUBQUERIES: list[Callable[[Models], Any]] = [
    # the keys of some items: a key IN over another model's rows
    lambda w: w.Order.user_id.in_(select(w.Item.user_id).where(w.Item.qty >= 4)),
    lambda w: w.Order.user_id.not_in(select(w.Item.user_id).where(w.Item.qty >= 5)),
    # the orders some items name: the ID (a key) IN a non-key column of the items
    lambda w: w.Order.id.in_(select(w.Item.order_id).where(w.Item.qty > 3)),
    # a correlated EXISTS on both keys (one table's rows), and on the order's ID only
    lambda w: exists(
        select(w.Item.id).where(
            w.Item.user_id == w.Order.user_id, w.Item.order_id == w.Order.id, w.Item.qty > 3
        )
    ),
    lambda w: ~exists(select(w.Item.id).where(w.Item.order_id == w.Order.id, w.Item.qty > 4)),
    # correlated on the user only: a comparison, and the order's ID among its user's items
    lambda w: w.Order.amount
    < select(func.max(w.Item.qty)).where(w.Item.user_id == w.Order.user_id).scalar_subquery(),
    lambda w: w.Order.id.in_(select(w.Item.order_id).where(w.Item.user_id == w.Order.user_id)),
    # an aggregate over all orders (the twin's database may refuse a subquery on the table
    # being changed)
    lambda w: w.Order.amount > _all_orders(w, func.avg),
    lambda w: w.Order.amount == _all_orders(w, func.max),
    # the reference table and the unsharded table
    lambda w: w.Order.status.in_(select(w.Status.code).where(w.Status.grp == "open")),
    lambda w: w.Order.user_id.in_(select(w.Note.id)),
]
"""Conditions with a subquery."""


def _all_orders(w: Models, aggregate: Callable[[Any], Any]) -> Any:
    other = aliased(w.Order)
    return select(aggregate(other.amount)).scalar_subquery()


_VALUES: list[Callable[[Models], dict[str, Any]]] = [
    lambda w: {"amount": w.Order.amount + 1},
    lambda w: {"status": "sent", "amount": None},
    lambda w: {"amount": case((w.Order.status == "paid", 100), else_=w.Order.amount * 2)},
    lambda w: {
        "amount": select(func.count())
        .where(w.Item.order_id == w.Order.id, w.Item.user_id == w.Order.user_id)
        .scalar_subquery()
    },
    lambda w: {
        "amount": select(func.count()).where(w.Item.order_id == w.Order.id).scalar_subquery()
    },
    # from the reference table, whose copy each database holds
    lambda w: {
        "status": select(w.Status.code)
        .where(w.Status.grp == "open")
        .order_by(w.Status.code)
        .limit(1)
        .scalar_subquery()
    },
    # the shard key: the same value (no row moves), or another (rows would move)
    lambda w: {"user_id": w.Order.user_id, "amount": 7},
    lambda w: {"user_id": USERS[2]},
]
"""The SET of an UPDATE."""


_ITEM_CONDITIONS: list[Callable[[Models], Any]] = [
    lambda w: w.Item.qty > 2,
    lambda w: w.Item.user_id == USERS[1],
    lambda w: w.Item.user_id.in_([USERS[0], USERS[4]]),
    lambda w: w.Item.user_id.is_(None),
    # the item's order, correlated on both keys (one table's rows), or on its ID only
    lambda w: exists(
        select(w.Order.id).where(
            w.Order.id == w.Item.order_id,
            w.Order.user_id == w.Item.user_id,
            w.Order.status == "paid",
        )
    ),
    lambda w: w.Item.order_id.in_(select(w.Order.id).where(w.Order.amount > 5)),
    lambda w: w.Item.user_id.in_(select(w.Order.user_id).where(w.Order.status == "new")),
]
"""Conditions on the items, some reading their orders."""

_ITEM_VALUES: list[Callable[[Models], dict[str, Any]]] = [
    lambda w: {"qty": w.Item.qty * 2},
    lambda w: {
        "qty": select(func.coalesce(func.max(w.Order.amount), 0))
        .where(w.Order.id == w.Item.order_id, w.Order.user_id == w.Item.user_id)
        .scalar_subquery()
    },
    lambda w: {"order_id": w.Item.order_id + 1},
]
"""The SET of an UPDATE of items."""


@dataclass
class Write:
    build: Callable[[Models], Any]
    returning: bool


@st.composite
def writes(draw: Any) -> Write:
    if draw(st.integers(0, 3)) == 0:
        return item_writes(draw)
    return order_writes(draw)


def item_writes(draw: Any) -> Write:
    """An UPDATE or DELETE of items (the orders read in its subqueries)."""
    verb = draw(st.sampled_from(["update", "delete"]))
    picked = st.sampled_from(range(len(_ITEM_CONDITIONS)))
    conditions = draw(st.lists(picked, max_size=2, unique=True))
    values = draw(st.sampled_from(range(len(_ITEM_VALUES))))
    returning = draw(st.booleans())

    def build(w: Models) -> Any:
        i = w.Item
        statement = update(i) if verb == "update" else delete(i)
        statement = statement.where(*[_ITEM_CONDITIONS[c](w) for c in conditions])
        if verb == "update":
            statement = statement.values(_ITEM_VALUES[values](w))
        if returning:
            statement = statement.returning(i.id, i.qty)
        return statement.execution_options(synchronize_session=False)

    return Write(build, returning)


def order_writes(draw: Any) -> Write:
    """An UPDATE or DELETE of orders."""
    verb = draw(st.sampled_from(["update", "delete"]))
    filters = draw(st.lists(st.sampled_from(range(len(_FILTERS))), max_size=2, unique=True))
    nested = draw(st.lists(st.sampled_from(range(len(_SUBQUERIES))), max_size=1))
    values = draw(st.sampled_from(range(len(_VALUES))))
    core = draw(st.booleans())
    returning = draw(st.booleans())
    synchronize = draw(st.sampled_from([None, False, "fetch", "evaluate"]))

    def build(w: Models) -> Any:
        m = w.Order
        target = m.__table__ if core else m
        statement = update(target) if verb == "update" else delete(target)
        conditions = [_FILTERS[f](w) for f in filters] + [_SUBQUERIES[n](w) for n in nested]
        statement = statement.where(*conditions)
        if verb == "update":
            statement = statement.values(_VALUES[values](w))
        if returning:
            statement = statement.returning(m.id, m.amount)
        if synchronize is not None and not core:
            statement = statement.execution_options(synchronize_session=synchronize)
        return statement

    return Write(build, returning)


# --------------------------------------------------------------------------- comparing


def _contents(session: Any, w: Models) -> tuple[list[Any], list[Any]]:
    """Every order and item of one side, in ID order."""
    m, i = w.Order, w.Item
    orders = rows_of(session.execute(select(m.id, m.user_id, m.amount, m.status).order_by(m.id)))
    items = rows_of(session.execute(select(i.id, i.user_id, i.order_id, i.qty).order_by(i.id)))
    return orders, items


def _applied(session: Any, statement: Any, returning: bool) -> tuple[int, list[Any]]:
    """(rows matched, rows returned): with RETURNING, the rows (sorted) and their number
    (an ORM result has no rowcount); else the rowcount and []."""
    result = session.execute(statement)
    if returning:
        returned = sort_rows(rows_of(result))
        return len(returned), returned
    return result.rowcount, []


def compare(setup: Setup, write: Write) -> None:
    """The sharded write's rowcount, returned rows and effect equal the twin's, or it is
    refused before any SQL; both are rolled back."""
    sharded, twin = setup.shop.sharded, setup.shop.twin
    log = setup.world.log
    statement = write.build(sharded)
    shown = f"{setup.name}: {statement}"
    with setup.session() as session:
        try:
            expected = _applied(session, write.build(twin), write.returning)
        except Exception as exc:  # noqa: BLE001 - the twin's database refused it: not sharding's
            event(f"the twin's database refused it: {type(exc).__name__} {str(exc)[:150]}")
            reject()
        expected_after = _contents(session, twin)
        session.rollback()
        log.clear()
        try:
            got = _applied(session, statement, write.returning)
        except REFUSALS as exc:
            assert len(log) == 0, f"SQL ran before the refusal of {shown}"
            event(f"refused: {type(exc).__name__} {str(exc)[:90]}")
            return
        except Exception as exc:  # noqa: BLE001 - any other outcome fails, naming the statement
            pytest.fail(f"{shown}\nraised {type(exc).__name__}: {exc}")
        got_after = _contents(session, sharded)
        session.rollback()
    event("compared")
    assert got == expected, shown
    assert got_after == expected_after, shown


@differential
@given(write=writes())
def test_sharded_writes_change_what_one_table_changes_or_are_refused(
    setup: Setup, write: Write
) -> None:
    """Every random UPDATE/DELETE changes the rows the twin's does, or raises a refusal."""
    compare(setup, write)
