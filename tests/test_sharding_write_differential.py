"""Random UPDATE, DELETE and INSERT statements on sharded models change exactly the rows they
change on one plain table, or raise a named refusal before any SQL runs.

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
is skipped.

One write in three inserts orders instead (:class:`InsertWrite`): one row's ``values()``, a
``values([...])`` list, executemany or ORM objects, plain or as an upsert (ON CONFLICT DO
NOTHING / DO UPDATE, MariaDB's IGNORE / ON DUPLICATE KEY UPDATE) of new IDs, existing ones,
or IDs of another user's gene, some amounts given as SQL, with or without RETURNING; compared
by what it reports, each row read back by its ID and its user (reads that look only in the
table the key names) and every row afterwards. ``SNOWSHARD_DIFFERENTIAL_EXAMPLES`` and
``SNOWSHARD_DIFFERENTIAL_SEED`` work as for the read differential.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event, given, reject
from hypothesis import strategies as st
from sqlalchemy import case, delete, exists, func, insert, select, update
from sqlalchemy.orm import aliased

from snowshard.orm import id_since
from snowshard.sharding import ShardKeyChanged, ShardKeyConflict, UnsupportedShardQuery
from tests.dialect_inserts import dialect_insert, skipping_existing, updating_existing
from tests.shop_setup import rows_of, sort_rows
from tests.twin_setups import CONFIGS, Setup, build_setup, differential
from tests.worlds import LAYOUT, TWIN_SWITCH, TWIN_USERS, Models

USERS = list(TWIN_USERS)
REFUSALS = (UnsupportedShardQuery, ShardKeyChanged, ShardKeyConflict)
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
def writes(draw: Any, nullable: bool = False) -> Write | InsertWrite:
    """One write in four changes items; of the rest, one in three inserts orders."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return item_writes(draw)
    if kind in (1, 2):
        return insert_writes(draw, nullable)
    return order_writes(draw)


def item_writes(draw: Any) -> Write:
    """An UPDATE or DELETE of items (the orders read in its subqueries)."""
    verb = draw(st.sampled_from(["update", "delete"]))
    picked = st.sampled_from(range(len(_ITEM_CONDITIONS)))
    conditions = draw(st.lists(picked, max_size=2, unique=True))
    values = draw(st.sampled_from(range(len(_ITEM_VALUES))))
    returning = draw(st.booleans())
    first = draw(st.booleans())

    def build(w: Models) -> Any:
        i = w.Item
        statement = update(i) if verb == "update" else delete(i)
        statement = statement.where(*[_ITEM_CONDITIONS[c](w) for c in conditions])
        if verb == "update":
            statement = statement.values(_ITEM_VALUES[values](w))
        if returning:
            statement = statement.returning(i.id, i.qty)
        return statement.execution_options(synchronize_session=False, subqueries_first=first)

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
    first = draw(st.booleans())  # subqueries_first=True (the twin's statement ignores it)

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
        if first:
            statement = statement.execution_options(subqueries_first=True)
        return statement

    return Write(build, returning)


@dataclass(frozen=True)
class RowSpec:
    """One row of an INSERT, made concrete for each example (:meth:`InsertWrite.rows`)."""

    user: int | None
    """Index into the users, or None for a NULL ``user_id`` (nullable shops only)."""
    id_kind: str
    """``fresh`` (a new ID of the user's gene), ``taken`` (an existing order's ID and user:
    a conflict; each row of a statement another order's) or ``foreign`` (a new ID of
    another user's gene)."""
    amount: int | None
    status: str | None
    computed: bool
    """The amount as a SQL expression (``abs(-amount)``) rather than a value."""


_UPSERT_SETS: list[Callable[[Any, Any], dict[str, Any]]] = [
    lambda model, new: {"amount": new.amount + 1},
    lambda model, new: {"status": "sent"},
    lambda model, new: {"amount": model.amount + 100},  # the row's own column (2.1 only)
    lambda model, new: {"amount": model.amount},  # the column alone (an ORM attribute)
]
"""The SET of an upsert's update: the row's new values, a constant, the existing row's
(in an expression, or alone)."""


@dataclass
class InsertWrite:
    """An INSERT of some rows: one row's ``values()``, a ``values([...])`` list, executemany
    or ORM objects; plain, ON CONFLICT DO NOTHING / DO UPDATE (MariaDB: IGNORE / ON
    DUPLICATE KEY UPDATE); on the ORM entity or its table; with or without RETURNING."""

    specs: list[RowSpec]
    form: str
    conflict: str | None
    upsert_set: int
    core: bool
    returning: bool

    def rows(self, setup: Setup, taken: list[Any]) -> list[dict[str, Any]]:
        """The rows, with IDs issued now (the same for both sides)."""
        ids, rows = setup.shop.ids, []
        for n, spec in enumerate(self.specs):
            user = None if spec.user is None else USERS[spec.user]
            gene = user if user is not None else n
            if spec.id_kind == "taken":  # a different order for each row of the statement
                row_id, user = taken[((spec.user or 0) * 5 + n * 11) % len(taken)]
            elif spec.id_kind == "foreign":
                row_id = ids.next_id(gene=USERS[(spec.user or 0) + 1])
            else:
                row_id = ids.next_id(gene=gene)
            rows.append(
                {"id": row_id, "user_id": user, "amount": spec.amount, "status": spec.status}
            )
        return rows

    def statement(self, backend: str, w: Models, rows: list[dict[str, Any]]) -> Any:
        """The statement, and its values when they are part of it (not executemany)."""
        model = w.Order.__table__ if self.core else w.Order
        statement = dialect_insert(backend, model) if self.conflict else insert(model)
        if self.form in ("one", "values"):
            listed = [self._valued(row, n) for n, row in enumerate(rows)]
            statement = statement.values(listed[0] if self.form == "one" else listed)
        if self.conflict == "nothing":
            statement = skipping_existing(backend, statement)
        elif self.conflict == "update":
            target = w.Order if not self.core else w.Order.__table__.c
            sets = _UPSERT_SETS[self.upsert_set]
            statement = updating_existing(backend, statement, lambda new: sets(target, new))
        if self.returning:
            columns = w.Order.__table__.c if self.core else w.Order
            statement = statement.returning(columns.id, columns.amount)
        return statement

    def _valued(self, row: dict[str, Any], n: int) -> dict[str, Any]:
        spec = self.specs[n]
        if spec.computed and row["amount"] is not None:
            return {**row, "amount": func.abs(-row["amount"])}
        return row


def insert_writes(draw: Any, nullable: bool) -> InsertWrite:
    """An INSERT of orders (:class:`InsertWrite`)."""
    form = draw(st.sampled_from(["one", "values", "values", "many", "orm"]))
    conflict = None if form == "orm" else draw(st.sampled_from([None, None, "nothing", "update"]))
    kinds = ["fresh", "fresh", "fresh", "foreign"] + (["taken", "taken"] if conflict else [])
    users = st.integers(0, len(USERS) - 2)
    spec = st.builds(
        RowSpec,
        user=st.one_of(st.none(), users) if nullable else users,
        id_kind=st.sampled_from(kinds),
        amount=st.one_of(st.none(), st.integers(0, 20)),
        status=st.sampled_from(["new", "paid", "sent", None]),
        computed=st.booleans() if form in ("one", "values") else st.just(False),
    )
    specs = draw(st.lists(spec, min_size=1, max_size=1 if form == "one" else 4))
    return InsertWrite(
        specs,
        form,
        conflict,
        draw(st.sampled_from(range(len(_UPSERT_SETS)))),
        core=form != "orm" and draw(st.booleans()),
        returning=form != "orm" and draw(st.booleans()),
    )


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


def _compare_sides(
    setup: Setup, shown: str, apply: Callable[[Any, Models], Any], compared: str
) -> None:
    """``apply`` (a write, then what is read after it) on the twin, then on the sharded side,
    each rolled back: equal, or the sharded write refused before any SQL. A write the twin's
    own database rejects says nothing about sharding: skipped."""
    log = setup.world.log
    with setup.session() as session:
        try:
            expected = apply(session, setup.shop.twin)
        except Exception as exc:  # noqa: BLE001 - the twin's database refused it: not sharding's
            event(f"the twin's database refused it: {type(exc).__name__} {str(exc)[:100]}")
            reject()
        session.rollback()
        log.clear()
        try:
            got = apply(session, setup.shop.sharded)
        except REFUSALS as exc:
            assert len(log) == 0, f"SQL ran before the refusal of {shown}"
            event(f"refused: {type(exc).__name__} {str(exc)[:60]}")
            return
        except Exception as exc:  # noqa: BLE001 - any other outcome fails, naming the write
            pytest.fail(f"{shown}\nraised {type(exc).__name__}: {exc}")
        session.rollback()
    event(compared)
    assert got == expected, shown


def compare(setup: Setup, write: Write) -> None:
    """The sharded write's rowcount, returned rows and effect equal the twin's, or it is
    refused before any SQL."""

    def apply(session: Any, w: Models) -> Any:
        return _applied(session, write.build(w), write.returning), _contents(session, w)

    _compare_sides(setup, f"{setup.name}: {write.build(setup.shop.sharded)}", apply, "compared")


def _inserted(session: Any, write: InsertWrite, backend: str, w: Models, rows: list[Any]) -> Any:
    """What an INSERT reports: the rows returned (sorted), else its rowcount (or that its
    result has none: an ORM executemany's, on one table as on shards)."""
    if write.form == "orm":
        session.add_all([w.Order(**row) for row in rows])
        session.flush()
        return "flushed"
    statement = write.statement(backend, w, rows)
    many = write.form == "many"
    result = session.execute(statement, rows) if many else session.execute(statement)
    if write.returning:
        return sort_rows(rows_of(result))
    return getattr(result, "rowcount", "no rowcount")


def _placed(session: Any, w: Models, rows: list[dict[str, Any]]) -> list[Any]:
    """The rows read back by their IDs, and their users' orders counted by user: keyed reads,
    which look only in the tables their keys name, so a row stored elsewhere is missed."""
    m = w.Order
    ids = [row["id"] for row in rows]
    users = sorted({row["user_id"] for row in rows if row["user_id"] is not None})
    by_id = select(m.id, m.user_id, m.amount).where(m.id.in_(ids))
    by_user = (
        select(m.user_id, func.count(), func.sum(m.amount))
        .where(m.user_id.in_(users))
        .group_by(m.user_id)
    )
    queries = (by_id, by_user) if users else (by_id,)
    return [sort_rows(rows_of(session.execute(query))) for query in queries]


def compare_insert(setup: Setup, write: InsertWrite) -> None:
    """The sharded INSERT's report, its rows read back by key and every row afterwards equal
    the twin's, or it is refused before any SQL."""
    if write.form == "orm" and setup.aio is not None:
        reject()  # the async variant's session is driven statement by statement
    twin = setup.shop.twin
    with setup.session() as session:
        taken = [tuple(r) for r in session.execute(select(twin.Order.id, twin.Order.user_id))]
    rows = write.rows(setup, sorted(taken))
    backend = setup.name.split("-")[0]

    def apply(session: Any, w: Models) -> Any:
        report = _inserted(session, write, backend, w, rows)
        return report, _placed(session, w, rows), _contents(session, w)

    shown = f"{setup.name}: {write} {rows}"
    _compare_sides(setup, shown, apply, f"compared: insert, {write.form}")


@differential
@given(data=st.data())
def test_sharded_writes_change_what_one_table_changes_or_are_refused(
    setup: Setup, data: st.DataObject
) -> None:
    """Every random UPDATE/DELETE/INSERT changes the rows the twin's does, or raises a refusal."""
    write = data.draw(writes(setup.shop.nullable_keys))
    if isinstance(write, InsertWrite):
        compare_insert(setup, write)
    else:
        compare(setup, write)
