"""Catching up: apply the captured changes until the target equals the source.

The triggers (:mod:`.triggers`), or the logical replication slot once :func:`collect`
moved what it decoded (:mod:`.logical`), log, in the writer's own transaction, which primary key
changed in which source table and its shard key (before a DELETE, after an INSERT; both
when an UPDATE moves it). Applying a batch of the log makes each named row of the target
equal the source's **current** row: delete it from the target tables its shard keys
route to, then insert the source row again if it still exists. That is idempotent and
independent of order, so a crash between applying and deleting the log rows only applies
them twice. Log rows are deleted by ``seq`` once applied, never up to a watermark: a
transaction that took a lower ``seq`` and committed later is still found next pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any

from sqlalchemy import Engine, Table, delete, func, select

from snowshard.operations.reshard.copy import OnRows, route_rows, write_routed
from snowshard.operations.reshard.logical import pump
from snowshard.operations.reshard.plan import ReshardPlan
from snowshard.operations.reshard.state import LOG
from snowshard.operations.reshard.triggers import fence_bypass

__all__ = ["apply_batch", "collect", "drain", "lag"]


def collect(plan: ReshardPlan, engines: Mapping[str, Engine]) -> int:
    """With logical capture, move what each source database's slot decoded into its change
    log (:func:`.logical.pump`); with triggers there is nothing to move. Rows logged."""
    if plan.capture != "logical":
        return 0
    return sum(
        pump(engines[database], plan.job, plan.log_job, plan.pk, plan.target.key)
        for database, _ in plan.by_database(plan.source)
    )


def lag(plan: ReshardPlan, engines: Mapping[str, Engine]) -> int:
    """Changes captured and not yet applied, over every source database. With logical
    capture, only those already moved into the log (:func:`collect`): reading a slot
    takes it, and a ``status`` must never stand in the way of the step that pumps it."""
    total = 0
    for database, _ in plan.by_database(plan.source):
        with engines[database].connect() as connection:
            total += connection.execute(
                select(func.count()).select_from(LOG).where(LOG.c.job == plan.log_job)
            ).scalar_one()
    return total


def apply_batch(
    plan: ReshardPlan,
    engines: Mapping[str, Engine],
    database: str,
    sources: Mapping[str, Table],
    targets: Mapping[int, Table],
    *,
    batch: int = 2000,
    fenced: bool = False,
) -> set[tuple[str, int]]:
    """Apply up to ``batch`` logged changes of source ``database``; the (table, pk) applied.

    ``fenced``: the target tables are fenced (rollback writes back into them).
    """
    with engines[database].connect() as connection:
        entries = connection.execute(
            select(LOG.c.seq, LOG.c.tbl, LOG.c.pk, LOG.c.shard_key)
            .where(LOG.c.job == plan.log_job)
            .order_by(LOG.c.seq)
            .limit(batch)
        ).all()
        if not entries:
            return set()
        current: dict[int, tuple[Any, ...]] = {}
        pk_at = list(plan.logical.columns.keys()).index(plan.pk)
        for name in {entry.tbl for entry in entries}:
            table = sources[name]
            keys = sorted({entry.pk for entry in entries if entry.tbl == name})
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                for row in connection.execute(
                    select(*table.columns).where(table.c[plan.pk].in_(chunk))
                ):
                    current[row[pk_at]] = tuple(row)
    stale: dict[int, set[int]] = {}
    for entry in entries:
        if entry.shard_key is not None:
            stale.setdefault(plan.target.table_of(entry.shard_key), set()).add(entry.pk)
    routed = route_rows(plan, list(current.values()))
    for index, rows in routed.items():
        position = list(plan.logical.columns.keys()).index(plan.pk)
        stale.setdefault(index, set()).update(row[position] for row in rows)
    for target_database, indices in plan.by_database(plan.target):
        touched = [i for i in indices if i in stale]
        if not touched:
            continue
        with engines[target_database].begin() as connection, ExitStack() as stack:
            if fenced:
                for index in touched:
                    stack.enter_context(fence_bypass(connection, targets[index], job=plan.job))
            for index in touched:
                table = targets[index]
                connection.execute(delete(table).where(table.c[plan.pk].in_(sorted(stale[index]))))
            write_routed(connection, plan, targets, routed, target_database)
    with engines[database].begin() as connection:
        seqs = [entry.seq for entry in entries]
        for start in range(0, len(seqs), 1000):
            connection.execute(delete(LOG).where(LOG.c.seq.in_(seqs[start : start + 1000])))
    return {(entry.tbl, entry.pk) for entry in entries}


def drain(
    plan: ReshardPlan,
    engines: Mapping[str, Engine],
    sources: Mapping[str, Table],
    targets: Mapping[int, Table],
    *,
    until: int = 0,
    fenced: bool = False,
    on_rows: OnRows | None = None,
) -> set[tuple[str, int]]:
    """Apply batches until at most ``until`` changes are left; the (table, pk) applied."""
    applied: set[tuple[str, int]] = set()
    while True:
        collect(plan, engines)
        progressed = False
        for database, _ in plan.by_database(plan.source):
            done = apply_batch(plan, engines, database, sources, targets, fenced=fenced)
            if done:
                progressed = True
                applied |= done
                if on_rows is not None:
                    on_rows(len(done))
        if not progressed or (until and lag(plan, engines) <= until):
            return applied
