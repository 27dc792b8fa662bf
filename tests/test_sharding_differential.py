"""Random statements on a sharded model equal the same statements on one plain table, or raise
UnsupportedShardQuery before any SQL runs.

The configurations (``tests/twin_setups.py``): SQLite, PostgreSQL (one database, two
databases) and MariaDB (one, two), and the same shop with some ``user_id`` keys NULL,
with a second layout generation, and queried through an AsyncShardedSession, on SQLite and
across two databases of each server. The
rows are created once per configuration (a twin shop of ``tests/worlds.py``: sharded
orders and items, their plain twins, an unsharded ``notes`` table and the reference table
``statuses``); each example builds one statement from a grammar (filters on key and
non-key columns, IN lists, ID time ranges, aggregates and expressions over them (division and CAST
included), GROUP BY selected and unselected keys, HAVING, ORDER BY with ties and NULLs,
LIMIT/OFFSET, DISTINCT, window functions, subqueries, binding-table and unsharded joins,
and inner/outer joins, filters, groups, EXISTS/IN/scalar subqueries, CTEs and derived
tables with the reference table) for both sides. ``SNOWSHARD_DIFFERENTIAL_EXAMPLES`` sets
the examples per configuration. The examples are the same on every run (derandomized);
``SNOWSHARD_DIFFERENTIAL_SEED=N`` draws another fixed set, to look further afield
(``SNOWSHARD_DIFFERENTIAL_SEED=7 SNOWSHARD_DIFFERENTIAL_EXAMPLES=2000 pytest -k differential``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, reject
from hypothesis import strategies as st
from sqlalchemy import Integer, and_, case, cast, desc, exists, func, select, union, union_all
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import with_loader_criteria

from snowshard.orm import id_between, id_since
from snowshard.sharding import UnsupportedShardQuery
from tests.shop_setup import rows_of, sort_rows
from tests.twin_setups import (
    CONFIGS,
    TWIN_BACKENDS,
    Filled,
    Setup,
    both_rows,
    build_setup,
    differential,
)
from tests.worlds import (
    LAYOUT,
    TWIN_SWITCH,
    TWIN_USERS,
    Models,
    World,
    distinct_on,
)

KNOWN_BUGS: dict[str, Callable[[World], bool]] = {}
"""Library bugs the grammar can produce: bug -> whether it shows in a configuration.

Statements a bug affects are skipped (``reject()``) where it shows, so the test stays a
guard for everything else; the xfail(strict=True) test named with each bug below
reproduces it. Remove the entry once the library is fixed (that test then XPASSes)."""
USERS = list(TWIN_USERS)
EARLIER_ERA = TWIN_SWITCH - timedelta(days=30)
"""Where :class:`~tests.worlds.TwoEras` issues its first IDs before the switch."""


@pytest.fixture(scope="module", params=CONFIGS)
def setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    yield from build_setup(request, tmp_path_factory.mktemp("diff"), *request.param)


# --------------------------------------------------------------------------- the grammar

Build = Callable[[Models], Any]
"""A side of the twin shop -> statement; called once with the sharded models, once with
the twins."""


@dataclass
class Case:
    build: Build
    ordered: list[int]
    """Result positions the ORDER BY determines (compared in sequence); [] for none."""
    total: bool
    """Whether the ORDER BY fixes the row order completely (LIMIT/OFFSET need that)."""
    bugs: tuple[str, ...] = ()
    """The :data:`KNOWN_BUGS` this statement runs into."""
    postgres_only: bool = False
    """Whether the statement is PostgreSQL's own SQL (DISTINCT ON)."""
    filter_clause: bool = False
    """Whether the statement aggregates with FILTER, which MariaDB does not have."""
    criteria: str = ""
    """The :data:`CRITERIA` the statement carries, if any."""
    first: bool = False
    """Whether the sharded side runs with ``subqueries_first=True``."""


def _where(draw: Any, m: Any) -> list[Callable[[Any], Any]]:
    options: list[Callable[[Any], Any]] = [
        lambda m: m.user_id == USERS[1],
        lambda m: m.user_id.in_([USERS[0], USERS[3], USERS[5]]),
        lambda m: m.amount > 5,
        lambda m: m.status == "paid",
        lambda m: m.status.is_(None),
        lambda m: m.user_id.in_([USERS[2], 999]),
        # time ranges on the ID: a generations shop's rows after its switch, or the first
        # few of its earlier era (other shops' IDs are of today: all or none)
        lambda m: id_since(m.id, LAYOUT, TWIN_SWITCH),
        lambda m: id_between(m.id, LAYOUT, EARLIER_ERA, EARLIER_ERA + timedelta(milliseconds=20)),
    ]
    chosen = draw(st.lists(st.sampled_from(range(len(options))), max_size=2, unique=True))
    return [options[i] for i in chosen]


def _rows(draw: Any) -> Case:
    columns = ["id", "user_id", "amount", "status"]
    picked = draw(st.lists(st.sampled_from(columns), min_size=1, max_size=4, unique=True))
    order = draw(st.lists(st.sampled_from(picked), max_size=2, unique=True))
    desc = draw(st.lists(st.booleans(), min_size=len(order), max_size=len(order)))
    limited = draw(st.booleans()) and bool(order)
    limit = draw(st.integers(1, 6)) if limited else None
    offset = draw(st.integers(0, 4)) if limited else 0
    distinct = draw(st.booleans()) and not limited
    window = draw(st.sampled_from([None, "count_key", "count_all", "row_number_key"]))
    filters = _where(draw, None)

    def build(w: Models) -> Any:
        m = w.Order
        cols = [getattr(m, c) for c in picked]
        if window == "count_key":
            cols.append(func.count().over(partition_by=m.user_id))
        elif window == "count_all":
            cols.append(func.count().over())
        elif window == "row_number_key":
            cols.append(func.row_number().over(partition_by=m.user_id, order_by=m.id))
        statement = select(*cols).where(*[f(m) for f in filters])
        keys = [getattr(m, c).desc() if d else getattr(m, c) for c, d in zip(order, desc)]
        if limited:
            keys.append(m.id)
            if "id" not in picked:
                statement = statement.add_columns(m.id)
        statement = statement.order_by(*keys)
        if distinct:
            statement = statement.distinct()
        if limited:
            statement = statement.limit(limit).offset(offset)
        return statement

    return Case(build, [picked.index(c) for c in order], limited)


_AGGREGATES: list[Callable[[Any], Any]] = [
    lambda m: func.count(),
    lambda m: func.sum(m.amount),
    lambda m: func.min(m.amount),
    lambda m: func.max(m.amount),
    lambda m: func.avg(m.amount),
    lambda m: func.count() * 2,
    lambda m: func.max(m.amount) - func.min(m.amount),
    lambda m: func.coalesce(func.sum(m.amount), 0),
    lambda m: cast(func.avg(m.amount) * 100, Integer),
    lambda m: case((func.count() > 3, "many"), else_="few"),
    lambda m: func.count(m.status.distinct()),
    lambda m: func.count(m.user_id.distinct()),
    lambda m: func.count(m.amount.distinct()) * 2,
    lambda m: func.sum(m.amount.distinct()),
    lambda m: func.avg(m.user_id.distinct()),
    lambda m: func.max(m.amount.distinct()) - func.min(m.user_id.distinct()),
    lambda m: func.min(m.status.distinct()),
    lambda m: func.sum(m.amount) / func.count(),
    lambda m: func.sum(m.amount) // func.count(),
    lambda m: cast(func.sum(m.amount) * 10 / func.count(), Integer),
    lambda m: func.max(m.amount) / (func.min(m.amount) + 1),
    lambda m: func.count() / 7,
]


_FILTERED: list[Callable[[Any], Any]] = [
    lambda m: func.count().filter(m.amount > 5),
    lambda m: func.sum(m.amount).filter(m.status.is_not(None)),
    lambda m: func.avg(m.amount).filter(m.user_id != USERS[1]),
    lambda m: func.min(m.status).filter(m.amount < 6),
    lambda m: func.max(m.amount).filter(m.amount < 9) - func.min(m.amount),
    lambda m: func.sum(m.amount).filter(m.amount > 2) / func.count().filter(m.amount > 2),
    lambda m: func.count(m.status.distinct()).filter(m.amount > 1),
]
"""Aggregates with FILTER (SQLite and PostgreSQL)."""


def _grouped(draw: Any) -> Case:
    aggs = draw(st.lists(st.sampled_from(range(len(_AGGREGATES))), min_size=1, max_size=3))
    filtered = draw(st.lists(st.sampled_from(range(len(_FILTERED))), max_size=2))
    key = draw(st.sampled_from([None, "status", "user_id"]))
    shown = key is not None and draw(st.booleans())
    having = key is not None and draw(st.booleans())
    ordered = shown and draw(st.booleans())
    filters = _where(draw, None)

    def build(w: Models) -> Any:
        m = w.Order
        cols = ([getattr(m, key)] if shown and key else []) + [_AGGREGATES[a](m) for a in aggs]
        cols += [_FILTERED[a](m) for a in filtered]
        statement = select(*cols).select_from(m).where(*[f(m) for f in filters])
        if key is not None:
            statement = statement.group_by(getattr(m, key))
        if having:
            statement = statement.having(func.avg(m.amount) > 4)
        if ordered and key is not None:
            statement = statement.order_by(getattr(m, key))
        return statement

    return Case(build, [0] if ordered else [], ordered, filter_clause=bool(filtered))


def _nested(draw: Any) -> Case:
    """Orders filtered by a subquery (scalar, EXISTS written out or built by ``.any()`` /
    ``.has()``, IN, IN over a join through ``Order.items``), or joined to their items."""
    kinds = [
        "scalar", "exists_item", "in_notes", "exists_notes", "join", "in_keys", "in_through",
        "any", "has",
    ]  # fmt: skip
    kind = draw(st.sampled_from(kinds))
    filters = _where(draw, None)
    # key IN (SELECT key ...): exact when grouped, if at all, by the key; refused otherwise
    grouped = draw(st.sampled_from([None, "user_id", "qty"]))
    negated = draw(st.booleans())

    def build(w: Models) -> Any:
        m, i, note = w.Order, w.Item, w.Note
        statement = select(m.id, m.amount).where(*[f(m) for f in filters])
        if kind == "scalar":
            return statement.where(m.amount > select(func.avg(m.amount)).scalar_subquery())
        if kind == "exists_item":
            inner = select(i.id).where(i.user_id == m.user_id, i.order_id == m.id, i.qty > 3)
            return statement.where(exists(inner))
        if kind == "any":  # Order.items.any(), as SQLAlchemy builds its EXISTS
            return statement.where(~m.items.any() if negated else m.items.any(i.qty > 3))
        if kind == "has":
            r = w.Status
            return statement.where(~m.status_row.has() if negated else m.status_row.has(r.rank > 1))
        if kind == "in_notes":
            return statement.where(m.user_id.in_(select(note.id)))
        if kind == "exists_notes":
            return statement.where(exists(select(note.id).where(note.label == "u3")))
        if kind == "in_through":  # a join through Order.items inside the subquery
            keys = select(m.user_id).join(m.items).where(i.qty >= 4)
            return statement.where(m.user_id.not_in(keys) if negated else m.user_id.in_(keys))
        if kind == "in_keys":
            keys = select(i.user_id if grouped != "qty" else func.min(i.user_id))
            keys = keys.where(i.qty >= 4)
            if grouped is not None:
                keys = keys.group_by(getattr(i, grouped)).having(func.count() > 1)
            test = m.user_id.not_in(keys) if negated else m.user_id.in_(keys)
            return statement.where(test)
        return (
            select(m.id, i.qty)
            .join(i, and_(i.user_id == m.user_id, i.order_id == m.id))
            .where(*[f(m) for f in filters])
        )

    return Case(build, [], False)


def _reference_where(draw: Any) -> list[Callable[[Any], Any]]:
    """Filters on the reference table's columns (``r``: the statuses model)."""
    options: list[Callable[[Any], Any]] = [
        lambda r: r.rank > 1,
        lambda r: r.grp == "open",
        lambda r: r.rank.is_(None),
        lambda r: r.code.in_(["new", "lost"]),
    ]
    chosen = draw(st.lists(st.sampled_from(range(len(options))), max_size=2, unique=True))
    return [options[i] for i in chosen]


_JOINS = ["inner", "outer", "from_reference"]
"""How orders meet statuses on ``Order.status == Status.code`` (a non-key column): an inner
join, orders LEFT OUTER JOIN statuses, or statuses LEFT OUTER JOIN orders."""


def _joined(w: Models, columns: list[Any], how: str, tables: bool, through: bool = False) -> Any:
    """``columns`` from orders and statuses joined as ``how`` says (:data:`_JOINS`).

    ``tables``: the join names the Core tables of the models (``Order.__table__``), else
    the ORM entities; ``through``: orders join statuses through ``Order.status_row``.
    """
    m, r = w.Order, w.Status
    if through and not tables and how != "from_reference":
        return select(*columns).select_from(m).join(m.status_row, isouter=how != "inner")
    left, right, on = (r, m, m.status == r.code) if how == "from_reference" else (m, r, r.code == m.status)
    if tables:
        left, right = left.__table__, right.__table__
    return select(*columns).select_from(left).join(right, on, isouter=how != "inner")


def _reference_rows(draw: Any) -> Case:
    how = draw(st.sampled_from(_JOINS))
    tables, through = draw(st.booleans()), draw(st.booleans())
    columns = ["o.id", "o.amount", "r.code", "r.grp", "r.rank"]
    picked = draw(st.lists(st.sampled_from(columns), min_size=1, max_size=3, unique=True))
    order = draw(st.lists(st.sampled_from(picked), max_size=2, unique=True))
    limited = draw(st.booleans()) and bool(order)
    limit = draw(st.integers(1, 6)) if limited else None
    offset = draw(st.integers(0, 4)) if limited else 0
    distinct = draw(st.booleans()) and not limited
    filters, reference_filters = _where(draw, None), _reference_where(draw)

    def build(w: Models) -> Any:
        def column(name: str) -> Any:
            table, attribute = name.split(".")
            return getattr(w.Order if table == "o" else w.Status, attribute)

        statement = _joined(w, [column(c) for c in picked], how, tables, through).where(
            *[f(w.Order) for f in filters], *[f(w.Status) for f in reference_filters]
        )
        keys = [column(c) for c in order]
        if limited:  # (code, order id) is unique in every one of the joins
            keys += [w.Status.code, w.Order.id]
            statement = statement.add_columns(w.Status.code, w.Order.id)
        statement = statement.order_by(*keys)
        if distinct:
            statement = statement.distinct()
        if limited:
            statement = statement.limit(limit).offset(offset)
        return statement

    return Case(build, [picked.index(c) for c in order], limited)


_REFERENCE_AGGREGATES: list[Callable[[Any], Any]] = [
    lambda r: func.sum(r.rank),
    lambda r: func.max(r.rank),
    lambda r: func.count(r.code),
    lambda r: func.coalesce(func.sum(r.rank), 0) + func.count(),
]




def _reference_grouped(draw: Any) -> Case:
    how = draw(st.sampled_from(_JOINS))
    tables = draw(st.booleans())
    aggs = draw(st.lists(st.sampled_from(range(len(_AGGREGATES))), max_size=2))
    reference_aggs = draw(
        st.lists(st.sampled_from(range(len(_REFERENCE_AGGREGATES))), max_size=2)
    )
    if not aggs and not reference_aggs:
        aggs = [0]
    key = draw(st.sampled_from([None, "grp", "code", "rank"]))
    shown = key is not None and draw(st.booleans())
    having = key is not None and draw(st.booleans())
    ordered = shown and draw(st.booleans())
    filters, reference_filters = _where(draw, None), _reference_where(draw)

    def build(w: Models) -> Any:
        m, r = w.Order, w.Status
        cols = [getattr(r, key)] if shown and key else []
        cols += [_AGGREGATES[a](m) for a in aggs]
        cols += [_REFERENCE_AGGREGATES[a](r) for a in reference_aggs]
        statement = _joined(w, cols, how, tables).where(
            *[f(m) for f in filters], *[f(r) for f in reference_filters]
        )
        if key is not None:
            statement = statement.group_by(getattr(r, key))
        if having:
            statement = statement.having(func.count() > 2)
        if ordered and key is not None:
            statement = statement.order_by(getattr(r, key))
        return statement

    return Case(build, [0] if ordered else [], ordered)


_REFERENCE_NESTED = [
    "exists",
    "not_exists",
    "in",
    "scalar",
    "scalar_column",
    "cte",
    "derived",
    "binding_join",
    "window",
    "sharded_inside",
]


def _reference_nested(draw: Any) -> Case:
    kind = draw(st.sampled_from(_REFERENCE_NESTED))
    filters, reference_filters = _where(draw, None), _reference_where(draw)

    def build(w: Models) -> Any:
        m, i, r = w.Order, w.Item, w.Status
        own = [f(m) for f in filters]
        theirs = [f(r) for f in reference_filters]
        statement = select(m.id, m.amount).where(*own)
        if kind == "exists":
            return statement.where(exists(select(r.code).where(r.code == m.status, *theirs)))
        if kind == "not_exists":
            return statement.where(~exists(select(r.code).where(r.code == m.status, *theirs)))
        if kind == "in":
            return statement.where(m.status.in_(select(r.code).where(*theirs)))
        if kind == "scalar":
            return statement.where(m.amount > select(func.max(r.rank)).scalar_subquery())
        if kind == "scalar_column":
            grp = select(r.grp).where(r.code == m.status).scalar_subquery()
            return select(m.id, grp.label("grp")).where(*own)
        if kind == "cte":
            codes = select(r.code).where(*theirs).cte("codes")
            return statement.where(m.status.in_(select(codes.c.code)))
        if kind == "derived":
            table = select(r.code, r.grp).where(*theirs).subquery("picked")
            return select(m.id, table.c.grp).join(table, table.c.code == m.status).where(*own)
        if kind == "binding_join":
            return (
                select(m.id, i.qty, r.grp)
                .join(i, and_(i.user_id == m.user_id, i.order_id == m.id))
                .join(r, r.code == m.status)
                .where(*own, *theirs)
            )
        if kind == "window":
            return select(m.id, func.count().over(partition_by=r.grp)).join(
                r, r.code == m.status
            ).where(*own, *theirs)
        # the reference table outside, the sharded model in a subquery
        return select(r.code, r.grp).where(
            *theirs, exists(select(m.id).where(m.status == r.code, *own))
        )

    return Case(build, [], False)


_ITEM_CONDITIONS: list[Callable[[Any, Any], Any]] = [
    lambda m, i: i.user_id == m.user_id,
    lambda m, i: i.order_id == m.id,
    lambda m, i: i.qty == m.amount,
    lambda m, i: i.qty > 1,
    lambda m, i: i.user_id < m.user_id,
    lambda m, i: (i.user_id == m.user_id) | (i.qty == 1),
]
"""Conditions between an order ``m`` and an item ``i``: the first ties their shard keys."""


def _items_joined(draw: Any) -> Case:
    """Orders and items joined (inner or left outer, either first) on one or two random
    conditions (or through ``Order.items``, whose ON clause they extend), or tied by them
    in WHERE, maybe then statuses joined from Order, counted or as rows (with a window
    partitioned by either side's key), the columns maybe given after the joins
    (``with_only_columns()``): one table's rows, or refused where no condition ties the
    keys."""
    chosen = draw(st.lists(st.sampled_from(range(len(_ITEM_CONDITIONS))), min_size=1, max_size=2, unique=True))
    how = draw(st.sampled_from(["inner", "outer", "where"]))
    if how == "where" and chosen == [3]:  # no condition relates them: a cross join in ON
        how = "inner"
    shape = draw(st.sampled_from(["counted", "rows", "window by order", "window by item"]))
    filters = _where(draw, None)
    through = how != "where" and draw(st.booleans())  # Order.items, with the conditions added
    from_item = how != "where" and not through and draw(st.booleans())  # items JOIN orders
    # then statuses, joined from Order (through Order.status_row, or by hand)
    status = draw(st.sampled_from([None, None, "relationship", "join_from"]))
    late = draw(st.booleans())  # the columns given by with_only_columns() after the joins

    def build(w: Models) -> Any:
        m, i = w.Order, w.Item
        tie = and_(*[_ITEM_CONDITIONS[c](m, i) for c in chosen])
        columns = [func.count(), func.count(i.id)] if shape == "counted" else [m.id, i.id, i.qty]
        if shape.startswith("window"):  # by a key an outer join may NULL-extend, or not
            key = m.user_id if shape == "window by order" else i.user_id
            columns.append(func.count().over(partition_by=key))
        if status is not None:
            columns.append(func.count(w.Status.code) if shape == "counted" else w.Status.grp)
        statement = select(m.id if late else columns[0], *([] if late else columns[1:]))
        statement = statement.where(*[f(m) for f in filters])
        if how == "where":
            statement = statement.where(tie)
        elif through:
            statement = statement.select_from(m).join(m.items.and_(tie), isouter=how == "outer")
        elif from_item:
            statement = statement.select_from(i).join(m, tie, isouter=how == "outer")
        else:
            statement = statement.select_from(m).join(i, tie, isouter=how == "outer")
        if status == "relationship":
            statement = statement.outerjoin(m.status_row)
        elif status == "join_from":
            statement = statement.join_from(m, w.Status, m.status == w.Status.code, isouter=True)
        return statement.with_only_columns(*columns) if late else statement

    return Case(build, [], False)


def _derived(draw: Any) -> Case:
    """A query over a derived table (or CTE) of orders: a count, a grouped sum or ordered
    rows, the derived SELECT plain, with DISTINCT over columns or a window partitioned by
    columns with or without a shard key (merged or refused), or with LIMIT or GROUP BY
    (refused)."""
    inner_kind = draw(
        st.sampled_from(["plain", "plain", "cte", "limit", "distinct", "grouped", "window"])
    )
    by = draw(st.sampled_from(["user_id", "status"]))
    outer = draw(st.sampled_from(["count", "grouped", "rows"]))
    keys = draw(st.sampled_from([(), ("user_id",), ("id",), ("user_id", "id")]))
    if inner_kind == "distinct" and "id" not in keys and outer == "rows":
        outer = "count"  # rows ordered by the ID only
    filters = _where(draw, None)

    def build(w: Models) -> Any:
        m = w.Order
        inner = select(m.status, m.amount, m.user_id, m.id).where(*[f(m) for f in filters])
        if inner_kind == "limit":
            inner = inner.order_by(m.id).limit(5)
        elif inner_kind == "distinct":
            inner = select(m.status, m.amount, *[getattr(m, k) for k in keys]).distinct()
            inner = inner.where(*[f(m) for f in filters])
        elif inner_kind == "window":  # a running sum by the shard key (merged) or not
            running = func.sum(m.amount).over(partition_by=getattr(m, by), order_by=m.id)
            inner = select(m.status, running.label("amount"), m.user_id, m.id)
            inner = inner.where(*[f(m) for f in filters])
        elif inner_kind == "grouped":
            inner = select(
                m.status, func.sum(m.amount).label("amount"), m.user_id, func.max(m.id).label("id")
            ).group_by(m.status, m.user_id)
        d = inner.cte() if inner_kind == "cte" else inner.subquery()
        if outer == "count":
            return select(func.count(), func.sum(d.c.amount)).select_from(d)
        if outer == "grouped":
            return select(d.c.status, func.count(), func.max(d.c.amount)).group_by(d.c.status)
        return select(d.c.id, d.c.amount).order_by(d.c.amount.desc(), d.c.id).limit(6)

    return Case(build, [], outer == "rows")


def _distinct_on(draw: Any) -> Case:
    """PostgreSQL's DISTINCT ON one or two values, the first row of each picked by further
    ORDER BY parts and the ID (so the answer is one), with a LIMIT and OFFSET or not."""
    values = ["user_id", "amount", "status", "bucket"]
    picked = draw(st.lists(st.sampled_from(["id", *values[:3]]), min_size=1, max_size=4, unique=True))
    on = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2, unique=True))
    then = draw(st.lists(st.sampled_from(["amount", "status", "user_id"]), max_size=2, unique=True))
    desc = draw(st.lists(st.booleans(), min_size=len(on) + len(then) + 1, max_size=len(on) + len(then) + 1))
    limited = draw(st.booleans())
    limit, offset = (draw(st.integers(1, 6)), draw(st.integers(0, 4))) if limited else (None, 0)
    filters = _where(draw, None)

    def build(w: Models) -> Any:
        m = w.Order
        bucket = m.user_id % 3  # one expression in both clauses: PostgreSQL matches them

        def value(name: str) -> Any:
            return bucket if name == "bucket" else getattr(m, name)

        statement = select(*[getattr(m, c) for c in picked]).where(*[f(m) for f in filters])
        keys = [value(v) for v in (*on, *then)] + [m.id]
        statement = distinct_on(statement, *[value(v) for v in on]).order_by(
            *[k.desc() if d else k for k, d in zip(keys, desc)]
        )
        return statement.limit(limit).offset(offset) if limited else statement

    return Case(build, [], True, postgres_only=True)


def _compound(draw: Any) -> Case:
    """UNION or UNION ALL of 2-3 filtered SELECTs of the same columns, perhaps ordered by
    all of them (by name or by the first SELECT's column) and limited."""
    columns = st.sampled_from(["id", "user_id", "amount", "status"])
    picked = draw(st.lists(columns, min_size=1, max_size=3, unique=True))
    parts = [_where(draw, None) for _ in range(draw(st.integers(2, 3)))]
    distinct = draw(st.booleans())
    ordered = draw(st.booleans())
    descending = draw(st.lists(st.booleans(), min_size=len(picked), max_size=len(picked)))
    by_name = draw(st.booleans())
    limited = ordered and draw(st.booleans())
    limit, offset = draw(st.integers(1, 6)), draw(st.integers(0, 4))

    def build(w: Models) -> Any:
        m = w.Order
        cols = [getattr(m, c) for c in picked]
        selects = [select(*cols).where(*[f(m) for f in fs]) for fs in parts]
        statement = (union if distinct else union_all)(*selects)
        if ordered:
            keys = [c if by_name else getattr(m, c) for c in picked]
            statement = statement.order_by(
                *[desc(k) if d else k for k, d in zip(keys, descending)]
            )
        if limited:
            statement = statement.limit(limit).offset(offset)
        return statement

    # ordered by every column, rows that tie are equal: the order is total
    return Case(build, list(range(len(picked))) if ordered else [], ordered)


SHAPES = [
    _rows, _grouped, _nested, _reference_rows, _reference_grouped, _reference_nested,
    _distinct_on, _items_joined, _derived, _compound,
]  # fmt: skip


CRITERIA: dict[str, Callable[[Models], Any]] = {
    "Order: amount > 5": lambda w: with_loader_criteria(w.Order, w.Order.amount > 5),
    "Order: status not NULL": lambda w: with_loader_criteria(
        w.Order, lambda cls: cls.status.is_not(None)
    ),
    "Order and aliases: user_id != 7": lambda w: with_loader_criteria(
        w.Order, lambda cls: cls.user_id != 7, include_aliases=True
    ),
    "Item: qty > 1": lambda w: with_loader_criteria(w.Item, lambda cls: cls.qty > 1),
}
"""Loader criteria a statement may carry (on both sides); user 7 is one of TWIN_USERS."""


@st.composite
def statements(draw: Any) -> Case:
    shape = draw(st.sampled_from(SHAPES))
    case_: Case = shape(draw)
    criteria = draw(st.sampled_from([None, None, *CRITERIA]))
    if criteria is not None:
        build, option = case_.build, CRITERIA[criteria]
        case_ = replace(case_, build=lambda w: build(w).options(option(w)), criteria=criteria)
    return replace(case_, first=draw(st.booleans()))


# --------------------------------------------------------------------------- comparing


def compare(setup: Setup, case_: Case) -> None:
    """The sharded statement's rows equal the twin's, or it is refused before any SQL."""
    if any(KNOWN_BUGS[bug](setup.world) for bug in case_.bugs if bug in KNOWN_BUGS):
        reject()
    if case_.postgres_only and not setup.name.startswith("postgresql"):
        reject()
    if case_.filter_clause and setup.name.startswith("mysql"):
        reject()
    sharded_statement = case_.build(setup.shop.sharded)
    if case_.first:
        sharded_statement = sharded_statement.execution_options(subqueries_first=True)
    twin_statement = case_.build(setup.shop.twin)
    log = setup.world.log
    # PostgreSQL's own SQL is shown as PostgreSQL renders it (SQLAlchemy 2.0 warns when
    # DISTINCT ON is rendered for no particular database)
    dialect = postgresql.dialect() if case_.postgres_only else None
    shown = f"{setup.name}: {sharded_statement.compile(dialect=dialect)}"
    if case_.criteria:
        shown += f"\nwith loader criteria {case_.criteria}"
    if case_.first:
        shown += "\nwith subqueries_first=True"
    with setup.session() as session:
        twin = rows_of(session.execute(twin_statement))
        log.clear()
        try:
            got = rows_of(session.execute(sharded_statement))
        except UnsupportedShardQuery:
            assert len(log) == 0, f"SQL ran before the refusal of {shown}"
            return
        except Exception as exc:  # noqa: BLE001 - any other outcome fails, naming the statement
            pytest.fail(f"{shown}\nraised {type(exc).__name__}: {exc}")
    if case_.total:
        assert got == twin, shown
        return
    assert sort_rows(got) == sort_rows(twin), shown
    if case_.ordered:
        assert [tuple(r[i] for i in case_.ordered) for r in got] == [
            tuple(r[i] for i in case_.ordered) for r in twin
        ], shown


@differential
@given(case_=statements())
def test_sharded_statements_equal_one_table_or_are_refused(setup: Setup, case_: Case) -> None:
    """Every random statement answers like the unsharded twin, or raises UnsupportedShardQuery."""
    compare(setup, case_)


# --------------------------------------------------------------------------- bugs it found

@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_entity_join_with_unsharded_table_on_one_database(
    filled: Filled, backend: str
) -> None:
    """Orders joined from select_from(Order) with the reference table equal the twin's rows."""
    shop, world = filled(backend, 1)

    def build(w: Models) -> Any:
        return select(w.Order.id).select_from(w.Order).join(w.Status, w.Status.code == w.Order.status)

    got, twin = both_rows(world, shop, build)
    assert got == twin and len(twin) == 20


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
@pytest.mark.parametrize("grouped", [False, True], ids=["rows", "count"])
def test_outer_join_from_reference_table_across_databases(
    filled: Filled, backend: str, grouped: bool
) -> None:
    """Statuses LEFT OUTER JOIN orders over two databases equals the twin, or is refused."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        columns = [w.Status.code, func.count()] if grouped else [w.Status.code, w.Order.id]
        statement = select(*columns).select_from(w.Status.__table__)
        statement = statement.outerjoin(w.Order.__table__, w.Order.status == w.Status.code)
        return statement.group_by(w.Status.code) if grouped else statement

    try:
        got, twin = both_rows(world, shop, build)
    except UnsupportedShardQuery:
        return
    assert got == twin


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_same_aggregate_of_two_models_merged(filled: Filled, backend: str) -> None:
    """MAX of an orders column and MAX of a statuses column, over two databases, equal the twin."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        return select(func.max(w.Order.amount), func.max(w.Status.rank)).join(
            w.Status, w.Status.code == w.Order.status
        )

    got, twin = both_rows(world, shop, build)
    assert got == twin == [(12, 2)]


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_count_of_core_tables_joined_merged(filled: Filled, backend: str) -> None:
    """COUNT(*) of orders' and statuses' tables joined, over two databases, equals the twin."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        return (
            select(func.count())
            .select_from(w.Order.__table__)
            .join(w.Status.__table__, w.Status.code == w.Order.status)
        )

    got, twin = both_rows(world, shop, build)
    assert got == twin == [(20,)]
