"""The copy phase: every source table, in primary-key order, chunk by chunk.

Each chunk is read from the source, split by target table, and written to each target
database in one transaction **together with that database's checkpoint** (the highest
primary key of the source table copied into it, ``snowshard_reshard_copied``). A copy
resumed after a crash (kill -9 at any point) starts after the lowest checkpoint and skips,
per database, the rows its own checkpoint already covers: no row is lost or written twice.

Rows changed while the copy runs are captured by triggers installed before it starts and
applied afterwards (:mod:`.catchup`); the copy itself never needs to see them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, Table, func, insert, select, update

from snowshard.operations.reshard.plan import ReshardPlan
from snowshard.operations.reshard.state import COPIED
from snowshard.operations.reshard.throttle import Throttle
from snowshard.sharding.bulk_writers import write_rows
from snowshard.strategies import Gene, Mod

__all__ = [
    "COPIED_ALL",
    "OnRows",
    "checkpoints",
    "copy_source_table",
    "route_rows",
    "write_routed",
]

OnRows = Callable[[int], None]
"""Progress callback: called with the number of rows just written."""


def checkpoints(plan: ReshardPlan, engines: Mapping[str, Engine], source_table: str) -> dict[str, int | None]:
    """Per target database, the highest primary key of ``source_table`` copied into it."""
    found: dict[str, int | None] = {}
    for database, _ in plan.by_database(plan.target):
        with engines[database].connect() as connection:
            found[database] = connection.execute(
                select(COPIED.c.last_pk).where(
                    COPIED.c.job == plan.log_job, COPIED.c.source_table == source_table
                )
            ).scalar()
    return found


def route_rows(plan: ReshardPlan, rows: Sequence[Sequence[Any]]) -> dict[int, list[Sequence[Any]]]:
    """``rows`` (values in the logical table's column order) by target table index."""
    position = list(plan.logical.columns.keys()).index(plan.target.key)
    routed: dict[int, list[Sequence[Any]]] = {}
    for row in rows:
        routed.setdefault(plan.target.table_of(row[position]), []).append(row)
    return routed


def write_routed(
    connection: Connection,
    plan: ReshardPlan,
    targets: Mapping[int, Table],
    routed: Mapping[int, Sequence[Sequence[Any]]],
    database: str,
) -> int:
    """Write each table's rows of ``routed`` (only tables of ``database``); rows written."""
    written = 0
    for index, rows in sorted(routed.items()):
        if plan.target.spec.database_of(index) != database or not rows:
            continue
        table = targets[index]
        write_rows(
            connection, table, list(table.columns), rows,
            batch_size=plan.chunk_rows, database=database, on_batch=lambda n: None,
        )
        written += len(rows)
    return written


def _save(connection: Connection, plan: ReshardPlan, source_table: str, last_pk: int, rows: int) -> None:
    where = (COPIED.c.job == plan.log_job, COPIED.c.source_table == source_table)
    done = connection.execute(
        update(COPIED).where(*where).values(last_pk=last_pk, rows=COPIED.c.rows + rows)
    )
    if not done.rowcount:
        connection.execute(
            insert(COPIED).values(job=plan.log_job, source_table=source_table, last_pk=last_pk, rows=rows)
        )


COPIED_ALL = 2**63 - 1
"""The checkpoint of a source table whose copy has finished: a resumed ``start`` copies
nothing more of it. Rows written since are in the change log (the capture triggers were
installed before the copy began) and reach the target through the catch-up, which may
already have applied them: copying them again would insert them twice."""


def _finished(plan: ReshardPlan, engines: Mapping[str, Engine], source_table: str,
              marks: Mapping[str, int | None]) -> None:
    for database, mark in marks.items():
        if mark != COPIED_ALL:
            with engines[database].begin() as connection:
                _save(connection, plan, source_table, COPIED_ALL, 0)


def copy_source_table(
    plan: ReshardPlan,
    engines: Mapping[str, Engine],
    source_database: str,
    source: Table,
    targets: Mapping[int, Table],
    *,
    throttle: Throttle | None = None,
    on_rows: OnRows | None = None,
    fed: Sequence[int] | None = None,
) -> int:
    """Copy ``source`` (in ``source_database``) into ``targets``; returns rows written.

    ``throttle`` is asked before each chunk (replica lag) and told the rows after it.
    ``fed`` (:meth:`~.plan.ReshardPlan.fed_by`) are the target tables the source's rows
    belong in: the copy in SQL sends INSERTs to those only, and checks that they took the
    whole chunk (a row in the wrong source table sends the chunk through Python, which
    routes every row)."""
    pace = throttle if throttle is not None else Throttle()
    marks = checkpoints(plan, engines, source.name)
    known = [mark for mark in marks.values() if mark is not None]
    start: int | None = min(known) if len(known) == len(marks) else None
    pk = source.c[plan.pk]
    pk_at = list(source.columns.keys()).index(plan.pk)
    written = 0
    in_place = _in_place(plan, source_database, marks)
    into = {index: targets[index] for index in fed} if fed is not None else targets

    def copied(database: str, last: int, count: int) -> None:
        nonlocal written
        marks[database] = last
        written += count
        pace.after_rows(count)
        if on_rows is not None and count:
            on_rows(count)

    while True:
        pace.before_chunk()
        step = _copy_in_place(plan, engines[source_database], source, into, start) if in_place else None
        if step is not None:
            copied(source_database, *step)
            start = step[0]
            continue
        query = select(*source.columns).order_by(pk).limit(plan.chunk_rows)
        if start is not None:
            query = query.where(pk > start)
        with engines[source_database].connect() as connection:
            rows = [tuple(row) for row in connection.execute(query)]
        if not rows:
            _finished(plan, engines, source.name, marks)
            return written
        last = rows[-1][pk_at]
        for database, mark in list(marks.items()):
            fresh = rows if mark is None else [r for r in rows if r[pk_at] > mark]
            with engines[database].begin() as connection:
                count = write_routed(connection, plan, targets, route_rows(plan, fresh), database)
                _save(connection, plan, source.name, last, count)
            copied(database, last, count)
        start = last


def _in_place(plan: ReshardPlan, source_database: str, marks: Mapping[str, int | None]) -> bool:
    """Whether the database can copy by itself: every target table is in the source's
    database and the target strategy is ``Gene`` or ``Mod`` (a modulo SQL can compute)."""
    return set(marks) == {source_database} and type(plan.target.strategy) in (Gene, Mod)


class _Mismatch(Exception):
    """The SQL modulo did not place every row (a negative key): copy the chunk in Python."""


def _copy_in_place(
    plan: ReshardPlan, engine: Engine, source: Table, targets: Mapping[int, Table], start: int | None
) -> tuple[int, int] | None:
    """Copy the next chunk with one ``INSERT ... SELECT`` per target table, and save the
    checkpoint, in one transaction. Returns (last key, rows), or None when the chunk must
    go through Python (no rows left - the caller then finishes - or a key SQL's modulo
    routes differently from the strategy, e.g. a negative one)."""
    try:
        pk = source.c[plan.pk]
        key = source.c[plan.target.key]
        count = plan.target.spec.count
        after = [pk > start] if start is not None else []
        names = list(source.columns.keys())
        with engine.begin() as connection:
            edge = select(pk).where(*after).order_by(pk).offset(plan.chunk_rows - 1).limit(1)
            locked = connection.dialect.name in ("mysql", "mariadb")
            if locked:
                # InnoDB: a locking read takes next-key locks on every key it scans, so the
                # window keeps exactly these chunk_rows rows until commit, and the INSERTs
                # below must place all of them (a row outside the tables its source table
                # feeds, or a negative key, leaves a shortfall: the chunk goes through Python)
                edge = edge.with_for_update(read=True)
            last = connection.execute(edge).scalar()
            full = locked and last is not None
            if last is None:
                last = connection.execute(select(func.max(pk)).where(*after)).scalar()
            if last is None:
                return None
            window = select(*source.columns).where(*after, pk <= last)
            if connection.dialect.name == "postgresql":
                # one scan of the chunk: data-modifying CTEs insert into every target table
                chunk = window.cte("snowshard_chunk")
                inserts = [
                    insert(table).from_select(names, select(chunk).where(
                        chunk.c[plan.target.key] >= 0, chunk.c[plan.target.key] % count == index
                    )).returning(table.c[plan.pk]).cte(f"snowshard_into_{index}")
                    for index, table in sorted(targets.items())
                ]
                expected = select(func.count()).select_from(chunk).scalar_subquery()
                copied_rows = [select(func.count()).select_from(cte).scalar_subquery() for cte in inserts]
                total: Any = copied_rows[0]
                for more in copied_rows[1:]:
                    total = total + more
                expected_n, copied = connection.execute(select(expected, total)).one()
            else:
                expected_n = plan.chunk_rows if full else connection.execute(
                    select(func.count()).select_from(window.subquery())
                ).scalar_one()
                copied = 0
                for index, table in sorted(targets.items()):
                    chosen = window.where(key >= 0, key % count == index)
                    copied += connection.execute(insert(table).from_select(names, chosen)).rowcount
            if copied != expected_n:
                raise _Mismatch
            _save(connection, plan, source.name, last, copied)
            return last, copied
    except _Mismatch:
        return None
