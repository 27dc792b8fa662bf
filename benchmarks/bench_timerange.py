"""A one-hour time-range COUNT by snowflake primary key vs by an indexed created_at column.

    python benchmarks/bench_timerange.py                       # SQLite only
    python benchmarks/bench_timerange.py --postgres postgresql+psycopg://postgres@127.0.0.1/postgres

PostgreSQL (and MariaDB/MySQL with ``--mysql URL``) also come from
``SNOWSHARD_TEST_POSTGRES_URL`` / ``SNOWSHARD_TEST_MYSQL_URL``. A throw-away database
``snowshard_bench_*`` is created on each server and dropped afterwards.

One table holds ``--rows`` rows issued evenly over ``--hours`` hours by a ``Snowflake`` on a
manual clock; ``created_at`` is the instant each ID was issued, with its own index. Each
query counts the rows of a random one-hour window, once as
``id_between(events.id, layout, start, end)`` (a primary key range scan) and once
as ``created_at >= start AND created_at < end``; both must return the same count. The table
reports median and 90th-percentile latency and the ratio of medians (target: PK / created_at
<= 1.0: the ID's own time bits serve a time range as fast as a separate indexed column).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import secrets
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import NullPool

from snowshard import Layout, ManualClock, Snowflake
from snowshard.orm import SnowflakeType, id_between

UTC = timezone.utc
START = datetime(2024, 5, 1, tzinfo=UTC)
LAYOUT = Layout()

metadata = sa.MetaData()
events = sa.Table(
    "events",
    metadata,
    sa.Column("id", SnowflakeType(), primary_key=True, autoincrement=False),
    sa.Column(
        "created_at",
        sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb"),
        nullable=False,
        index=True,
    ),
    sa.Column("amount", sa.Integer, nullable=False),
)


# --------------------------------------------------------------------------- databases


@contextmanager
def scratch_database(backend: str, server_url: str | None) -> Iterator[str]:
    """A fresh database URL for ``backend``, dropped (or deleted) afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
        return
    assert server_url is not None
    name = "snowshard_bench_" + secrets.token_hex(4)
    server = make_url(server_url)
    admin_url = server if backend == "postgresql" else server.set(database=None)
    admin = sa.create_engine(admin_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        try:
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            drop = f"DROP DATABASE IF EXISTS {name}"
            with admin.connect() as conn:
                conn.exec_driver_sql(drop + (" WITH (FORCE)" if backend == "postgresql" else ""))
    finally:
        admin.dispose()


def load(engine: Engine, rows: int, hours: int) -> None:
    """``rows`` rows issued evenly over ``hours`` hours from START; then ANALYZE."""
    clock = ManualClock(int(START.timestamp() * 1000))
    generator = Snowflake(LAYOUT, worker=1, clock=clock, sleep=clock.sleep)
    span_ms = hours * 3_600_000
    naive = engine.dialect.name != "postgresql"
    metadata.create_all(engine)
    batch: list[dict[str, object]] = []
    with engine.begin() as conn:
        for i in range(rows):
            offset = i * span_ms // rows
            clock.set(int(START.timestamp() * 1000) + offset)
            when = START + timedelta(milliseconds=offset)
            batch.append({
                "id": generator.next_id(),
                "created_at": when.replace(tzinfo=None) if naive else when,
                "amount": i % 1000,
            })
            if len(batch) == 20_000:
                conn.execute(events.insert(), batch)
                batch.clear()
        if batch:
            conn.execute(events.insert(), batch)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE events")
    else:
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE" if engine.dialect.name == "sqlite" else
                                 "ANALYZE TABLE events")


# --------------------------------------------------------------------------- measuring


def measure(engine: Engine, hours: int, repeat: int) -> tuple[list[float], list[float]]:
    """Latencies (ms) of the PK-range and the created_at count over the same windows."""
    rng = random.Random(42)
    naive = engine.dialect.name != "postgresql"
    by_pk: list[float] = []
    by_created: list[float] = []
    count = sa.select(sa.func.count()).select_from(events)
    with engine.connect() as conn:
        for round_ in range(repeat + 5):  # the first 5 rounds warm caches and are dropped
            start = START + timedelta(minutes=rng.randrange((hours - 1) * 60))
            end = start + timedelta(hours=1)
            created = events.c.created_at
            lo, hi = (start.replace(tzinfo=None), end.replace(tzinfo=None)) if naive else (
                start, end)
            pk_query = count.where(id_between(events.c.id, LAYOUT, start, end))
            created_query = count.where(created >= lo, created < hi)
            results = {}
            order = [("pk", pk_query), ("created", created_query)]
            if round_ % 2:
                order.reverse()
            for name, query in order:
                began = time.perf_counter()
                results[name] = conn.execute(query).scalar_one()
                elapsed = (time.perf_counter() - began) * 1000
                if round_ >= 5:
                    (by_pk if name == "pk" else by_created).append(elapsed)
            if results["pk"] != results["created"]:
                raise AssertionError(f"counts differ for [{start}, {end}): {results}")
    return by_pk, by_created


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--hours", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=200, help="windows per backend")
    parser.add_argument("--postgres", default=os.environ.get("SNOWSHARD_TEST_POSTGRES_URL"))
    parser.add_argument("--mysql", default=os.environ.get("SNOWSHARD_TEST_MYSQL_URL"))
    args = parser.parse_args()

    backends: list[tuple[str, str | None]] = [("sqlite", None)]
    if args.postgres:
        backends.append(("postgresql", args.postgres))
    if args.mysql:
        backends.append(("mysql", args.mysql))

    print(
        f"snowshard time-range benchmark, {date.today()}, {platform.python_implementation()} "
        f"{platform.python_version()}, SQLAlchemy {sa.__version__}; {args.rows:,} rows over "
        f"{args.hours} h, {args.repeat} random one-hour windows per backend"
    )
    header = (
        f"{'backend':<11} {'PK median ms':>12} {'PK p90':>8} {'created_at median ms':>20} "
        f"{'p90':>8} {'PK / created_at':>15}"
    )
    lines = []
    for backend, server in backends:
        with scratch_database(backend, server) as url:
            engine = sa.create_engine(url)
            try:
                began = time.perf_counter()
                load(engine, args.rows, args.hours)
                loaded = time.perf_counter() - began
                by_pk, by_created = measure(engine, args.hours, args.repeat)
            finally:
                engine.dispose()
        pk, created = statistics.median(by_pk), statistics.median(by_created)
        lines.append(
            f"{backend:<11} {pk:>12.3f} {p90(by_pk):>8.3f} {created:>20.3f} "
            f"{p90(by_created):>8.3f} {pk / created:>15.2f}"
        )
        print(f"  ({backend}: loaded in {loaded:.1f} s)")
    print(header)
    print("\n".join(lines))
    print("target: PK / created_at <= 1.0 (the primary key is as fast as the created_at index)")


if __name__ == "__main__":
    main()
