"""Shared models and fixtures of the sharding contract tests (this module holds no tests).

A *world* here is one sharded setup on one backend: the shop of ``tests/worlds.py``
declared for a strategy and a sharding level (8 tables in one database, or 4 + 4 in two
databases), the databases holding it, engines whose SQL goes to a :class:`SqlLog`, and
an unsharded twin table ``orders_twin`` that receives the same rows, to compare results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard.sharding import ShardedModel, ShardedSession, sharded_model
from snowshard.strategies import Gene, Mix, Mod, Shift
from tests.backends import DatabaseFactory
from tests.worlds import IDS, LAYOUT, SqlLog, declare_shop, open_world
from tests.worlds import World as ShardedWorld

__all__ = [
    "BACKEND_MARKS",
    "COUNT",
    "IDS",
    "LAYOUT",
    "LEVELS",
    "STRATEGIES",
    "Models",
    "World",
    "build_world",
    "models",
    "world_params",
]

COUNT = 8

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
    shop = declare_shop(COUNT, key=keys, strategy=rule, databases=LEVELS[level])

    class Twin(shop.base):  # type: ignore[name-defined,misc]
        __tablename__ = "orders_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger, index=True)
        amount: Mapped[int] = mapped_column(Integer, default=0)
        note: Mapped[Optional[str]] = mapped_column(String(20))

    shop.base.registry.configure()
    found = Models(shop.base, shop.User, shop.Order, shop.Item, Twin, rule, keys)
    _models[(level, strategy)] = found
    return found


@dataclass
class World:
    """Databases, engines, models and the SQL log of one sharded setup."""

    backend: str
    level: str
    strategy_name: str
    m: Models
    sharded: ShardedWorld

    @property
    def engines(self) -> dict[str, sa.Engine]:
        """The named databases (none at the table level, where everything is in ``bind``)."""
        return self.sharded.databases

    @property
    def bind(self) -> sa.Engine:
        return self.sharded.bind

    @property
    def sql(self) -> SqlLog:
        return self.sharded.log

    @property
    def log(self) -> list[tuple[str, str, Any]]:
        """(database, SQL, parameters) of each statement since the last :meth:`clear`."""
        return [(s.database, s.statement, s.params) for s in self.sql]

    def session(self, **kw: Any) -> ShardedSession:
        return self.sharded.session(**kw)

    @property
    def model(self) -> ShardedModel:
        return sharded_model(self.m.Order)

    def expected_shard(self, order: Any) -> int:
        """The shard the strategy names for ``order`` (by its first key)."""
        key = self.m.keys[0]
        return int(self.m.strategy.shard_of(getattr(order, key)))

    def tables_named(self) -> set[str]:
        """Physical tables named by the SQL logged since the last :meth:`clear`."""
        return self.sql.touched()

    def statements(self) -> list[str]:
        return self.sql.statements()

    def clear(self) -> None:
        self.sql.clear()

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
        by_name = self.sharded.rows_by_table(self.m.Order)
        return {shard: by_name[table.name] for shard, table in enumerate(self.model.tables)}

    def reset(self) -> None:
        """Delete every row of every table (in each table's database); clear the log."""
        for engine in {id(e): e for e in self.sharded.engines.values()}.values():
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


def world_params(backends: tuple[str, ...] = ("sqlite", "postgresql", "mysql")) -> list[Any]:
    """pytest params (backend, level, strategy) for every combination."""
    return [
        pytest.param((b, level, s), id=f"{b}-{level}-{s}", marks=BACKEND_MARKS[b])
        for b in backends
        for level in LEVELS
        for s in STRATEGIES
    ]




def build_world(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, level: str, strategy: str
) -> Iterator[World]:
    """Create the databases and tables of a world; drop them afterwards."""


    factory = DatabaseFactory.for_request(request, tmp_path)
    try:
        m = models(level, strategy)
        yield World(backend, level, strategy, m, open_world(factory, m.base, backend))
    finally:
        factory.cleanup()
