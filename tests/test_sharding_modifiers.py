"""Prefixes, suffixes and syntax extensions of a SELECT across shards: kept where the
answer stays one table's, refused by name before any SQL where each source would apply
them to its own rows only."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.sql import ClauseElement

from tests.shop_setup import USERS, Setup, refused_before_sql, sort_rows

try:
    from sqlalchemy.sql import SyntaxExtension
except ImportError:  # SQLAlchemy 2.0: no syntax extensions
    SyntaxExtension = None


def _both(shop: Setup, build: Any) -> tuple[list[Any], list[Any]]:
    s = shop.schema
    with shop.session() as session:
        got = sort_rows([tuple(r) for r in session.execute(build(s.Order))])
        twin = sort_rows([tuple(r) for r in session.execute(build(s.OrderTwin))])
    return got, twin


def test_a_distinct_prefix_is_refused_before_any_sql(shop: Setup) -> None:
    """prefix_with("DISTINCT") would make each source distinct, not the whole: refused."""
    statement = select(shop.schema.Order.status).prefix_with("DISTINCT")
    refused_before_sql(shop, statement, r"prefix_with\('DISTINCT'\)")


def test_a_limit_suffix_is_refused_before_any_sql(shop: Setup) -> None:
    """suffix_with("LIMIT 2") would keep two rows per source: refused, pointing to limit()."""
    order = shop.schema.Order
    statement = select(order.id).order_by(order.id).suffix_with("LIMIT 2")
    refused_before_sql(shop, statement, r"suffix_with\('LIMIT 2'\).*limit\(\)")


def test_a_prefix_for_another_dialect_is_not_rendered_so_kept(shop: Setup) -> None:
    """A DISTINCT prefix given for MySQL only: other databases never see it and merge as
    one table does; on MariaDB it is rendered, so refused."""
    build = lambda m: select(m.status).prefix_with("DISTINCT", dialect="mysql")  # noqa: E731
    if shop.name.startswith("mysql"):
        refused_before_sql(shop, build(shop.schema.Order), "DISTINCT")
        return
    got, twin = _both(shop, build)
    assert got == twin and len(twin) == 40


@pytest.mark.parametrize("shop", [pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True)
def test_mysql_modifiers_that_keep_the_rows_are_kept(shop: Setup) -> None:
    """SQL_NO_CACHE and SQL_BUFFER_RESULT change how MariaDB reads, not what: merged."""
    got, twin = _both(
        shop,
        lambda m: select(m.status, m.amount).prefix_with("SQL_NO_CACHE SQL_BUFFER_RESULT"),
    )
    assert got == twin and len(twin) == 40


def test_a_query_on_one_shard_keeps_its_prefix(shop: Setup) -> None:
    """One user's orders live in one table: the prefix runs there whole, as on one table."""
    got, twin = _both(
        shop, lambda m: select(m.status).where(m.user_id == USERS[0]).prefix_with("DISTINCT")
    )
    assert got == twin and len(twin) == 1


@pytest.mark.skipif(SyntaxExtension is None, reason="syntax extensions are SQLAlchemy 2.1's")
def test_a_syntax_extension_is_refused_before_any_sql(shop: Setup) -> None:
    """A syntax extension (here a comment after the body) is refused across shards, before
    any SQL: the merge cannot know what it does to the rows."""
    from sqlalchemy.ext.compiler import compiles

    class Trailer(SyntaxExtension, ClauseElement):  # type: ignore[misc, valid-type]
        __visit_name__ = "snowshard_test_trailer"
        _traverse_internals = []  # noqa: RUF012 - SQLAlchemy's traversal contract
        inherit_cache = True

        def apply_to_select(self, select_stmt: Any) -> None:
            select_stmt.apply_syntax_extension_point(lambda found: [*found, self], "post_body")

    @compiles(Trailer)
    def _trailer(element: Any, compiler: Any, **kw: Any) -> str:
        return "/* trailer */"

    refused_before_sql(shop, select(shop.schema.Order).ext(Trailer()), r"select\.ext")


def _limited(statement: Any, rows: int) -> Any:
    """``statement`` (an UPDATE or DELETE) with MySQL's LIMIT, as this SQLAlchemy spells it."""
    try:
        from sqlalchemy.dialects.mysql import limit
    except ImportError:  # SQLAlchemy 2.0
        return statement.with_dialect_options(mysql_limit=rows)
    return statement.ext(limit(rows))


@pytest.mark.parametrize("shop", [pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True)
def test_an_update_or_delete_limit_across_shards_is_refused(shop: Setup) -> None:
    """UPDATE/DELETE ... LIMIT 2 on every shard would change 2 rows per shard (8 where one
    table changes 2): refused before any SQL, in both spellings of the LIMIT."""
    order = shop.schema.Order
    statements = [
        update(order).where(order.amount > 3).values(amount=0).with_dialect_options(mysql_limit=2),
        _limited(update(order).where(order.amount > 3).values(amount=0), 2),
    ]
    if SyntaxExtension is not None:  # SQLAlchemy 2.0 has no LIMIT for DELETE
        statements.append(_limited(delete(order).where(order.amount > 3), 2))
    for statement in statements:
        refused_before_sql(shop, statement, "LIMIT|extension")


@pytest.mark.parametrize("shop", [pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True)
def test_an_update_limit_on_one_shard_runs_there(shop: Setup) -> None:
    """One user's orders live in one table: UPDATE ... LIMIT 1 there changes one row, as on
    one table (both rolled back)."""
    s = shop.schema
    changed = []
    for model in (s.Order, s.OrderTwin):
        statement = update(model).where(model.user_id == USERS[1]).values(amount=0)
        with shop.session() as session:
            changed.append(session.execute(_limited(statement, 1)).rowcount)
            session.rollback()
    assert changed == [1, 1]


def test_a_limit_for_mysql_is_not_rendered_elsewhere_so_kept(shop: Setup) -> None:
    """mysql_limit is MySQL's: on SQLite and PostgreSQL the UPDATE changes every row it
    matches, sharded or not (rolled back); on MariaDB it is refused."""
    s = shop.schema
    if shop.name.startswith("mysql"):
        order = s.Order
        statement = update(order).values(amount=0).with_dialect_options(mysql_limit=2)
        refused_before_sql(shop, statement, "LIMIT 2")
        return
    changed = []
    for model in (s.Order, s.OrderTwin):
        statement = update(model).where(model.amount > 3).values(amount=0)
        with shop.session() as session:
            changed.append(
                session.execute(statement.with_dialect_options(mysql_limit=2)).rowcount
            )
            session.rollback()
    assert changed[0] == changed[1] > 2
