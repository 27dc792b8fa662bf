"""INSERT of many rows over shards: RETURNING rows in the order of the rows given, as one
table returns them, checked against the unsharded twin."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import bindparam, func, insert, literal, literal_column, select

from snowshard.sharding import UnsupportedShardQuery, explain
from tests.dialect_inserts import dialect_insert, skipping_existing, updating_existing
from tests.shop_setup import IDS, USERS, Setup

ROWS = [{"user_id": u, "amount": 900 + n} for n, u in enumerate([*USERS, *reversed(USERS)])]
"""Rows of every user twice, so that each table's rows are interleaved with others'."""

SORTED_RETURNING = tuple(int(p) for p in sqlalchemy.__version__.split(".")[:3]) >= (2, 0, 10)
"""Whether ``returning(sort_by_parameter_order=True)`` exists (new in SQLAlchemy 2.0.10)."""
VALUES_WITH_PARAMETERS = tuple(int(p) for p in sqlalchemy.__version__.split(".")[:3]) >= (2, 0, 11)
"""Whether an ORM ``insert().values(...)`` takes bound values from separate execution
parameters (SQLAlchemy 2.0.11 on; before, not even on one plain table)."""
SHARDED_UPSERTS = tuple(int(p) for p in sqlalchemy.__version__.split(".")[:2]) >= (2, 1)
"""Whether an upsert clause naming the model's columns can run on shards (SQLAlchemy 2.1
copies the clause with the statement; 2.0 does not)."""


def _given() -> list[tuple[int, int]]:
    return [(row["user_id"], row["amount"]) for row in ROWS]


def test_returning_rows_follow_the_rows_given(shop: Setup) -> None:
    """RETURNING of rows written to several tables and databases comes back in the order of
    the rows given, as the twin's does."""
    s = shop.schema
    with shop.session() as session:
        got = session.execute(insert(s.Order).returning(s.Order.user_id, s.Order.amount), ROWS)
        twin = session.execute(
            insert(s.OrderTwin).returning(s.OrderTwin.user_id, s.OrderTwin.amount),
            [{"id": 10**6 + n, **row} for n, row in enumerate(ROWS)],
        )
        assert [tuple(r) for r in got] == [tuple(r) for r in twin] == _given()
        session.rollback()


def test_returning_objects_follow_the_rows_given(shop: Setup) -> None:
    """RETURNING of whole objects gives each row's object at the row's position."""
    s = shop.schema
    with shop.session() as session:
        objects = session.scalars(insert(s.Order).returning(s.Order), ROWS).all()
        assert [(o.user_id, o.amount) for o in objects] == _given()
        assert len({type(o) for o in objects}) > 1  # written to several tables
        session.rollback()


@pytest.mark.skipif(not SORTED_RETURNING, reason="sort_by_parameter_order is new in 2.0.10")
def test_sort_by_parameter_order_holds_across_shards(shop: Setup) -> None:
    """returning(..., sort_by_parameter_order=True) pairs each returned ID with its row."""
    s = shop.schema
    with shop.session() as session:
        statement = insert(s.Order).returning(
            s.Order.id, s.Order.user_id, s.Order.amount, sort_by_parameter_order=True
        )
        returned = session.execute(statement, ROWS).all()
        assert [(r.user_id, r.amount) for r in returned] == _given()
        session.expunge_all()
        stored = [session.get(s.Order, r.id) for r in returned]
        assert [(o.user_id, o.amount) for o in stored] == _given()  # each ID is its row's
        session.rollback()


def _ignoring(backend: str, model: Any) -> Any:
    """An INSERT that skips rows whose ID exists, in ``backend``'s dialect."""
    return skipping_existing(backend, dialect_insert(backend, model))


@pytest.mark.skipif(not SORTED_RETURNING, reason="sort_by_parameter_order is new in 2.0.10")
def test_parameter_order_with_skipped_rows_is_refused(shop: Setup) -> None:
    """When a skipped row returns nothing, rows returned by several tables cannot be paired
    with the rows given: with sort_by_parameter_order=True that raises, naming the way out."""
    s = shop.schema
    with shop.session() as session:
        taken = session.scalars(insert(s.Order).returning(s.Order), ROWS[:1]).one()
        rows = [{"id": taken.id, "user_id": taken.user_id, "amount": 1}, *ROWS[1:]]
        statement = _ignoring(shop.name, s.Order).returning(
            s.Order.user_id, sort_by_parameter_order=True
        )
        with pytest.raises(UnsupportedShardQuery, match="cannot be matched"):
            session.execute(statement, rows)
        session.rollback()


_READING_INSERTS = {
    "a count of orders as a value": (
        lambda s: insert(s.Order).values(
            user_id=USERS[0], amount=select(func.count()).select_from(s.Order).scalar_subquery()
        ),
        "INSERT INTO orders reads Order in a subquery of its values",
    ),
    "a value from items": (
        lambda s: insert(s.Order).values(
            user_id=USERS[0], amount=select(func.max(s.Item.qty)).scalar_subquery()
        ),
        "INSERT INTO orders reads Item in a subquery of its values",
    ),
    "a note whose value reads orders": (
        lambda s: insert(s.Note).values(
            id=99, label=select(func.min(s.Order.status)).scalar_subquery()
        ),
        "INSERT INTO notes reads Order in a subquery of its values",
    ),
    "a list of rows, one reading orders": (
        lambda s: insert(s.Order).values(
            [
                {"user_id": USERS[0], "amount": 1},
                {"user_id": USERS[1], "amount": select(func.max(s.Order.amount)).scalar_subquery()},
            ]
        ),
        "INSERT INTO orders reads Order in a subquery of its values",
    ),
    "a list of notes, one naming an order's column": (
        lambda s: insert(s.Note).values(
            [{"id": 98, "label": "x"}, {"id": 99, "label": s.Order.status}]
        ),
        "INSERT INTO notes reads Order in a subquery of its values",
    ),
    "notes from orders": (
        lambda s: insert(s.Note).from_select(
            ["id", "label"], select(s.Order.id, literal("copied")).where(s.Order.amount > 10)
        ),
        r"insert\(notes\).from_select\(...\) is not routed",
    ),
}


@pytest.mark.parametrize("name", list(_READING_INSERTS))
def test_an_insert_reading_a_sharded_model_is_refused(shop: Setup, name: str) -> None:
    """An INSERT whose values read a sharded model would read one table's rows (a count of
    40 orders stored as 10) or a table another database holds: refused before any SQL,
    naming the table written and the model read, and explain() says so too."""
    s = shop.schema
    build, message = _READING_INSERTS[name]
    statement = build(s)
    with shop.session() as session:
        assert re.search(message, explain(session, statement).refused or "")
        shop.sent.clear()
        with pytest.raises(UnsupportedShardQuery, match=message):
            session.execute(statement)
        assert shop.sent == []
        assert session.scalar(select(func.count()).select_from(s.Order)) == 40
        assert session.scalar(select(func.count()).select_from(s.Note)) == 4


def test_a_listed_row_naming_its_table_reads_it_as_one_row_does(shop: Setup) -> None:
    """An ORM attribute of the table written, put in a values([...]) row, names the row's
    table as in values() of one row: both run (MariaDB) or both fail the same way."""
    s = shop.schema
    outcomes = []
    row = {"user_id": USERS[0], "amount": s.Order.amount}
    for values in (row, [row]):
        with shop.session() as session:
            shop.sent.clear()
            try:
                session.execute(insert(s.Order).values(values))
                outcomes.append("ran")
            except Exception as exc:  # noqa: BLE001 - the one-row form's outcome is the reference
                outcomes.append(type(exc).__name__)
            session.rollback()
        assert shop.sent and not any("orders.amount" in sql for sql in shop.sent), shop.sent
    assert outcomes[0] == outcomes[1]
    assert (outcomes[0] == "ran") == shop.name.startswith("mysql"), outcomes


def _upserting(
    backend: str, model: Any, values: Any, amount: Callable[[Any], Any]
) -> Any:
    """An INSERT of ``values`` (a row or a list) that sets ``amount(new)`` where the ID
    exists, in ``backend``'s dialect; ``new`` is the row's new values."""
    statement = dialect_insert(backend, model).values(values)
    return updating_existing(backend, statement, lambda new: {"amount": amount(new)})


def test_an_upsert_whose_update_reads_a_sharded_model_is_refused(shop: Setup) -> None:
    """ON CONFLICT DO UPDATE (ON DUPLICATE KEY UPDATE on MariaDB) setting a count of the
    orders would count the conflicting row's table only: refused before any SQL."""
    s = shop.schema
    count = select(func.count()).select_from(s.Order).scalar_subquery()
    with shop.session() as session:
        existing = session.execute(select(s.Order.id, s.Order.user_id).limit(1)).one()
        row = {"id": existing.id, "user_id": existing.user_id, "amount": 1}
        statement = _upserting(shop.name, s.Order, row, lambda new: count)
        shop.sent.clear()
        with pytest.raises(UnsupportedShardQuery, match="reads Order in a subquery of its values"):
            session.execute(statement)
        assert shop.sent == []


_SETTING_THE_MODELS_COLUMN = {
    "amount + 100": (lambda model: model.amount + 100, 100),
    "amount itself (an ORM attribute)": (lambda model: model.amount, 0),
}


@pytest.mark.parametrize("name", list(_SETTING_THE_MODELS_COLUMN))
def test_an_upsert_naming_the_models_columns_is_exact_or_refused(shop: Setup, name: str) -> None:
    """ON CONFLICT DO UPDATE (ON DUPLICATE KEY UPDATE) SET amount = orders.amount + 100 (or
    the attribute alone): SQLAlchemy 2.1 copies the clause with the statement, so it is
    pointed at the row's table and the row reads like the twin's; 2.0 does not, so it is
    refused before any SQL, naming insert.excluded as the way out (it once reached the
    database naming the logical table)."""
    s = shop.schema
    set_to, added = _SETTING_THE_MODELS_COLUMN[name]
    with shop.session() as session:
        existing = session.execute(
            select(s.Order.id, s.Order.user_id, s.Order.amount)
            .where(s.Order.amount.is_not(None))
            .limit(1)
        ).one()
        outcomes = []
        for model in (s.OrderTwin, s.Order):
            row = {"id": existing.id, "user_id": existing.user_id, "amount": 1}
            statement = _upserting(shop.name, model, row, lambda new: set_to(model))
            shop.sent.clear()
            if model is s.Order and not SHARDED_UPSERTS:
                with pytest.raises(UnsupportedShardQuery, match="insert.excluded"):
                    session.execute(statement)
                assert shop.sent == []
                return
            session.execute(statement)
            outcomes.append(session.scalar(select(model.amount).where(model.id == existing.id)))
        session.rollback()
    assert outcomes == [existing.amount + added] * 2


# --------------------------------------------------------------------------- values([...])

LISTED = [{"user_id": u, "amount": 800 + n, "status": "new"} for n, u in enumerate(USERS)]
"""Rows of every user, in all four tables over two databases, IDs left to the model's
default."""


def _listed_twin(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": 10**6 + n, **row} for n, row in enumerate(rows)]


def _contents(session: Any, model: Any) -> list[tuple[Any, ...]]:
    query = select(model.user_id, model.amount, model.status)
    return sorted((tuple(r) for r in session.execute(query)), key=repr)


def test_listed_rows_are_one_insert_per_table(shop: Setup) -> None:
    """insert(Order).values([...]) writes each row to its user's table, one multi-row INSERT
    per table, the rows and rowcount equal to the twin's; each ID carries its user's gene."""
    s = shop.schema
    with shop.session() as session:
        shop.sent.clear()
        count = session.execute(insert(s.Order).values(LISTED)).rowcount
        inserts = [sql for sql in shop.sent if sql.lstrip().upper().startswith("INSERT")]
        twin = session.execute(insert(s.OrderTwin).values(_listed_twin(LISTED))).rowcount
        assert _contents(session, s.Order) == _contents(session, s.OrderTwin)
        assert count == twin
        assert len(inserts) == len({u % 4 for u in USERS}) == 4
        new = session.execute(select(s.Order.id, s.Order.user_id).where(s.Order.amount >= 800))
        assert all(i % 16 == u % 16 for i, u in new)
        session.rollback()


def test_listed_rows_return_in_the_order_given(shop: Setup) -> None:
    """RETURNING of a values([...]) INSERT over several tables comes back in the order of
    the rows given, as the twin's does, each ID with its row."""
    s = shop.schema
    with shop.session() as session:
        returned = session.execute(
            insert(s.Order).values(LISTED).returning(s.Order.id, s.Order.user_id, s.Order.amount)
        ).all()
        twin = session.execute(
            insert(s.OrderTwin)
            .values(_listed_twin(LISTED))
            .returning(s.OrderTwin.user_id, s.OrderTwin.amount)
        ).all()
        given = [(row["user_id"], row["amount"]) for row in LISTED]
        assert [(r.user_id, r.amount) for r in returned] == [tuple(r) for r in twin] == given
        session.expunge_all()
        assert all(session.get(s.Order, r.id).amount == r.amount for r in returned)
        session.rollback()


def test_listed_upsert_changes_what_the_twin_changes(shop: Setup) -> None:
    """An upsert of a values([...]) list, some of whose IDs exist in several tables, leaves
    the rows the twin's leaves, with the same rowcount."""
    s = shop.schema
    with shop.session() as session:
        models = (s.Order, s.OrderTwin)
        existing = session.execute(select(s.OrderTwin.id, s.OrderTwin.user_id)).all()[::7]
        rows = [{"id": i, "user_id": u, "amount": 600 + n} for n, (i, u) in enumerate(existing)]
        rows += [{"id": IDS.next_id(gene=u), "user_id": u, "amount": 650 + u} for u in USERS]
        adding = [_upserting(shop.name, m, rows, lambda new: new.amount + 1) for m in models]
        counts = [session.execute(statement).rowcount for statement in adding]
        assert _contents(session, s.Order) == _contents(session, s.OrderTwin)
        assert counts[0] == counts[1]
        session.rollback()


def _plus_one(new: Any) -> dict[str, Any]:
    return {"amount": new.amount + 1}


def _meeting_existing(session: Any, model: Any) -> tuple[list[dict[str, Any]], int]:
    """Rows for an upsert, and how many of them come first with an ID that exists in
    ``model`` (every fifth row's); the others are new, one per user."""
    existing = session.execute(select(model.id, model.user_id)).all()[::5]
    rows = [{"id": i, "user_id": u, "amount": 500 + n} for n, (i, u) in enumerate(existing)]
    rows += [{"id": IDS.next_id(gene=u), "user_id": u, "amount": 550 + u} for u in USERS]
    return rows, len(existing)


def test_many_rows_upserted_with_a_parameter_change_what_the_twin_changes(shop: Setup) -> None:
    """An upsert run with a list of rows whose update sends a bound parameter (amount + 1)
    leaves the rows the twin's leaves, the twin's written one row at a time. Grouped by
    table, rows with the same columns meet, and MySQL drivers' executemany fails on a
    parameter in ON DUPLICATE KEY UPDATE: those rows are sent one by one."""
    s = shop.schema
    with shop.session() as session:
        rows, _ = _meeting_existing(session, s.OrderTwin)
        sharded, twin = (
            updating_existing(shop.name, dialect_insert(shop.name, m), _plus_one)
            for m in (s.Order, s.OrderTwin)
        )
        shop.sent.clear()
        session.execute(sharded, rows)
        inserts = [sql for sql in shop.sent if sql.lstrip().upper().startswith("INSERT")]
        assert len(inserts) == (len(rows) if shop.name.startswith("mysql") else 4), inserts
        for row in rows:
            session.execute(twin, row)
        assert _contents(session, s.Order) == _contents(session, s.OrderTwin)
        session.rollback()


def test_many_rows_upserted_with_a_parameter_return_in_the_order_given(shop: Setup) -> None:
    """RETURNING of that upsert (rows sent one by one on MariaDB) comes back in the order of
    the rows given, each row's new amount with its ID."""
    s = shop.schema
    with shop.session() as session:
        rows, existing = _meeting_existing(session, s.Order)
        upsert = updating_existing(shop.name, dialect_insert(shop.name, s.Order), _plus_one)
        returned = session.execute(upsert.returning(s.Order.id, s.Order.amount), rows).all()
        expected = [(r["id"], r["amount"] + (n < existing)) for n, r in enumerate(rows)]
        assert [tuple(r) for r in returned] == expected
        session.rollback()


_KEY_EXPRESSIONS = {
    "one row, its user as SQL": lambda s: insert(s.Order).values(
        user_id=literal_column(str(USERS[1])), amount=1
    ),
    "one row, its ID as SQL": lambda s: insert(s.Order).values(
        id=literal_column(str(IDS.next_id(gene=USERS[2]))), user_id=USERS[1], amount=1
    ),
    "a list, one user as SQL": lambda s: insert(s.Order).values(
        [{"user_id": USERS[0], "amount": 1}, {"user_id": func.abs(-USERS[1]), "amount": 2}]
    ),
}


@pytest.mark.parametrize("name", list(_KEY_EXPRESSIONS))
def test_a_shard_key_given_as_sql_is_refused(shop: Setup, name: str) -> None:
    """A shard key the database would compute leaves the row's table unknown (it was routed
    by the other key, or given an ID of another table's gene, and stored where reads by its
    key never look): refused before any SQL, naming the column; explain() says so too."""
    statement = _KEY_EXPRESSIONS[name](shop.schema)
    with shop.session() as session:
        assert "SQL expression" in (explain(session, statement).refused or "")
        shop.sent.clear()
        with pytest.raises(UnsupportedShardQuery, match=r"sets (user_id|id) to the SQL expression"):
            session.execute(statement)
        assert shop.sent == []


@pytest.mark.skipif(not VALUES_WITH_PARAMETERS, reason="values() plus parameters: 2.0.11 on")
def test_a_shard_key_bound_by_the_execution_parameters_routes_by_their_value(
    shop: Setup,
) -> None:
    """values(user_id=bindparam("u")) run with {"u": user}: the row goes to that user's
    table, where a read by the user finds it (a bound parameter is a value, not SQL)."""
    s = shop.schema
    statement = insert(s.Order).values(user_id=bindparam("u"), amount=bindparam("a"))
    with shop.session() as session:
        for user in USERS[:4]:
            session.execute(statement, {"u": user, "a": 990 + user})
        for user in USERS[:4]:
            mine = select(s.Order.amount).where(s.Order.user_id == user, s.Order.amount >= 990)
            assert session.scalars(mine).all() == [990 + user]
        session.rollback()


def test_listed_rows_naming_other_columns_are_refused(shop: Setup) -> None:
    """Rows of values([...]) naming different columns are refused before any SQL (SQLAlchemy
    writes the first row's columns in every row; split by table, each table's first row
    would decide), naming the row and its columns."""
    rows = [{"user_id": USERS[0], "amount": 1}, {"user_id": USERS[1], "status": "new"}]
    with shop.session() as session:
        shop.sent.clear()
        with pytest.raises(UnsupportedShardQuery, match=r"row 1 .* names the columns"):
            session.execute(insert(shop.schema.Order).values(rows))
        assert shop.sent == []


# --------------------------------------------------------------------------- legacy bulk methods


def _orders(session: Any, model: Any) -> list[tuple[Any, ...]]:
    query = select(model.id, model.user_id, model.amount).order_by(model.id)
    return [tuple(r) for r in session.execute(query)]


def test_bulk_insert_mappings_writes_each_row_to_its_table(shop: Setup) -> None:
    """Session.bulk_insert_mappings (legacy) of orders sends each row to its own table and
    database, like the twin's rows (it once wrote every row through one database's
    connection: 'no such table')."""
    s = shop.schema
    rows = [{"id": IDS.next_id(gene=u), "user_id": u, "amount": 700 + u} for u in USERS]
    with shop.session() as session:
        session.bulk_insert_mappings(s.Order, rows)
        session.bulk_insert_mappings(s.OrderTwin, rows)
        assert _orders(session, s.Order) == _orders(session, s.OrderTwin)
        for row in rows:
            assert session.get(s.Order, row["id"]).user_id == row["user_id"]
        session.rollback()


def test_bulk_update_mappings_updates_each_row_in_its_table(shop: Setup) -> None:
    """Session.bulk_update_mappings (legacy) by primary key changes the rows the twin's
    does, each in its own table."""
    s = shop.schema
    with shop.session() as session:
        ids = [row[0] for row in _orders(session, s.OrderTwin)[::5]]
        changes = [{"id": i, "amount": 500 + n} for n, i in enumerate(ids)]
        session.bulk_update_mappings(s.Order, changes)
        session.bulk_update_mappings(s.OrderTwin, changes)
        assert _orders(session, s.Order) == _orders(session, s.OrderTwin)
        session.rollback()


def test_bulk_save_objects_of_sharded_rows_is_refused(shop: Setup) -> None:
    """Session.bulk_save_objects (legacy) writes each class through one connection, not
    each row's database: refused for sharded objects before any SQL, naming the model;
    unsharded objects are saved as before."""
    s = shop.schema
    with shop.session() as session:
        shop.sent.clear()
        with pytest.raises(UnsupportedShardQuery, match=r"bulk_save_objects\(\) of Order"):
            objects = [s.Note(id=501, label="x"), s.Order(user_id=USERS[1], amount=1)]
            session.bulk_save_objects(objects)
        assert shop.sent == []
        session.bulk_save_objects([s.Note(id=501, label="x")])
        assert session.get(s.Note, 501) is not None
        session.rollback()


def test_bulk_insert_mappings_returning_defaults_is_refused(shop: Setup) -> None:
    """bulk_insert_mappings(..., return_defaults=True) is refused before any SQL, naming
    session.execute(insert(...).returning(...)) instead."""
    s = shop.schema
    with shop.session() as session:
        shop.sent.clear()
        with pytest.raises(UnsupportedShardQuery, match=r"returning"):
            session.bulk_insert_mappings(s.Order, [{"user_id": USERS[1]}], return_defaults=True)
        assert shop.sent == []
