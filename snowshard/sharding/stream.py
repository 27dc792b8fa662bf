"""The merge of a SELECT read from several sources, on rows, lazily.

:class:`~snowshard.sharding.merge.MergePlan` says how sources combine; this module runs
that plan as a stream over the sources' raw rows (the values the driver returned, with
the ``snowshard_merge_*`` helper columns that carry the ORDER BY values):

* ordered: a k-way merge (:func:`heapq.merge`) of the sorted sources, each read a batch
  at a time; unordered: one source after another;
* then DISTINCT, OFFSET and LIMIT, still lazily: a deep OFFSET skips rows as they stream
  by (each source sends at most OFFSET+LIMIT rows, :class:`MergePlan`), and no source is
  read past the rows the LIMIT needs; prefer keyset pages
  (:func:`snowshard.sharding.keyset_page`) to deep offsets, which read every skipped row;
* strings a PostgreSQL collation orders (:attr:`MergePlan.ranked`) are compared by the
  ranks one database gives them (:mod:`~snowshard.sharding.ranking`): the first batch of
  every source is read before the merge starts and ranked in one statement, each later
  batch with the strings the other sources' batches still hold;
* only then ORM objects: the rows the merge kept, a batch at a time, are handed per
  source to SQLAlchemy's ORM loading (:func:`~snowshard._compat.orm_cursor_result`), so
  a top-20 over 4 databases builds 20 objects, not 80.

The merged result is an iterator-backed :class:`~sqlalchemy.engine.Result`: with
``yield_per=N`` (or ``stream_results=True``, in batches of :data:`STREAM_BATCH`) the
sources are read through server-side cursors N rows at a time and the merge holds about
N rows per source, so memory stays O(sources x N); ``partitions()`` yields N rows.
Without either (a buffered result, as SQLAlchemy's default) the rows are merged and
built when the statement executes, and the result takes its shape from one of the ORM
results they were built in. Closing the result (or exhausting it) closes every source's
cursor.

Grouped and aggregate merges (:meth:`MergePlan.merge`) stay materialized: their input is
one row per group and source; so do reads whose rows repeat objects (``joinedload`` of a
collection), merged as ORM results.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from sqlalchemy.engine import CursorResult, Result

from snowshard._compat import (
    ResultCloser,
    buffered_copy,
    chunked_result,
    fetch_raw,
    interim_rows,
    several_rows_per_object,
)
from snowshard.sharding.merge import MergePlan, sort_key
from snowshard.sharding.nan import canonical_key
from snowshard.sharding.ranking import HeldRanks, Ranker, required

__all__ = ["STREAM_BATCH", "Source", "can_stream", "helper_label", "merge_sources"]

STREAM_BATCH = 1000
"""Raw rows read per source at a time (and, under ``stream_results=True`` without
``yield_per``, rows per ORM load)."""


def helper_label(number: int) -> str:
    """The label of a merge helper column (an ORDER BY value a source sends)."""
    return f"snowshard_merge_{number}"


@dataclass
class Source:
    """One source's result: its rows as the driver returned them, and how to load them."""

    raw: CursorResult[Any]
    load: Callable[[CursorResult[Any]], Result[Any]]
    """The ORM result of a cursor result of this source's statement (objects, columns)."""

    def objects(self) -> Result[Any]:
        """The ORM result of all of this source's rows (for the materialized merges)."""
        return self.load(self.raw)

    def close(self) -> None:
        """Release this source's cursor (rows not read are discarded)."""
        self.raw.close()


def _positions(plan: MergePlan, raw: CursorResult[Any]) -> list[int] | None:
    """Where each helper column is in a raw row, or None if a source lacks one."""
    keys = list(raw.keys())
    try:
        return [keys.index(helper_label(i)) for i in range(plan.helpers)]
    except ValueError:
        return None


def _sort_key(
    plan: MergePlan, positions: Sequence[int], held: HeldRanks | None
) -> tuple[Callable[[Any], Any], bool]:
    # MergePlan.order counts helpers from the end of an ORM row: map them to raw positions
    readers = []
    for index, descending, nulls_first in plan.order:
        helper = plan.helpers + index
        if held is not None and helper in plan.ranked:
            readers.append((held.reader(helper), descending, nulls_first))
        else:
            readers.append((plan.order_reader(index, positions[helper]), descending, nulls_first))
    key, reverse = sort_key(readers)
    return (lambda pair: key(pair[1])), reverse


def _unique(rows: Iterable[tuple[int, Any]], key: Callable[[Any], Any]) -> Iterator[tuple[int, Any]]:
    seen: set[Any] = set()
    for pair in rows:
        found = key(pair[1])
        if found not in seen:
            seen.add(found)
            yield pair


def _read(
    number: int,
    source: Source,
    batch: int,
    first: list[Any] | None,
    held: HeldRanks | None,
) -> Iterator[tuple[int, Any]]:
    """``source``'s rows, from its ``first`` batch if already read; each batch read here is
    held by ``held`` (when the merge ranks strings)."""
    rows = first if first is not None else fetch_raw(source.raw, batch)
    del first  # the batch is held by ``rows`` only, and let go with it
    while rows:
        for row in rows:
            yield number, row
        rows = fetch_raw(source.raw, batch)
        if held is not None:
            held.hold({number: rows})


def can_stream(plan: MergePlan, sources: Sequence[Source]) -> bool:
    """Whether the merge can work on raw rows: one row per result row (no ``joinedload``
    of a collection), each carrying the helper columns the merge reads."""
    return not plan.grouped and all(
        _positions(plan, s.raw) is not None and not several_rows_per_object(s.raw)
        for s in sources
    )


def _empty(source: Source) -> Result[Any]:
    """An ORM result of ``source``'s statement holding no rows: the merged result's shape."""
    return source.load(buffered_copy(source.raw, []))


def _build(
    sources: Sequence[Source], pairs: Sequence[tuple[int, Any]]
) -> tuple[list[Any], Result[Any] | None]:
    """ORM rows of the kept raw rows, in merged order, built per source; and one of the
    ORM results they were built in (None if no rows were kept)."""
    rows_of: dict[int, list[Any]] = {}
    for number, row in pairs:
        rows_of.setdefault(number, []).append(row)
    results = {
        number: sources[number].load(buffered_copy(sources[number].raw, rows))
        for number, rows in rows_of.items()
    }
    loaded = {number: iter(interim_rows(result)) for number, result in results.items()}
    built = [next(loaded[number]) for number, _ in pairs]
    return built, (results[min(results)] if results else None)


def merge_sources(
    plan: MergePlan, sources: Sequence[Source], batch: int | None, rank: Ranker | None = None
) -> Result[Any]:
    """The merged result of ``sources`` (module docstring); ``batch``: rows read and built
    at a time (``yield_per``), None to read each source whole (a buffered result);
    ``rank``: how strings of :attr:`MergePlan.ranked` helpers are ranked."""
    if plan.grouped or not can_stream(plan, sources):
        return plan.merge([source.objects() for source in sources], rank)
    positions = _positions(plan, sources[0].raw)
    assert positions is not None
    size = batch or STREAM_BATCH
    firsts: Sequence[list[Any] | None] = [None] * len(sources)
    held = None
    if plan.ranked and plan.order:
        helpers = {h: (positions[h], order) for h, order in plan.ranked.items()}
        held = HeldRanks(required(rank), helpers, len(sources))
        read = [fetch_raw(s.raw, size) for s in sources]
        held.hold(dict(enumerate(read)))  # every source's first batch: one statement
        firsts = read
    streams = [_read(n, s, size, firsts[n], held) for n, s in enumerate(sources)]
    merged: Iterable[tuple[int, Any]]
    if plan.order:
        key, reverse = _sort_key(plan, positions, held)
        merged = heapq.merge(*streams, key=key, reverse=reverse)
    else:
        merged = itertools.chain.from_iterable(streams)
    if plan.distinct:
        width = len(sources[0].raw.keys())
        kept = [i for i in range(width) if i not in set(positions)]
        if plan.distinct_by_weight or plan.distinct_on:  # matched by some helpers
            kept = [positions[plan.helpers + u] if u < 0 else kept[u] for u in plan.unique]
        key = itemgetter(*kept) if len(kept) != 1 else lambda r: r[kept[0]]
        merged = _unique(merged, canonical_key(key) if plan.nan_aware else key)
    end = None if plan.limit is None else plan.offset + plan.limit
    picked = itertools.islice(merged, plan.offset, end)

    def close() -> None:
        for source in sources:
            source.close()

    if batch is None:  # buffered: merge and build now, taking the shape from a built part
        rows, built = _build(sources, list(picked))
        remaining = iter(rows)
        template = built if built is not None else _empty(sources[0])

        def chunks(size: int | None) -> Iterator[list[Any]]:
            # one chunk: fetchmany, partitions and yield_per slice what they hand out
            if part := list(remaining):
                yield part

        result = chunked_result(template, chunks, ResultCloser(close))
    else:

        def chunks(size: int | None) -> Iterator[list[Any]]:
            while pairs := list(itertools.islice(picked, size or batch)):
                yield _build(sources, pairs)[0]

        result = chunked_result(_empty(sources[0]), chunks, ResultCloser(close))
        result = result.yield_per(batch)
    if plan.helpers:
        return result.columns(*range(plan.width))
    return result
