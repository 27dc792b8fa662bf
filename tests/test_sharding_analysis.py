"""Each query that once gave a plausible wrong answer across shards: now exact, or refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import (
    BigInteger,
    Integer,
    and_,
    cast,
    delete,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.orm import DeclarativeBase, mapped_column

from snowshard.orm import id_time, snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, UnsupportedShardQuery
from tests.shop_setup import IDS, USERS, Setup, build_setup
from tests.shop_setup import rows_of as _rows_of
from tests.shop_setup import sort_rows as _sort
from tests.worlds import World, WorldFactory, split_databases

LAYOUT = IDS.layout


@pytest.fixture(scope="module")
def one_db(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Setup]:
    yield from build_setup(request, tmp_path_factory.mktemp("one"), "sqlite", 1)


@pytest.fixture(scope="module")
def two_db(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Setup]:
    yield from build_setup(request, tmp_path_factory.mktemp("two"), "sqlite", 2)


@pytest.fixture(scope="module")
def two_pg(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Setup]:
    yield from build_setup(request, tmp_path_factory.mktemp("pg"), "postgresql", 2)


def _both(setup: Setup, build: Any) -> tuple[list[Any], list[Any]]:
    s = setup.schema
    with setup.session() as session:
        got = _rows_of(session.execute(build(s.Order)))
        twin = _rows_of(session.execute(build(s.OrderTwin)))
    return _sort(got), _sort(twin)


def _refused(setup: Setup, build: Any, match: str) -> None:
    setup.sent.clear()
    with setup.session() as session, pytest.raises(UnsupportedShardQuery, match=match):
        session.execute(build(setup.schema.Order))
    assert setup.sent == []


def _expressions(m: Any) -> Any:
    return select(
        func.count() * 2,
        func.max(m.amount) - func.min(m.amount),
        func.coalesce(func.sum(m.amount), 0),
    ).select_from(m)


def test_expressions_over_aggregates_merge_across_databases(two_db: Setup) -> None:
    """count()*2, max-min and coalesce(sum, 0) give one row equal to one table's."""
    got, twin = _both(two_db, _expressions)
    assert got == twin and len(got) == 1


def test_expressions_over_aggregates_merge_over_an_in_list(one_db: Setup) -> None:
    """The same expressions with user_id IN (...) over several shards of one database."""
    got, twin = _both(one_db, lambda m: _expressions(m).where(m.user_id.in_(USERS[:5])))
    assert got == twin and len(got) == 1


def test_cast_over_an_aggregate_merges_across_shards(two_db: Setup) -> None:
    """cast(avg(x) * 100, Integer) gives the row one table gives (SQLite truncates)."""
    got, twin = _both(two_db, lambda m: select(cast(func.avg(m.amount) * 100, Integer)).select_from(m))
    assert got == twin and len(got) == 1


def test_group_by_an_unselected_column_keeps_every_group(two_db: Setup) -> None:
    """select(avg(amount)).group_by(status) returns one row per status, like one table."""
    got, twin = _both(two_db, lambda m: select(func.avg(m.amount)).group_by(m.status))
    assert got == twin and len(got) == 4


def test_having_over_avg_merges_across_databases(two_db: Setup) -> None:
    """HAVING avg(amount) > 5 is applied to the merged groups."""
    got, twin = _both(
        two_db,
        lambda m: select(m.user_id, func.count())
        .group_by(m.user_id)
        .having(func.avg(m.amount) > 5),
    )
    assert got == twin and 0 < len(got) < len(USERS)


def test_id_time_bucket_groups_across_databases(two_db: Setup) -> None:
    """An id_time bucket selected and grouped across databases equals one table's groups."""

    def build(m: Any) -> Any:
        bucket = func.strftime("%Y-%m-%d %H", id_time(m.id, LAYOUT))
        return select(bucket, func.count()).select_from(m).group_by(bucket)

    got, twin = _both(two_db, build)
    assert got == twin and sum(r[1] for r in got) == 40


@pytest.mark.postgres
def test_hourly_report_across_postgresql_databases(two_pg: Setup) -> None:
    """The README's hourly report (date_trunc of id_time, unselected) equals one table's."""

    def build(m: Any) -> Any:
        hour = func.date_trunc("hour", id_time(m.id, LAYOUT))
        return select(func.count()).select_from(m).group_by(hour)

    got, twin = _both(two_pg, build)
    assert got == twin and sum(r[0] for r in got) == 40


def test_window_over_all_rows_is_refused_across_shards(two_db: Setup) -> None:
    """count() OVER () is refused with the rewrite: partition by the shard key."""
    _refused(
        two_db,
        lambda m: select(m.id, func.count().over()),
        "partition by the shard key",
    )


def test_window_partitioned_by_the_shard_key_is_exact(two_db: Setup) -> None:
    """row_number() OVER (PARTITION BY user_id ORDER BY id) equals one table's numbering."""
    got, twin = _both(
        two_db,
        lambda m: select(m.id, func.row_number().over(partition_by=m.user_id, order_by=m.id)),
    )
    assert got == twin and len(got) == 40


def test_keyless_subquery_in_a_routed_query_is_refused(one_db: Setup) -> None:
    """A scalar subquery without key inside a one-shard query is refused, not narrowed."""
    _refused(
        one_db,
        lambda m: select(m.id).where(
            m.user_id == USERS[2], m.amount > select(func.avg(m.amount)).scalar_subquery()
        ),
        "subquery",
    )


def test_unsharded_exists_runs_in_its_own_database(two_db: Setup) -> None:
    """An EXISTS over unsharded tables only, in a multi-database session, reads the bind."""
    note = two_db.schema.Note
    with two_db.session() as session:
        found = session.scalar(select(exists(select(note.id).where(note.label == "u3"))))
    assert found is True


def test_unsharded_join_across_databases_is_refused(two_db: Setup) -> None:
    """A sharded model filtered by an unsharded table across databases is refused."""
    note = two_db.schema.Note
    _refused(
        two_db,
        lambda m: select(m.id).where(m.user_id.in_(select(note.id))),
        "not sharded and lives in one database",
    )


_WRITES_BY_NOTES = {
    "update of all shards": lambda m, note: update(m)
    .where(m.user_id.in_(select(note.id)))
    .values(amount=0),
    "delete of all shards": lambda m, note: delete(m).where(m.user_id.in_(select(note.id))),
    "update of one shard": lambda m, note: update(m)
    .where(m.user_id == USERS[2], m.user_id.in_(select(note.id)))
    .values(amount=0),
}


@pytest.mark.parametrize("write", list(_WRITES_BY_NOTES))
@pytest.mark.parametrize(
    "where", ["two_db", pytest.param("two_pg", marks=pytest.mark.postgres)]
)
def test_unsharded_filter_of_a_write_across_databases_is_refused(
    request: pytest.FixtureRequest, where: str, write: str
) -> None:
    """An UPDATE or DELETE of a sharded model filtered by an unsharded table of another
    database is refused before any SQL (it once reached a shard's database, which has no
    such table), and changes nothing."""
    setup: Setup = request.getfixturevalue(where)
    s = setup.schema
    with setup.session() as session:
        before = _rows_of(session.execute(select(s.Order.id, s.Order.amount).order_by(s.Order.id)))
        setup.sent.clear()
        with pytest.raises(UnsupportedShardQuery, match="not sharded and lives in one database"):
            session.execute(_WRITES_BY_NOTES[write](s.Order, s.Note))
        assert setup.sent == []
        session.commit()
        after = _rows_of(session.execute(select(s.Order.id, s.Order.amount).order_by(s.Order.id)))
    assert after == before and len(after) == 40


def test_unsharded_filter_in_one_database_is_exact(one_db: Setup) -> None:
    """In one database, the same unsharded filter answers like one table."""
    note = one_db.schema.Note
    got, twin = _both(one_db, lambda m: select(m.id).where(m.user_id.in_(select(note.id))))
    assert got == twin and len(got) == 20


def _noted(m: Any, note: Any, correlate: bool) -> Any:
    inner = select(note.id).where(note.id == m.user_id)
    if not correlate:
        # a shape of its own: SQLAlchemy 2.0.2's cache key ignores correlate(None), so the
        # same statement with and without it would share cached plans (and compiled SQL)
        inner = inner.where(note.id > 0).correlate(None)
    return select(m.id).where(m.user_id.in_([USERS[0], USERS[1], USERS[5]]), exists(inner))


def test_exists_correlated_with_the_outer_model_runs_per_shard(one_db: Setup) -> None:
    """An EXISTS on an unsharded table correlated with the outer model is exact per shard."""
    note = one_db.schema.Note
    got, twin = _both(one_db, lambda m: _noted(m, note, correlate=True))
    assert got == twin and len(got) == 5  # of users 3, 4 and 17, only 3 has a note


def test_exists_that_reads_the_model_itself_is_refused(one_db: Setup) -> None:
    """The same EXISTS with correlate(None) reads the sharded model inside: refused per shard."""
    note = one_db.schema.Note
    _refused(one_db, lambda m: _noted(m, note, correlate=False), "subquery")



# --------------------------------------------------------------------------- joins of models


def _joined(shop: Setup, build: Any) -> tuple[list[Any], list[Any]]:
    """Rows of ``build(order, item)`` on the sharded models and on their twins."""
    s = shop.schema
    with shop.session() as session:
        got = _rows_of(session.execute(build(s.Order, s.Item)))
        twin = _rows_of(session.execute(build(s.OrderTwin, s.ItemTwin)))
    return _sort(got), _sort(twin)


_UNTIED_JOINS = {
    "ON other columns": lambda o, i: select(func.count()).select_from(o).join(i, i.qty == o.amount),
    "ON keys compared by <": lambda o, i: select(func.count())
    .select_from(o)
    .join(i, i.user_id < o.user_id),
    "ON keys OR another test": lambda o, i: select(func.count())
    .select_from(o)
    .join(i, (i.user_id == o.user_id) | (i.qty == 1)),
    "ON a key and an expression": lambda o, i: select(func.count())
    .select_from(o)
    .join(i, i.user_id == o.user_id + 0),
    "ON a column that is no key": lambda o, i: select(o.id, i.id).join(i, i.order_id == o.id),
    "LEFT JOIN ON other columns": lambda o, i: select(func.count())
    .select_from(o)
    .outerjoin(i, i.qty == o.amount),
    "WHERE other columns": lambda o, i: select(func.count()).where(i.qty == o.amount),
    "on one shard": lambda o, i: select(o.id, i.id)
    .join(i, i.qty == o.amount)
    .where(o.user_id == USERS[0]),
}


@pytest.mark.parametrize("name", list(_UNTIED_JOINS))
def test_models_joined_otherwise_than_on_keys_are_refused(shop: Setup, name: str) -> None:
    """Orders and items joined without an equality of shard keys would be joined table by
    table, missing matches in other shards (one table finds 168 rows for qty = amount
    where the shards found 43): refused by name before any SQL, on one shard too."""
    s = shop.schema
    shop.sent.clear()
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="shard keys"):
        session.execute(_UNTIED_JOINS[name](s.Order, s.Item))
    assert shop.sent == []


def test_models_joined_on_keys_equal_one_table(shop: Setup) -> None:
    """A join whose ON (or WHERE) equates the shard keys, with other conditions beside it,
    inner or outer, finds what one table finds."""
    for build in (
        lambda o, i: select(func.count()).select_from(o).join(i, i.user_id == o.user_id),
        lambda o, i: select(o.id, i.qty).join(
            i, and_(i.user_id == o.user_id, i.order_id == o.id, i.qty > 1)
        ),
        lambda o, i: select(func.count(i.id)).select_from(o).outerjoin(
            i, and_(i.order_id == o.id, i.user_id == o.user_id)
        ),
        lambda o, i: select(func.count()).where(i.user_id == o.user_id, i.qty == o.amount),
    ):
        got, twin = _joined(shop, build)
        assert got == twin and twin


# --------------------------------------------------------------------------- writes reading items

_WRITES_READING_ITEMS = {
    "DELETE WHERE NOT EXISTS items on both keys": lambda o, i: delete(o).where(
        ~exists(select(i.id).where(i.user_id == o.user_id, i.order_id == o.id, i.qty > 2))
    ),
    "UPDATE SET a count of the order's items": lambda o, i: update(o).values(
        amount=select(func.count())
        .where(i.user_id == o.user_id, i.order_id == o.id)
        .scalar_subquery()
    ),
    "UPDATE WHERE key IN (SELECT key of items)": lambda o, i: update(o)
    .where(o.user_id.in_(select(i.user_id).where(i.qty >= 5)))
    .values(amount=-1),
    "DELETE of one shard WHERE EXISTS items": lambda o, i: delete(o).where(
        o.user_id == USERS[2], exists(select(i.id).where(i.user_id == o.user_id, i.qty > 3))
    ),
}


def _written(shop: Setup, build: Any) -> tuple[list[Any], list[Any]]:
    """(rowcount, then every order) after ``build(order, item)`` on each side, rolled back."""
    s = shop.schema
    outcomes = []
    with shop.session() as session:
        for o, i in ((s.Order, s.Item), (s.OrderTwin, s.ItemTwin)):
            count = session.execute(build(o, i)).rowcount
            rows = session.execute(select(o.id, o.user_id, o.amount).order_by(o.id))
            outcomes.append([(count,), *_rows_of(rows)])
        session.rollback()
    return outcomes[0], outcomes[1]


@pytest.mark.parametrize("name", list(_WRITES_READING_ITEMS))
def test_a_write_reading_items_on_the_shard_key_equals_one_table(shop: Setup, name: str) -> None:
    """An UPDATE or DELETE of orders that reads items in a subquery correlated on the shard
    key, or as key IN (SELECT key), runs table by table (orders_k with items_k) and changes
    what one table changes (it was refused: one sharded model per write)."""
    shop.sent.clear()
    got, twin = _written(shop, _WRITES_READING_ITEMS[name])
    assert got == twin and twin[0] != (0,)
    shard_writes = ("UPDATE orders_0", "DELETE FROM orders_0")
    writes = [sql for sql in shop.sent if sql.startswith(shard_writes)]
    assert writes
    for sql in writes:
        orders = {k for k in range(4) if f"orders_0{k}" in sql}
        items = {k for k in range(4) if f"items_0{k}" in sql}
        assert len(orders) == 1 and items == orders, sql


_WRITES_READING_ITEMS_OTHERWISE = {
    "UPDATE ... FROM items": (
        lambda o, i: update(o)
        .where(o.user_id == i.user_id, o.id == i.order_id)
        .values(amount=i.qty),
        "outside a subquery",
    ),
    "DELETE WHERE id IN (SELECT a column of items that is no key)": (
        lambda o, i: delete(o).where(o.id.in_(select(i.order_id).where(i.qty > 3))),
        "without being correlated",
    ),
    "UPDATE WHERE EXISTS items of the same order only": (
        lambda o, i: update(o)
        .where(exists(select(i.id).where(i.order_id == o.id)))
        .values(amount=0),
        "shard keys",
    ),
}


@pytest.mark.parametrize("name", list(_WRITES_READING_ITEMS_OTHERWISE))
def test_a_write_reading_items_otherwise_is_refused(shop: Setup, name: str) -> None:
    """A write that names items outside a subquery (UPDATE ... FROM), or reads them in a
    subquery not tied to the order's shard key (shard k's items would miss the others), is
    refused before any SQL and changes nothing."""
    build, match = _WRITES_READING_ITEMS_OTHERWISE[name]
    s = shop.schema
    shop.sent.clear()
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match=match):
        session.execute(build(s.Order, s.Item))
    assert shop.sent == []


def test_a_write_correlated_with_an_unsharded_table_equals_one_table(one_db: Setup) -> None:
    """In one database, a write whose EXISTS reads an unsharded table correlated with the
    written order runs on each shard (it was refused as an uncorrelated subquery)."""
    note = one_db.schema.Note
    got, twin = _written(
        one_db,
        lambda o, i: update(o)
        .where(exists(select(note.id).where(note.id == o.user_id)))
        .values(amount=o.amount + 100),
    )
    assert got == twin and twin[0] == (20,)


# --------------------------------------------------------------------------- derived tables


def _derived(o: Any) -> Any:
    """Orders of amounts above 3, as a derived table of their status, amount and user."""
    return select(o.status, o.amount, o.user_id).where(o.amount > 3).subquery()


def _numbered(o: Any) -> Any:
    """Orders numbered newest first within each user, as a derived table."""
    number = func.row_number().over(partition_by=o.user_id, order_by=o.id.desc())
    return select(o.id, o.amount, o.user_id, number.label("n")).subquery()


_ROW_WISE = {
    "count(*) of a subquery": lambda o: select(func.count()).select_from(_derived(o)),
    "count(*) of whole entities": lambda o: select(func.count()).select_from(select(o).subquery()),
    "grouped": lambda o: (lambda d: select(d.c.status, func.sum(d.c.amount), func.count())
                          .group_by(d.c.status))(_derived(o)),  # fmt: skip
    "ordered rows": lambda o: (lambda d: select(d.c.user_id, d.c.amount)
                               .order_by(d.c.amount.desc(), d.c.user_id).limit(5))(_derived(o)),  # fmt: skip
    "a CTE": lambda o: select(func.count()).select_from(select(o.id).where(o.amount > 3).cte()),
    "two levels": lambda o: select(func.count()).select_from(
        select(_derived(o).c.amount).subquery()
    ),
    "DISTINCT over the shard key": lambda o: select(func.count()).select_from(
        select(o.user_id).distinct().subquery()
    ),
    "DISTINCT over the key and more": lambda o: (lambda d: select(d.c.status, func.count())
        .group_by(d.c.status))(select(o.user_id, o.status).distinct().subquery()),  # fmt: skip
    "DISTINCT of whole entities": lambda o: select(func.count()).select_from(
        select(o).distinct().subquery()
    ),
    "each user's latest order (a window by the shard key)": lambda o: (
        lambda d: select(d.c.id, d.c.amount, d.c.user_id).where(d.c.n == 1)
    )(_numbered(o)),
    "a running sum by the shard key": lambda o: (
        lambda d: select(d.c.user_id, func.max(d.c.running)).group_by(d.c.user_id)
    )(select(o.user_id, func.sum(o.amount).over(partition_by=o.user_id, order_by=o.id)
             .label("running")).subquery()),  # fmt: skip
}


@pytest.mark.parametrize("name", list(_ROW_WISE))
def test_a_row_wise_derived_table_merges_as_the_model(shop: Setup, name: str) -> None:
    """A derived table or CTE that is a query's whole FROM, without LIMIT, GROUP BY or
    aggregates, with windows and DISTINCT only over a shard key (their rows live in one
    shard),
    holds each source's share of the rows: the query over it (the count idiom
    select(func.count()).select_from(stmt.subquery()) included) equals one table's."""
    got, twin = _both(shop, _ROW_WISE[name])
    assert got == twin and twin


_NOT_ROW_WISE = {
    "LIMIT": lambda o: select(func.count()).select_from(select(o.id).limit(5).subquery()),
    "DISTINCT": lambda o: select(func.count()).select_from(select(o.status).distinct().subquery()),
    "DISTINCT of an expression of the key": lambda o: select(func.count()).select_from(
        select(o.user_id % 3).distinct().subquery()
    ),
    "GROUP BY": lambda o: select(func.count()).select_from(
        select(o.user_id, func.count()).group_by(o.user_id).subquery()
    ),
    "a window": lambda o: select(func.count()).select_from(
        select(o.id, func.row_number().over(order_by=o.id).label("n")).subquery()
    ),
    "a window by another column": lambda o: (lambda d: select(d.c.id).where(d.c.n == 1))(
        select(o.id, func.row_number().over(partition_by=o.status, order_by=o.id).label("n"))
        .subquery()
    ),
    "joined with the model": lambda o: (lambda d: select(func.count()).select_from(o)
                                        .join(d, d.c.user_id == o.user_id))(_derived(o)),  # fmt: skip
}


@pytest.mark.parametrize("name", list(_NOT_ROW_WISE))
def test_a_derived_table_that_is_not_row_wise_is_refused(shop: Setup, name: str) -> None:
    """A derived table with LIMIT, DISTINCT, GROUP BY or a window not by the shard key
    gives a per-source answer (a count of each source's top 5), and one joined beside the
    model is not the query's whole FROM: refused before any SQL, naming what to leave
    out."""
    _refused(shop, _NOT_ROW_WISE[name], "derived table")


def _item_users(o: Any, i: Any, outer: bool) -> Any:
    """count(*) of the DISTINCT item users of orders (NULL for an order without items above
    4, when the join is outer)."""
    on = and_(i.order_id == o.id, i.user_id == o.user_id, i.qty > 4)
    joined = select(i.user_id).select_from(o).join(i, on, isouter=outer).distinct()
    return select(func.count()).select_from(joined.subquery())


def test_distinct_over_an_outer_joined_key_is_refused(shop: Setup) -> None:
    """DISTINCT over a key an outer join can make NULL would give one NULL row per source:
    refused before any SQL, where the same over an inner join merges."""
    s = shop.schema
    shop.sent.clear()
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="derived table"):
        session.execute(_item_users(s.Order, s.Item, outer=True))
    assert shop.sent == []
    got, twin = _joined(shop, lambda o, i: _item_users(o, i, outer=False))
    assert got == twin and twin


# --------------------------------------------------------------------------- key IN (SELECT key)


def _big(i: Any) -> Any:
    """The users of more than one item of quantity 5 (half of them)."""
    return select(i.user_id).where(i.qty == 5).group_by(i.user_id).having(func.count() > 1)


_KEYED_IN = {
    "orders of users with such items": lambda o, i: select(o.id).where(o.user_id.in_(_big(i))),
    "the same model": lambda o, i: select(o.id, o.amount).where(
        o.user_id.in_(select(o.user_id).where(o.amount > 10))
    ),
    "filtered only": lambda o, i: select(o.id).where(
        o.user_id.in_(select(i.user_id).where(i.qty == 5, i.order_id % 3 == 0))
    ),
    "counted": lambda o, i: select(func.count()).select_from(o).where(o.user_id.in_(_big(i))),
    "in an OR": lambda o, i: select(o.id).where(or_(o.amount > 11, o.user_id.in_(_big(i)))),
    "as a column": lambda o, i: select(o.id, o.user_id.in_(_big(i)).label("big")),
    "ordered and limited": lambda o, i: select(o.id)
    .where(o.user_id.in_(_big(i)))
    .order_by(o.id.desc())
    .limit(5),
    "NOT IN": lambda o, i: select(o.id).where(o.user_id.not_in(_big(i))),
    "under NOT": lambda o, i: select(o.id).where(~or_(o.amount > 11, o.user_id.in_(_big(i)))),
}


@pytest.mark.parametrize("name", list(_KEYED_IN))
def test_key_in_a_select_of_keys_is_exact(shop: Setup, name: str) -> None:
    """key IN (SELECT key of a model sharded alike ...) sees, for each outer row, every row
    of its key (they live in the same table index): it equals one table's answer."""
    got, twin = _joined(shop, _KEYED_IN[name])
    assert got == twin and twin
    with shop.session() as session:  # the subquery does filter: some users have no such item
        s = shop.schema
        users = set(session.scalars(_big(s.ItemTwin)))
        assert 0 < len(users) < len(USERS)


_UNKEYED_IN = {
    "a column that is no key": lambda o, i: select(o.id).where(
        o.id.in_(select(i.order_id).where(i.qty > 3))
    ),
    "a LIMIT": lambda o, i: select(o.id).where(o.user_id.in_(_big(i).limit(2))),
    "groups of another column": lambda o, i: select(o.id).where(
        o.user_id.in_(select(func.min(i.user_id)).group_by(i.qty))
    ),
}


@pytest.mark.parametrize("name", list(_UNKEYED_IN))
def test_key_in_a_select_of_other_values_is_refused(shop: Setup, name: str) -> None:
    """IN a subquery of a column that is no shard key, or limited, or grouped otherwise
    (each source would see its own rows only), is refused before any SQL."""
    s = shop.schema
    shop.sent.clear()
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="subquery"):
        session.execute(_UNKEYED_IN[name](s.Order, s.Item))
    assert shop.sent == []


def _nullable_keys(
    sharded_world: WorldFactory, backend: str, databases: int = 2
) -> tuple[World, dict[str, Any]]:
    """Orders and items whose ``user_id`` key may be NULL, over two databases (or
    ``databases``), and their
    unsharded twins: orders of users 1-8 and items of users 1 and 2 in tables 0-3, three
    orders with a NULL ``user_id`` (stored by their IDs' genes: tables 0 and 3, one in
    each database), and one item with a NULL ``user_id`` in table 3 only, so one table's
    rows hold NULL in the subquery and the others' do not."""

    class Base(DeclarativeBase):
        pass

    def columns() -> dict[str, Any]:
        return {
            "id": snowflake_pk(IDS, gene_from="user_id"),
            "user_id": mapped_column(BigInteger, nullable=True),
        }

    def sharded(name: str) -> Any:
        shards = Shards(4, key=("id", "user_id"), databases=split_databases(4, databases))
        return type(name, (Sharded, Base), {"__tablename__": name.lower() + "s",
                                            "__shards__": shards, **columns()})  # fmt: skip

    def twin(name: str) -> Any:
        return type(name + "Twin", (Base,), {"__tablename__": name.lower() + "s_twin",
                                             **columns()})  # fmt: skip

    models = {name: sharded(name) for name in ("Order", "Item")}
    models.update({name + "Twin": twin(name) for name in ("Order", "Item")})
    world = sharded_world(Base, backend)
    orders = [{"id": IDS.next_id(gene=u), "user_id": u} for u in range(1, 9)]
    orders += [{"id": IDS.next_id(gene=g), "user_id": None} for g in (0, 3, 3)]
    items = [{"id": IDS.next_id(gene=u), "user_id": u} for u in (1, 2)]
    items.append({"id": IDS.next_id(gene=3), "user_id": None})
    with ShardedSession(world.bind, databases=world.databases) as session:
        for prefix in ("", "Twin"):
            session.execute(insert(models["Order" + prefix]), orders)
            session.execute(insert(models["Item" + prefix]), items)
        session.commit()
    return world, models


def test_a_subquery_used_as_a_where_condition_and_a_column_is_refused(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """One ``scalar_subquery()`` in a WHERE condition and in a column: the column needs the
    keys NOT NULL (one table answers NULL, the shards FALSE), so the statement is refused."""
    world, m = _nullable_keys(sharded_world, sql_backend)

    def build(o: Any, i: Any) -> Any:
        users = select(i.user_id).scalar_subquery()
        return select(o.user_id, o.id.in_(users)).where(o.user_id.in_(users))

    with ShardedSession(world.bind, databases=world.databases) as session:
        twin = sorted(tuple(r) for r in session.execute(build(m["OrderTwin"], m["ItemTwin"])))
        world.log.clear()
        with pytest.raises(UnsupportedShardQuery, match="a key column can be NULL"):
            session.execute(build(m["Order"], m["Item"]))
    assert len(world.log) == 0
    assert twin == [(1, None), (2, None)]


def test_in_of_keys_that_can_be_null_is_exact_as_a_where_condition(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """key IN (SELECT key ...) as a WHERE condition keeps the rows one table keeps, NULLs
    in one table's subquery notwithstanding (NULL and FALSE both drop a row)."""
    world, m = _nullable_keys(sharded_world, sql_backend)

    def users(o: Any, i: Any) -> Any:
        return select(o.user_id).where(o.user_id.in_(select(i.user_id)), o.user_id < 8)

    with ShardedSession(world.bind, databases=world.databases) as session:
        got = sorted(session.scalars(users(m["Order"], m["Item"])))
        twin = sorted(session.scalars(users(m["OrderTwin"], m["ItemTwin"])))
    assert got == twin == [1, 2]


_NULL_COUNTS = {
    "as a column": lambda o, i: select(o.user_id, o.user_id.in_(select(i.user_id))),
    "NOT IN": lambda o, i: select(o.user_id, o.user_id).where(o.user_id.not_in(select(i.user_id))),
    "under NOT": lambda o, i: select(o.user_id, o.user_id).where(
        ~or_(o.user_id.in_(select(i.user_id)), o.user_id > 100)
    ),
}


@pytest.mark.parametrize("name", list(_NULL_COUNTS))
def test_in_of_keys_that_can_be_null_is_refused_where_null_counts(
    sharded_world: WorldFactory, sql_backend: str, name: str
) -> None:
    """Where the IN's NULL and FALSE differ (a column, NOT IN, under NOT) and a key can be
    NULL, the tables without the NULL would answer FALSE where one table answers NULL:
    refused before any SQL (the twin shows the NULL: users 3-8 get NULL or no row)."""
    world, m = _nullable_keys(sharded_world, sql_backend)
    build = _NULL_COUNTS[name]
    with ShardedSession(world.bind, databases=world.databases) as session:
        twin = {user: seen for user, seen in session.execute(build(m["OrderTwin"], m["ItemTwin"]))}
        world.log.clear()
        with pytest.raises(UnsupportedShardQuery, match="a key column can be NULL"):
            session.execute(build(m["Order"], m["Item"]))
    assert len(world.log) == 0
    assert all(twin.get(user) is None for user in range(3, 9))


_NULL_PARTITIONS = {
    "a window partitioned by the key": lambda o: select(
        o.id, o.user_id, func.count().over(partition_by=o.user_id)
    ),
    "a derived table DISTINCT over the key": lambda o: select(func.count()).select_from(
        select(o.user_id).distinct().subquery()
    ),
}


@pytest.mark.parametrize("name", list(_NULL_PARTITIONS))
def test_a_key_that_can_be_null_does_not_partition_rows(
    sharded_world: WorldFactory, sql_backend: str, name: str
) -> None:
    """Rows whose key is NULL live in the tables of their IDs: one table has one NULL
    partition (and one NULL value), the shards one per database. A window partitioned by
    such a key, or a DISTINCT derived table over it, is refused before any SQL."""
    world, m = _nullable_keys(sharded_world, sql_backend)
    build = _NULL_PARTITIONS[name]
    with ShardedSession(world.bind, databases=world.databases) as session:
        twin = [tuple(r) for r in session.execute(build(m["OrderTwin"]))]
        world.log.clear()
        with pytest.raises(UnsupportedShardQuery, match="NOT NULL"):
            session.execute(build(m["Order"]))
    assert len(world.log) == 0
    if len(twin[0]) == 3:  # the three NULL-key orders are one partition of three
        assert sorted(n for _, user, n in twin if user is None) == [3, 3, 3]
    else:  # users 1-8 and NULL
        assert twin == [(9,)]


@pytest.mark.parametrize("name", list(_NULL_PARTITIONS))
def test_a_key_that_can_be_null_partitions_rows_within_one_database(
    sharded_world: WorldFactory, sql_backend: str, name: str
) -> None:
    """With every table in one database the statement is one UNION ALL over them, so the
    same window or DISTINCT sees every NULL row at once and equals the twin."""
    world, m = _nullable_keys(sharded_world, sql_backend, databases=1)
    build = _NULL_PARTITIONS[name]
    with ShardedSession(world.bind, databases=world.databases) as session:
        got = sorted((tuple(r) for r in session.execute(build(m["Order"]))), key=repr)
        twin = sorted((tuple(r) for r in session.execute(build(m["OrderTwin"]))), key=repr)
    assert got == twin and twin


def _outer_items(o: Any, i: Any, partition: Any) -> Any:
    """Orders LEFT JOIN their items of the same quantity as the order's amount, with a
    count per partition: orders without such an item get NULL item columns."""
    return select(o.id, i.id, func.count().over(partition_by=partition(o, i))).outerjoin(
        i, and_(i.user_id == o.user_id, i.order_id == o.id, i.qty == o.amount)
    )


def test_a_window_partitioned_by_an_outer_joined_key_is_refused(shop: Setup) -> None:
    """PARTITION BY items.user_id of orders LEFT JOIN items: the orders without an item make
    one NULL partition on one table, one per table across shards: refused before any SQL."""
    s = shop.schema
    with shop.session() as session:
        twin = session.execute(_outer_items(s.OrderTwin, s.ItemTwin, lambda o, i: i.user_id))
        assert any(item is None for _, item, _ in twin)
        shop.sent.clear()
        with pytest.raises(UnsupportedShardQuery, match="outer join"):
            session.execute(_outer_items(s.Order, s.Item, lambda o, i: i.user_id))
    assert shop.sent == []


def test_a_window_partitioned_by_the_preserved_sides_key_is_exact(shop: Setup) -> None:
    """PARTITION BY orders.user_id of the same outer join: the key is never NULL-extended,
    so each partition is in one table, as on one table."""
    got, twin = _joined(shop, lambda o, i: _outer_items(o, i, lambda o, i: o.user_id))
    assert got == twin and any(item is None for _, item, _ in twin)


# --------------------------------------------------------------------------- EXISTS


def _typed(setup: Setup, build: Any) -> tuple[list[Any], list[Any]]:
    """Rows of ``build`` on the sharded model and its twin, each value with its type."""
    s = setup.schema
    with setup.session() as session:
        got, twin = (
            [tuple((type(v).__name__, v) for v in row) for row in session.execute(build(m))]
            for m in (s.Order, s.OrderTwin)
        )
    return got, twin


def test_select_exists_is_true_where_any_shard_has_a_row(shop: Setup) -> None:
    """select(exists().where(...)) runs on every source and is true (or 1, as the database
    types it) where any source's is: keyed, keyless, none found, two at once, labelled."""
    for build in (
        lambda o: select(exists().where(o.user_id == USERS[2])),
        lambda o: select(exists().where(o.amount > 11)),
        lambda o: select(exists().where(o.amount > 1000)),
        lambda o: select(exists().where(o.status == "paid"), exists().where(o.amount < 0)),
        lambda o: select(select(o.id).where(o.amount > 11).exists().label("any_big")),
    ):
        got, twin = _typed(shop, build)
        assert got == twin and len(twin) == 1


def test_select_exists_of_a_limited_or_distinct_select_merges(shop: Setup) -> None:
    """EXISTS of a SELECT with LIMIT (1 or 0) or DISTINCT asks the same of each source as of
    one table: whether a row is there."""
    for build in (
        lambda o: select(select(o.id).where(o.amount > 11).limit(1).exists()),
        lambda o: select(select(o.id).where(o.amount > 1000).limit(1).exists()),
        lambda o: select(select(o.id).where(o.amount > 11).limit(0).exists()),
        lambda o: select(select(o.status).where(o.amount > 11).distinct().exists()),
    ):
        got, twin = _typed(shop, build)
        assert got == twin and len(twin) == 1


def test_select_exists_of_a_per_shard_answer_is_refused(shop: Setup) -> None:
    """EXISTS of a grouped SELECT (groups of one shard), of an OFFSET (rows past the
    first of one shard), or one beside a FROM list, is refused before any SQL."""
    for build in (
        lambda o: select(
            select(o.user_id).group_by(o.user_id).having(func.count() > 5).exists()
        ),
        lambda o: select(select(o.id).where(o.amount > 11).offset(3).exists()),
        lambda o: select(o.id, exists().where(o.amount > 11)),
    ):
        _refused(shop, build, "subquery")


# --------------------------------------------------------------------------- SELECT *

_STARS = {
    "literal_column('*')": lambda o: select(literal_column("*")).select_from(o),
    "text('*')": lambda o: select(text("*")).select_from(o),
    "orders.*": lambda o: select(literal_column("orders.*")).select_from(o),
    "* beside a column": lambda o: select(literal_column("*")).select_from(o).where(o.amount > 1),
    "* in a derived table": lambda o: select(
        select(literal_column("*")).select_from(o).subquery()
    ),
    "* over an IN list": lambda o: select(literal_column("*"))
    .select_from(o)
    .where(o.user_id.in_(USERS[:3])),
}


@pytest.mark.parametrize("name", list(_STARS))
def test_star_over_the_tables_of_one_database_is_refused(one_db: Setup, name: str) -> None:
    """SELECT * over a UNION ALL of one database's tables would also return the union's
    own column (one more than one table's): refused by name before any SQL."""
    _refused(one_db, _STARS[name], r"SELECT .*\* over several tables")


@pytest.mark.parametrize("name", list(_STARS))
def test_star_across_databases_is_refused(two_db: Setup, name: str) -> None:
    """SELECT * merged across databases is refused by name before any SQL (it once failed
    inside SQLAlchemy with an AttributeError)."""
    _refused(two_db, _STARS[name], r"SELECT .*\* over several tables")


def test_star_on_one_shard_equals_one_table(shop: Setup) -> None:
    """SELECT * of one user's orders reads one table, whose columns are one table's."""
    got, twin = _both(
        shop, lambda o: select(literal_column("*")).select_from(o).where(o.user_id == USERS[0])
    )
    assert got == twin and len(got) > 0 and len(got[0]) == 4


def test_star_inside_exists_equals_one_table(shop: Setup) -> None:
    """EXISTS (SELECT * ...) correlated on the shard key is exact: its columns are not read."""
    got, twin = _joined(
        shop,
        lambda o, i: select(o.id).where(
            exists(
                select(literal_column("*"))
                .select_from(i)
                .where(i.user_id == o.user_id, i.order_id == o.id, i.qty > 2)
            )
        ),
    )
    assert got == twin and 0 < len(got) < len(_joined(shop, lambda o, i: select(o.id))[1])
