"""Routing state travels with each statement, and sharded models live as long as their Base."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, event, insert, select
from sqlalchemy.orm import DeclarativeBase, Mapped, ORMExecuteState, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all, sharded_model
from snowshard.sharding.bulk import BIND_KEY, bulk_database
from snowshard.sharding.execute import DIRECT_MAPPER
from snowshard.sharding.routing import find_models
from tests.backends import DatabaseFactory

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=5)


def _declare(databases: dict[str, range] | None = None, strategy: Any = None) -> Any:
    """A fresh Base with a sharded ``orders`` model of 4 tables; returns the model class."""

    class Base(DeclarativeBase):
        pass

    class Order(Sharded, Base):
        __tablename__ = "orders"
        __shards__ = Shards(
            4,
            key=("id", "user_id") if strategy is None else "user_id",
            databases=databases or {},
            strategy=strategy,
        )
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        amount: Mapped[int] = mapped_column(Integer, default=0)

    return Order


@pytest.fixture
def two_databases(database_factory: DatabaseFactory) -> Iterator[tuple[Any, dict[str, sa.Engine]]]:
    order = _declare({"a": range(0, 2), "b": range(2, 4)})
    urls = database_factory("sqlite", 2)
    engines = {name: database_factory.engine(url) for name, url in zip("ab", urls)}
    create_all(order.metadata, databases=engines)
    yield order, engines


def _direct(state: ORMExecuteState) -> Any:
    return state.execution_options.get(DIRECT_MAPPER)


def test_session_has_no_routing_attributes(sqlite_url: str) -> None:
    """A ShardedSession carries no per-call routing attribute that one call could leak to another."""
    with ShardedSession(sa.create_engine(sqlite_url)) as session:
        assert not hasattr(session, "direct_mapper")
        assert not hasattr(session, "routing_database")
        session.bind.dispose()  # type: ignore[union-attr]


def test_get_marks_its_load_with_the_physical_mapper(two_databases: Any) -> None:
    """session.get passes the physical mapper as an execution option of its own SELECT."""
    order, engines = two_databases
    seen: list[Any] = []
    with ShardedSession(databases=engines) as session:
        row = order(user_id=6, amount=3)
        session.add(row)
        session.commit()
        key = row.id
        session.expunge_all()
        event.listen(session, "do_orm_execute", lambda state: seen.append(_direct(state)))
        found = session.get(order, key)
    model = sharded_model(order)
    assert found is not None and found.amount == 3
    assert seen == [model.mappers[model.shard_of("id", key)]]


def test_get_names_the_database_its_id_routes_to(two_databases: Any) -> None:
    """session.get on several databases passes the ID's database in its bind arguments, and
    keeps the caller's own."""
    order, engines = two_databases
    seen: list[dict[str, Any]] = []
    with ShardedSession(databases=engines) as session:
        rows = [order(user_id=user, amount=user) for user in (5, 6)]
        session.add_all(rows)
        session.commit()
        keys = [row.id for row in rows]
        session.expunge_all()
        event.listen(session, "do_orm_execute", lambda state: seen.append(state.bind_arguments))
        found = [session.get(order, key, bind_arguments={"mine": 1}) for key in keys]
    model = sharded_model(order)
    expected = [model.database_of(model.shard_of("id", key)) for key in keys]
    assert [f.amount for f in found if f is not None] == [5, 6]
    assert len(set(expected)) == 2  # the two rows live in different databases
    assert [arguments[BIND_KEY] for arguments in seen] == expected
    assert all(arguments["mine"] == 1 for arguments in seen)


def test_bulk_insert_across_databases_leaves_no_target_behind(two_databases: Any) -> None:
    """Rows of a bulk insert reach both databases, and no bulk target outlives the call."""
    order, engines = two_databases
    with ShardedSession(databases=engines) as session:
        session.execute(insert(order), [{"user_id": u, "amount": u} for u in range(8)])
        assert bulk_database(session) is None
        session.commit()
    counts = {}
    for name, engine in engines.items():
        with engine.connect() as conn:
            counts[name] = sum(
                conn.scalar(select(sa.func.count()).select_from(t)) or 0
                for t in sharded_model(order).tables
                if sharded_model(order).database_of(int(t.name[-2:])) == name
            )
    assert counts == {"a": 4, "b": 4}


def test_same_table_name_in_two_bases_stays_apart() -> None:
    """Two Bases declaring ``orders`` each see only their own sharded model."""
    first, second = _declare(), _declare()
    assert find_models(select(first)) == [sharded_model(first)]
    assert find_models(select(second.amount)) == [sharded_model(second)]
    assert sharded_model(first) is not sharded_model(second)


def test_a_discarded_base_is_garbage_collected(sqlite_url: str) -> None:
    """Once its classes are dropped, a Base and its sharded model are freed, queries included."""
    order = _declare()
    engine = sa.create_engine(sqlite_url)
    create_all(order.metadata, bind=engine)
    with ShardedSession(engine) as session:
        session.execute(select(order).where(order.amount > 1)).all()
    engine.dispose()
    model_ref = weakref.ref(sharded_model(order))
    base_ref = weakref.ref(order.__mro__[2])
    del order, session, engine
    gc.collect()
    assert model_ref() is None and base_ref() is None


def test_a_run_statement_is_not_kept_alive(sqlite_url: str) -> None:
    """The rewrite memo holds statements weakly, so a statement's id cannot be reused stale."""
    order = _declare()
    engine = sa.create_engine(sqlite_url)
    create_all(order.metadata, bind=engine)
    statement = select(order.id).where(order.amount > 0)
    with ShardedSession(engine) as session:
        session.execute(statement).all()
    engine.dispose()
    ref = weakref.ref(statement)
    del statement
    gc.collect()
    assert ref() is None


class _Tagged:
    """A custom strategy whose repr ignores its behaviour (shard = value % 4 + offset)."""

    count = 4

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def shard_of(self, value: int) -> int:
        return (value + self.offset) % 4

    def __repr__(self) -> str:
        return "Tagged(4)"


def test_binding_compares_strategies_not_their_reprs() -> None:
    """Models whose strategies print alike but route differently are not binding tables."""
    first = sharded_model(_declare(strategy=_Tagged(0)))
    second = sharded_model(_declare(strategy=_Tagged(1)))
    same = sharded_model(_declare(strategy=first.strategy))
    assert not first.binds_with(second)
    assert first.binds_with(same)
