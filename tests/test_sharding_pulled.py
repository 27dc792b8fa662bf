"""``subqueries_first=True``: a subquery its statement cannot read where it runs is run
first as a query of its own, and the statement answers as one plain table would."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import delete, exists, func, select, update
from sqlalchemy.orm import with_loader_criteria

from snowshard.sharding import (
    ShardConfigError,
    ShardedSession,
    SubqueryResultError,
    UnsupportedShardQuery,
    explain,
)
from snowshard.sharding import pulled
from tests.shop_setup import rows_of, sort_rows
from tests.twin_setups import CONFIGS, Setup, build_setup
from tests.worlds import TWIN_USERS, Models, SqlLog, WorldFactory, declare_twin_shop, fill_twin_shop

FIRST = {"subqueries_first": True}

TWO_DATABASES = [pytest.param(("sqlite", 2, ""), id="sqlite-2")] + [
    c for c in CONFIGS if c.values[0][1] == 2 and c.values[0][2] in ("", "async")
]
"""Orders over two databases of each backend (and of PostgreSQL and MariaDB through
asyncio sessions)."""


@pytest.fixture(scope="module", params=TWO_DATABASES)
def shop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    """The twin shop of each configuration, made once for the module and only read."""
    yield from build_setup(request, tmp_path_factory.mktemp("pulled"), *request.param)

STATEMENTS: dict[str, Callable[[Models], Any]] = {
    "unsharded IN sharded": lambda w: select(w.Note.id).where(
        w.Note.id.in_(select(w.Order.user_id).where(w.Order.amount > 2))
    ),
    "NOT IN": lambda w: select(w.Note.id).where(
        w.Note.id.not_in(select(w.Order.user_id).where(w.Order.amount > 11))
    ),
    "EXISTS": lambda w: select(w.Note.id).where(exists().where(w.Order.amount > 3)),
    "NOT EXISTS of nothing": lambda w: select(w.Note.id).where(
        ~exists().where(w.Order.amount > 10_000)
    ),
    "above the average": lambda w: select(w.Order.id, w.Order.amount).where(
        w.Order.amount > select(func.avg(w.Order.amount)).scalar_subquery()
    ),
    "the newest, keyed": lambda w: select(w.Order.id).where(
        w.Order.user_id == TWIN_USERS[2],
        w.Order.id == select(func.max(w.Order.id)).scalar_subquery(),
    ),
    "a count as a column": lambda w: select(
        w.Note.id, select(func.count()).select_from(w.Order).scalar_subquery()
    ),
    "orders of big items": lambda w: select(w.Order.id).where(
        w.Order.id.in_(select(w.Item.order_id).where(w.Item.qty > 2))
    ),
    "orders of noted users": lambda w: select(w.Order.id, w.Order.amount).where(
        w.Order.user_id.in_(select(w.Note.id).where(w.Note.id < 10))
    ),
    "NOT IN an empty subquery, NULLs too": lambda w: select(w.Order.id).where(
        w.Order.amount.not_in(select(w.Order.amount).where(w.Order.amount > 1000))
    ),
    "EXISTS as a column": lambda w: select(w.Note.id, exists().where(w.Order.amount > 3)),
    "IN within IN": lambda w: select(w.Note.id).where(
        w.Note.id.in_(
            select(w.Order.user_id).where(
                w.Order.id.in_(select(w.Item.order_id).where(w.Item.qty > 4))
            )
        )
    ),
    "a scalar in a column": lambda w: select(
        w.Order.id, w.Order.amount - select(func.min(w.Order.amount)).scalar_subquery()
    ),
    "grouped over a subquery's users": lambda w: select(w.Order.status, func.count())
    .where(w.Order.user_id.in_(select(w.Note.id).where(w.Note.label != "u3")))
    .group_by(w.Order.status),
}


def _rows(setup: Setup, statement: Any) -> list[tuple[Any, ...]]:
    with setup.session() as session:
        return sort_rows(rows_of(session.execute(statement)))


@pytest.mark.parametrize("name", list(STATEMENTS))
def test_a_subquery_run_first_gives_the_plain_tables_answer(shop: Setup, name: str) -> None:
    """Each statement, refused as it is, answers as the twin does with its subquery run first."""
    build = STATEMENTS[name]
    with shop.session() as session, pytest.raises(UnsupportedShardQuery):
        session.execute(build(shop.shop.sharded))
    got = _rows(shop, build(shop.shop.sharded).execution_options(**FIRST))
    twin = _rows(shop, build(shop.shop.twin))
    assert got == twin
    assert twin  # the statement shows something


def test_not_in_a_subquery_holding_null_matches_nothing(shop: Setup) -> None:
    """NOT IN over values that include NULL is never true, as in SQL."""

    def build(w: Models) -> Any:
        return select(w.Status.code).where(w.Status.rank.not_in(select(w.Order.amount)))

    nulls = select(func.count()).where(shop.shop.twin.Order.amount.is_(None))
    assert _rows(shop, nulls) != [(0,)]
    assert _rows(shop, build(shop.shop.sharded).execution_options(**FIRST)) == []
    assert _rows(shop, build(shop.shop.twin)) == []


def test_loader_criteria_of_the_statement_reach_the_subquery_run_first(shop: Setup) -> None:
    """The statement's criteria filter its subquery too, as SQLAlchemy applies them there."""

    def build(w: Models) -> Any:
        return (
            select(w.Order.id)
            .where(w.Order.amount > select(func.avg(w.Order.amount)).scalar_subquery())
            .options(with_loader_criteria(w.Order, lambda cls: cls.amount > 3))
        )

    got = _rows(shop, build(shop.shop.sharded).execution_options(**FIRST))
    twin = _rows(shop, build(shop.shop.twin))
    unfiltered = _rows(shop, STATEMENTS["above the average"](shop.shop.twin))
    assert got == twin
    assert len(twin) != len(unfiltered)  # the criteria moved the average


def test_values_from_a_subquery_route_the_statement(shop: Setup) -> None:
    """Shard keys a subquery gives narrow the statement to their tables."""
    user = TWIN_USERS[2]  # one of the notes' users
    statement = select(shop.shop.sharded.Order.id).where(
        shop.shop.sharded.Order.user_id.in_(select(shop.shop.sharded.Note.id).where(
            shop.shop.sharded.Note.id == user
        ))
    )
    shop.world.log.clear()
    got = _rows(shop, statement.execution_options(**FIRST))
    orders = [s for s in shop.world.log.statements() if "orders" in s]
    assert len(orders) == 1  # one table's statement
    twin = _rows(shop, select(shop.shop.twin.Order.id).where(shop.shop.twin.Order.user_id == user))
    assert got == twin and twin


@pytest.mark.parametrize(
    "build",
    [
        lambda w: select(w.Note.id).where(exists().where(w.Order.user_id == w.Note.id)),
        lambda w: select(w.Order.id, func.row_number().over(order_by=w.Order.id)).where(
            w.Order.user_id.in_(select(w.Item.user_id))
        ),
        lambda w: select(w.Note.id).where(
            w.Note.id.in_(
                select(w.Order.user_id).options(
                    with_loader_criteria(w.Order, lambda cls: cls.amount > 3)
                )
            )
        ),
    ],
    ids=[
        "correlated", "refused for a window function", "criteria given to the subquery alone",
    ],  # fmt: skip
)
def test_what_cannot_run_first_is_refused_before_any_sql(shop: Setup, build: Any) -> None:
    """A correlated subquery, or a statement refused for another reason, sends nothing."""
    shop.world.log.clear()
    with shop.session() as session, pytest.raises(UnsupportedShardQuery):
        session.execute(build(shop.shop.sharded).execution_options(**FIRST))
    assert shop.world.log.statements() == []


def test_a_subquery_correlated_with_the_table_a_write_changes_is_not_run_first(
    shop: Setup,
) -> None:
    """A DELETE's subquery reading its table stays in place; an uncorrelated one is found."""
    w = shop.shop.sharded
    correlated = select(w.Item.order_id).where(w.Item.qty > w.Order.amount)
    alone = select(w.Item.order_id).where(w.Item.qty > 2)
    assert pulled.pulled_subqueries(delete(w.Order).where(w.Order.id.in_(correlated))) == []
    found = pulled.pulled_subqueries(delete(w.Order).where(w.Order.id.in_(alone)))
    assert [p.kind for p in found] == ["in"]


def test_a_scalar_subquery_of_several_rows_is_an_error(shop: Setup) -> None:
    """A scalar subquery returning two rows raises SubqueryResultError, as databases refuse it."""
    Order = shop.shop.sharded.Order
    statement = select(Order.id).where(Order.amount == select(Order.amount).scalar_subquery())
    with shop.session() as session, pytest.raises(SubqueryResultError, match="more than one row"):
        session.execute(statement.execution_options(**FIRST))


def test_an_in_list_over_the_cap_is_refused(shop: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    """More values than MAX_VALUES raise UnsupportedShardQuery naming the count."""
    monkeypatch.setattr(pulled, "MAX_VALUES", 3)
    statement = STATEMENTS["unsharded IN sharded"](shop.shop.sharded)
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="more than the 3"):
        session.execute(statement.execution_options(**FIRST))


def test_explain_shows_the_subquery_run_first(shop: Setup) -> None:
    """explain() lists the subquery as a query of its own, then the statement."""
    statement = STATEMENTS["above the average"](shop.shop.sharded)
    with shop.world.session() as session:
        assert explain(session, statement).refused is not None
        plan = explain(session, statement.execution_options(**FIRST))
    assert plan.refused is None
    assert len(plan.first) == 1 and plan.first[0].merged  # the average of every table
    assert "first, subquery 1" in str(plan) and plan.as_dict()["first"]


def test_the_refusal_names_the_option(shop: Setup) -> None:
    """Without the option, the refusal says how to have the subquery run first."""
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="subqueries_first"):
        session.execute(STATEMENTS["above the average"](shop.shop.sharded))


@pytest.mark.parametrize("write", ["delete", "update"])
def test_a_write_with_a_subquery_run_first_changes_what_one_table_would(
    sharded_world: WorldFactory, sql_backend: str, sql_log: SqlLog, write: str
) -> None:
    """DELETE / UPDATE of orders of big items: the same row count and rows after as the twin."""
    shop = declare_twin_shop(4, databases=2)
    world = sharded_world(shop.base, sql_backend)
    with world.session() as session:
        fill_twin_shop(session, shop)

    def build(w: Models) -> Any:
        big = w.Order.id.in_(select(w.Item.order_id).where(w.Item.qty > 2))
        if write == "delete":
            return delete(w.Order).where(big)
        return update(w.Order).where(big).values(amount=-1)

    outcomes = []
    for side, options in ((shop.sharded, FIRST), (shop.twin, {})):
        with world.session() as session:
            done = session.execute(build(side).execution_options(**options)).rowcount
            session.commit()
            after = sort_rows(rows_of(session.execute(select(side.Order.id, side.Order.amount))))
        outcomes.append((done, after))
    assert outcomes[0] == outcomes[1]
    assert outcomes[1][0] > 0


def test_a_session_can_run_every_statements_subqueries_first(shop: Setup) -> None:
    """ShardedSession(subqueries_first=True) applies to statements that do not say otherwise."""
    statement = STATEMENTS["above the average"](shop.shop.sharded)
    with ShardedSession(
        shop.world.bind, databases=shop.world.databases, subqueries_first=True
    ) as session:
        got = sort_rows(rows_of(session.execute(statement)))
        with pytest.raises(UnsupportedShardQuery):
            session.execute(statement.execution_options(subqueries_first=False))
    assert got == _rows(shop, STATEMENTS["above the average"](shop.shop.twin))


@pytest.mark.parametrize("where", ["session", "statement"])
def test_a_subqueries_first_that_is_not_a_bool_is_refused(shop: Setup, where: str) -> None:
    """subqueries_first="yes" raises ShardConfigError naming the value."""
    statement = STATEMENTS["above the average"](shop.shop.sharded)
    with pytest.raises(ShardConfigError, match="'yes'"):
        if where == "session":
            ShardedSession(shop.world.bind, subqueries_first="yes")  # type: ignore[arg-type]
        else:
            with shop.world.session() as session:
                session.execute(statement.execution_options(subqueries_first="yes"))
