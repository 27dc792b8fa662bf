"""A table to reshard, its two declared layouts, an unsharded twin, and steady writers.

``Order`` (4 tables ``rs_orders_00..03``) is moved to ``OrderV2`` (8 tables
``rs_orders_v2_00..07``); in the two-database world both layouts span databases a and b.
Writers insert, update and delete through a :class:`ShardedSession`, choosing the model
with :meth:`ShardMap.pick` per transaction and retrying on :class:`StaleShardMap`, and
repeat every committed write on ``rs_twin``, one plain table: after the move, the new
layout must hold exactly the twin's rows.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, String, delete, select, update
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from snowshard.operations.reshard import Reshard, ReshardPlan
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all, sharded_model
from snowshard.sharding.shard_map import ShardMap, StaleShardMap


class TwinBase(DeclarativeBase):
    pass


def _columns() -> dict[str, Any]:
    return {
        "id": mapped_column(BigInteger, primary_key=True, autoincrement=False),
        "user_id": mapped_column(BigInteger, index=True),
        "amount": mapped_column(Integer),
        "note": mapped_column(String(40)),
        "__annotations__": {"id": Mapped[int], "user_id": Mapped[int], "amount": Mapped[int],
                            "note": Mapped[str]},
    }


def declare(databases: Mapping[str, range] | None, counts: tuple[int, int] = (4, 8)) -> tuple[type, type]:
    """The old and new declarations of ``rs_orders`` (optionally over databases a/b),
    each in a declarative base of its own, fresh for every world; ``counts``: their table
    counts (one database only, when not 4 and 8)."""
    old_base = type("OldBase", (DeclarativeBase,), {})
    new_base = type("NewBase", (DeclarativeBase,), {})
    old_db = {} if databases is None else {"a": range(0, 2), "b": range(2, 4)}
    new_db = {} if databases is None else {"a": range(0, 4), "b": range(4, 8)}
    old = type("Order", (Sharded, old_base), {
        "__tablename__": "rs_orders", "__shards__": Shards(counts[0], key="user_id", databases=old_db),
        **_columns()})
    new = type("OrderV2", (Sharded, new_base), {
        "__tablename__": "rs_orders", "__shards__": Shards(
            counts[1], key="user_id", pattern="{name}_v2_{index:02d}", databases=new_db),
        **_columns()})
    return old, new


class Twin(TwinBase):
    __tablename__ = "rs_twin"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Integer)
    note: Mapped[str] = mapped_column(String(40))


@dataclass
class ReshardWorld:
    """Engines by database key, the two declarations, and the plan between them."""

    engines: dict[str, sa.Engine]
    old: type
    new: type
    control: str

    @property
    def bind(self) -> sa.Engine:
        return self.engines[self.control]

    def session(self) -> ShardedSession:
        databases = {k: e for k, e in self.engines.items() if k != "default"}
        return ShardedSession(self.engines.get("default"), databases=databases or None)

    def plan(self, **kw: Any) -> ReshardPlan:
        return ReshardPlan.between(
            sharded_model(self.old), sharded_model(self.new), job="rs-orders", **kw)

    def job(self, **kw: Any) -> Reshard:
        return Reshard(self.plan(**kw), self.engines)

    def rows_of(self, model: type) -> list[tuple[Any, ...]]:
        with self.session() as session:
            return [tuple(r) for r in session.execute(
                select(model.id, model.user_id, model.amount, model.note).order_by(model.id))]  # type: ignore[attr-defined]

    def twin_rows(self) -> list[tuple[Any, ...]]:
        with Session(self.bind) as session:
            return [tuple(r) for r in session.execute(
                select(Twin.id, Twin.user_id, Twin.amount, Twin.note).order_by(Twin.id))]

    def placed_right(self, model: type) -> bool:
        """Every physical table of ``model`` holds only rows its strategy routes to it."""
        m = sharded_model(model)
        for index, table in enumerate(m.tables):
            engine = self.engines[m.database_of(index)] if m.database_of(index) in self.engines else self.bind
            with engine.connect() as connection:
                for (user_id,) in connection.execute(select(table.c.user_id)):
                    if m.shard_of("user_id", user_id) != index:
                        return False
        return True


def build(
    engines: dict[str, sa.Engine],
    *,
    two_databases: bool,
    rows: int = 300,
    seed: int = 1,
    models: tuple[type, type] | None = None,
) -> ReshardWorld:
    """Create the old layout, the twin, and ``rows`` rows in both; ``models``: the (old,
    new) declarations to use (default: fresh ones from :func:`declare`)."""
    old, new = models or declare({"a": range(2)} if two_databases else None)
    control = "a" if two_databases else "default"
    world = ReshardWorld(engines, old, new, control)
    databases = {k: e for k, e in engines.items() if k != "default"} or None
    create_all(old.metadata, bind=engines.get("default"), databases=databases)  # type: ignore[arg-type]
    TwinBase.metadata.create_all(world.bind)
    rng = random.Random(seed)
    values = [{"id": 10_000 + n * 7, "user_id": rng.randrange(1, 500), "amount": n,
               "note": f"n{n}"} for n in range(rows)]
    with world.session() as session:
        session.execute(sa.insert(old), values)
        session.commit()
    with Session(world.bind) as session:
        session.execute(sa.insert(Twin), values)
        session.commit()
    return world


@dataclass
class Writers:
    """Threads writing at a steady pace through the map until stopped; counts what they did."""

    world: ReshardWorld
    threads: int = 2
    pause: float = 0.002
    stop: threading.Event = field(default_factory=threading.Event)
    done: dict[str, int] = field(default_factory=lambda: {"insert": 0, "update": 0, "delete": 0, "stale": 0})
    errors: list[BaseException] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next: int = 10_000_000

    def __enter__(self) -> Writers:
        self._workers = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(self.threads)]
        for worker in self._workers:
            worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for worker in self._workers:
            worker.join(60)
        if self.errors:
            raise self.errors[0]

    def _run(self, number: int) -> None:
        rng = random.Random(number)
        shard_map = ShardMap(self.world.bind)
        try:
            while not self.stop.is_set():
                self._one(rng, shard_map, number)
                self.stop.wait(self.pause)
        except BaseException as error:  # reported by __exit__
            self.errors.append(error)

    def _pick_row(self, rng: random.Random, number: int) -> tuple[int, int] | None:
        """A row only this writer touches (ids split by writer), so the twin sees the
        same order of writes per row as the sharded table."""
        with Session(self.world.bind) as session:
            row = session.execute(select(Twin.id, Twin.user_id).where(Twin.id % self.threads == number)
                                  .order_by(Twin.id).offset(rng.randrange(0, 100)).limit(1)).first()
        return None if row is None else (row[0], row[1])

    def _one(self, rng: random.Random, shard_map: ShardMap, number: int) -> None:
        kind = rng.choice(["insert", "insert", "update", "delete"])
        with self._lock:
            self._next += self.threads
            new_id = self._next - self._next % self.threads + number
        user_id = rng.randrange(1, 500)
        picked = self._pick_row(rng, number) if kind != "insert" else None
        if kind != "insert" and picked is None:
            return
        amount = rng.randrange(1_000_000)
        for _ in range(500):
            model: Any = shard_map.pick(self.world.old, self.world.new)
            try:
                with self.world.session() as session:
                    if kind == "insert":
                        session.add(model(id=new_id, user_id=user_id, amount=amount, note="w"))
                    elif kind == "update":
                        assert picked is not None
                        session.execute(update(model).where(model.id == picked[0], model.user_id == picked[1])
                                        .values(amount=amount))
                    else:
                        assert picked is not None
                        session.execute(delete(model).where(model.id == picked[0], model.user_id == picked[1]))
                    session.commit()
                break
            except StaleShardMap:
                with self._lock:
                    self.done["stale"] += 1
                self.stop.wait(0.005)
        else:
            raise AssertionError("a write kept failing with StaleShardMap")
        with Session(self.world.bind) as session:
            if kind == "insert":
                session.add(Twin(id=new_id, user_id=user_id, amount=amount, note="w"))
            elif kind == "update":
                assert picked is not None
                session.execute(update(Twin).where(Twin.id == picked[0]).values(amount=amount))
            else:
                assert picked is not None
                session.execute(delete(Twin).where(Twin.id == picked[0]))
            session.commit()
        with self._lock:
            self.done[kind] += 1


def replicated_world(
    database_factory: Any, backend: str, primary_url: str, replica_url: str
) -> tuple[ReshardWorld, sa.Engine]:
    """The old layout (300 rows) in a new database on ``primary_url``, and an engine on the
    same database through ``replica_url`` (a real replica of that server), returned once
    the replica has the rows."""
    from sqlalchemy.engine import make_url

    from tests.backends import wait_for_replica

    (url,) = database_factory(backend, 1, server_url=primary_url)
    world = build({"default": database_factory.engine(url)}, two_databases=False)
    copy = make_url(replica_url).set(database=make_url(url).database)
    replica = database_factory.engine(copy.render_as_string(hide_password=False), pool_pre_ping=True)

    def has_rows() -> bool:
        with replica.connect() as connection:
            return bool(connection.execute(sa.text("SELECT count(*) FROM rs_orders_00")).scalar_one())

    wait_for_replica(has_rows, "the test database's rows")
    return world, replica
