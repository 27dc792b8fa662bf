"""Memory of streaming a fan-out across two databases vs the same rows from one plain table.

    python benchmarks/bench_stream_memory.py             # needs PostgreSQL (MariaDB optional)
    python benchmarks/bench_stream_memory.py --rows 300000 --no-mysql

Issue 14's memory target: streaming with ``execution_options(yield_per=1000)`` from two
databases raises peak RSS by at most 1.5x what the same rows streamed from one plain table
raise it, plus 20 MB; i.e. memory stays O(shards x batch), not O(rows).

Method. PostgreSQL comes from ``--postgres URL`` or ``SNOWSHARD_TEST_POSTGRES_URL``; MariaDB,
when ``--mysql URL`` or ``SNOWSHARD_TEST_MYSQL_URL`` is set (``--no-mysql`` skips it). On each
server two throw-away databases ``snowshard_bench_*`` are created, and dropped afterwards.
The same ``--rows`` rows (~200 bytes each: two BIGINTs, an INTEGER and a 170-character
VARCHAR, from a seeded generator) go into:

* ``plain``: one table ``plain_events`` in the first database;
* ``sharded``: a snowshard model with 16 tables, 0-7 in the first database and 8-15 in the
  second, read through one ``ShardedSession(databases=...)``.

Each variant streams ``select(M)`` (unordered) and ``select(M).order_by(M.id)`` (a k-way
merge when sharded) as ORM objects, with ``execution_options(yield_per=--yield-per)``, in a
**fresh child process** of its own, so nothing one variant allocated stays in another's
heap. The child connects and runs the same statement once with a WHERE that matches no row
(imports, mapper configuration, connections), then resets its peak RSS (writes ``5`` to
``/proc/self/clear_refs``, which sets VmHWM to the current VmRSS; where that is refused, a
thread samples VmRSS every millisecond) and measures from just before ``execute()`` to
the last row: growth = VmHWM after - VmRSS at the reset. It also reports the seconds taken
and a count and sum of the rows, which the parent checks against the rows it loaded (and,
ordered, that IDs came in order).

Children run one after another (plain, then sharded, per query), ``--rounds`` times; the
table prints the median growth in MB, the ratio to plain, the target and the seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import re
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, String, select
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

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=2)
BATCH = 5_000
NOTE_BYTES = 85  # hex: 170 characters
FIRST, SECOND = "a", "b"
QUERIES = ("unordered", "ordered")
VARIANTS = ("plain", "sharded")
TARGET_RATIO, TARGET_SLACK_MB = 1.5, 20.0


class Base(DeclarativeBase):
    pass


class PlainEvent(Base):
    __tablename__ = "plain_events"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Integer)
    note: Mapped[str] = mapped_column(String(200))


class Event(Sharded, Base):
    __tablename__ = "events"
    __shards__ = Shards(
        16, key=("id", "user_id"), databases={FIRST: range(8), SECOND: range(8, 16)}
    )
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Integer)
    note: Mapped[str] = mapped_column(String(200))


# --------------------------------------------------------------------------- peak RSS


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        found = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"/proc/self/status has no {field} (needs Linux)")
    return int(found.group(1))


class PeakMeter:
    """Peak RSS growth since :meth:`reset`: VmHWM reset by clear_refs, else a sampler."""

    def __init__(self) -> None:
        self.baseline_kb = 0
        self.sampled_kb = 0
        self.method = "clear_refs"
        self.stop = threading.Event()
        self.sampler: threading.Thread | None = None

    def reset(self) -> None:
        gc.collect()
        try:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")
        except OSError:
            self.method = "sampling VmRSS every 1 ms"
            self.sampler = threading.Thread(target=self.sample, daemon=True)
        self.baseline_kb = _status_kb("VmRSS")
        self.sampled_kb = self.baseline_kb
        if self.sampler is not None:
            self.sampler.start()

    def sample(self) -> None:
        while not self.stop.wait(0.001):
            self.sampled_kb = max(self.sampled_kb, _status_kb("VmRSS"))

    def growth_kb(self) -> int:
        """Peak RSS since :meth:`reset` minus RSS at the reset."""
        if self.sampler is not None:
            self.stop.set()
            self.sampler.join()
            peak = max(self.sampled_kb, _status_kb("VmRSS"))
        else:
            peak = _status_kb("VmHWM")
        return peak - self.baseline_kb


# --------------------------------------------------------------------------- child


def stream(variant: str, query: str, urls: list[str], yield_per: int) -> dict[str, Any]:
    """Stream every row in this process; the peak RSS growth while doing it, and a digest."""
    engines = [sa.create_engine(u) for u in urls]
    model: Any
    if variant == "plain":
        session: Session = Session(engines[0])
        model = PlainEvent
    else:
        session = ShardedSession(engines[0], databases={FIRST: engines[0], SECOND: engines[1]})
        model = Event
    statement = select(model)
    if query == "ordered":
        statement = statement.order_by(model.id)
    options = {"yield_per": yield_per}
    try:
        with session:
            session.scalars(statement.where(model.amount < 0).execution_options(**options)).all()
            meter = PeakMeter()
            meter.reset()
            started = time.perf_counter()
            rows = total = 0
            last, in_order = -1, True
            for event in session.scalars(statement.execution_options(**options)):
                rows += 1
                total += event.amount
                in_order = in_order and event.id > last
                last = event.id
            seconds = time.perf_counter() - started
            growth = meter.growth_kb()
    finally:
        for engine in engines:
            engine.dispose()
    return {
        "growth_kb": growth, "baseline_kb": meter.baseline_kb, "method": meter.method,
        "seconds": seconds, "rows": rows, "sum": total, "in_order": in_order,
    }  # fmt: skip


def run_child(variant: str, query: str, urls: list[URL], yield_per: int) -> dict[str, Any]:
    command = [
        sys.executable, os.path.abspath(__file__), "--child", variant, "--child-query", query,
        "--yield-per", str(yield_per),
    ]  # fmt: skip
    secret = json.dumps([u.render_as_string(hide_password=False) for u in urls])  # not argv
    done = subprocess.run(command, input=secret, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{variant} {query} child failed:\n{done.stderr}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


# --------------------------------------------------------------------------- databases


@contextmanager
def databases(server: str, count: int) -> Iterator[list[URL]]:
    """``count`` new databases ``snowshard_bench_*`` on ``server``, dropped afterwards."""
    names = [f"snowshard_bench_{secrets.token_hex(4)}" for _ in range(count)]
    url = make_url(server)
    postgres = url.get_backend_name() == "postgresql"
    admin = sa.create_engine(url if postgres else url.set(database=None),
                             isolation_level="AUTOCOMMIT")  # fmt: skip
    create = 'CREATE DATABASE "{}" TEMPLATE template0' if postgres else "CREATE DATABASE `{}`"
    drop = 'DROP DATABASE IF EXISTS "{}" WITH (FORCE)' if postgres else "DROP DATABASE IF EXISTS `{}`"
    try:
        with admin.connect() as conn:
            for name in names:
                conn.exec_driver_sql(create.format(name))
        yield [url.set(database=n) for n in names]
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.exec_driver_sql(drop.format(name))
        admin.dispose()


def batches(rows: int) -> Iterator[list[dict[str, Any]]]:
    """The rows, ``BATCH`` at a time (seeded; IDs carry the gene of ``user_id``)."""
    rng = random.Random(20240514)
    users = rng.sample(range(1, 10_000_000), max(1, rows // 10))
    for start in range(0, rows, BATCH):
        batch = []
        for _ in range(min(BATCH, rows - start)):
            user = rng.choice(users)
            batch.append({
                "id": IDS.next_id(gene=user), "user_id": user,
                "amount": rng.randrange(1, 10_000), "note": rng.randbytes(NOTE_BYTES).hex(),
            })  # fmt: skip
        yield batch


def load(first: Engine, second: Engine, rows: int) -> tuple[int, int]:
    """Create the tables and load the same rows into both variants; (count, sum of amount)."""
    create_all(Base.metadata, bind=first, databases={FIRST: first, SECOND: second})
    spec = sharded_model(Event)
    engines = {FIRST: first, SECOND: second}
    loaded = total = 0
    for batch in batches(rows):
        loaded += len(batch)
        total += sum(r["amount"] for r in batch)
        with first.begin() as conn:
            conn.execute(sa.insert(PlainEvent), batch)
        by_shard: dict[int, list[dict[str, Any]]] = {}
        for row in batch:
            by_shard.setdefault(spec.shard_of("user_id", row["user_id"]), []).append(row)
        for shard, part in by_shard.items():
            with engines[spec.database_of(shard)].begin() as conn:
                conn.execute(spec.tables[shard].insert(), part)
    if first.dialect.name == "postgresql":
        for engine in (first, second):
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM ANALYZE")
    return loaded, total


Results = dict[tuple[str, str], dict[str, dict[str, float]]]
"""(backend, query) -> variant -> median ``growth_mb`` and ``seconds``."""


def run(
    servers: dict[str, str], rows: int, rounds: int, yield_per: int, queries: list[str]
) -> tuple[Results, set[str], list[str]]:
    """The results, how peak RSS was measured, and the names of the databases used."""
    results: Results = {}
    methods: set[str] = set()
    names: list[str] = []
    for backend, server in servers.items():
        with databases(server, 2) as urls:
            names.extend(f"{backend}:{u.database}" for u in urls)
            first, second = (sa.create_engine(u) for u in urls)
            try:
                expected = load(first, second, rows)
            finally:
                first.dispose()
                second.dispose()
            for query in queries:
                samples: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
                for _ in range(rounds):
                    for variant in VARIANTS:
                        found = run_child(variant, query, urls, yield_per)
                        if (found["rows"], found["sum"]) != expected:
                            raise AssertionError(
                                f"{backend} {variant} {query} streamed {found['rows']} rows "
                                f"(sum {found['sum']}), expected {expected[0]} (sum {expected[1]})"
                            )
                        if query == "ordered" and not found["in_order"]:
                            raise AssertionError(f"{backend} {variant}: IDs out of order")
                        samples[variant].append(found)
                        methods.add(found["method"])
                results[(backend, query)] = {
                    v: {
                        "growth_mb": statistics.median(s["growth_kb"] for s in found_) / 1024,
                        "seconds": statistics.median(s["seconds"] for s in found_),
                    }
                    for v, found_ in samples.items()
                }
    return results, methods, names


def report(results: Results, methods: set[str], note: str) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\nsnowshard streaming-memory benchmark, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} "
        f"UTC, {platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, load {load}), "
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}; {note}"
    )
    print(
        f"peak RSS growth while streaming, MB (median of rounds); target: sharded <= "
        f"{TARGET_RATIO}x plain + {TARGET_SLACK_MB:g} MB; peak by {' and '.join(sorted(methods))}"
    )
    header = ("backend", "query", "plain MB", "sharded MB", "ratio", "limit MB", "target",
              "plain s", "sharded s", "ratio")  # fmt: skip
    print("".join(f"{h:>12}" for h in header))
    for (backend, query), row in results.items():
        plain, sharded = row["plain"], row["sharded"]
        limit = TARGET_RATIO * plain["growth_mb"] + TARGET_SLACK_MB
        ratio = sharded["growth_mb"] / plain["growth_mb"] if plain["growth_mb"] > 0 else float("inf")
        cells = [
            backend, query, f"{plain['growth_mb']:.1f}", f"{sharded['growth_mb']:.1f}",
            f"{ratio:.2f}x", f"{limit:.1f}", "met" if sharded["growth_mb"] <= limit else "MISSED",
            f"{plain['seconds']:.2f}", f"{sharded['seconds']:.2f}",
            f"{sharded['seconds'] / plain['seconds']:.2f}x",
        ]  # fmt: skip
        print("".join(f"{c:>12}" for c in cells))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rows", type=int, default=300_000, help="rows (default 300,000)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each child (default 1)")
    parser.add_argument("--yield-per", type=int, default=1000, help="yield_per (default 1000)")
    parser.add_argument("--postgres", default=os.environ.get("SNOWSHARD_TEST_POSTGRES_URL"))
    parser.add_argument("--mysql", default=os.environ.get("SNOWSHARD_TEST_MYSQL_URL"),
                        help="MariaDB/MySQL server (default $SNOWSHARD_TEST_MYSQL_URL)")  # fmt: skip
    parser.add_argument("--no-mysql", action="store_true", help="skip MariaDB")
    parser.add_argument("--queries", nargs="+", choices=QUERIES, default=list(QUERIES),
                        help="which queries to stream (default: both)")  # fmt: skip
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--child-query", choices=QUERIES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        urls = json.loads(sys.stdin.read())  # from stdin: passwords stay out of `ps`
        print(json.dumps(stream(args.child, args.child_query, urls, args.yield_per)))
        return
    if not args.postgres:
        parser.error("needs PostgreSQL: --postgres URL or SNOWSHARD_TEST_POSTGRES_URL")
    if args.rows < 1 or args.rounds < 1 or args.yield_per < 1:
        parser.error("--rows, --rounds and --yield-per must be >= 1")
    servers = {"postgresql": args.postgres}
    if args.mysql and not args.no_mysql:
        servers["mariadb"] = args.mysql
    started = time.perf_counter()
    results, methods, names = run(servers, args.rows, args.rounds, args.yield_per, args.queries)
    report(
        results,
        methods,
        f"{args.rows:,} rows, yield_per={args.yield_per}, {args.rounds} round(s), "
        f"{time.perf_counter() - started:.0f} s in all",
    )
    print(f"throw-away databases (dropped): {', '.join(names)}")


if __name__ == "__main__":
    main()
