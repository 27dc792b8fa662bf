"""Online resharding: copy speed, capture overhead, and the write pause at cutover.

    python benchmarks/bench_reshard.py                       # PostgreSQL and MariaDB found
    python benchmarks/bench_reshard.py --rows 200000 --cutover-rows 200000 --only copy,cutover

Servers come from ``--postgres`` / ``--mysql`` or ``SNOWSHARD_TEST_POSTGRES_URL`` /
``SNOWSHARD_TEST_MYSQL_URL``; each part runs in a throw-away database, dropped afterwards.
A table ``orders`` (4 tables by ``user_id``) is moved to 8 tables (``orders_v2_*``) in
the same database. Every ratio is against a baseline measured in the same run:

* **copy**: ``Reshard.start()`` on ``--rows`` rows (default 1M; copy and catch-up, no
  writers, everything ``start`` does included: targets, capture, counts) vs
  ``INSERT INTO plain_copy SELECT * FROM plain`` of the same rows into one table on the
  same server. Target: >= 0.5x the rows/s.
* **capture**: ``--writes`` single-row writes (insert, then update of the same row)
  through a ``ShardedSession``, 1 and 4 threads, on the old layout without triggers vs
  with the capture triggers installed. Target: <= 1.3x the time.
* **capture, logical** (PostgreSQL with ``wal_level = logical``, ``--postgres-logical``,
  default ``SNOWSHARD_TEST_POSTGRES2_URL``): the same writes without capture vs with a
  logical replication slot on the tables, and the rate at which the slot's changes are
  moved into the change log.
* **cutover** (PostgreSQL): ``--cutover-rows`` rows, 4 writer threads writing through
  ``ShardMap.pick`` and retrying on ``StaleShardMap``; p50/p99 of each write's latency
  (retries included) before, during ``cutover()`` and after, and the pause cutover
  reports. Target: p99 during cutover <= 1 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, String, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_bulk import server_database  # noqa: E402  (a sibling script)

from snowshard.operations.reshard import Reshard, ReshardPlan  # noqa: E402
from snowshard.operations.reshard import logical, triggers  # noqa: E402
from snowshard.operations.reshard.state import LOG  # noqa: E402
from snowshard.sharding import Sharded, ShardedSession, Shards, bulk_insert, sharded_model  # noqa: E402
from snowshard.sharding.shard_map import ShardMap, StaleShardMap  # noqa: E402


class OldBase(DeclarativeBase):
    pass


class NewBase(DeclarativeBase):
    pass


class PlainBase(DeclarativeBase):
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


Order: Any = type("Order", (Sharded, OldBase), {
    "__tablename__": "orders", "__shards__": Shards(4, key="user_id"), **_columns()})
OrderV2: Any = type("OrderV2", (Sharded, NewBase), {
    "__tablename__": "orders", "__shards__": Shards(8, key="user_id", pattern="{name}_v2_{index:02d}"),
    **_columns()})
Plain: Any = type("Plain", (PlainBase,), {"__tablename__": "plain", **_columns()})
PlainCopy: Any = type("PlainCopy", (PlainBase,), {"__tablename__": "plain_copy", **_columns()})


def rows(count: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": 1_000_000 + n, "user_id": rng.randrange(1, 100_000), "amount": n,
             "note": f"order {n}"} for n in range(count)]


def setup(engine: Engine, data: list[dict[str, Any]]) -> None:
    """The old layout and the plain table, both holding ``data``."""
    for base in (OldBase, PlainBase):
        base.metadata.create_all(engine)
    with ShardedSession(engine) as session:
        bulk_insert(session, Order, data, batch_size=10_000)
        session.commit()
    with engine.begin() as connection:
        connection.execute(sa.insert(Plain), data)


def plan(chunk_rows: int = 10_000) -> ReshardPlan:
    return ReshardPlan.between(sharded_model(Order), sharded_model(OrderV2), job="bench", chunk_rows=chunk_rows)


def timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


# --------------------------------------------------------------------------- copy


def bench_copy(backend: str, url: str, count: int, chunk_rows: int = 10_000) -> list[str]:
    with server_database(url) as engine:
        setup(engine, rows(count))

        def baseline() -> None:
            with engine.begin() as connection:
                connection.exec_driver_sql("INSERT INTO plain_copy SELECT * FROM plain")

        PlainBase.metadata.create_all(engine)
        plain_s = timed(baseline)
        reshard_s = timed(lambda: Reshard(plan(chunk_rows), {"default": engine}).start())
    ratio = plain_s / reshard_s
    return [
        f"{backend:<11} copy  INSERT...SELECT   {count / plain_s:>12,.0f} rows/s  1.00x",
        f"{backend:<11} copy  reshard start     {count / reshard_s:>12,.0f} rows/s  {ratio:.2f}x  >= 0.5x",
        f"{backend:<11} copy  (chunks of {chunk_rows:,} rows)",
    ]


# --------------------------------------------------------------------------- capture


def _writes(engine: Engine, threads: int, writes: int, base_id: int) -> float:
    def work(n: int) -> None:
        with ShardedSession(engine) as session:
            for i in range(writes // threads):
                key = base_id + n * 1_000_000 + i
                session.add(Order(id=key, user_id=key % 9973, amount=1, note="w"))
                session.commit()
                session.execute(update(Order).where(Order.id == key, Order.user_id == key % 9973)
                                .values(amount=2))
                session.commit()

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - began


Capture = Callable[[Engine], AbstractContextManager[Callable[[], "float | None"]]]
"""Installs a capture on ``Order``'s tables for the block and removes it after; yields what
to measure once the captured writes are done (None: nothing)."""


def _overhead(url: str, writes: int, capture: Capture) -> Iterator[tuple[int, float, float, float | None]]:
    """For 1 and 4 threads: (threads, writes' time without capture, with it, and what the
    capture measured after its writes)."""
    with server_database(url) as engine:
        setup(engine, rows(1000))
        LOG.create(engine, checkfirst=True)
        for threads in (1, 4):
            plain_s = _writes(engine, threads, writes, 10_000_000 * threads)
            with capture(engine) as after:
                captured_s = _writes(engine, threads, writes, 20_000_000 * threads)
                measured = after()
            yield threads, plain_s, captured_s, measured


@contextmanager
def _trigger_capture(engine: Engine) -> Iterator[Callable[[], float | None]]:
    tables = sharded_model(Order).tables
    with engine.begin() as connection:
        for table in tables:
            triggers.install_capture(connection, table, job="bench", pk="id", key="user_id")
    try:
        yield lambda: None
    finally:
        with engine.begin() as connection:
            for table in tables:
                triggers.drop_capture(connection, table, job="bench")


@contextmanager
def _logical_capture(engine: Engine) -> Iterator[Callable[[], float | None]]:
    tables = list(sharded_model(Order).tables)
    logical.install_logical(engine, "bench", tables)

    def pumped() -> float:
        """Changes per second moved from the slot into the change log."""
        began = time.perf_counter()
        logged = logical.pump(engine, "bench", "bench", "id", "user_id")
        return logged / (time.perf_counter() - began)

    try:
        yield pumped
    finally:
        logical.drop_logical(engine, "bench", tables)


def _capture_lines(
    backend: str, threads: int, writes: int, timed: tuple[tuple[str, float], tuple[str, float]]
) -> list[str]:
    """The baseline's and the captured writers' lines: ``timed`` is (label, seconds) of each."""
    (plain, plain_s), (captured, captured_s) = timed
    head = f"{backend:<11} capture {threads} thread(s)"
    return [
        f"{head} {plain:<12} {writes / plain_s:>8,.0f} writes/s  1.00x",
        f"{head} {captured:<12} {writes / captured_s:>8,.0f} writes/s  "
        f"{captured_s / plain_s:.2f}x time  <= 1.3x",
    ]


def bench_capture(backend: str, url: str, writes: int) -> list[str]:
    lines = []
    for threads, plain_s, captured_s, _ in _overhead(url, writes, _trigger_capture):
        timed = (("no triggers", plain_s), ("captured", captured_s))
        lines += _capture_lines(backend, threads, writes, timed)
    return lines


def bench_capture_logical(url: str, writes: int) -> list[str]:
    """The same writes on PostgreSQL with ``wal_level = logical``: no capture vs a logical
    replication slot and publication on the tables (``capture="logical"``), which the
    writers pay for only in WAL (``REPLICA IDENTITY FULL`` logs whole old rows); then how
    fast the slot's changes are moved into the change log."""
    lines = []
    for threads, plain_s, captured_s, rate in _overhead(url, writes, _logical_capture):
        timed = (("no capture", plain_s), ("logical slot", captured_s))
        lines += _capture_lines("postgresql", threads, writes, timed)
        lines.append(
            f"postgresql  capture {threads} thread(s) slot -> log  {rate or 0:>8,.0f} changes/s"
        )
    return lines


# --------------------------------------------------------------------------- cutover


def bench_cutover(url: str, count: int) -> list[str]:
    with server_database(url) as engine:
        setup(engine, rows(count))
        job = Reshard(plan(20_000), {"default": engine})
        shard_map = ShardMap(engine)
        samples: list[tuple[float, float]] = []
        stop = threading.Event()
        lock = threading.Lock()

        def writer(n: int) -> None:
            rng = random.Random(n)
            key = 50_000_000 + n * 10_000_000
            while not stop.is_set():
                key += 1
                began = time.perf_counter()
                while True:
                    model = shard_map.pick(Order, OrderV2)
                    try:
                        with ShardedSession(engine) as session:
                            session.add(model(id=key, user_id=rng.randrange(1, 100_000), amount=1, note="w"))
                            session.commit()
                        break
                    except StaleShardMap:
                        time.sleep(0.002)
                with lock:
                    samples.append((began, time.perf_counter() - began))

        threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(2)
        copy_began = time.perf_counter()
        job.start()
        copy_ended = time.perf_counter()
        cut_began = time.perf_counter()
        report = job.cutover()
        cut_ended = time.perf_counter()
        time.sleep(2)
        stop.set()
        for thread in threads:
            thread.join()

    def window(low: float, high: float) -> str:
        latencies = sorted(s for t, s in samples if low <= t < high or (t < low and t + s >= low))
        if not latencies:
            return "no writes"
        p50 = latencies[len(latencies) // 2] * 1000
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
        return f"p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  ({len(latencies)} writes)"

    first = min(t for t, _ in samples)
    return [
        f"postgresql  cutover {count:,} rows: copy+catch-up {copy_ended - copy_began:.1f} s, "
        f"pause {report.pause_ms:.0f} ms ({', '.join(f'{k} {v:.0f}' for k, v in report.checks.items())})",
        f"postgresql  writes before         {window(first, copy_began)}",
        f"postgresql  writes during copy    {window(copy_began, copy_ended)}",
        f"postgresql  writes during cutover {window(cut_began, cut_ended)}  target p99 <= 1000 ms",
        f"postgresql  writes after          {window(cut_ended, float('inf'))}",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get("SNOWSHARD_TEST_POSTGRES_URL"))
    parser.add_argument("--mysql", default=os.environ.get("SNOWSHARD_TEST_MYSQL_URL"))
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows copied (default 1,000,000)")
    parser.add_argument("--writes", type=int, default=2_000, help="writes per capture run")
    parser.add_argument("--cutover-rows", type=int, default=1_000_000)
    parser.add_argument("--postgres-logical", default=os.environ.get("SNOWSHARD_TEST_POSTGRES2_URL"),
                        help="a PostgreSQL server with wal_level=logical, for logical capture")
    parser.add_argument("--only", default="copy,capture,cutover", help="parts to run")
    parser.add_argument("--chunk-rows", type=int, default=10_000, help="rows per copy chunk (default 10,000)")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{stamp}; Python {platform.python_version()}, SQLAlchemy {sa.__version__}, "
          f"{os.cpu_count()} CPUs, {platform.machine()}")
    servers = [(name, url) for name, url in (("postgresql", args.postgres), ("mysql", args.mysql)) if url]
    for name, url in servers:
        if "copy" in parts:
            print("\n".join(bench_copy(name, url, args.rows, args.chunk_rows)), flush=True)
        if "capture" in parts:
            print("\n".join(bench_capture(name, url, args.writes)), flush=True)
    if "capture" in parts and args.postgres_logical:
        print("\n".join(bench_capture_logical(args.postgres_logical, args.writes)), flush=True)
    if "cutover" in parts and args.postgres:
        print("\n".join(bench_cutover(args.postgres, args.cutover_rows)), flush=True)


if __name__ == "__main__":
    main()
