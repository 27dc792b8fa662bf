"""FROM entries selected whole (a table, a subquery, a CTE) return one table's columns.

Each statement runs on the sharded orders and on their unsharded twin, in one database
(the tables read through one UNION ALL) and over two (merged), on every backend. Before
the columns were spelled out, ``select(Order.__table__)`` returned the union's own column
as well, and ``select(select(Order).subquery())`` the columns of every table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from snowshard.sharding.spelled_columns import spelled_columns
from tests.shop_setup import USERS, Setup, build_setup, rows_of, sort_rows

SETUPS = [
    pytest.param(("sqlite", 1), id="sqlite-1"),
    pytest.param(("sqlite", 2), id="sqlite-2"),
    pytest.param(("postgresql", 1), id="postgresql-1", marks=pytest.mark.postgres),
    pytest.param(("postgresql", 2), id="postgresql-2", marks=pytest.mark.postgres),
    pytest.param(("mysql", 1), id="mysql-1", marks=pytest.mark.mysql),
    pytest.param(("mysql", 2), id="mysql-2", marks=pytest.mark.mysql),
]
COLUMNS = 4  # id, user_id, amount, status


@pytest.fixture(scope="module", params=SETUPS)
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    """Orders in one database (several tables) or two, and their twin, made once, read only."""
    backend, count = request.param
    yield from build_setup(request, tmp_path_factory.mktemp("spelled"), backend, count)


def _both(setup: Setup, build: Callable[[Any], Any], ordered: bool = False) -> tuple[Any, Any]:
    """Rows of ``build(model)`` on the sharded orders and on the twin."""
    s = setup.schema
    with setup.session() as session:
        got = rows_of(session.execute(build(s.Order)))
        twin = rows_of(session.execute(build(s.OrderTwin)))
    return (got, twin) if ordered else (sort_rows(got), sort_rows(twin))


def _assert_equal(setup: Setup, build: Callable[[Any], Any], ordered: bool = False) -> None:
    got, twin = _both(setup, build, ordered)
    assert got == twin and got and {len(row) for row in got} == {COLUMNS}


def test_select_of_the_table_returns_one_tables_columns(setup: Setup) -> None:
    """select(Order.__table__) gives the rows and columns of one table."""
    _assert_equal(setup, lambda m: select(m.__table__))


def test_table_select_with_a_condition_equals_one_table(setup: Setup) -> None:
    """Order.__table__.select().where(...) gives what one table gives."""
    _assert_equal(setup, lambda m: m.__table__.select().where(m.__table__.c.amount > 5))


def test_legacy_query_of_the_table_equals_one_table(setup: Setup) -> None:
    """session.query(Order.__table__) gives one table's rows and columns."""
    s = setup.schema
    with setup.session() as session:
        got = sort_rows(rows_of(session.query(s.Order.__table__)))
        twin = sort_rows(rows_of(session.query(s.OrderTwin.__table__)))
    assert got == twin and {len(row) for row in got} == {COLUMNS}


def test_derived_table_of_the_entity_selected_whole_equals_one_table(setup: Setup) -> None:
    """select(select(Order).subquery()) lists the subquery's columns, not every table's."""
    _assert_equal(setup, lambda m: select(select(m).where(m.amount > 2).subquery()))


def test_cte_of_the_entity_selected_whole_equals_one_table(setup: Setup) -> None:
    """select(cte) of a CTE over the entity lists the CTE's columns."""
    _assert_equal(setup, lambda m: select(select(m).cte("recent")))


def test_ordered_page_of_a_derived_table_equals_one_table(setup: Setup) -> None:
    """A derived table selected whole, ordered and limited, merges to one table's page."""

    def build(m: Any) -> Any:
        inner = select(m).subquery()
        return select(inner).order_by(inner.c.amount.desc(), inner.c.id).limit(5)

    _assert_equal(setup, build, ordered=True)


def test_nested_derived_tables_selected_whole_equal_one_table(setup: Setup) -> None:
    """A derived table of a derived table, each selected whole, is spelled out at each level."""

    def build(m: Any) -> Any:
        inner = select(m.__table__).where(m.user_id.in_(USERS[:4])).subquery()
        return select(select(inner).subquery())

    _assert_equal(setup, build)


def test_count_over_a_table_selected_whole_equals_one_table(setup: Setup) -> None:
    """count(*) over a derived table that selects the table whole counts its rows."""
    got, twin = _both(
        setup, lambda m: select(func.count()).select_from(select(m.__table__).subquery())
    )
    assert got == twin and got[0][0] > 0


def test_orm_entity_is_left_to_the_orm(setup: Setup) -> None:
    """select(Order) is not spelled out: it still loads Order objects."""
    s = setup.schema
    statement = select(s.Order).where(s.Order.user_id == USERS[0])
    assert spelled_columns(statement) is statement
    with setup.session() as session:
        loaded = session.scalars(statement).all()
    assert loaded and all(isinstance(order, s.Order) for order in loaded)


def test_aggregates_are_not_spelled_out(setup: Setup) -> None:
    """func.sum(...) is a FROM entry to SQLAlchemy too (table-valued use); it stays a column."""
    s = setup.schema
    statement = select(s.Order.user_id, func.sum(s.Order.amount)).group_by(s.Order.user_id)
    assert spelled_columns(statement) is statement
    got, twin = _both(
        setup, lambda m: select(m.user_id, func.sum(m.amount)).group_by(m.user_id)
    )
    assert got == twin and got and {len(row) for row in got} == {2}
