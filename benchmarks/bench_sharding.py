"""Sharded model (16 tables, Gene(16)) vs a plain table with a BIGINT autoincrement key.

    python benchmarks/bench_sharding.py                      # SQLite, and PostgreSQL if set
    python benchmarks/bench_sharding.py --rows 20000 --backends sqlite

PostgreSQL comes from ``--postgres URL`` or ``SNOWSHARD_TEST_POSTGRES_URL``; a throw-away
database ``snowshard_bench_*`` is created there and dropped afterwards. SQLite uses a
temporary file. Same run, same data (user ids and amounts from one seeded generator):

* insert: ``--rows`` ORM objects added and committed in batches of 5,000, in 5 rounds
  alternating plain and sharded; best rows per second (target: sharded >= 0.9x plain);
* get: ``session.get`` of random existing IDs, each on an empty identity map, seconds per
  call (target: sharded <= 1.2x plain);
* fan-out: ``select(Model).order_by(Model.id.desc()).limit(20)`` as ORM objects, seconds
  per call; the sharded model reads all 16 tables in one UNION ALL (target: <= 2x).

Latencies are the best of 7 rounds run alternately. The table prints ratio = sharded /
plain: for the insert rate higher is better, for latencies lower is better.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, String, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)
BATCH = 5_000


class Base(DeclarativeBase):
    pass


class Plain(Base):
    __tablename__ = "plain_orders"
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
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


@contextmanager
def sqlite_engine() -> Iterator[Engine]:
    with tempfile.TemporaryDirectory() as folder:
        engine = sa.create_engine(f"sqlite:///{Path(folder) / 'bench.db'}")
        try:
            yield engine
        finally:
            engine.dispose()


@contextmanager
def postgres_engine(server: str) -> Iterator[Engine]:
    name = f"snowshard_bench_{secrets.token_hex(4)}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    engine = sa.create_engine(make_url(server).set(database=name))
    try:
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def _data(rows: int) -> list[tuple[int, int]]:
    rng = random.Random(20240501)
    return [(rng.randrange(1, 10_000_000), rng.randrange(1, 10_000)) for _ in range(rows)]


def insert_rates(engine: Engine, data: list[tuple[int, int]]) -> tuple[float, float]:
    """Best rows/s of each model over rounds run alternately (resists machine noise).

    Each round inserts its share of ``data`` into the plain table, then the same rows into
    the sharded model: ORM objects added and committed in batches of BATCH.
    """
    best = [0.0, 0.0]
    rounds = 5
    share = -(-len(data) // rounds)
    for start in range(0, len(data), share):
        rows = data[start : start + share]
        for index, (model, make) in enumerate(((Plain, Session), (Order, ShardedSession))):
            began = time.perf_counter()
            with make(engine) as session:
                for batch in range(0, len(rows), BATCH):
                    session.add_all(
                        model(user_id=user, amount=amount, note="bench")
                        for user, amount in rows[batch : batch + BATCH]
                    )
                    session.commit()
                    session.expunge_all()
            best[index] = max(best[index], len(rows) / (time.perf_counter() - began))
    return best[0], best[1]


def _pair(
    plain: Callable[[], None], sharded: Callable[[], None], calls: int
) -> tuple[float, float]:
    """Best per-call seconds of each, over rounds run alternately (resists machine noise)."""
    best = [float("inf"), float("inf")]
    rounds = 7
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        for index, action in enumerate((plain, sharded)):
            started = time.perf_counter()
            for _ in range(per_round):
                action()
            best[index] = min(best[index], (time.perf_counter() - started) / per_round)
    return best[0], best[1]


def _getter(session: Session, model: Any, ids: list[int]) -> Callable[[], None]:
    """session.get of the next ID, on an empty identity map (so it reads the row)."""
    cycle = iter(ids * 1000)

    def get() -> None:
        found = session.get(model, next(cycle))
        assert found is not None
        session.expunge(found)

    return get


def _newest(session: Session, model: Any) -> Callable[[], None]:
    """The 20 newest rows by ID, as ORM objects."""
    query = select(model).order_by(model.id.desc()).limit(20)

    def newest() -> None:
        assert len(session.scalars(query).all()) == 20
        session.expunge_all()

    return newest


def run(
    backend: str, engine: Engine, rows: int, samples: int
) -> list[tuple[str, str, float, float, str]]:
    create_all(Base.metadata, bind=engine)
    data = _data(rows)
    plain_rate, sharded_rate = insert_rates(engine, data)
    with Session(engine) as session:
        plain_ids = list(session.scalars(select(Plain.id)))
    with ShardedSession(engine) as session:
        sharded_ids = list(session.scalars(select(Order.id)))
    rng = random.Random(7)
    plain_pick, sharded_pick = rng.sample(plain_ids, samples), rng.sample(sharded_ids, samples)
    with Session(engine) as plain, ShardedSession(engine) as sharded:
        for action in (
            _getter(plain, Plain, plain_pick),
            _getter(sharded, Order, sharded_pick),
            _newest(plain, Plain),
            _newest(sharded, Order),
        ):
            for _ in range(50):  # warm the statement caches
                action()
        plain_get, sharded_get = _pair(
            _getter(plain, Plain, plain_pick), _getter(sharded, Order, sharded_pick), samples
        )
        plain_scan, sharded_scan = _pair(
            _newest(plain, Plain), _newest(sharded, Order), samples // 4
        )
    return [
        (backend, f"insert {rows:,} rows (rows/s)", plain_rate, sharded_rate, ">= 0.90"),
        (backend, "session.get (s per call)", plain_get, sharded_get, "<= 1.20"),
        (backend, "ORDER BY id DESC LIMIT 20 (s per call)", plain_scan, sharded_scan, "<= 2.00"),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--rows", type=int, default=100_000, help="rows per table (default 100,000)"
    )
    parser.add_argument(
        "--samples", type=int, default=2_000, help="session.get calls (default 2,000)"
    )
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated")
    parser.add_argument("--postgres", default=os.environ.get("SNOWSHARD_TEST_POSTGRES_URL"))
    args = parser.parse_args(argv)
    samples = min(args.samples, args.rows)
    results = []
    for backend in args.backends.split(","):
        if backend == "sqlite":
            with sqlite_engine() as engine:
                results += run("sqlite", engine, args.rows, samples)
        elif backend == "postgresql":
            if not args.postgres:
                print(
                    "postgresql: skipped (no --postgres URL and SNOWSHARD_TEST_POSTGRES_URL unset)"
                )
                continue
            with postgres_engine(args.postgres) as engine:
                results += run("postgresql", engine, args.rows, samples)
        else:
            parser.error(f"unknown backend {backend!r}")
    print(
        f"\nsnowshard {Order.__shards__.count}-table sharding vs one plain table; "
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}"
    )
    print(f"{'backend':<11} {'measure':<38} {'plain':>12} {'sharded':>12} {'ratio':>7}  target")
    for backend, measure, plain, sharded, target in results:
        ratio = sharded / plain
        shown = (
            f"{plain:>12,.0f} {sharded:>12,.0f}"
            if "rows/s" in measure
            else f"{plain * 1e3:>10.3f}ms {sharded * 1e3:>10.3f}ms"
        )
        print(f"{backend:<11} {measure:<38} {shown} {ratio:>7.2f}  {target}")


if __name__ == "__main__":
    main()
