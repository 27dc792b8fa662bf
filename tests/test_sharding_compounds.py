"""UNION and UNION ALL of SELECTs on a sharded model: the rows one table gives, or a
refusal before any SQL (``snowshard.sharding.compounds``).

The shop's orders over two databases of each backend and their unsharded twin (and the
twin shop's items and reference table); the random shapes run in
``test_sharding_differential`` (``_compound``).
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import BigInteger, cast, desc, except_, func, intersect, select, union, union_all

from snowshard.sharding import UnsupportedShardQuery
from tests.shop_setup import USERS, Setup, refused_before_sql, rows_of, sort_rows
from tests.twin_setups import TWIN_BACKENDS, Filled, both_rows
from tests.worlds import Models


def _both(shop: Setup, build: Any) -> tuple[list[Any], list[Any]]:
    """The sharded model's rows and the twin's, in the order each came."""
    s = shop.schema
    with shop.session() as session:
        got = rows_of(session.execute(build(s.Order)))
        return got, rows_of(session.execute(build(s.OrderTwin)))


def test_union_all_returns_every_row_of_every_select(shop: Setup) -> None:
    """A UNION ALL of overlapping SELECTs keeps a row each time a SELECT returns it."""
    got, twin = _both(
        shop,
        lambda m: union_all(
            select(m.id, m.amount).where(m.user_id == USERS[0]),
            select(m.id, m.amount).where(m.amount > 5),
        ),
    )
    assert sort_rows(got) == sort_rows(twin) and len(twin) > len(set(twin))


def test_union_removes_rows_that_two_databases_both_return(shop: Setup) -> None:
    """A UNION keeps one of equal rows, though different databases return them."""
    got, twin = _both(
        shop, lambda m: union(select(m.status), select(m.status).where(m.amount > 3))
    )
    assert sort_rows(got) == sort_rows(twin) and len(twin) == len(set(twin)) > 1


def test_ordered_and_limited_union_returns_one_tables_page(shop: Setup) -> None:
    """ORDER BY (by name and by the first SELECT's column), LIMIT and OFFSET of the compound
    give the rows one table gives, in its order."""
    got, twin = _both(
        shop,
        lambda m: union(
            select(m.status, m.amount).where(m.user_id.in_(USERS[:3])),
            select(m.status, m.amount).where(m.amount < 4),
        )
        .order_by(desc("status"), m.amount)
        .limit(5)
        .offset(1),
    )
    assert got == twin and len(got) == 5


def test_count_over_a_union_all_derived_table_is_merged(shop: Setup) -> None:
    """count(*) over a UNION ALL used as a derived table sums each database's count."""
    got, twin = _both(
        shop,
        lambda m: select(func.count()).select_from(
            union_all(select(m.id).where(m.amount > 2), select(m.id).where(m.user_id == USERS[1]))
            .subquery()
        ),
    )
    assert got == twin and got[0][0] > 0


@pytest.mark.parametrize("operator", [except_, intersect], ids=["except", "intersect"])
def test_except_and_intersect_are_refused_before_any_sql(shop: Setup, operator: Any) -> None:
    """EXCEPT and INTERSECT are refused: a row's match may live in another database."""
    m = shop.schema.Order
    statement = operator(select(m.amount), select(m.amount).where(m.user_id == USERS[1]))
    refused_before_sql(shop, statement, "shard")


def test_order_by_an_expression_of_a_union_is_refused_before_any_sql(shop: Setup) -> None:
    """ORDER BY an expression of a UNION's columns is refused, naming its columns."""
    m = shop.schema.Order
    statement = union_all(select(m.amount), select(m.amount)).order_by(m.amount + 1)
    refused_before_sql(shop, statement, r"names no column of its result \(amount\)")


def test_columns_of_different_types_are_refused_before_any_sql(shop: Setup) -> None:
    """A column that is INTEGER in one SELECT and BIGINT in another is refused, naming it."""
    m = shop.schema.Order
    refused_before_sql(shop, union(select(m.amount), select(m.user_id)), "column 1 of a UNION")
    got, twin = _both(
        shop, lambda m: union(select(cast(m.amount, BigInteger)), select(m.user_id))
    )
    assert sort_rows(got) == sort_rows(twin)


def test_a_grouped_select_in_a_union_is_refused_before_any_sql(shop: Setup) -> None:
    """A SELECT with GROUP BY in a UNION ALL is refused: each database would group its rows."""
    m = shop.schema.Order
    statement = union_all(select(m.status).group_by(m.status), select(m.status))
    refused_before_sql(shop, statement, "subquery")


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_union_of_two_models_sharded_alike_equals_one_table(filled: Filled, backend: str) -> None:
    """A UNION of orders' and items' user IDs (one joined to a reference table), ordered and
    limited, over two databases, equals the twin's."""
    shop, world = filled(backend, 2)

    def build(w: Models) -> Any:
        orders = select(w.Order.user_id).join(w.Status, w.Status.code == w.Order.status)
        return union(orders, select(w.Item.user_id)).order_by("user_id").limit(4)

    got, twin = both_rows(world, shop, build)
    assert got == twin and len(twin) == 4


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
def test_a_select_of_a_reference_table_alone_is_refused(filled: Filled, backend: str) -> None:
    """A UNION ALL with a SELECT of a reference table alone is refused before any SQL: every
    database holds the table, so each would return its rows again."""
    shop, world = filled(backend, 2)
    s = shop.sharded
    statement = union_all(select(s.Order.status), select(s.Status.code))
    world.log.clear()
    with world.session() as session, pytest.raises(UnsupportedShardQuery, match="no sharded model"):
        session.execute(statement)
    assert len(world.log) == 0
