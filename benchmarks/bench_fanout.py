"""Fan-out across databases behind a network delay vs the same query on one plain table.

    python benchmarks/bench_fanout.py                    # needs PostgreSQL
    python benchmarks/bench_fanout.py --rows 50000 --rounds 30 --calls 10 --delay-ms 1

Issue 14's latency target: a fan-out over 4 databases, each ~2 ms away, should cost at most
1.3x the same query on one plain table ~2 ms away. A query that visits the databases one
after another pays one round trip per database (~4x); one that visits them at once pays
about one.

Method. PostgreSQL comes from ``--postgres URL`` or ``SNOWSHARD_TEST_POSTGRES_URL``;
``--databases`` (default 4) throw-away databases ``snowshard_bench_*`` are created there and
dropped afterwards. The same ``--rows`` orders (seeded generator) are loaded into:

* ``plain``: one table ``plain_orders`` in the first database;
* ``sharded``: a snowshard model with 16 tables spread evenly over the databases (4 per
  database with 4 databases), one ``ShardedSession(databases=...)`` over all of them.

Each database, and the plain table's database once more, sits behind its own
:mod:`latency_proxy` process adding ``--delay-ms`` (default 1 ms) each way; the round trip
measured through a proxy is printed, since the proxy's timers run late by the event loop's
wake-up latency. The same sessions are also measured on direct connections (no proxy).
Variants:

* ``plain``: the baseline;
* ``plain xN threads``: the plain query on N connections at once from N threads (N =
  ``--databases``), i.e. what a perfectly concurrent fan-out could cost;
* ``sharded``: today's session; when :class:`ShardedSession` accepts ``max_concurrency=``
  (concurrent fan-out), ``sharded conc=1`` (sequential) and ``sharded default``;
* ``driver``: the plain query's SQL sent straight through psycopg (no SQLAlchemy), and
  ``driver xN``: the SQL the sharded session sends to each database, straight through
  psycopg on N connections at once (the calling thread and N-1 pool threads, as the
  session does). Their ratio to each other is what the round trips of an N-way fan-out
  cost on this machine before any SQLAlchemy work: the floor for the sharded ratio.

Measures, each built as application code writes it (a new statement per call):

* top-20: ``select(M).order_by(M.id.desc()).limit(20)`` as ORM objects;
* count: ``select(func.count()).select_from(M)``.

Before timing, every variant's answers are checked against the plain table's. Each round
runs ``--calls`` calls of every variant in turn, each round starting with the next variant
(so machine noise hits all alike); the table prints the median over ``--rounds`` rounds of
µs per call, and the median over rounds of each variant's ratio to ``plain`` in the same
round (a paired ratio: a slow stretch of the machine that slows a whole round cancels out).
The header names the machine, its load and the date.
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import random
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from latency_proxy import DEFAULT_DELAY_MS, ProxyProcess
from paired import Action, measure
from sqlalchemy import BigInteger, Integer, String, event, func, select
from sqlalchemy.engine import URL, Engine, make_url
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

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)
TABLES = 16
BATCH = 5_000
TOP = 20
CONCURRENCY_OPTION = "max_concurrency"
"""The keyword of :class:`ShardedSession` that bounds concurrent fan-out, where it exists."""


# --------------------------------------------------------------------------- models


def declare(databases: int) -> tuple[Any, Any, sa.MetaData]:
    """(Plain, Order, metadata): a plain table, and 16 tables spread over ``databases``."""
    keys = [chr(ord("a") + i) for i in range(databases)]
    bounds = [TABLES * i // databases for i in range(databases + 1)]
    spread = {key: range(bounds[i], bounds[i + 1]) for i, key in enumerate(keys)}

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
        __shards__ = Shards(TABLES, key=("id", "user_id"), databases=spread)
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger, index=True)
        amount: Mapped[int] = mapped_column(Integer)
        note: Mapped[str] = mapped_column(String(20))

    Base.registry.configure()
    return Plain, Order, Base.metadata


# --------------------------------------------------------------------------- databases


@contextmanager
def postgres_databases(server: str, count: int, options: str = "") -> Iterator[list[URL]]:
    """``count`` new databases ``snowshard_bench_*`` on ``server``, dropped afterwards;
    ``options`` ends their CREATE DATABASE (a locale, say)."""
    names = [f"snowshard_bench_{secrets.token_hex(4)}" for _ in range(count)]
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for name in names:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE template0 {options}')
        yield [make_url(server).set(database=n) for n in names]
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def make_rows(count: int) -> list[dict[str, Any]]:
    rng = random.Random(20240514)
    users = rng.sample(range(1, 10_000_000), max(1, count // 10))
    rows = [
        {"id": IDS.next_id(gene=u), "user_id": u, "amount": rng.randrange(1, 10_000), "note": "x"}
        for u in (rng.choice(users) for _ in range(count))
    ]
    rng.shuffle(rows)
    return rows


def _insert(engine: Engine, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        for start in range(0, len(rows), BATCH):
            conn.execute(table.insert(), rows[start : start + BATCH])


def load(
    engines: dict[str, Engine], plain: Any, order: Any, metadata: sa.MetaData,
    rows: list[dict[str, Any]],
) -> None:  # fmt: skip
    """Create the tables and load the same rows into the plain table and the shards."""
    first = next(iter(engines.values()))
    create_all(metadata, bind=first, databases=engines)
    _insert(first, plain.__table__, rows)
    spec = sharded_model(order)
    by_shard: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_shard.setdefault(spec.shard_of("user_id", row["user_id"]), []).append(row)
    for shard, part in by_shard.items():
        _insert(engines[spec.database_of(shard)], spec.tables[shard], part)
    for engine in engines.values():
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")


# --------------------------------------------------------------------------- actions


def top(session: Session, model: Any) -> list[int]:
    """IDs of the 20 newest rows, read as ORM objects (identity map emptied after)."""
    found = session.scalars(select(model).order_by(model.id.desc()).limit(TOP)).all()
    ids = [o.id for o in found]
    session.expunge_all()
    return ids


def count(session: Session, model: Any) -> int:
    return int(session.scalar(select(func.count()).select_from(model)) or 0)


def bound(query: Callable[[Session, Any], object], session: Session, model: Any) -> Action:
    """The query on one session."""

    def run() -> None:
        query(session, model)

    return run


def parallel(pool: ThreadPoolExecutor, sessions: list[Session], model: Any,
             query: Callable[[Session, Any], object]) -> Action:  # fmt: skip
    """The query on every session at once, one thread each; returns when all answered."""

    def run() -> None:
        for future in [pool.submit(query, s, model) for s in sessions]:
            future.result()

    return run


def sent_by(engines: dict[str, Engine], run: Callable[[], object]) -> list[tuple[str, Any]]:
    """The SQL and parameters ``run()`` sends to each of ``engines``, as the driver got them."""
    sent: dict[str, tuple[str, Any]] = {}

    def recorder(key: str) -> Callable[..., None]:
        def record(conn: Any, cursor: Any, statement: str, parameters: Any, *rest: Any) -> None:
            sent[key] = (statement, parameters)

        return record

    listeners = [(engine, recorder(key)) for key, engine in engines.items()]
    for engine, record in listeners:
        event.listen(engine, "before_cursor_execute", record)
    try:
        run()
    finally:
        for engine, record in listeners:
            event.remove(engine, "before_cursor_execute", record)
    return [sent[key] for key in engines if key in sent]


def driver(pool: ThreadPoolExecutor, connections: list[Any],
           statements: list[tuple[str, Any]]) -> Action:  # fmt: skip
    """Each statement on its own DBAPI connection, at once: the first in the calling
    thread, the others in pool threads; returns when all rows are read."""

    def one(connection: Any, sql: str, parameters: Any) -> None:
        cursor = connection.cursor()
        cursor.execute(sql, parameters)
        cursor.fetchall()
        cursor.close()

    def run() -> None:
        futures = [
            pool.submit(one, c, *st) for c, st in zip(connections[1:], statements[1:])
        ]
        one(connections[0], *statements[0])
        for future in futures:
            future.result()

    return run


def round_trip_ms(engine: Engine, calls: int) -> float:
    """Median ms of ``SELECT 1`` on one connection of ``engine``."""
    with engine.connect() as conn:
        samples = []
        for _ in range(calls):
            started = time.perf_counter()
            conn.exec_driver_sql("SELECT 1").all()
            samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e3


# --------------------------------------------------------------------------- run


def session_options() -> dict[str, dict[str, Any]]:
    """Sharded variants: name -> extra ShardedSession keywords."""
    if CONCURRENCY_OPTION in inspect.signature(ShardedSession).parameters:
        return {"sharded conc=1": {CONCURRENCY_OPTION: 1}, "sharded default": {}}
    return {"sharded": {}}


def measure_setting(
    plain_engine: Engine, engines: dict[str, Engine], plain: Any, order: Any,
    rows: int, rounds: int, calls: int,
) -> dict[str, dict[str, tuple[float, float]]]:  # fmt: skip
    """Every variant, both measures, on one set of engines (all proxied, or all direct)."""
    first = next(iter(engines.values()))
    width = len(engines)
    with ExitStack() as stack:
        plain_session = stack.enter_context(Session(plain_engine))
        threads = [stack.enter_context(Session(plain_engine)) for _ in range(width)]
        pool = stack.enter_context(ThreadPoolExecutor(width))
        sharded = {
            name: stack.enter_context(ShardedSession(first, databases=engines, **options))
            for name, options in session_options().items()
        }
        expected_top, expected_count = top(plain_session, plain), count(plain_session, plain)
        if expected_count != rows or len(expected_top) != min(TOP, rows):
            raise AssertionError(f"plain table holds {expected_count} rows, not {rows}")
        for name, session in sharded.items():
            if top(session, order) != expected_top or count(session, order) != rows:
                raise AssertionError(f"{name} answers differ from the plain table's")
        raw = [plain_engine.raw_connection()] + [e.raw_connection() for e in engines.values()]
        for connection in raw:
            stack.callback(connection.close)
        last = list(sharded.values())[-1]
        results: dict[str, dict[str, tuple[float, float]]] = {}
        for label, query in (("top-20", top), ("count", count)):
            actions: dict[str, Action] = {
                "plain": bound(query, plain_session, plain),
                f"plain x{width} threads": parallel(pool, threads, plain, query),
            }
            for name, session in sharded.items():
                actions[name] = bound(query, session, order)
            plain_sql = sent_by({"plain": plain_engine}, bound(query, plain_session, plain))
            shard_sql = sent_by(engines, bound(query, last, order))
            actions["driver"] = driver(pool, raw[:1], plain_sql)
            actions[f"driver x{len(shard_sql)}"] = driver(pool, raw[1:], shard_sql)
            results[label] = measure(actions, rounds, calls, max(3, calls // 2))
    return results


def run(
    server: str, rows: int, rounds: int, calls: int, delay_ms: float, databases: int
) -> tuple[dict[str, dict[str, tuple[float, float]]], dict[str, float], list[str]]:
    """(µs per call by measure and variant, round trips in ms, database names)."""
    plain, order, metadata = declare(databases)
    data = make_rows(rows)
    keys = [chr(ord("a") + i) for i in range(databases)]
    results: dict[str, dict[str, tuple[float, float]]] = {}
    trips: dict[str, float] = {}
    with postgres_databases(server, databases) as urls, ExitStack() as stack:
        names = [str(u.database) for u in urls]
        direct = {k: sa.create_engine(u) for k, u in zip(keys, urls)}
        plain_direct = sa.create_engine(urls[0])
        proxies = {
            k: stack.enter_context(ProxyProcess(str(u.host), u.port or 5432, delay_ms))
            for k, u in zip(keys, urls)
        }
        plain_proxy = stack.enter_context(
            ProxyProcess(str(urls[0].host), urls[0].port or 5432, delay_ms)
        )
        proxied = {
            k: sa.create_engine(u.set(host="127.0.0.1", port=proxies[k].port))
            for k, u in zip(keys, urls)
        }
        plain_proxied = sa.create_engine(urls[0].set(host="127.0.0.1", port=plain_proxy.port))
        engines = [*direct.values(), plain_direct, *proxied.values(), plain_proxied]
        for engine in engines:  # disposed before the proxies stop and the databases go
            stack.callback(engine.dispose)
        load(direct, plain, order, metadata, data)
        pings = max(10, 5 * calls)
        trips = {k: round_trip_ms(e, pings) for k, e in (("direct", plain_direct), ("proxy", plain_proxied))}
        for setting, plain_engine, shard_engines in (
            ("proxy", plain_proxied, proxied),
            ("direct", plain_direct, direct),
        ):
            found = measure_setting(plain_engine, shard_engines, plain, order, rows, rounds, calls)
            for label, row in found.items():
                results[f"{label} ({setting})"] = row
    return results, trips, names


def report(
    results: dict[str, dict[str, tuple[float, float]]], trips: dict[str, float], note: str
) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\nsnowshard fan-out benchmark, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, load {load}), "
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}, PostgreSQL; {note}"
    )
    print(
        f"round trip (SELECT 1, median): {trips['direct']:.2f} ms direct, "
        f"{trips['proxy']:.2f} ms through the proxy"
    )
    print(
        "µs per call (median of rounds) and ratio to plain (median of the rounds' ratios); "
        "target: sharded <= 1.30x with proxy"
    )
    names = list(next(iter(results.values())))
    print(f"{'measure':<18}" + "".join(f"{n:>22}" for n in names))
    for measure_name, row in results.items():
        cells = [f"{row[n][0]:>12.0f} {row[n][1]:>6.2f}x" for n in names]
        print(f"{measure_name:<18}" + "".join(f"{c:>22}" for c in cells))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rows", type=int, default=50_000, help="orders (default 50,000)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds (default 30)")
    parser.add_argument("--calls", type=int, default=10, help="calls per round (default 10)")
    parser.add_argument("--delay-ms", type=float, default=DEFAULT_DELAY_MS,
                        help=f"one-way delay of each proxy (default {DEFAULT_DELAY_MS})")  # fmt: skip
    parser.add_argument("--databases", type=int, default=4,
                        help=f"databases the {TABLES} tables are spread over (default 4)")  # fmt: skip
    parser.add_argument("--postgres", default=os.environ.get("SNOWSHARD_TEST_POSTGRES_URL"))
    args = parser.parse_args(argv)
    if not args.postgres:
        parser.error("needs PostgreSQL: --postgres URL or SNOWSHARD_TEST_POSTGRES_URL")
    if not 1 <= args.databases <= TABLES:
        parser.error(f"--databases must be 1..{TABLES}, not {args.databases}")
    if args.rows < TOP or args.rounds < 1 or args.calls < 1:
        parser.error(f"--rows must be >= {TOP}, --rounds and --calls >= 1")
    if args.delay_ms < 0:
        parser.error(f"--delay-ms must be >= 0, not {args.delay_ms}")
    results, trips, names = run(
        args.postgres, args.rows, args.rounds, args.calls, args.delay_ms, args.databases
    )
    report(
        results,
        trips,
        f"{args.rows:,} rows, {TABLES} tables over {args.databases} databases, "
        f"proxy delay {args.delay_ms:g} ms each way, {args.rounds} rounds x {args.calls} calls",
    )
    print(f"throw-away databases (dropped): {', '.join(names)}")


if __name__ == "__main__":
    main()
