"""A reshard step in a process of its own, killed with SIGKILL at a chosen point.

``python -m tests.faults.reshard_child SPEC`` where SPEC is JSON: ``urls`` (database key
-> URL), ``two_databases``, ``step`` (``start``, ``cutover``, ``rollback`` or
``cleanup``), ``kill_at`` ([progress step, calls]: SIGKILL itself at that progress call),
``signal`` (optional, ``"SIGSTOP"`` to stop there instead of dying), ``capture``
(optional, ``"logical"``) and ``chunk_rows``. It declares the same two layouts as the test (``tests.reshard_world``)
and runs the step; if the kill point is never reached it exits 0. To be killed in the
catch-up, it rewrites every source row with its own values once the capture is installed:
the catch-up then has more changes to apply than it leaves, whatever the test's writers
managed to write during the copy.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import sqlalchemy as sa

from snowshard.operations.reshard import Reshard, ReshardPlan
from snowshard.sharding import sharded_model
from tests.reshard_world import declare

__all__ = ["main"]


def main(spec: dict[str, Any]) -> None:
    old, new = declare({"a": range(2)} if spec["two_databases"] else None)
    plan = ReshardPlan.between(
        sharded_model(old), sharded_model(new), job="rs-orders", chunk_rows=spec["chunk_rows"],
        capture=spec.get("capture", "triggers"),
    )
    kill_step, kill_calls = spec["kill_at"]
    calls = 0
    touched = False

    def progress(step: str, done: int, total: int | None) -> None:
        nonlocal calls, touched
        if step == "copy" and kill_step == "catch up" and not touched:
            touched = True  # the first "copy" call: captured, nothing copied yet
            _rewrite_sources(plan, engines)
        if step == kill_step:
            calls += 1
            if calls >= kill_calls:
                os.kill(os.getpid(), getattr(signal, spec.get("signal", "SIGKILL")))

    kw: dict[str, Any] = {}
    engines = {
        key: sa.create_engine(url, **({"connect_args": {"timeout": 30}} if url.startswith("sqlite") else kw))
        for key, url in spec["urls"].items()
    }
    getattr(Reshard(plan, engines, progress=progress), spec["step"])()


def _rewrite_sources(plan: ReshardPlan, engines: dict[str, sa.Engine]) -> None:
    """Set a column of every source row to its own value: changes the capture records."""
    tables = plan.tables(plan.source)
    for database, indices in plan.by_database(plan.source):
        with engines[database].begin() as connection:
            for index in indices:
                table = tables[index]
                column = table.c.amount  # neither a key nor the shard key
                connection.execute(table.update().values({column.name: column}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
