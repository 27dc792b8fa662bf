"""Benchmarks of the worker-ID machinery, each against a baseline measured in the same run.

1. Redis issuer: one round trip per ID (``next_id``) vs batched ``INCRBY``
   (``next_ids(4096)``). Target: the batch reaches >= 10x the per-ID rate.
2. ``Snowflake.next_id`` with a leased worker ID (Redis, and a SQLite table) vs a fixed
   worker ID. Target: >= 0.95x, i.e. renewal stays off the hot path.
3. Time to first ID (``--ttl``, ``--clock-skew``): on a settled Redis namespace (target:
   under 0.1 s), on a new one and on a SQLite table (fenced: target ttl + clock_skew, +0.5 s
   of slack), and after a fault while a generator runs (the namespace's Redis keys deleted,
   as a FLUSHALL would; the table's rows deleted). The generator issues under its old claim
   until its deadline, is refused, then issues under the new claim: the time from the fault
   to that ID (target: renew_every + ttl + clock_skew, + 0.5 s) and the longest time without
   an ID (target: ttl + clock_skew, + 0.5 s). The baseline is ttl + clock_skew itself.

Run::

    python benchmarks/bench_workers.py [--redis-url redis://127.0.0.1:6379/0] [--seconds 1]

Each figure is the best of ``--rounds`` timed runs, alternating the variants so that load
from other processes hits them alike. Needs a Redis server.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis
import sqlalchemy as sa

from snowshard import Layout, Snowflake, WorkerIdError
from snowshard.redis_issuer import RedisIssuer
from snowshard.workers import DatabaseLease, Lease, RedisLease, create_table, worker_leases

DEFAULT_REDIS = os.environ.get("SNOWSHARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def rate(issue: Callable[[], int], seconds: float) -> float:
    """IDs per second of ``issue()`` (which returns how many IDs it made) over ``seconds``."""
    made = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        made += issue()
        now = time.perf_counter()
        if now >= deadline:
            return made / (now - start)


def best_of(
    variants: dict[str, Callable[[], int]], seconds: float, rounds: int
) -> dict[str, float]:
    """The best rate of each variant over ``rounds`` alternating runs."""
    best = dict.fromkeys(variants, 0.0)
    for _ in range(rounds):
        for name, issue in variants.items():
            best[name] = max(best[name], rate(issue, seconds))
    return best


def loop_of(next_id: Callable[[], int], n: int = 1000) -> Callable[[], int]:
    """``n`` calls of ``next_id`` per measurement step (keeps timer overhead out)."""

    def issue() -> int:
        for _ in range(n):
            next_id()
        return n

    return issue


Row = tuple[str, float, str, float]  # name, IDs/s, target text, target ratio (0: baseline)


def bench_issuer(url: str, prefix: str, seconds: float, rounds: int) -> list[Row]:
    layout = Layout(datacenter_bits=5, worker_bits=5)
    with RedisIssuer(url, layout, key_prefix=prefix + "seq") as issuer:
        per_id = loop_of(issuer.next_id, 200)

        def batch() -> int:
            return len(issuer.next_ids(4096))

        best = best_of({"per_id": per_id, "batch": batch}, seconds, rounds)
    return [
        ("Redis issuer, next_id (1 round trip/ID)", best["per_id"], "baseline", 0.0),
        ("Redis issuer, next_ids(4096) (INCRBY)", best["batch"], ">= 10x", 10.0),
    ]


def bench_leases(url: str, prefix: str, seconds: float, rounds: int) -> list[Row]:
    layout = Layout()
    leases: list[Lease] = []
    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.create_engine(f"sqlite:///{Path(tmp) / 'leases.sqlite3'}")
        try:
            create_table(engine)
            with redis.Redis.from_url(url) as client:  # a namespace in long use: no fence
                client.set(f"{prefix}workers:era", f"{client.info('server')['run_id']}:0")
            # ttl 2 s: renewals every 0.67 s during the timed runs; the table's claim waits
            # out its fence (2.5 s) at construction
            redis_lease = RedisLease(url, layout, key_prefix=prefix + "workers", ttl=2.0)
            db_lease = DatabaseLease(engine, layout, ttl=2.0, clock_skew=0.5)
            leases += [redis_lease, db_lease]
            fixed = Snowflake(layout, worker=5)
            on_redis = Snowflake(layout, worker=redis_lease)
            on_db = Snowflake(layout, worker=db_lease)
            best = best_of(
                {
                    "fixed": loop_of(fixed.next_id),
                    "redis": loop_of(on_redis.next_id),
                    "db": loop_of(on_db.next_id),
                },
                seconds,
                rounds,
            )
        finally:
            for lease in leases:
                lease.close()
            engine.dispose()
    return [
        ("Snowflake.next_id, fixed worker", best["fixed"], "baseline", 0.0),
        ("Snowflake.next_id, RedisLease (ttl 2 s)", best["redis"], ">= 0.95x", 0.95),
        ("Snowflake.next_id, DatabaseLease (SQLite, ttl 2 s)", best["db"], ">= 0.95x", 0.95),
    ]


def first_id_seconds(make: Callable[[], Lease]) -> float:
    """Seconds from building a lease to its generator's first ID."""
    start = time.perf_counter()
    lease = make()
    try:
        Snowflake(lease.layout, worker=lease).next_id()
        return time.perf_counter() - start
    finally:
        lease.close()


def recovery_seconds(lease: Lease, fault: Callable[[], None]) -> tuple[float, float]:
    """After ``fault()`` while a generator issues: (seconds to the first ID after its
    refusals, i.e. under the new claim; the longest time without an ID)."""
    generator = Snowflake(lease.layout, worker=lease)
    generator.next_id()
    fault()
    start = last = time.perf_counter()
    longest = 0.0
    refused = False
    while time.perf_counter() - start < 60:
        try:
            generator.next_id()
        except WorkerIdError:
            refused = True
            time.sleep(0.002)
            continue
        now = time.perf_counter()
        longest = max(longest, now - last)
        last = now
        if refused:
            return now - start, longest
        time.sleep(0.001)
    raise RuntimeError("the generator never resumed after the fault")


TimeRow = tuple[str, float, float]  # name, seconds, upper bound (seconds)


def bench_first_id(url: str, prefix: str, ttl: float, skew: float) -> list[TimeRow]:
    layout = Layout()
    fence = ttl + skew
    rows: list[TimeRow] = []
    settled = prefix + "settled"
    with redis.Redis.from_url(url) as client:
        run_id = client.info("server")["run_id"]
        client.set(f"{settled}:era", f"{run_id}:0")  # a namespace in long use

        def on_redis(key_prefix: str) -> Lease:
            return RedisLease(url, layout, key_prefix=key_prefix, ttl=ttl, clock_skew=skew)

        rows.append(("RedisLease, settled namespace", first_id_seconds(
            lambda: on_redis(settled)), 0.1))
        rows.append(("RedisLease, new namespace (fenced)", first_id_seconds(
            lambda: on_redis(prefix + "new")), fence + 0.5))
        def flush() -> None:
            client.delete(*client.scan_iter(match=settled + ":*"))

        lease = on_redis(settled)
        try:
            recovered, stall = recovery_seconds(lease, flush)
        finally:
            lease.close()
        rows.append(("RedisLease, keys flushed: to the new claim's ID", recovered,
                     lease.renew_every + fence + 0.5))
        rows.append(("RedisLease, keys flushed: longest time without ID", stall, fence + 0.5))
    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.create_engine(f"sqlite:///{Path(tmp) / 'leases.sqlite3'}")
        try:
            create_table(engine)

            def on_table() -> Lease:
                return DatabaseLease(engine, layout, ttl=ttl, clock_skew=skew)

            rows.append(("DatabaseLease (SQLite), clean start (fenced)",
                         first_id_seconds(on_table), fence + 0.5))

            def delete_rows() -> None:
                with engine.begin() as conn:
                    conn.execute(sa.delete(worker_leases))

            lease = on_table()
            try:
                recovered, stall = recovery_seconds(lease, delete_rows)
            finally:
                lease.close()
            rows.append(("DatabaseLease, rows deleted: to the new claim's ID", recovered,
                         lease.renew_every + fence + 0.5))
            rows.append(("DatabaseLease, rows deleted: longest time without ID", stall,
                         fence + 0.5))
        finally:
            engine.dispose()
    return rows


def time_table(rows: list[TimeRow], ttl: float, skew: float) -> tuple[str, bool]:
    """Format time-to-first-ID rows; ratios are against ttl + clock_skew."""
    fence = ttl + skew
    lines = [
        f"{'time to first ID':<52} {'seconds':>8} {'ratio':>8}  target",
        f"{'baseline: ttl + clock_skew':<52} {fence:>8.3f} {1:>7.2f}x  -",
    ]
    ok = True
    for name, seconds, bound in rows:
        passed = seconds <= bound
        ok = ok and passed
        verdict = "  ok" if passed else "  MISSED"
        lines.append(
            f"{name:<52} {seconds:>8.3f} {seconds / fence:>7.2f}x  <= {bound:g} s{verdict}"
        )
    return "\n".join(lines), ok


def table(rows: list[Row]) -> tuple[str, bool]:
    """Format rows (name, IDs/s, target text, target ratio); the first row is the baseline."""
    base = rows[0][1]
    lines = [f"{'benchmark':<44} {'IDs/s':>12} {'ratio':>8}  target"]
    ok = True
    for name, value, target, needed in rows:
        ratio = value / base
        verdict = "" if not needed else ("  ok" if ratio >= needed else "  MISSED")
        ok = ok and (not needed or ratio >= needed)
        lines.append(f"{name:<44} {value:>12,.0f} {ratio:>7.2f}x  {target}{verdict}")
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", default=DEFAULT_REDIS)
    parser.add_argument("--seconds", type=float, default=0.5, help="per timed run")
    parser.add_argument("--rounds", type=int, default=7, help="timed runs per variant")
    parser.add_argument("--ttl", type=float, default=2.0, help="of the time-to-first-ID leases")
    parser.add_argument("--clock-skew", type=float, default=0.5, help="of the same leases")
    args = parser.parse_args(argv)
    prefix = f"snowshard:bench:{secrets.token_hex(4)}:"
    try:
        issuer_rows = bench_issuer(args.redis_url, prefix, args.seconds, args.rounds)
        lease_rows = bench_leases(args.redis_url, prefix, args.seconds, args.rounds)
        first_rows = bench_first_id(args.redis_url, prefix, args.ttl, args.clock_skew)
    finally:
        with redis.Redis.from_url(args.redis_url) as client:
            keys = list(client.scan_iter(match=prefix + "*", count=1000))
            if keys:
                client.delete(*keys)
    ok = True
    print(f"Python {sys.version.split()[0]}, best of {args.rounds} x {args.seconds:g} s\n")
    for rows in (issuer_rows, lease_rows):
        text, passed = table(rows)
        ok = ok and passed
        print(text, end="\n\n")
    text, passed = time_table(first_rows, args.ttl, args.clock_skew)
    print(text)
    return 0 if (ok and passed) else 1


if __name__ == "__main__":
    raise SystemExit(main())
