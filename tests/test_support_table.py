"""README's "What is supported across shards" table says what the library does.

Each row of the table (construct -> what happens across shards) maps, in :data:`EXAMPLES`
below, to representative statements built for both sides of a twin shop
(``tests/worlds.py``: sharded orders/items, a reference table, their plain twins). Each
status cell is read as clauses separated by ``;``, each starting with *exact*, *merged* or
*refused* (``exact when whole; refused otherwise``). An example claims one of those kinds,
on a world of two databases (the default) or of one (``whole``: every table in one
database, where a query without key runs as one UNION ALL), and is checked against the
library's own plan (:func:`snowshard.explain`, which sends no SQL) and the twin:

* *refused*: ``explain`` reports the refusal, and running it raises
  ``UnsupportedShardQuery`` before any SQL is sent;
* *merged*: it runs, ``explain`` lists something computed in Python (``merged``), and the
  rows equal the twin's;
* *exact*: it runs with nothing computed in Python but concatenation, and the rows (for
  UPDATE, DELETE and INSERT: row counts and the rows afterwards) equal the twin's.

A row without examples fails, so a new row needs them; every kind a row's status names
needs at least one example of that kind. The same checks run for the copy of the table in
docs/queries.md, which must match the README's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    Integer,
    Numeric,
    String,
    and_,
    case,
    cast,
    delete,
    desc,
    distinct,
    except_,
    exists,
    func,
    insert,
    literal_column,
    select,
    tuple_,
    union,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import aliased, with_loader_criteria

from snowshard._compat import listed_rows
from snowshard.orm.timerange import id_time, id_unix_ms
from snowshard.sharding import UnsupportedShardQuery, explain
from tests.backends import DatabaseFactory
from tests.markdown_blocks import table
from tests.worlds import (
    IDS,
    LAYOUT,
    TWIN_USERS,
    Models,
    SqlLog,
    TwinShop,
    World,
    declare_twin_shop,
    distinct_on,
    fill_twin_shop,
    open_world,
)

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
QUERIES_PAGE = ROOT / "docs" / "queries.md"
HEADING = "What is supported across shards"
PAGE_HEADING = "What is merged, what is refused"
KINDS = ("exact", "merged", "refused")

Build = Callable[[Models], Any]


@dataclass(frozen=True)
class Example:
    """A statement demonstrating one clause of a row's status."""

    kind: str
    """``exact``, ``merged`` or ``refused``."""
    build: Build
    whole: bool = False
    """Run on a world of one database (else two)."""
    ordered: bool = False
    """Compare rows in order (the statement's ORDER BY fixes it completely)."""
    backends: tuple[str, ...] = ("sqlite", "postgresql", "mysql")
    rows: tuple[dict[str, Any], ...] = ()
    """Rows an INSERT statement is executed with (``session.execute(insert(Order), rows)``)."""
    bug: str = ""
    """A library bug that makes the example fail today (it runs as xfail(strict=True))."""


# --------------------------------------------------------------------------- the examples


def _hourly(order: Any) -> Any:
    """README's hourly report: orders per hour of their IDs' time (PostgreSQL)."""
    hour = func.date_trunc("hour", id_time(order.id, LAYOUT))  # one bound "hour" for both
    return select(hour, func.count()).group_by(hour)


_LISTED = [
    {"id": IDS.next_id(gene=u), "user_id": u, "amount": u % 5, "status": "paid"}
    for u in (2, 5, 9, 14)
]
"""Rows of a ``values([...])`` INSERT, IDs included (each with its user's gene), the same on
both sides."""


def _through_alias(order: Any) -> Any:
    """An alias of orders joined to items through the alias's relationship."""
    return select(order.id).join(order.items)


def _page_of_subquery(subquery: Any) -> Any:
    return select(subquery).order_by(subquery.c.amount.desc(), subquery.c.id).limit(4)


def _legacy_count(model: Any, condition: Any) -> Any:
    """The statement ``Query.count()`` runs for a query with loader criteria: the option on
    the subquery it counts and on the count itself."""
    option = with_loader_criteria(model, condition)
    inner = select(model).options(option).subquery()
    return select(func.count()).select_from(inner).options(option)


_FILTER_BACKENDS = ("sqlite", "postgresql")
"""The databases that have FILTER (MariaDB has not)."""


EXAMPLES: dict[str, list[Example]] = {
    "filters on any column, IN lists, per-row functions (a known list)": [
        Example("exact", lambda w: select(w.Order.id).where(w.Order.amount > 5)),
        Example("exact", lambda w: select(w.Order.id).where(w.Order.user_id.in_([3, 8, 17]))),
        Example(
            "exact",
            lambda w: select(w.Order.id, func.coalesce(w.Order.amount, 0), func.upper(w.Order.status)),
        ),
    ],
    "ORDER BY (NULLs per dialect), LIMIT/OFFSET": [
        Example(
            "merged",
            lambda w: select(w.Order.id, w.Order.amount)
            .order_by(w.Order.amount, w.Order.id)
            .limit(5)
            .offset(2),
            ordered=True,
        ),
        Example(
            "merged",
            lambda w: select(w.Order.status, w.Order.id).order_by(w.Order.status.desc(), w.Order.id),
            ordered=True,
        ),
    ],
    "DISTINCT": [Example("merged", lambda w: select(w.Order.status).distinct())],
    "`prefix_with()`, `suffix_with()`, syntax extensions (`select.ext()`)": [
        Example(
            "exact",
            lambda w: select(w.Order.status)
            .where(w.Order.user_id == TWIN_USERS[0])
            .prefix_with("DISTINCT"),
        ),
        Example(
            "merged",
            lambda w: select(w.Order.id, w.Order.status)
            .prefix_with("SQL_NO_CACHE")
            .order_by(w.Order.id),
            backends=("mysql",),
            ordered=True,
        ),
        Example(
            "merged",
            lambda w: select(w.Order.id, w.Order.status)
            .prefix_with("DISTINCT", dialect="mysql")
            .order_by(w.Order.id),
            backends=("sqlite", "postgresql"),
            ordered=True,
        ),
        Example("refused", lambda w: select(w.Order.status).prefix_with("DISTINCT")),
    ],
    "`with_for_update()` (FOR UPDATE, FOR SHARE, NOWAIT, SKIP LOCKED)": [
        Example("exact", lambda w: select(w.Order.id, w.Order.amount).with_for_update()),
        Example(
            "merged",
            lambda w: select(w.Order.id).order_by(w.Order.id).limit(5).with_for_update(),
            ordered=True,
        ),
        Example(
            "merged",
            lambda w: select(w.Order.id, w.Order.status)
            .order_by(w.Order.id.desc())
            .limit(3)
            .with_for_update(read=True, nowait=True),
            whole=True,
            ordered=True,
        ),
    ],
    "`with_loader_criteria()`": [
        Example(
            "exact",
            lambda w: select(w.Order.id, w.Order.amount).options(
                with_loader_criteria(w.Order, lambda cls: cls.amount > 3)
            ),
        ),
        Example(
            "exact",
            lambda w: select(w.Order.id)
            .where(w.Order.user_id == TWIN_USERS[1])
            .options(with_loader_criteria(w.Order, w.Order.amount > 3)),
        ),
        Example(
            "merged",
            lambda w: select(w.Order.user_id, func.count())
            .group_by(w.Order.user_id)
            .options(with_loader_criteria(w.Order, lambda cls: cls.status.is_not(None))),
        ),
        Example(
            "merged",
            lambda w: select(w.Order.id)
            .order_by(w.Order.id.desc())
            .limit(4)
            .options(with_loader_criteria(w.Order, w.Order.amount > 3)),
        ),
        Example(
            "refused",
            lambda w: select(w.Order.id).options(
                with_loader_criteria(w.Order.__subclasses__()[0], lambda cls: cls.amount > 3)
            ),
        ),
        Example(
            "refused",
            lambda w: select(w.Order.id).where(
                w.Order.user_id.in_(
                    select(w.Order.user_id)
                    .options(with_loader_criteria(w.Order, w.Order.amount > 3))
                    .scalar_subquery()
                )
            ),
        ),
        Example("merged", lambda w: _legacy_count(w.Order, lambda cls: cls.amount > 3)),
        Example(
            "merged",
            lambda w: select(w.Order)
            .options(with_loader_criteria(w.Order, lambda cls: cls.amount > 3))
            .with_only_columns(func.sum(w.Order.amount)),
        ),
        Example(
            "refused",
            lambda w: select(w.Order.id)
            .join(w.Order.items)
            .with_only_columns(func.count())
            .options(with_loader_criteria(w.Order, lambda cls: cls.amount > 3)),
        ),
        Example(
            "exact",
            lambda w: select(w.Order.id, w.Status.grp)
            .join(w.Status, w.Status.code == w.Order.status)
            .options(with_loader_criteria(w.Status, w.Status.grp != "open")),
        ),
        Example(
            "exact",
            lambda w: select(w.Order.id, w.Note.label)
            .join(w.Note, w.Note.id == w.Order.user_id)
            .options(with_loader_criteria(w.Note, w.Note.label != "u3")),
            whole=True,
        ),
    ],
    "DISTINCT ON (PostgreSQL)": [
        Example(
            "merged",
            lambda w: distinct_on(select(w.Order.status, w.Order.id), w.Order.status).order_by(
                w.Order.status, w.Order.id.desc()
            ),
            backends=("postgresql",),
            ordered=True,
        ),
        Example(
            "refused",
            lambda w: distinct_on(select(w.Order.status, func.count()), w.Order.status)
            .group_by(w.Order.status),
            backends=("postgresql",),
        ),
    ],
    "strings ordered, grouped or matched by a merge (ORDER BY, MIN/MAX, GROUP BY, DISTINCT, "
    "comparisons)": [
        # the twin shop's status is declared with each backend's code-point collation
        Example("merged", lambda w: select(w.Order.status, w.Order.id).order_by(w.Order.status, w.Order.id), ordered=True),
        Example("merged", lambda w: select(func.min(w.Order.status), func.max(w.Order.status))),
        Example("merged", lambda w: select(func.count()).select_from(w.Order).group_by(func.lower(w.Order.status))),
        Example(
            "merged",
            lambda w: select(w.Order.user_id, func.max(w.Order.status))
            .group_by(w.Order.user_id)
            .having(func.max(w.Order.status) > "o"),
        ),
        Example("refused", lambda w: select(w.Order.id).order_by(w.Order.status.collate("NOCASE")), backends=("sqlite",)),
        Example("merged", lambda w: select(w.Order.id).order_by(w.Order.status.collate("en-x-icu"), w.Order.id), backends=("postgresql",), ordered=True),
        Example("merged", lambda w: select(func.min(w.Order.status.collate("utf8mb4_general_ci")), func.max(w.Order.status.collate("utf8mb4_general_ci"))), backends=("mysql",)),
        Example("merged", lambda w: select(func.max(w.Order.status.collate("en-x-icu"))), backends=("postgresql",)),
        Example(
            "refused",
            lambda w: select(w.Order.user_id, func.max(w.Order.status))
            .group_by(w.Order.user_id)
            .having(func.max(w.Order.status.collate("en-x-icu")) > "o"),
            backends=("postgresql",),
        ),
        Example(
            "merged",
            lambda w: select(w.Order.id).order_by(w.Order.status.collate("utf8mb4_general_ci").desc(), w.Order.id),
            backends=("mysql",),
            ordered=True,
        ),
        Example(
            "refused",  # a string of unknown length under a case-insensitive collation
            lambda w: select(func.concat(w.Order.status.collate("utf8mb4_general_ci"), "x")).distinct(),
            backends=("mysql",),
        ),
        Example(  # concat() takes its column's code-point collation
            "merged",
            lambda w: select(func.concat(w.Order.status, "x")).distinct(),
            backends=("mysql",),
        ),
        Example(
            "merged",
            lambda w: select(w.Order.status.collate("utf8mb4_general_ci")).distinct(),
            backends=("mysql",),
        ),
        Example(
            "merged",
            lambda w: select(w.Order.status.collate("utf8mb4_general_ci"), func.count())
            .group_by(w.Order.status.collate("utf8mb4_general_ci"))
            .order_by(w.Order.status.collate("utf8mb4_general_ci")),
            backends=("mysql",),
            ordered=True,
        ),
        Example("exact", lambda w: select(w.Order.id).order_by(w.Order.status.collate("NOCASE"), w.Order.id), whole=True, backends=("sqlite",), ordered=True),
        Example("exact", lambda w: select(w.Order.id).order_by(w.Order.status.collate("en-x-icu"), w.Order.id), whole=True, backends=("postgresql",), ordered=True),
    ],

    "COUNT, SUM, MIN, MAX, AVG": [
        Example(
            "merged",
            lambda w: select(
                func.count(),
                func.sum(w.Order.amount),
                func.min(w.Order.amount),
                func.max(w.Order.amount),
                func.avg(w.Order.amount),
            ),
        )
    ],
    "aggregates with FILTER (`func.count().filter(Order.amount > 5)`; SQLite and "
    "PostgreSQL, MariaDB has no FILTER)": [
        Example(
            "merged",
            lambda w: select(func.count().filter(w.Order.amount > 3), func.count()),
            backends=_FILTER_BACKENDS,
        ),
        Example(
            "merged",
            lambda w: select(
                w.Order.status,
                func.avg(w.Order.amount).filter(w.Order.user_id > 5),
                func.min(w.Order.status).filter(w.Order.amount < 5),
            )
            .group_by(w.Order.status)
            .having(func.sum(w.Order.amount).filter(w.Order.amount > 1) > 3)
            .order_by(func.max(w.Order.amount).filter(w.Order.amount < 8), w.Order.status),
            ordered=True,
            backends=_FILTER_BACKENDS,
        ),
        Example(
            "refused",
            lambda w: select(func.count(distinct(w.Order.status)).filter(w.Order.amount > 3)),
            backends=_FILTER_BACKENDS,
        ),
        Example(
            "refused",
            lambda w: select(func.string_agg(w.Order.status, ",").filter(w.Order.amount > 3)),
            backends=("postgresql",),
        ),
    ],
    "`union()` / `union_all()` of SELECTs on a sharded model (also ordered and limited)": [
        Example(
            "exact",
            lambda w: union_all(
                select(w.Order.id).where(w.Order.amount > 6),
                select(w.Order.id).where(w.Order.user_id == 7),
            ),
        ),
        Example(
            "merged",
            lambda w: union(
                select(w.Order.amount), select(w.Order.amount).where(w.Order.user_id < 9)
            )
            .order_by(desc("amount"))
            .limit(3),
            ordered=True,
        ),
        Example(
            "refused",
            lambda w: except_(
                select(w.Order.amount), select(w.Order.amount).where(w.Order.user_id == 7)
            ),
        ),
        Example(
            "refused",
            lambda w: union(select(w.Order.amount), select(w.Order.amount)).order_by(
                w.Order.amount * 2
            ),
        ),
        Example("refused", lambda w: union(select(w.Order.amount), select(w.Order.user_id))),
        Example("refused", lambda w: union_all(select(w.Order.status), select(w.Status.code))),
        Example(
            "refused",
            lambda w: union(
                union(select(w.Order.amount), select(w.Order.amount)), select(w.Order.amount)
            ),
        ),
    ],
    "COUNT(DISTINCT x), SUM/AVG/MIN/MAX(DISTINCT x)": [
        Example("merged", lambda w: select(func.count(distinct(w.Order.user_id)))),
        Example(
            "merged",
            lambda w: select(func.sum(distinct(w.Order.amount)), func.avg(distinct(w.Order.amount))),
        ),
        Example(
            "merged",
            lambda w: select(w.Order.status, func.count(distinct(w.Order.amount)), func.count())
            .group_by(w.Order.status)
            .order_by(w.Order.status),
        ),
        Example(
            "merged",
            lambda w: select(w.Order.status, func.max(distinct(w.Order.status)))
            .group_by(w.Order.status)
            .order_by(func.min(distinct(w.Order.amount))),
        ),
        Example(
            "refused", lambda w: select(func.sum(distinct(cast(w.Order.amount, Numeric(8, 2)))))
        ),
    ],
    "`+ - *`, comparisons, AND/OR, CASE, COALESCE over aggregates and group keys": [
        Example(
            "merged",
            lambda w: select(
                w.Order.status,
                func.max(w.Order.amount) - func.min(w.Order.amount),
                case((and_(func.count() > 3, func.sum(w.Order.amount) < 80), "many"), else_="few"),
                func.coalesce(func.sum(w.Order.amount), 0) * 2 + w.Order.user_id,
            ).group_by(w.Order.status, w.Order.user_id),
        ),
        Example(
            "refused",
            lambda w: select(w.Order.status, func.avg(w.Order.amount) * 2).group_by(w.Order.status),
            backends=("mysql",),
        ),
        Example(
            "merged",
            lambda w: select(
                w.Order.status,
                func.max(id_time(w.Order.id, LAYOUT)) - func.min(id_time(w.Order.id, LAYOUT)),
            ).group_by(w.Order.status),
            backends=("postgresql",),
        ),
        Example(
            "refused",
            lambda w: select(
                func.max(id_time(w.Order.id, LAYOUT)) - func.min(id_time(w.Order.id, LAYOUT))
            ),
            backends=("sqlite", "mysql"),
        ),
        Example(
            "refused",
            lambda w: select(func.min(id_time(w.Order.id, LAYOUT)) + timedelta(days=1)),
        ),
        Example(
            "refused",
            lambda w: select(
                func.coalesce(func.max(id_time(w.Order.id, LAYOUT)), datetime(2024, 1, 1))
            ),
            backends=("sqlite", "mysql"),
        ),
        Example(
            "refused",
            lambda w: select(w.Order.status)
            .group_by(w.Order.status)
            .having(func.max(id_time(w.Order.id, LAYOUT)) > "2024-01-01"),
        ),
    ],
    "`/`, `//` and CAST (to integer or float) over aggregates": [
        Example("merged", lambda w: select(func.sum(w.Order.amount) / func.count())),
        Example("merged", lambda w: select(func.sum(w.Order.amount) // func.count())),
        Example(
            "merged",
            lambda w: select(cast(func.sum(w.Order.amount) * 10 / func.count(), Integer)),
        ),
        Example(
            "merged",
            lambda w: select(cast(func.avg(w.Order.amount) * 100, Integer)),
            backends=("sqlite", "postgresql"),
        ),
        Example(
            "refused",
            lambda w: select(cast(func.avg(w.Order.amount) * 100, Integer)),
            backends=("mysql",),
        ),
        Example("refused", lambda w: select(cast(func.sum(w.Order.amount), String(20)))),
    ],
    "GROUP BY selected or unselected keys, `id_time`/`id_unix_ms` and `date_trunc` buckets": [
        Example("merged", lambda w: select(w.Order.status, func.count()).group_by(w.Order.status)),
        Example("merged", lambda w: select(func.avg(w.Order.amount)).group_by(w.Order.status)),
        Example(
            "merged",
            lambda w: select(id_time(w.Order.id, LAYOUT), func.count()).group_by(
                id_time(w.Order.id, LAYOUT)
            ),
        ),
        Example(
            "merged",
            lambda w: select(func.count())
            .select_from(w.Order)
            .group_by(id_unix_ms(w.Order.id, LAYOUT) // 3_600_000),
        ),
        Example("merged", lambda w: _hourly(w.Order), backends=("postgresql",)),
    ],
    "HAVING, ORDER BY of grouped queries": [
        Example(
            "merged",
            lambda w: select(w.Order.user_id, func.sum(w.Order.amount))
            .group_by(w.Order.user_id)
            .having(func.avg(w.Order.amount) > 4)
            .order_by(func.sum(w.Order.amount).desc(), w.Order.user_id),
            ordered=True,
            backends=("sqlite", "postgresql"),
        ),
        Example(
            "merged",
            lambda w: select(w.Order.user_id, func.avg(w.Order.amount))
            .group_by(w.Order.user_id)
            .having(func.sum(w.Order.amount) > 4 * func.count(w.Order.amount))
            .order_by(func.avg(w.Order.amount).desc(), w.Order.user_id),
            ordered=True,
        ),
        Example(
            "refused",
            lambda w: select(w.Order.user_id)
            .group_by(w.Order.user_id)
            .having(func.avg(w.Order.amount) > 4),
            backends=("mysql",),
        ),
    ],
    "window functions partitioned by the shard key (or a column derived from it)": [
        Example("exact", lambda w: select(w.Order.id, func.count().over(partition_by=w.Order.user_id))),
        Example(
            "exact",
            lambda w: select(
                w.Order.id,
                func.row_number().over(partition_by=w.Order.user_id, order_by=w.Order.id),
            ),
        ),
    ],
    "other window functions": [
        Example("exact", lambda w: select(w.Order.id, func.count().over()), whole=True),
        Example("refused", lambda w: select(w.Order.id, func.count().over())),
    ],
    "subquery, EXISTS or CTE on a sharded model correlated on the shard key with a model "
    "sharded alike (a relationship's `.any()` / `.has()` included, read as the EXISTS "
    "written out), or `key IN (SELECT key ...)` of such a model "
    "(`Order.user_id.in_(select(Item.user_id).where(...))`)": [
        Example("exact", lambda w: select(w.Order.id).where(w.Order.items.any(w.Item.qty > 3))),
        Example("exact", lambda w: select(w.Order.id).where(~w.Order.items.any(w.Item.qty > 3))),
        Example(
            "exact",
            lambda w: select(w.Order.id).where(
                w.Order.user_id.in_(select(w.Item.user_id).where(w.Item.qty > 3))
            ),
        ),
        Example(
            "exact",
            lambda w: select(w.Order.id).where(
                w.Order.user_id.not_in(select(w.Item.user_id).where(w.Item.user_id > 10))
            ),
        ),
        Example(
            "exact",
            lambda w: select(w.Order.id).where(
                exists(
                    select(w.Item.id).where(
                        w.Item.user_id == w.Order.user_id,
                        w.Item.order_id == w.Order.id,
                        w.Item.qty > 3,
                    )
                )
            ),
        )
    ],
    "derived table or CTE on a sharded model as a query's whole FROM "
    "(`select(func.count()).select_from(stmt.subquery())`, `Query.count()`)": [
        Example(
            "merged",
            lambda w: select(func.count()).select_from(
                select(w.Order.id).where(w.Order.amount > 3).subquery()
            ),
        ),
        Example(
            "merged",
            lambda w: select(func.count()).select_from(
                select(w.Order.user_id, w.Order.status).distinct().subquery()
            ),
        ),
        Example(
            "refused",
            lambda w: select(func.count()).select_from(
                select(w.Order.status).distinct().subquery()
            ),
        ),
        Example(
            "merged",
            lambda w: (lambda d: select(d.c.id, d.c.user_id).where(d.c.n == 1).order_by(d.c.id))(
                select(
                    w.Order.id,
                    w.Order.user_id,
                    func.row_number()
                    .over(partition_by=w.Order.user_id, order_by=w.Order.id.desc())
                    .label("n"),
                ).subquery()
            ),
            ordered=True,
        ),
        Example(
            "refused",
            lambda w: select(func.count()).select_from(select(w.Order.id).limit(5).subquery()),
        ),
    ],
    "`select(exists().where(...))` on a sharded model (no FROM list)": [
        Example("merged", lambda w: select(exists().where(w.Order.amount > 5))),
        Example(
            "merged",
            lambda w: select(select(w.Order.id).where(w.Order.amount > 5).limit(1).exists()),
        ),
        Example(
            "refused",
            lambda w: select(select(w.Order.id).where(w.Order.amount > 5).offset(2).exists()),
        ),
        Example(
            "refused",
            lambda w: select(
                select(w.Order.user_id).group_by(w.Order.user_id).having(func.count() > 2).exists()
            ),
        ),
    ],
    "keyless subquery on a sharded model": [
        Example(
            "exact",
            lambda w: select(w.Order.id).where(
                w.Order.amount > select(func.avg(w.Order.amount)).scalar_subquery()
            ),
            whole=True,
        ),
        Example(
            "refused",
            lambda w: select(w.Order.id).where(
                w.Order.amount > select(func.avg(w.Order.amount)).scalar_subquery()
            ),
        ),
        Example(  # routed to one table of the one database: still refused
            "refused",
            lambda w: select(w.Order.id).where(
                w.Order.user_id == 7,
                w.Order.amount > select(func.avg(w.Order.amount)).scalar_subquery(),
            ),
            whole=True,
        ),
    ],
    "uncorrelated subquery (IN, NOT IN, EXISTS, scalar) that its statement cannot read where "
    "it runs, with `execution_options(subqueries_first=True)`": [
        Example(
            "exact",
            lambda w: select(w.Note.id)
            .where(w.Note.id.in_(select(w.Order.user_id).where(w.Order.amount > 2)))
            .execution_options(subqueries_first=True),
        ),
        Example(
            "exact",
            lambda w: select(w.Order.id)
            .where(w.Order.amount > select(func.avg(w.Order.amount)).scalar_subquery())
            .execution_options(subqueries_first=True),
        ),
        Example(
            "refused",
            lambda w: select(w.Note.id)
            .where(exists().where(w.Order.user_id == w.Note.id, w.Order.amount > 2))
            .execution_options(subqueries_first=True),
        ),
    ],
    "join of models sharded alike (same strategy and count) with an explicit ON, or "
    "through a relationship attribute (`join(Order.items)`, read as the explicit join its "
    "`primaryjoin` describes)": [
        Example(
            "exact",
            lambda w: select(w.Order.id, w.Item.qty).join(
                w.Item, and_(w.Item.user_id == w.Order.user_id, w.Item.order_id == w.Order.id)
            ),
        ),
        Example("exact", lambda w: select(w.Order.id, w.Item.qty).join(w.Order.items)),
        Example(
            "exact",
            lambda w: select(w.Order.id, w.Item.qty).outerjoin(w.Order.items.and_(w.Item.qty > 1)),
        ),
        Example(
            "exact",
            lambda w: select(w.Order).join(w.Order.items).with_only_columns(w.Order.id, w.Item.qty),
        ),
        Example(
            "refused",
            lambda w: select(w.Order.id, w.Item.qty).join(w.Item, w.Item.order_id == w.Order.id),
        ),
    ],
    "join or subquery with a reference table (`Reference`)": [
        Example(
            "exact",
            lambda w: select(w.Order.id, w.Status.grp).join(w.Status, w.Status.code == w.Order.status),
        ),
        Example("exact", lambda w: select(w.Order.id, w.Status.grp).join(w.Order.status_row)),
        Example(
            "exact", lambda w: select(w.Order.id).where(w.Order.status_row.has(w.Status.rank > 1))
        ),
        Example(
            "exact",
            lambda w: select(w.Order.id).where(
                w.Order.status.in_(select(w.Status.code).where(w.Status.rank > 1))
            ),
        ),
        Example(
            "exact",
            lambda w: select(w.Order.id).where(
                exists(select(w.Status.code).where(w.Status.code == w.Order.status, w.Status.rank > 1))
            ),
        ),
        Example(
            "exact",
            lambda w: select(w.Status.code, w.Order.id)
            .select_from(w.Status)
            .outerjoin(w.Order, w.Order.status == w.Status.code),
            whole=True,
        ),
        Example(
            "refused",
            lambda w: select(w.Status.code, func.count(w.Order.id))
            .select_from(w.Status)
            .outerjoin(w.Order, w.Order.status == w.Status.code)
            .group_by(w.Status.code),
        ),
    ],
    "statements on unsharded tables only": [
        Example("exact", lambda w: select(w.Note.id, w.Note.label)),
        Example("exact", lambda w: select(w.Status.code, w.Status.rank)),
    ],
    "sharded model joined with a plain unsharded table": [
        Example(
            "exact",
            lambda w: select(w.Order.id, w.Note.label).join(w.Note, w.Note.id == w.Order.user_id),
            whole=True,
        ),
        Example(
            "refused",
            lambda w: select(w.Order.id, w.Note.label).join(w.Note, w.Note.id == w.Order.user_id),
        ),
    ],
    "a FROM entry selected whole: `select(Order.__table__)`, `Order.__table__.select()`, "
    "`select(subquery)`, `select(cte)`": [
        Example("exact", lambda w: select(w.Order.__table__), whole=True),
        Example("exact", lambda w: w.Order.__table__.select().where(w.Order.amount > 3)),
        Example("exact", lambda w: select(select(w.Order).where(w.Order.amount > 2).cte())),
        Example("merged", lambda w: _page_of_subquery(select(w.Order).subquery()), ordered=True),
    ],
    '`SELECT *` (`literal_column("*")`, `text("*")`, `"orders.*"`)': [
        Example(
            "exact",
            lambda w: select(literal_column("*")).select_from(w.Order).where(w.Order.user_id == 7),
        ),
        Example(
            "exact",
            lambda w: select(w.Order.id).where(
                exists(
                    select(literal_column("*"))
                    .select_from(w.Item)
                    .where(w.Item.user_id == w.Order.user_id, w.Item.order_id == w.Order.id)
                )
            ),
        ),
        Example("refused", lambda w: select(literal_column("*")).select_from(w.Order), whole=True),
        Example("refused", lambda w: select(literal_column("*")).select_from(w.Order)),
    ],
    "WITHIN GROUP, unknown functions, whole entities in grouped "
    "queries, FETCH FIRST, row values (`tuple_()`) in ORDER BY or GROUP BY, SQL text "
    "(`text()`, `literal_column()`) in ORDER BY, `aliased()` "
    "of a sharded model, joins of models sharded differently or through a relationship "
    "with a `secondary` table, of an alias, of a physical class or from a model to itself": [
        Example(
            "refused",
            lambda w: select(func.percentile_cont(0.5).within_group(w.Order.amount)),
            backends=("postgresql",),
        ),
        Example("refused", lambda w: select(w.Order.id, func.hex(w.Order.amount))),
        Example("refused", lambda w: select(w.Order, func.count()).group_by(w.Order.id)),
        Example("refused", lambda w: select(w.Order.id).order_by(w.Order.id).fetch(3)),
        Example(
            "refused", lambda w: select(w.Order.id).order_by(tuple_(w.Order.status, w.Order.id))
        ),
        Example(
            "refused",
            lambda w: select(func.count()).select_from(w.Order).group_by(tuple_(w.Order.status)),
        ),
        Example("refused", lambda w: select(aliased(w.Order).id)),
        Example("refused", lambda w: _through_alias(aliased(w.Order))),
    ],
    "UPDATE / DELETE": [
        Example("exact", lambda w: update(w.Order).where(w.Order.user_id == 7).values(amount=1)),
        Example("exact", lambda w: update(w.Order).where(w.Order.amount > 6).values(amount=0)),
        Example("exact", lambda w: delete(w.Order).where(w.Order.status == "paid")),
        Example(
            "exact",
            lambda w: delete(w.Order).where(
                ~exists(
                    select(w.Item.id).where(
                        w.Item.user_id == w.Order.user_id, w.Item.order_id == w.Order.id, w.Item.qty > 2
                    )
                )
            ),
        ),
        Example(
            "exact",
            lambda w: update(w.Order)
            .where(w.Order.user_id.in_(select(w.Item.user_id).where(w.Item.qty >= 5)))
            .values(amount=0),
        ),
        Example(
            "refused",
            lambda w: update(w.Order).values(amount=0).with_dialect_options(mysql_limit=2),
            backends=("mysql",),
        ),
        Example(
            "refused",
            lambda w: update(w.Order)
            .where(w.Order.user_id == w.Item.user_id, w.Order.id == w.Item.order_id)
            .values(amount=w.Item.qty),
        ),
    ],
    "INSERT (one row, `values([...])`, `insert(Order), rows`)": [
        Example("exact", lambda w: insert(w.Order).values(user_id=5, amount=9, status="new")),
        Example("exact", lambda w: insert(w.Order).values(_LISTED)),
        Example(
            "exact",
            lambda w: postgresql.insert(w.Order).values(_LISTED).on_conflict_do_nothing(),
            backends=("postgresql",),
        ),
        Example(
            "exact",
            lambda w: insert(w.Order),
            rows=tuple({"user_id": u, "amount": u % 7, "status": "sent"} for u in (2, 5, 9, 14, 23)),
        ),
        Example(
            "refused",
            lambda w: insert(w.Order).values(
                user_id=5, amount=select(func.count()).select_from(w.Order).scalar_subquery()
            ),
        ),
        Example(
            "refused",
            lambda w: insert(w.Order).from_select(
                ["user_id", "amount"], select(w.Order.user_id, w.Order.amount + 1)
            ),
        ),
        Example(
            "refused",
            lambda w: insert(w.Order).values(
                [{"user_id": 5, "amount": 1}, {"user_id": 9, "status": "new"}]
            ),
        ),
        Example(
            "refused", lambda w: insert(w.Order).values(user_id=literal_column("5"), amount=1)
        ),
    ],
}
"""Row construct (the first cell, as written) -> the examples of its status."""

TWIN_IDS = 10**15
"""IDs of rows inserted into the twin (the sharded rows get theirs from snowflake_pk)."""



# --------------------------------------------------------------------------- the table


def support_rows(path: Path, heading: str) -> dict[str, str]:
    """construct -> status, from the table under ``heading`` in ``path``."""
    rows = table(path.read_text(), heading, path.relative_to(ROOT).as_posix())
    assert all(len(row) == 2 for row in rows), f"{path.name}: a row without two cells"
    return {construct: status for construct, status in rows}


def clauses(status: str) -> list[str]:
    """The clauses of a status cell (split on ``;`` outside parentheses)."""
    found, depth, current = [], 0, ""
    for char in status:
        depth += char == "("
        depth -= char == ")"
        if char == ";" and depth == 0:
            found.append(current.strip())
            current = ""
        else:
            current += char
    return [*found, current.strip()]


def kind_of(clause: str) -> str | None:
    """``exact``, ``merged`` or ``refused``: the word a clause starts with; None for none."""
    first = clause.split(None, 1)[0].strip(",:").lower() if clause else ""
    return first if first in KINDS else None


ROWS = support_rows(README, HEADING)


def test_every_row_has_examples_and_every_example_a_row() -> None:
    """Each row of the README's table has examples here, and no example names a row that went."""
    assert not sorted(set(ROWS) - set(EXAMPLES)), "add examples for these new rows"
    assert not sorted(set(EXAMPLES) - set(ROWS)), "these rows left the README"


@pytest.mark.parametrize("construct", sorted(EXAMPLES))
def test_examples_show_each_kind_the_row_names(construct: str) -> None:
    """The kinds (exact, merged, refused) of a row's status are those of its examples."""
    named = {k for k in map(kind_of, clauses(ROWS[construct])) if k is not None}
    shown = {e.kind for e in EXAMPLES[construct]}
    assert shown >= named, f"{construct!r} says {sorted(named)}; examples show {sorted(shown)}"
    if named:
        assert shown <= named, f"{construct!r}: examples show {sorted(shown - named)} as well"


def test_every_status_starts_with_a_kind() -> None:
    """Each clause of each status says exact, merged or refused first."""
    vague = {c: s for c, s in ROWS.items() if any(kind_of(x) is None for x in clauses(s))}
    assert not vague, f"statuses to say exact, merged or refused: {vague}"


def test_docs_page_table_is_the_readme_table() -> None:
    """docs/queries.md shows the same table as the README, row for row."""
    assert support_rows(QUERIES_PAGE, PAGE_HEADING) == ROWS


# --------------------------------------------------------------------------- the worlds

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mariadb", marks=pytest.mark.mysql),
]


@dataclass
class Worlds:
    """The twin shop, filled, on one database and on two, of one backend."""

    backend: str
    one: tuple[TwinShop, World]
    two: tuple[TwinShop, World]


@pytest.fixture(scope="module", params=BACKENDS)
def worlds(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worlds]:
    """Both worlds of a backend, made once for the module (every example rolls back)."""


    factory = DatabaseFactory.for_request(request, tmp_path_factory.mktemp("support"))
    logs = [SqlLog(), SqlLog()]
    try:
        opened = []
        for databases, log in zip((1, 2), logs):
            shop = declare_twin_shop(4, databases=databases)
            world = open_world(factory, shop.base, request.param, log=log)
            with world.session() as session:
                fill_twin_shop(session, shop)
            opened.append((shop, world))
        yield Worlds(request.param, opened[0], opened[1])
    finally:
        for log in logs:
            log.close()
        factory.cleanup()


def _cases() -> list[object]:
    return [
        pytest.param(
            construct,
            n,
            id=f"{construct[:40]}-{n}",
            marks=[pytest.mark.xfail(strict=True, reason=f"library bug: {example.bug}")]
            if example.bug
            else [],
        )
        for construct, examples in sorted(EXAMPLES.items())
        for n, example in enumerate(examples)
    ]


def _sorted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=lambda r: tuple((v is None, str(type(v)), v if v is not None else 0) for v in r))


def _rows(result: Any) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in result]


@pytest.mark.parametrize(("construct", "index"), _cases())
def test_example_is_classified_as_the_table_says(
    worlds: Worlds, construct: str, index: int
) -> None:
    """The example is refused, merged or exact as its row says, and equals the twin."""
    example = EXAMPLES[construct][index]
    if worlds.backend not in example.backends:
        pytest.skip(f"this example is for {', '.join(example.backends)}")
    shop, world = worlds.one if example.whole else worlds.two
    statement = example.build(shop.sharded)
    with world.session() as session:
        plan = explain(session, statement)
        if example.kind == "refused":
            assert plan.refused is not None, f"{construct}: not refused:\n{plan}"
            world.log.clear()
            with pytest.raises(UnsupportedShardQuery):
                session.execute(statement)
            assert len(world.log) == 0, "SQL ran before the refusal"
            return
        assert plan.refused is None, f"{construct}: refused: {plan.refused}"
        if example.kind == "merged":
            assert plan.merged, f"{construct}: nothing merged in Python:\n{plan}"
        else:
            assert not plan.merged, f"{construct}: merged in Python:\n{plan}"
        got, twin = _outcomes(session, shop, example)
        session.rollback()
    if example.ordered:
        assert got == twin
    else:
        assert _sorted(got) == _sorted(twin)
    assert twin, "an example that returns nothing shows nothing"


def _outcomes(session: Any, shop: TwinShop, example: Example) -> tuple[list[Any], list[Any]]:
    """(sharded, twin) rows of a SELECT; of a write: its row count, then the rows after it."""
    sharded, twin = example.build(shop.sharded), example.build(shop.twin)
    if sharded.is_select:
        return _rows(session.execute(sharded)), _rows(session.execute(twin))
    outcomes = []
    for side, statement in ((shop.sharded, sharded), (shop.twin, twin)):
        ids = side is shop.twin and statement.is_insert
        if example.rows:
            rows = [dict(r, **({"id": TWIN_IDS + n} if ids else {})) for n, r in enumerate(example.rows)]
            session.execute(statement, rows)
            count = len(rows)
        else:
            given = ids and listed_rows(statement) is None
            count = session.execute(statement.values(id=TWIN_IDS) if given else statement).rowcount
        after = select(side.Order.user_id, side.Order.amount, side.Order.status)
        outcomes.append([(count,), *_rows(session.execute(after))])
    return outcomes[0], outcomes[1]


def test_twin_shop_sides_hold_the_same_rows(worlds: Worlds) -> None:
    """Every comparison above rests on this: each side holds the same orders and statuses,
    and each database's copy of the reference table holds all of them."""
    shop, world = worlds.two
    s, t = shop.sharded, shop.twin
    columns = ("id", "user_id", "amount", "status")
    with world.session() as session:
        orders = {tuple(r) for r in session.execute(select(*[getattr(s.Order, c) for c in columns]))}
        twins = {tuple(r) for r in session.execute(select(*[getattr(t.Order, c) for c in columns]))}
        statuses = {tuple(r) for r in session.execute(select(t.Status.code, t.Status.grp, t.Status.rank))}
    assert orders == twins and len(orders) == 40
    for engine in world.engines.values():
        with engine.connect() as conn:
            copy = {tuple(r) for r in conn.execute(select(s.Status.code, s.Status.grp, s.Status.rank))}
        assert copy == statuses and len(copy) == 3
