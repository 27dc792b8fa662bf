"""Bulk loads: ``bulk_insert`` into 16 sharded tables vs the fastest plain load of one table.

    python benchmarks/bench_bulk.py                          # 100k rows, every backend found
    python benchmarks/bench_bulk.py --rows 1000000 --rounds 3 --only postgresql

The same rows (``--rows`` orders of random users, IDs included, from seeded generators)
are loaded, in one run, by:

* PostgreSQL (``--postgres`` or ``SNOWSHARD_TEST_POSTGRES_URL``; a throw-away database):
  ``raw COPY``: psycopg 3's ``cursor.copy("COPY plain_orders (...) FROM STDIN")`` with
  ``write_row`` of each row's values (taken from the same dicts with an ``itemgetter``)
  into one plain table, against ``bulk_insert`` into the 16 tables of a sharded model;
  target >= 0.5x.
* MariaDB (``--mysql`` or ``SNOWSHARD_TEST_MYSQL_URL``, PyMySQL) and SQLite (a file in
  a temporary directory): ``executemany``: ``session.execute(insert(PlainOrder), rows)``
  on a plain ``Session`` into one plain table, against ``bulk_insert`` into the 16
  tables; target >= 0.9x.
* On every backend, for reference: ``sharded ORM insert``, the same rows through
  ``ShardedSession.execute(insert(Order), rows)`` (the path ``bulk_insert`` replaces).

Each load runs in its own transaction, commit included, into empty tables (emptied with
``TRUNCATE``, or ``DELETE`` on SQLite, outside the timing). Each round runs every variant
once, in turn, so machine noise hits all of them alike; the table prints the median
rows/s over ``--rounds`` rounds and its ratio to the baseline of the same run.
"""

from __future__ import annotations

import argparse
import operator
import os
import platform
import random
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, String, insert
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    Sharded,
    ShardedSession,
    Shards,
    create_all,
    sharded_model,
)
from snowshard.sharding.bulk_load import bulk_insert

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)
COLUMNS = ("id", "user_id", "amount", "note")


class Base(DeclarativeBase):
    pass


class PlainOrder(Base):
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


def make_rows(count: int) -> list[dict[str, Any]]:
    rng = random.Random(20240501)
    users = rng.sample(range(1, 10_000_000), max(1, count // 10))
    rows = []
    for _ in range(count):
        user = rng.choice(users)
        rows.append(
            {
                "id": IDS.next_id(gene=user),
                "user_id": user,
                "amount": rng.randrange(1, 10_000),
                "note": f"note {rng.randrange(1000)}",
            }
        )
    return rows


# --------------------------------------------------------------------------- databases


@contextmanager
def server_database(server: str) -> Iterator[Engine]:
    """A throw-away database on the PostgreSQL or MariaDB server at ``server``."""
    url = make_url(server)
    name = f"snowshard_bench_{secrets.token_hex(4)}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    quote = '"' if url.get_backend_name() == "postgresql" else "`"
    engine = None
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {quote}{name}{quote}")
        engine = sa.create_engine(url.set(database=name))
        yield engine
    finally:
        if engine is not None:
            engine.dispose()
        force = " WITH (FORCE)" if quote == '"' else ""
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote}{name}{quote}{force}")
        admin.dispose()


@contextmanager
def sqlite_database() -> Iterator[Engine]:
    with tempfile.TemporaryDirectory() as folder:
        engine = sa.create_engine(f"sqlite:///{folder}/bench.db")
        try:
            yield engine
        finally:
            engine.dispose()


def empty_tables(engine: Engine) -> None:
    tables = [PlainOrder.__table__, *sharded_model(Order).tables]
    with engine.begin() as conn:
        for table in tables:
            name = conn.dialect.identifier_preparer.format_table(table)
            verb = "DELETE FROM" if engine.dialect.name == "sqlite" else "TRUNCATE TABLE"
            conn.exec_driver_sql(f"{verb} {name}")


# --------------------------------------------------------------------------- loads

Load = Callable[[list[dict[str, Any]]], None]


def raw_copy(engine: Engine) -> Load:
    """psycopg's COPY into the plain table, values taken from the dicts."""
    values = operator.itemgetter(*COLUMNS)

    def load(rows: list[dict[str, Any]]) -> None:
        with engine.begin() as conn:
            driver: Any = conn.connection.driver_connection
            sql = f"COPY plain_orders ({', '.join(COLUMNS)}) FROM STDIN"
            with driver.cursor() as cursor, cursor.copy(sql) as copy:
                for row in rows:
                    copy.write_row(values(row))

    return load


def plain_executemany(engine: Engine) -> Load:
    def load(rows: list[dict[str, Any]]) -> None:
        with Session(engine) as session:
            session.execute(insert(PlainOrder), rows)
            session.commit()

    return load


def sharded_bulk(engine: Engine) -> Load:
    def load(rows: list[dict[str, Any]]) -> None:
        with ShardedSession(engine) as session:
            report = bulk_insert(session, Order, rows)
            session.commit()
        assert report.total == len(rows)

    return load


def sharded_orm(engine: Engine) -> Load:
    def load(rows: list[dict[str, Any]]) -> None:
        with ShardedSession(engine) as session:
            session.execute(insert(Order), rows)
            session.commit()

    return load


def measure(
    engine: Engine, loads: dict[str, Load], rows: list[dict[str, Any]], rounds: int
) -> dict[str, float]:
    """Median rows/s of each load over ``rounds`` rounds that run them in turn."""
    samples: dict[str, list[float]] = {name: [] for name in loads}
    for _ in range(rounds):
        for name, load in loads.items():
            empty_tables(engine)
            started = time.perf_counter()
            load(rows)
            samples[name].append(len(rows) / (time.perf_counter() - started))
    return {name: statistics.median(values) for name, values in samples.items()}


def run_backend(
    backend: str, engine: Engine, rows: list[dict[str, Any]], rounds: int, orm: bool
) -> dict[str, float]:
    create_all(Base.metadata, bind=engine)
    baseline = raw_copy(engine) if backend == "postgresql" else plain_executemany(engine)
    loads = {"baseline": baseline, "bulk_insert": sharded_bulk(engine)}
    if orm:
        loads["sharded ORM insert"] = sharded_orm(engine)
    measure(engine, loads, rows[: min(len(rows), 5_000)], 1)  # warm caches and connections
    return measure(engine, loads, rows, rounds)


BASELINES = {"postgresql": "raw COPY, 1 table", "mysql": "executemany, 1 table",
             "sqlite": "executemany, 1 table"}  # fmt: skip
TARGETS = {"postgresql": 0.5, "mysql": 0.9, "sqlite": 0.9}


def report(results: dict[str, dict[str, float]], rows: int, rounds: int) -> None:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"\n{rows:,} rows, median of {rounds} rounds; Python {platform.python_version()}, "
        f"SQLAlchemy {sa.__version__}, {platform.machine()} x{os.cpu_count()}, "
        f"load average {load[0]:.2f}"
    )
    print(f"{'backend':<12}{'load':<28}{'rows/s':>12}{'ratio':>9}{'target':>9}")
    for backend, measured in results.items():
        base = measured["baseline"]
        for name, rate in measured.items():
            label = BASELINES[backend] if name == "baseline" else name
            ratio = rate / base
            target = f">= {TARGETS[backend]}x" if name == "bulk_insert" else ""
            print(f"{backend:<12}{label:<28}{rate:>12,.0f}{ratio:>8.2f}x{target:>9}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows (default 100,000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--postgres", default=os.environ.get("SNOWSHARD_TEST_POSTGRES_URL"))
    parser.add_argument("--mysql", default=os.environ.get("SNOWSHARD_TEST_MYSQL_URL"))
    parser.add_argument(
        "--only", choices=sorted(TARGETS), action="append", help="backends (default: all found)"
    )
    parser.add_argument(
        "--no-orm", action="store_true", help="skip the (slow) sharded ORM insert reference"
    )
    args = parser.parse_args(argv)
    rows = make_rows(args.rows)
    chosen = args.only or ["postgresql", "mysql", "sqlite"]
    results: dict[str, dict[str, float]] = {}
    for backend in chosen:
        if backend == "sqlite":
            database = sqlite_database()
        else:
            server = args.postgres if backend == "postgresql" else args.mysql
            if not server:
                print(f"skipping {backend}: no URL (--postgres / --mysql or SNOWSHARD_TEST_*_URL)")
                continue
            database = server_database(server)
        with database as engine:
            results[backend] = run_backend(backend, engine, rows, args.rounds, not args.no_orm)
    report(results, args.rows, args.rounds)


if __name__ == "__main__":
    main()
