"""Sharding over several databases: engines per table, schema helpers, two-phase commit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, event, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    Sharded,
    ShardedSession,
    Shards,
    UnknownDatabase,
    UnsupportedShardQuery,
    create_all,
    drop_all,
    sharded_model,
    tables_by_database,
)

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=13)


class Base(DeclarativeBase):
    pass


class Note(Base):
    """An unsharded table: it lives with ``bind``."""

    __tablename__ = "notes"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(4, key=("id", "user_id"), databases={"east": [0, 1], "west": [2, 3]})
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Integer, default=0)


SERVERS = [
    pytest.param("postgresql", marks=pytest.mark.postgres, id="postgresql"),
    pytest.param("mysql", marks=pytest.mark.mysql, id="mysql"),
]


@pytest.fixture
def engines(db_urls_2: list[str], database_factory: Any) -> Iterator[dict[str, sa.Engine]]:
    east, west = (database_factory.engine(url) for url in db_urls_2)
    yield {"east": east, "west": west}


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_tables_by_database_follows_the_spec() -> None:
    """Each physical table is listed under its database; unsharded tables under None."""
    grouped = tables_by_database(Base.metadata)
    assert {k: sorted(t.name for t in v) for k, v in grouped.items()} == {
        None: ["notes"],
        "east": ["orders_00", "orders_01"],
        "west": ["orders_02", "orders_03"],
    }


def test_create_all_and_drop_all_per_database(engines: dict[str, sa.Engine]) -> None:
    """create_all puts each table in its database (unsharded ones in bind); drop_all undoes it."""
    create_all(Base.metadata, bind=engines["east"], databases=engines)
    assert _tables(engines["east"]) == {"notes", "orders_00", "orders_01"}
    assert _tables(engines["west"]) == {"orders_02", "orders_03"}
    drop_all(Base.metadata, bind=engines["east"], databases=engines)
    assert _tables(engines["east"]) == _tables(engines["west"]) == set()


def test_create_all_needs_every_database() -> None:
    """Leaving out the engine of a database raises UnknownDatabase, naming it."""
    engine = sa.create_engine("sqlite://")
    try:
        with pytest.raises(UnknownDatabase, match="'west'"):
            create_all(Base.metadata, bind=engine, databases={"east": engine})
    finally:
        engine.dispose()


def test_writes_and_reads_go_to_the_database_of_each_table(engines: dict[str, sa.Engine]) -> None:
    """Rows of orders_00/01 are stored in 'east', of orders_02/03 in 'west', and read back."""
    create_all(Base.metadata, bind=engines["east"], databases=engines)
    with ShardedSession(engines["east"], databases=engines) as session:
        session.add_all([Order(user_id=u, amount=u) for u in range(8)])
        session.add(Note(id=1))
        session.commit()
        assert session.scalar(select(func.sum(Order.amount))) == sum(range(8))
    for name, engine in engines.items():
        with engine.connect() as conn:
            for shard in sharded_model(Order).spec.tables_in(name):
                users = conn.execute(sa.text(f"SELECT user_id FROM orders_{shard:02d}")).scalars()
                assert sorted(users) == [shard, shard + 4]


@pytest.mark.parametrize("backend", SERVERS)
def test_two_phase_commit_prepares_every_database(backend: str, database_factory: Any) -> None:
    """Session(twophase=True) prepares both databases, then commits rows in each."""
    east, west = (database_factory.engine(u) for u in database_factory(backend, 2))
    engines = {"east": east, "west": west}
    create_all(Base.metadata, bind=east, databases=engines)
    prepared: list[str] = []
    for engine in (east, west):
        event.listen(engine, "prepare_twophase", lambda conn, xid: prepared.append(str(xid)))
    with ShardedSession(east, databases=engines, twophase=True) as session:
        session.add_all([Order(user_id=u, amount=1) for u in (0, 2)])
        session.commit()
    assert len(prepared) == 2
    with ShardedSession(east, databases=engines) as session:
        assert session.scalar(select(func.count()).select_from(Order)) == 2


@pytest.mark.parametrize("backend", SERVERS)
def test_two_phase_rollback_leaves_both_databases_empty(
    backend: str, database_factory: Any
) -> None:
    """A two-phase session rolled back after writing to both databases leaves no rows."""
    east, west = (database_factory.engine(u) for u in database_factory(backend, 2))
    engines = {"east": east, "west": west}
    create_all(Base.metadata, bind=east, databases=engines)
    with ShardedSession(east, databases=engines, twophase=True) as session:
        session.add_all([Order(user_id=u, amount=1) for u in (0, 2)])
        session.flush()
        session.rollback()
        assert session.scalar(select(func.count()).select_from(Order)) == 0


def _sent(engines: dict[str, sa.Engine]) -> list[str]:
    sent: list[str] = []
    for engine in engines.values():
        event.listen(engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    return sent


@pytest.mark.parametrize(
    "subquery",
    [
        lambda: Note.id.in_(select(Order.user_id)),
        lambda: select(Order.id).where(Order.user_id == Note.id).exists(),
        lambda: Note.id == select(func.max(Order.user_id)).scalar_subquery(),
    ],
    ids=["in", "exists", "scalar"],
)
def test_sharded_model_in_a_subquery_across_databases_is_refused(
    engines: dict[str, sa.Engine], subquery: Any
) -> None:
    """Across databases, a sharded model inside a subquery raises before any SQL is sent."""
    create_all(Base.metadata, bind=engines["east"], databases=engines)
    sent = _sent(engines)
    with ShardedSession(engines["east"], databases=engines) as session:
        with pytest.raises(UnsupportedShardQuery, match="inside a subquery"):
            session.scalars(select(Note).where(subquery()))
    assert sent == []


def test_sharded_model_in_its_own_subquery_across_databases_is_refused(
    engines: dict[str, sa.Engine],
) -> None:
    """A sharded query filtering on a subquery of itself would take a per-database max: refused."""
    create_all(Base.metadata, bind=engines["east"], databases=engines)
    with ShardedSession(engines["east"], databases=engines) as session:
        with pytest.raises(UnsupportedShardQuery, match="Order is sharded over several"):
            session.scalars(select(Order).where(Order.id == select(func.max(Order.id)).scalar_subquery()))
