"""Verification: count and hash per primary-key range, on the source and on the target.

The primary-key span of the source is cut into ranges of about ``chunk_rows`` rows each.
For every range the rows of all source tables and of all target tables are read in key
order, counted and hashed (SHA-256 over each row's values), and every target row is
checked to sit in the table its shard key routes to. A range that differs is reported;
``repair=True`` copies it again (delete the range from the targets, insert the source's
rows), which is safe while capture runs: a change made meanwhile is logged and applied.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, Table, delete, func, select

from snowshard.operations.reshard.catchup import collect
from snowshard.operations.reshard.copy import route_rows, write_routed
from snowshard.operations.reshard.plan import Placement, ReshardPlan
from snowshard.operations.reshard.state import LOG

__all__ = ["RangeCheck", "VerifyReport", "compare_keys", "key_ranges", "verify"]


@dataclass(frozen=True)
class RangeCheck:
    """One primary-key range ``[low, high)``: rows and digests on both sides."""

    low: int
    high: int
    source_rows: int
    target_rows: int
    matches: bool
    misplaced: int = 0


@dataclass
class VerifyReport:
    """Every range checked; ``mismatches`` the ranges that differ, ``repaired`` those copied again."""

    ranges: list[RangeCheck] = field(default_factory=list)
    repaired: list[tuple[int, int]] = field(default_factory=list)

    @property
    def mismatches(self) -> list[RangeCheck]:
        return [check for check in self.ranges if not check.matches]

    @property
    def rows(self) -> int:
        return sum(check.source_rows for check in self.ranges)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __str__(self) -> str:
        head = f"{len(self.ranges)} ranges, {self.rows} source rows: "
        if self.ok:
            return head + "source and target are equal"
        bad = ", ".join(f"[{c.low}, {c.high})" for c in self.mismatches[:10])
        return head + f"{len(self.mismatches)} differ: {bad}"


def _tables(plan: ReshardPlan, placement: Placement) -> list[tuple[str, int, Table]]:
    tables = plan.tables(placement)
    return [(placement.spec.database_of(i), i, t) for i, t in sorted(tables.items())]


def key_ranges(plan: ReshardPlan, engines: Mapping[str, Engine]) -> list[tuple[int, int]]:
    """``[low, high)`` ranges covering the source's primary keys, about ``chunk_rows`` each."""
    low: int | None = None
    high: int | None = None
    rows = 0
    for database, _, table in _tables(plan, plan.source):
        pk = table.c[plan.pk]
        with engines[database].connect() as connection:
            least, most, count = connection.execute(select(func.min(pk), func.max(pk), func.count())).one()
        if count:
            low = least if low is None else min(low, least)
            high = most if high is None else max(high, most)
            rows += count
    if low is None or high is None:
        return []
    pieces = max(1, -(-rows // plan.chunk_rows))
    step = max(1, -(-(high + 1 - low) // pieces))
    return [(start, min(start + step, high + 1)) for start in range(low, high + 1, step)]


def _read(
    plan: ReshardPlan, engines: Mapping[str, Engine], tables: Iterable[tuple[str, int, Table]],
    where: Any,
) -> list[tuple[int, tuple[Any, ...]]]:
    found: list[tuple[int, tuple[Any, ...]]] = []
    for database, index, table in tables:
        with engines[database].connect() as connection:
            found.extend((index, tuple(row)) for row in connection.execute(
                select(*table.columns).where(where(table))
            ))
    position = list(plan.logical.columns.keys()).index(plan.pk)
    found.sort(key=lambda item: item[1][position])
    return found


def _digest(rows: Sequence[tuple[int, tuple[Any, ...]]]) -> str:
    digest = hashlib.sha256()
    for _, row in rows:
        digest.update(repr(row).encode())
    return digest.hexdigest()


def _misplaced(plan: ReshardPlan, rows: Sequence[tuple[int, tuple[Any, ...]]]) -> int:
    position = list(plan.logical.columns.keys()).index(plan.target.key)
    return sum(1 for index, row in rows if plan.target.table_of(row[position]) != index)


def _pending(plan: ReshardPlan, engines: Mapping[str, Engine], keys: Sequence[int]) -> set[int]:
    """Which of ``keys`` have a captured change not applied yet."""
    found: set[int] = set()
    for database, _ in plan.by_database(plan.source):
        with engines[database].connect() as connection:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start : start + 500])
                found.update(connection.execute(
                    select(LOG.c.pk).where(LOG.c.job == plan.log_job, LOG.c.pk.in_(chunk))
                ).scalars())
    return found


def _check(plan: ReshardPlan, engines: Mapping[str, Engine], low: int, high: int) -> RangeCheck:
    """Compare one range. The target is read first, then the source, then the change log:
    a row that differs only because of a change not applied yet is then still in the log
    (changes are applied by this same process, never while it verifies), so writers that
    keep writing during a verify do not make it fail."""
    def where(table: Table) -> Any:
        pk = table.c[plan.pk]
        return (pk >= low) & (pk < high)

    target = _read(plan, engines, _tables(plan, plan.target), where)
    source = _read(plan, engines, _tables(plan, plan.source), where)
    misplaced = _misplaced(plan, target)
    if len(source) == len(target) and _digest(source) == _digest(target) and not misplaced:
        return RangeCheck(low, high, len(source), len(target), True)
    position = list(plan.logical.columns.keys()).index(plan.pk)
    left = {row[position]: row for _, row in source}
    right = {row[position]: row for _, row in target}
    differ = sorted(k for k in left.keys() | right.keys() if left.get(k) != right.get(k))
    collect(plan, engines)  # logical capture: what committed before the source read is logged
    lagging = _pending(plan, engines, differ)
    same = not misplaced and all(k in lagging for k in differ)
    return RangeCheck(low, high, len(source), len(target), same, misplaced)


def _recopy(plan: ReshardPlan, engines: Mapping[str, Engine], low: int, high: int) -> None:
    def where(table: Table) -> Any:
        pk = table.c[plan.pk]
        return (pk >= low) & (pk < high)

    rows = [row for _, row in _read(plan, engines, _tables(plan, plan.source), where)]
    targets = plan.tables(plan.target)
    routed = route_rows(plan, rows)
    for database, indices in plan.by_database(plan.target):
        with engines[database].begin() as connection:
            for index in indices:
                connection.execute(delete(targets[index]).where(where(targets[index])))
            write_routed(connection, plan, targets, routed, database)


def verify(
    plan: ReshardPlan,
    engines: Mapping[str, Engine],
    *,
    repair: bool = False,
    ranges: Sequence[tuple[int, int]] | None = None,
) -> VerifyReport:
    """Check every range (or ``ranges``); with ``repair``, copy differing ones again."""
    report = VerifyReport()
    for low, high in ranges if ranges is not None else key_ranges(plan, engines):
        check = _check(plan, engines, low, high)
        report.ranges.append(check)
        if repair and not check.matches:
            _recopy(plan, engines, low, high)
            report.repaired.append((low, high))
    return report


def compare_keys(
    plan: ReshardPlan, engines: Mapping[str, Engine], keys: Iterable[int]
) -> list[int]:
    """The primary keys among ``keys`` whose source and target rows differ (or are misplaced)."""
    wanted = sorted(set(keys))
    bad: list[int] = []
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]

        def where(table: Table) -> Any:
            return table.c[plan.pk].in_(chunk)

        source = {row[list(plan.logical.columns.keys()).index(plan.pk)]: row
                  for _, row in _read(plan, engines, _tables(plan, plan.source), where)}
        target_rows = _read(plan, engines, _tables(plan, plan.target), where)
        position = list(plan.logical.columns.keys()).index(plan.pk)
        target = {row[position]: row for _, row in target_rows}
        wrong = {row[position] for index, row in target_rows
                 if plan.target.table_of(row[list(plan.logical.columns.keys()).index(plan.target.key)]) != index}
        for key in chunk:
            if source.get(key) != target.get(key) or key in wrong:
                bad.append(key)
    return bad
