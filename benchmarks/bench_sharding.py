"""Reads of a sharded model vs one plain table, PostgreSQL partitioning and horizontal_shard.

    python benchmarks/bench_sharding.py                  # needs PostgreSQL
    python benchmarks/bench_sharding.py --users 2000 --rounds 30 --calls 20

PostgreSQL comes from ``--postgres URL`` or ``SNOWSHARD_TEST_POSTGRES_URL``; two throw-away
databases ``snowshard_bench_*`` are created there and dropped afterwards. The same rows
(``--users`` users with ``--per-user`` orders each, from seeded generators) are loaded into:

* ``plain``: one table ``plain_orders`` (primary key ``id``, index on ``user_id``);
* ``partitioned``: a table ``PARTITION BY HASH (user_id)`` with 16 partitions (primary
  key ``(id, user_id)``, as PostgreSQL requires the partition key in it);
* ``sharded-1db``: snowshard, 16 tables in the first database;
* ``sharded-2db``: snowshard, tables 0-7 in the first database and 8-15 in the second;
* ``horizontal_shard``: SQLAlchemy's ``sqlalchemy.ext.horizontal_shard`` with one table
  per database, users split between the two databases the same way, its
  ``execute_chooser`` finding ``user_id`` in the WHERE clause as in SQLAlchemy's example.

Measures, each built as application code writes it (a new statement per call):

* keyed read: ``select(M).where(M.user_id == u)`` of a random user, as ORM objects;
* get: ``session.get(M, id)`` of a random existing ID, on an empty identity map;
* fan-out: ``select(M).order_by(M.id.desc()).limit(20)`` as ORM objects (partitioned and
  sharded models read every table; horizontal_shard does not merge, so it is left out).

With ``--steps``, the keyed read is also taken apart, as client CPU (``time.process_time``)
of one layer after another: ``plain``; ``physical class`` (the user's shard table read
through its physical mapped class, on a plain ``Session``); ``+ no-op hook`` (the same,
with a ``do_orm_execute`` listener that does nothing, which SQLAlchemy pays for on every
statement); ``ShardedSession, physical`` (the same statement on a ``ShardedSession``: it
names no sharded model, so it runs without the hook); ``ShardedSession, routed`` (the
logical model, routed to that table before the hook would run, its shape being known).

Each round runs ``--calls`` calls of every variant in turn, each round starting with the
next variant (so machine noise hits all of them alike); the table prints the median over
``--rounds`` rounds of µs per call, and the median over rounds of each variant's ratio to
``plain`` in the same round (a paired ratio: a slow stretch of the machine that slows a
whole round cancels out of it).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

import sqlalchemy as sa
from paired import Action, measure
from sqlalchemy import BigInteger, Integer, String, event, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.ext.horizontal_shard import ShardedSession as HorizontalSession
from sqlalchemy.orm import DeclarativeBase, Mapped, ORMExecuteState, Session, mapped_column
from sqlalchemy.sql import operators, visitors

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all, sharded_model

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)
BATCH = 5_000
PARTITIONS = 16
FIRST, SECOND = "a", "b"


class Base(DeclarativeBase):
    pass


class Plain(Base):
    __tablename__ = "plain_orders"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    amount: Mapped[int] = mapped_column(Integer)
    note: Mapped[str] = mapped_column(String(20))


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(16, key=("id", "user_id"))
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    amount: Mapped[int] = mapped_column(Integer)
    note: Mapped[str] = mapped_column(String(20))


class SpreadBase(DeclarativeBase):
    pass


class SpreadOrder(Sharded, SpreadBase):
    __tablename__ = "spread_orders"
    __shards__ = Shards(
        16, key=("id", "user_id"), databases={FIRST: range(0, 8), SECOND: range(8, 16)}
    )
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    amount: Mapped[int] = mapped_column(Integer)
    note: Mapped[str] = mapped_column(String(20))


class OtherBase(DeclarativeBase):
    """Models whose tables are created by hand (partitioned) or in both databases."""


class Partitioned(OtherBase):
    __tablename__ = "part_orders"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Integer)
    note: Mapped[str] = mapped_column(String(20))


class Horizontal(OtherBase):
    __tablename__ = "hs_orders"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    amount: Mapped[int] = mapped_column(Integer)
    note: Mapped[str] = mapped_column(String(20))


def _half(value: int) -> str:
    """The database of a user (or of an ID carrying its gene) in the two-database layouts."""
    return FIRST if value % 16 < 8 else SECOND


def _shard_chooser(mapper: Any, instance: Any, clause: Any = None, **kw: Any) -> str:
    return _half(instance.user_id)


def _identity_chooser(
    mapper: Any, primary_key: Any, *, lazy_loaded_from: Any, execution_options: Any,
    bind_arguments: Any, **kw: Any,
) -> list[str]:  # fmt: skip
    return [_half(primary_key[0])]


def _execute_chooser(context: ORMExecuteState) -> Iterable[str]:
    """The databases the WHERE clause names by user_id (SQLAlchemy's example's approach)."""
    found: set[str] = set()
    where = getattr(context.statement, "whereclause", None)
    if where is not None:
        for element in visitors.iterate(where):
            if (
                isinstance(element, sa.BinaryExpression)
                and element.operator is operators.eq
                and isinstance(element.left, sa.ColumnClause)
                and element.left.key == "user_id"
                and isinstance(element.right, sa.BindParameter)
            ):
                value: Any = element.right.effective_value
                found.add(_half(value))
    return found or [FIRST, SECOND]


@contextmanager
def postgres_databases(server: str, count: int) -> Iterator[list[Engine]]:
    names = [f"snowshard_bench_{secrets.token_hex(4)}" for _ in range(count)]
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    engines: list[Engine] = []
    try:
        with admin.connect() as conn:
            for name in names:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        engines = [sa.create_engine(make_url(server).set(database=n)) for n in names]
        yield engines
    finally:
        for engine in engines:
            engine.dispose()
        with admin.connect() as conn:
            for name in names:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def _rows(users: int, per_user: int) -> list[dict[str, Any]]:
    rng = random.Random(20240501)
    user_ids = rng.sample(range(1, 10_000_000), users)
    rows = [
        {"id": IDS.next_id(gene=u), "user_id": u, "amount": rng.randrange(1, 10_000), "note": "x"}
        for u in user_ids
        for _ in range(per_user)
    ]
    rng.shuffle(rows)
    return rows


def _insert(engine: Engine, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        for start in range(0, len(rows), BATCH):
            conn.execute(table.insert(), rows[start : start + BATCH])


def load(first: Engine, second: Engine, rows: list[dict[str, Any]]) -> None:
    """Create every variant's tables and load the same rows into each."""
    create_all(Base.metadata, bind=first)
    create_all(SpreadBase.metadata, bind=first, databases={FIRST: first, SECOND: second})
    for engine in (first, second):
        OtherBase.metadata.create_all(engine, tables=[Horizontal.__table__])  # type: ignore[list-item]
    with first.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE part_orders (id BIGINT NOT NULL, user_id BIGINT NOT NULL, "
            "amount INTEGER NOT NULL, note VARCHAR(20) NOT NULL, PRIMARY KEY (id, user_id)) "
            "PARTITION BY HASH (user_id)"
        )
        for index in range(PARTITIONS):
            conn.exec_driver_sql(
                f"CREATE TABLE part_orders_{index:02d} PARTITION OF part_orders "
                f"FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {index})"
            )
        conn.exec_driver_sql("CREATE INDEX part_orders_user_id ON part_orders (user_id)")
    _insert(first, Plain.__table__, rows)  # type: ignore[arg-type]
    _insert(first, Partitioned.__table__, rows)  # type: ignore[arg-type]
    for model, engines in ((Order, {}), (SpreadOrder, {FIRST: first, SECOND: second})):
        spec = sharded_model(model)
        by_shard: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            by_shard.setdefault(spec.shard_of("user_id", row["user_id"]), []).append(row)
        for shard, part in by_shard.items():
            engine = engines.get(spec.database_of(shard), first)
            _insert(engine, spec.tables[shard], part)
    for name, engine in ((FIRST, first), (SECOND, second)):
        mine = [r for r in rows if _half(r["user_id"]) == name]
        _insert(engine, Horizontal.__table__, mine)  # type: ignore[arg-type]
    for engine in (first, second):
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")


def _keyed(session: Session, model: Any, users: list[int]) -> Action:
    """One user's orders as ORM objects (a new statement per call, as applications write)."""
    return _keyed_by(session, lambda _user: model, users)


def _keyed_by(session: Session, model_of: Callable[[int], Any], users: list[int]) -> Action:
    """:func:`_keyed`, reading each user through ``model_of(user)``."""
    cycle = iter(users * 10_000)

    def read() -> None:
        user = next(cycle)
        model = model_of(user)
        found = session.scalars(select(model).where(model.user_id == user)).all()
        assert found and found[0].user_id == user
        session.expunge_all()

    return read


def _no_op(state: ORMExecuteState) -> None:
    """A ``do_orm_execute`` listener that leaves every statement as it is."""


def steps(
    first: Engine, users: list[int], rounds: int, calls: int
) -> dict[str, tuple[float, float]]:
    """The keyed read one layer at a time, as client CPU (``--steps``, module docstring)."""
    spec = sharded_model(Order)

    def physical(user: int) -> Any:
        return spec.classes[spec.shard_of("user_id", user)]

    with (
        Session(first) as plain,
        Session(first) as bare,
        Session(first) as hooked,
        ShardedSession(first) as sharded_physical,
        ShardedSession(first) as sharded,
    ):
        event.listen(hooked, "do_orm_execute", _no_op)
        actions = {
            "plain": _keyed(plain, Plain, users),
            "physical class": _keyed_by(bare, physical, users),
            "+ no-op hook": _keyed_by(hooked, physical, users),
            "ShardedSession, physical": _keyed_by(sharded_physical, physical, users),
            "ShardedSession, routed": _keyed(sharded, Order, users),
        }
        return measure(actions, rounds, calls, max(20, calls // 4), clock=time.process_time)


def _getter(session: Session, model: Any, ids: list[int]) -> Action:
    """session.get of the next ID, on an empty identity map (so it reads the row)."""
    cycle = iter(ids * 10_000)

    def get() -> None:
        found = session.get(model, next(cycle))
        assert found is not None
        session.expunge(found)

    return get


def _newest(session: Session, model: Any) -> Action:
    """The 20 newest rows by ID, as ORM objects."""

    def newest() -> None:
        found = session.scalars(select(model).order_by(model.id.desc()).limit(20)).all()
        assert len(found) == 20
        session.expunge_all()

    return newest


def run(
    server: str, users: int, per_user: int, rounds: int, calls: int, with_steps: bool = False
) -> tuple[dict[str, dict[str, tuple[float, float]]], list[str]]:
    """(µs per call and ratio by measure and variant, the throw-away databases' names);
    ``with_steps`` adds the measure ``keyed read, client CPU`` (:func:`steps`)."""
    rows = _rows(users, per_user)
    rng = random.Random(7)
    picked_users = rng.sample(sorted({r["user_id"] for r in rows}), min(users, 1000))
    picked_ids = [r["id"] for r in rng.sample(rows, min(len(rows), 1000))]
    with postgres_databases(server, 2) as (first, second):
        names = [str(engine.url.database) for engine in (first, second)]
        load(first, second, rows)
        spread = {FIRST: first, SECOND: second}
        with (
            Session(first) as plain,
            Session(first) as partitioned,
            ShardedSession(first) as one_db,
            ShardedSession(first, databases=spread) as two_db,
            HorizontalSession(
                shard_chooser=_shard_chooser,
                identity_chooser=_identity_chooser,
                execute_chooser=_execute_chooser,
                shards=spread,
            ) as horizontal,
        ):
            variants: dict[str, tuple[Session, Any]] = {
                "plain": (plain, Plain),
                "partitioned": (partitioned, Partitioned),
                "sharded-1db": (one_db, Order),
                "sharded-2db": (two_db, SpreadOrder),
                "horizontal_shard": (horizontal, Horizontal),
            }
            warm_up = max(20, calls // 4)  # statement caches and prepared statements
            results: dict[str, dict[str, tuple[float, float]]] = {}
            results["keyed read"] = measure(
                {n: _keyed(s, m, picked_users) for n, (s, m) in variants.items()},
                rounds, calls, warm_up,
            )  # fmt: skip
            results["get by ID"] = measure(
                {n: _getter(s, m, picked_ids) for n, (s, m) in variants.items()},
                rounds, calls, warm_up,
            )  # fmt: skip
            results["fan-out top-20"] = measure(
                {n: _newest(s, m) for n, (s, m) in variants.items() if n != "horizontal_shard"},
                rounds, calls, warm_up,
            )  # fmt: skip
        if with_steps:
            results["keyed read, client CPU"] = steps(first, picked_users, rounds, calls)
    return results, names


def report(
    results: dict[str, dict[str, tuple[float, float]]], note: Optional[str] = None
) -> None:
    names = ["plain", "partitioned", "sharded-1db", "sharded-2db", "horizontal_shard"]
    print(
        f"\nµs per call (median of rounds) and ratio to plain (median of the rounds' ratios); "
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}, PostgreSQL"
        + (f"; {note}" if note else "")
    )
    print(f"{'measure':<16}" + "".join(f"{n:>20}" for n in names))
    layered = results.pop("keyed read, client CPU", None)
    for measure_name, row in results.items():
        cells = []
        for name in names:
            if name not in row:
                cells.append(f"{'n/a':>20}")
                continue
            micros, ratio = row[name]
            cells.append(f"{micros:>12.0f} {ratio:>5.2f}x")
        print(f"{measure_name:<16}" + "".join(f"{c:>20}" for c in cells))
    if layered is not None:
        print("\nkeyed read, client CPU (time.process_time), one layer at a time:")
        base = layered["plain"][0]
        for name, (micros, ratio) in layered.items():
            print(f"{name:<26}{micros:>8.0f} µs {ratio:>5.2f}x  {micros - base:>+6.1f} µs")


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--users", type=int, default=4_000, help="users (default 4,000)")
    parser.add_argument("--per-user", type=int, default=10, help="orders per user (default 10)")
    parser.add_argument("--rounds", type=int, default=60, help="rounds (default 60)")
    parser.add_argument("--calls", type=int, default=50, help="calls per round (default 50)")
    parser.add_argument("--postgres", default=os.environ.get("SNOWSHARD_TEST_POSTGRES_URL"))
    parser.add_argument("--steps", action="store_true",
                        help="also take the keyed read apart, as client CPU per layer")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.postgres:
        parser.error("needs PostgreSQL: --postgres URL or SNOWSHARD_TEST_POSTGRES_URL")
    if args.users < 1 or args.per_user < 1 or args.users * args.per_user < 20:
        parser.error("needs at least 20 orders (--users x --per-user) for the top-20 read")
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be >= 1")
    results, names = run(
        args.postgres, args.users, args.per_user, args.rounds, args.calls, args.steps
    )
    report(results, f"{args.users:,} users x {args.per_user} orders")
    print(f"throw-away databases (dropped): {', '.join(names)}")


if __name__ == "__main__":
    main()
