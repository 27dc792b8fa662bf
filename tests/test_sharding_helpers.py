"""Shared models and fixtures of the sharding tests (this module holds no tests).

A *world* is one sharded setup on one backend: models declared for a strategy and a
sharding level (8 tables in one database, or 4 + 4 in two databases), the databases
holding them, engines that log every SQL statement with the database it went to, and
an unsharded twin table ``orders_twin`` that receives the same rows, to compare results.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, String, event
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all, sharded_model
from snowshard.strategies import Gene, Mix, Mod, Shift
from tests.backends import DatabaseFactory

COUNT = 8
LAYOUT = Layout(worker_bits=6, gene_bits=4)
IDS = Snowflake(LAYOUT, worker=3)

STRATEGIES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "gene": (Gene(COUNT), ("id", "user_id")),
    "mod": (Mod(COUNT), ("id", "user_id")),
    "mix": (Mix(COUNT), ("id",)),
    "shift": (Shift(COUNT, 1), ("user_id",)),
}
LEVELS: dict[str, dict[str, range]] = {
    "table": {},
    "database": {"a": range(0, 4), "b": range(4, 8)},
}
BACKEND_MARKS = {"sqlite": (), "postgresql": (pytest.mark.postgres,), "mysql": (pytest.mark.mysql,)}
_TABLE_NAME = re.compile(r"\b((?:orders|items)_\d\d)\b")


@dataclass
class Models:
    """The classes of one (level, strategy): ``Order`` and ``Item`` sharded alike."""

    base: type[DeclarativeBase]
    User: Any
    Order: Any
    Item: Any
    Twin: Any
    strategy: Any
    keys: tuple[str, ...]


_models: dict[tuple[str, str], Models] = {}


def models(level: str, strategy: str) -> Models:
    """The models of ``(level, strategy)``, declared once per test session."""
    found = _models.get((level, strategy))
    if found is not None:
        return found
    rule, keys = STRATEGIES[strategy]
    databases = LEVELS[level]

    class Base(DeclarativeBase):
        pass

    class User(Base):
        __tablename__ = "users"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        name: Mapped[str] = mapped_column(String(40), default="")
        orders: Mapped[list[Any]] = relationship(
            "Order",
            primaryjoin="User.id == foreign(Order.user_id)",
            viewonly=True,
            order_by="Order.id",
        )

    class Order(Sharded, Base):
        __tablename__ = "orders"
        __shards__ = Shards(COUNT, key=keys, strategy=rule, databases=databases)
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger, index=True)
        amount: Mapped[int] = mapped_column(Integer, default=0)
        note: Mapped[Optional[str]] = mapped_column(String(20))

    class Item(Sharded, Base):
        __tablename__ = "items"
        __shards__ = Shards(COUNT, key=keys, strategy=rule, databases=databases)
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        order_id: Mapped[int] = mapped_column(BigInteger)
        qty: Mapped[int] = mapped_column(Integer, default=1)

    class Twin(Base):
        __tablename__ = "orders_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger, index=True)
        amount: Mapped[int] = mapped_column(Integer, default=0)
        note: Mapped[Optional[str]] = mapped_column(String(20))

    Base.registry.configure()
    found = _models[(level, strategy)] = Models(Base, User, Order, Item, Twin, rule, keys)
    return found


@dataclass
class World:
    """Databases, engines, models and the SQL log of one sharded setup."""

    backend: str
    level: str
    strategy_name: str
    m: Models
    engines: dict[str, sa.Engine]
    bind: sa.Engine
    log: list[tuple[str, str, Any]] = field(default_factory=list)

    def session(self, **kw: Any) -> ShardedSession:
        return ShardedSession(self.bind, databases=dict(self.engines), **kw)

    @property
    def model(self) -> Any:
        return sharded_model(self.m.Order)

    def expected_shard(self, order: Any) -> int:
        """The shard the strategy names for ``order`` (by its first key)."""
        key = self.m.keys[0]
        return int(self.m.strategy.shard_of(getattr(order, key)))

    def tables_named(self) -> set[str]:
        """Physical tables named by the SQL logged since the last :meth:`clear`."""
        return {name for _, sql, _ in self.log for name in _TABLE_NAME.findall(sql)}

    def statements(self) -> list[str]:
        return [sql for _, sql, _ in self.log]

    def clear(self) -> None:
        self.log.clear()

    def add_orders(self, users: list[int], amount: Callable[[int], int] = lambda i: i) -> list[Any]:
        """One order per user id (with ``amount(i)``), committed, copied into the twin."""
        with self.session() as session:
            orders = [
                self.m.Order(user_id=u, amount=amount(i), note=f"n{i % 3}")
                for i, u in enumerate(users)
            ]
            session.add_all(orders)
            session.flush()
            session.add_all(
                self.m.Twin(id=o.id, user_id=o.user_id, amount=o.amount, note=o.note)
                for o in orders
            )
            session.commit()
            return [(o.id, o.user_id, o.amount) for o in orders]

    def rows_by_table(self) -> dict[int, set[int]]:
        """Order ids in each physical table, read with Core from its own database."""
        found: dict[int, set[int]] = {}
        for shard, table in enumerate(self.model.tables):
            engine = self.engines.get(self.model.database_of(shard), self.bind)
            with engine.connect() as conn:
                found[shard] = set(conn.execute(sa.select(table.c.id)).scalars())
        return found

    def reset(self) -> None:
        for engine in {id(e): e for e in (self.bind, *self.engines.values())}.values():
            with engine.begin() as conn:
                for table in reversed(self.m.base.metadata.sorted_tables):
                    info = table.info.get("snowshard")
                    here = info is None and engine is self.bind
                    if info is not None:
                        here = (
                            self.engines.get(info.spec.database_of(info.shard), self.bind) is engine
                        )
                    if here:
                        conn.execute(table.delete())
        self.clear()


def _logging(engine: sa.Engine, database: str, log: list[tuple[str, str, Any]]) -> None:
    def record(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        log.append((database, statement, params))

    event.listen(engine, "before_cursor_execute", record)


def world_params(backends: tuple[str, ...] = ("sqlite", "postgresql", "mysql")) -> list[Any]:
    """pytest params (backend, level, strategy) for every combination."""
    return [
        pytest.param((b, level, s), id=f"{b}-{level}-{s}", marks=BACKEND_MARKS[b])
        for b in backends
        for level in LEVELS
        for s in STRATEGIES
    ]


_SERVERS = {"postgresql": "postgres_url", "mysql": "mysql_url"}


def build_world(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, level: str, strategy: str
) -> Iterator[World]:
    """Create the databases and tables of a world; drop them afterwards."""

    def server(kind: str) -> str:
        url: str = request.getfixturevalue(_SERVERS[kind])
        return url

    factory = DatabaseFactory(tmp_path, server)
    try:
        m = models(level, strategy)
        names = list(LEVELS[level]) or ["default"]
        engines = [factory.engine(url) for url in factory(backend, len(names))]
        log: list[tuple[str, str, Any]] = []
        for name, engine in zip(names, engines):
            _logging(engine, name, log)
        databases = dict(zip(names, engines)) if LEVELS[level] else {}
        world = World(backend, level, strategy, m, databases, engines[0], log)
        create_all(m.base.metadata, bind=world.bind, databases=databases)
        yield world
    finally:
        factory.cleanup()
