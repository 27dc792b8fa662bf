"""Child processes for the fault tests: ``python -m tests.faults.procs MODE [options]``.

The tests fork them (:func:`run_forked`: no interpreter start-up, so eight children cost
little); the command line is for running one by hand.

Modes:

``churn``
    ``--rounds`` times: lease a worker ID, issue ``--per-round`` IDs with ``next_id``,
    release it. Writes the IDs (int64) to ``--out`` and the rounds to ``--out``.json.
``hold``
    lease a worker ID and issue one ID every ``--interval`` s until ``--stop`` exists,
    writing ``ready.json`` first, then one line per ID (``I <id> <wall ms>``) or error
    (``E <wall ms> <class> <message>``), line-buffered so a SIGKILLed child leaves them.
``issue``
    the same loop with a :class:`~snowshard.redis_issuer.RedisIssuer` instead of a lease.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import time
from array import array
from pathlib import Path
from typing import Any

from snowshard import Layout, Snowflake, SnowshardError, WorkerIdError
from snowshard.workers import DatabaseLease, Lease, RedisLease, WorkerIdsExhausted

__all__ = ["main", "make_lease", "run_forked", "wall_ms"]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def make_lease(store: str, target: str, prefix: str, layout: Layout, ttl: float) -> Lease:
    """A lease on Redis (``target`` a redis URL) or a database (``target`` an SQLAlchemy URL)."""
    if store == "redis":
        return RedisLease(target, layout, key_prefix=prefix, ttl=ttl, clock_skew=0.1)
    return DatabaseLease(target, layout, namespace=prefix, ttl=ttl, clock_skew=0.1)


def lease_generator(
    args: argparse.Namespace, layout: Layout, timeout: float, **kwargs: Any
) -> tuple[Lease, Snowflake]:
    """Lease a worker ID, waiting while all are taken (up to ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        lease = make_lease(args.store, args.target, args.prefix, layout, args.ttl)
        try:
            return lease, Snowflake(layout, worker=lease, **kwargs)
        except WorkerIdsExhausted:
            lease.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def churn(args: argparse.Namespace) -> None:
    layout = Layout(worker_bits=args.worker_bits)
    ids = array("q")
    rounds = []
    refusals = 0
    for _ in range(args.rounds):
        lease, generator = lease_generator(args, layout, timeout=60)
        next_id = generator.next_id
        append = ids.append
        left = args.per_round
        while left:
            try:
                for _ in range(left):
                    append(next_id())
                    left -= 1
            except WorkerIdError:  # a starved renewal let the lease lapse: wait for a new one
                refusals += 1
                time.sleep(0.01)
        rounds.append({"worker": generator.worker, "last": ids[-1]})
        lease.close()
    Path(args.out).write_bytes(ids.tobytes())
    info = {"pid": os.getpid(), "rounds": rounds, "refusals": refusals}
    Path(args.out + ".json").write_text(json.dumps(info))


def _loop(args: argparse.Namespace, next_id: Any, out: Any) -> None:
    stop = Path(args.stop)
    while not stop.exists():
        try:
            value = next_id()
            out.write(f"I {value} {wall_ms()}\n")
        except SnowshardError as exc:
            message = " ".join(str(exc).split())[:300]
            out.write(f"E {wall_ms()} {type(exc).__name__} {message}\n")
        time.sleep(args.interval)


def hold(args: argparse.Namespace) -> None:
    layout = Layout(worker_bits=args.worker_bits)
    kwargs: dict[str, Any] = {}
    if args.clock_offset_ms:
        offset = args.clock_offset_ms
        kwargs["clock"] = lambda: wall_ms() + offset
    lease, generator = lease_generator(args, layout, timeout=30, **kwargs)
    ready = {"pid": os.getpid(), "worker": generator.worker, "holder": lease.holder}
    with open(args.out, "w", buffering=1) as out:
        Path(args.ready).write_text(json.dumps(ready))
        _loop(args, generator.next_id, out)
    lease.close()


def issue(args: argparse.Namespace) -> None:
    from snowshard.redis_issuer import RedisIssuer

    with RedisIssuer(args.target, key_prefix=args.prefix, timeout=0.5) as issuer:
        with open(args.out, "w", buffering=1) as out:
            Path(args.ready).write_text(json.dumps({"pid": os.getpid()}))
            _loop(args, issuer.next_id, out)


def run_forked(argv: list[str], log: str) -> None:
    """Entry point of a forked child: output to ``log``, then :func:`main`.

    SIGUSR1 makes the child write every thread's stack to ``log`` (a test that finds it
    stuck asks for them before failing).
    """
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    main(argv)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.procs")
    parser.add_argument("mode", choices=["churn", "hold", "issue"])
    parser.add_argument("--store", default="redis")
    parser.add_argument("--target", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--worker-bits", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=25_000)
    parser.add_argument("--interval", type=float, default=0.001)
    parser.add_argument("--clock-offset-ms", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ready", default="")
    parser.add_argument("--stop", default="")
    args = parser.parse_args(argv)
    {"churn": churn, "hold": hold, "issue": issue}[args.mode](args)


if __name__ == "__main__":
    main()
