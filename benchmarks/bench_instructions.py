"""Client cost per call as instructions counted by valgrind: steady on a noisy machine.

    python benchmarks/bench_instructions.py              # needs valgrind; about 5 minutes
    python benchmarks/bench_instructions.py --calls 2000 --measure keyed

Timings of one keyed read on a shared 2-core VM move by 10-30 % between runs, more than
the overhead they are meant to show. Instructions do not: ``valgrind --tool=callgrind``
counts the same total for the same work whatever else the machine does. This script
measures snowshard's client-side cost against a plain SQLAlchemy session on the same
rows (SQLite in a file, so the database's own work is small and equal on both sides):

* keyed read: ``select(M).where(M.user_id == u)`` of a user's 10 orders, as ORM objects;
* get by ID: ``session.get(M, id)`` on an empty identity map.

Each variant runs in a child process under callgrind twice, counting only from the end of
its set-up and ``--warm-up`` calls (500; the child switches counting on with
``callgrind_control``): once with no calls, once with ``--calls`` calls; the difference
over ``--calls`` is the instructions per call. The cyclic garbage collector is off while
counting: whether one of its passes lands among the counted calls is chance, and moved
otherwise equal runs by tens of thousands of instructions per call. The models and rows
are those of :mod:`bench_sharding` (16 tables in one database). Ratios are to the plain
session measured in the same run.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VARIANTS = ["plain keyed", "sharded keyed", "plain get", "sharded get"]


def child(variant: str, calls: int, warm_up: int, path: str, users: int = 400) -> None:
    """Load the rows, warm up, then make ``calls`` calls of ``variant`` (in this process)."""
    sys.path.insert(0, str(HERE))
    import bench_sharding as b
    import sqlalchemy as sa
    from bench_sharding import _getter, _insert, _keyed, _rows
    from sqlalchemy.orm import Session

    from snowshard.sharding import ShardedSession, create_all, sharded_model

    engine = sa.create_engine(f"sqlite:///{path}")
    rows = _rows(users, 10)
    create_all(b.Base.metadata, bind=engine)
    _insert(engine, b.Plain.__table__, rows)  # type: ignore[arg-type]
    spec = sharded_model(b.Order)
    by_shard: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_shard.setdefault(spec.shard_of("user_id", row["user_id"]), []).append(row)
    for shard, part in by_shard.items():
        _insert(engine, spec.tables[shard], part)
    kind, what = variant.split()
    session = Session(engine) if kind == "plain" else ShardedSession(engine)
    model = b.Plain if kind == "plain" else b.Order
    if what == "keyed":
        action = _keyed(session, model, sorted({r["user_id"] for r in rows}))
    else:
        action = _getter(session, model, [r["id"] for r in rows[:400]])
    for _ in range(warm_up):
        action()
    # the cyclic collector's passes fall inside or outside the counted calls by chance (a
    # full pass over the loaded modules moved equal runs by ~50,000 instructions per call)
    gc.collect()
    gc.disable()
    # counting starts here: set-up and warm-up ran uninstrumented (--instr-atstart=no)
    subprocess.run(
        ["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True
    )
    for _ in range(calls):
        action()


def instructions(variant: str, calls: int, warm_up: int, users: int = 400) -> int:
    """Instructions callgrind counts for set-up, warm-up and ``calls`` calls of ``variant``."""
    with tempfile.TemporaryDirectory() as folder:
        command = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={folder}/callgrind.%p",
            sys.executable, __file__, "--child", variant, "--calls", str(calls),
            "--warm-up", str(warm_up), "--db", os.path.join(folder, "bench.db"),
            "--users", str(users),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no total for {variant}:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warm-up", type=int, default=500, help="calls before counting")
    parser.add_argument("--measure", choices=["keyed", "get", "both"], default="both")
    parser.add_argument(
        "--users", type=int, default=400, help="users (10 orders each) in the database"
    )
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.calls, args.warm_up, args.db, args.users)
        return
    measures = ["keyed", "get"] if args.measure == "both" else [args.measure]
    per_call = {
        v: (
            instructions(v, args.calls, args.warm_up, args.users)
            - instructions(v, 0, args.warm_up, args.users)
        )
        / args.calls
        for v in VARIANTS
        if v.split()[1] in measures
    }
    import sqlalchemy

    print(
        f"\ninstructions per call (valgrind callgrind, {args.calls} calls after {args.warm_up} "
        f"warm-up); Python {platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, "
        f"SQLite, {platform.machine()}"
    )
    print(f"{'measure':<12}{'plain':>12}{'sharded':>12}{'ratio':>8}{'over plain':>12}")
    for what in measures:
        plain, sharded = per_call[f"plain {what}"], per_call[f"sharded {what}"]
        label = "keyed read" if what == "keyed" else "get by ID"
        print(
            f"{label:<12}{plain:>12,.0f}{sharded:>12,.0f}{sharded / plain:>7.2f}x"
            f"{sharded - plain:>12,.0f}"
        )


if __name__ == "__main__":
    main()
