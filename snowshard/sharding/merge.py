"""Merging the results of one SELECT run on several shards (or databases), in Python.

The rules are ShardingSphere's:

* rows: each source runs the statement with ``LIMIT offset+n`` and no OFFSET, sorted by
  its ORDER BY; the sorted sources are merged with a heap (:func:`heapq.merge`) on the
  ORDER BY values, then DISTINCT, OFFSET and LIMIT are applied;
* aggregates: ``COUNT`` adds up, ``SUM`` adds up (NULL if every source is NULL),
  ``MIN``/``MAX`` take the least/greatest, ``AVG`` is rewritten to ``SUM``/``COUNT`` per
  source and divided at the end; with ``GROUP BY`` the groups are merged by key, sorted by
  ORDER BY (which must name selected columns), then cut by OFFSET/LIMIT.

ORDER BY values are compared in Python: NULLs sort as the database's dialect does (last
in ascending order on PostgreSQL, first on SQLite and MySQL) unless ``nulls_first()`` /
``nulls_last()`` says otherwise; strings compare by code point, not by the database's
collation. ``HAVING`` and ``COUNT(DISTINCT ...)`` cannot be merged and raise
:class:`~snowshard.sharding.errors.UnsupportedShardQuery`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Optional

from sqlalchemy import Select, func
from sqlalchemy.engine import Result
from sqlalchemy.exc import CompileError
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import ColumnElement, Label, UnaryExpression
from sqlalchemy.sql.functions import FunctionElement

from snowshard._compat import (
    LabelReference,
    TextualLabelReference,
    distinct_of,
    fetch_clause_of,
    group_by_of,
    has_having,
    limit_offset_of,
    order_by_of,
)
from snowshard.sharding.errors import UnsupportedShardQuery

__all__ = ["MergePlan"]

_AGGREGATES = ("count", "sum", "min", "max", "avg")
_NULLS_LARGE = ("postgresql", "oracle")


class _Reversed:
    """Inverts the order of a value, for descending sort keys."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: _Reversed) -> bool:
        return bool(other.value < self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and bool(self.value == other.value)

    __hash__ = None  # type: ignore[assignment]


def _unwrap(element: Any) -> Any:
    while isinstance(element, (Label, LabelReference)):
        element = element.element
    return element


def _direction(element: Any, nulls_large: bool) -> tuple[Any, bool, bool]:
    """(expression, descending, nulls_first) of one ORDER BY element."""
    descending = False
    nulls_first: Optional[bool] = None
    while True:
        if isinstance(element, LabelReference):
            element = element.element
        elif isinstance(element, UnaryExpression) and element.modifier in (
            operators.desc_op,
            operators.asc_op,
            operators.nulls_first_op,
            operators.nulls_last_op,
        ):
            if element.modifier is operators.desc_op:
                descending = True
            elif element.modifier is operators.nulls_first_op:
                nulls_first = True
            elif element.modifier is operators.nulls_last_op:
                nulls_first = False
            element = element.element
        else:
            break
    if nulls_first is None:
        nulls_first = nulls_large == descending
    return element, descending, nulls_first


def _aggregate(column: Any) -> Optional[str]:
    element = _unwrap(column)
    if not isinstance(element, FunctionElement):
        return None
    name = str(getattr(element, "name", "")).lower()
    if name not in _AGGREGATES:
        return None
    for argument in element.clauses:
        if isinstance(argument, UnaryExpression) and argument.operator is operators.distinct_op:
            raise UnsupportedShardQuery(
                f"{name}(DISTINCT ...) cannot be merged across shards; select the distinct "
                "values and count them in Python, or route the query to one shard"
            )
    return name


def _average(total: Any, count: Any, partial: Iterable[Any]) -> Any:
    if not count or total is None:
        return None
    # the type (and scale) the database gives AVG: Decimal on PostgreSQL and MySQL (whose
    # div_precision_increment keeps 4 decimals), float on SQLite
    decimals = [value for value in partial if isinstance(value, Decimal)]
    if not decimals:
        return total / count
    exact = Decimal(total) / Decimal(count)
    exponent = min(int(value.as_tuple().exponent) for value in decimals)
    return exact.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_HALF_UP)


def _combine(kind: str, values: Iterable[Any]) -> Any:
    present = [v for v in values if v is not None]
    if kind == "count":
        return sum(present)
    if not present:
        return None
    if kind == "sum":
        total = present[0]
        for value in present[1:]:
            total = total + value
        return total
    return min(present) if kind == "min" else max(present)


class MergePlan:
    """How to run ``statement`` on each source and merge the partial results.

    :attr:`source` is the statement each source runs (helper columns added, OFFSET removed,
    LIMIT raised); :meth:`merge` turns the sources' results into the statement's result.
    """

    def __init__(self, statement: Select[Any], dialect: str) -> None:
        if has_having(statement):
            raise UnsupportedShardQuery(
                "HAVING cannot be applied to partial groups of several shards; filter the "
                "merged groups in Python, or route the query to one shard"
            )
        if fetch_clause_of(statement) is not None:
            raise UnsupportedShardQuery("FETCH FIRST across shards: use limit() instead")
        try:
            self.limit, offset = limit_offset_of(statement)
            self.offset = offset or 0
        except CompileError as exc:
            raise UnsupportedShardQuery(
                "LIMIT/OFFSET across shards must be plain integers, not expressions"
            ) from exc
        self.distinct = distinct_of(statement)
        self.width = len(statement.column_descriptions)
        """Columns of a result row (an ORM entity is one)."""
        nulls_large = dialect in _NULLS_LARGE
        order = [_direction(e, nulls_large) for e in order_by_of(statement)]
        self.kinds = [_aggregate(c) for c in statement.selected_columns]
        self.grouped = bool(group_by_of(statement)) or any(self.kinds)
        self.avg: dict[int, tuple[int, int]] = {}
        helpers: list[ColumnElement[Any]] = []
        source = statement.offset(None)
        if self.grouped:
            self._plan_groups(statement, order, helpers)
            source = source.limit(None)
        else:
            self.order = []
            for expr, descending, nulls_first in order:
                if isinstance(expr, TextualLabelReference):
                    expr = statement.selected_columns[expr.element]
                self.order.append((len(helpers), descending, nulls_first))
                helpers.append(expr)
            if self.limit is not None:
                source = source.limit(self.offset + self.limit)
        labels = [h.label(f"snowshard_merge_{i}") for i, h in enumerate(helpers)]
        self.helpers = len(labels)
        if not self.grouped:  # helper number -> index from the end of the row
            self.order = [(i - self.helpers, d, n) for i, d, n in self.order]
        self.avg = {k: (s - self.helpers, c - self.helpers) for k, (s, c) in self.avg.items()}
        self.source = source.add_columns(*labels) if labels else source

    def _plan_groups(
        self, statement: Select[Any], order: Sequence[Any], helpers: list[Any]
    ) -> None:
        columns = list(statement.selected_columns)
        groups = list(group_by_of(statement))
        self.keys: list[int] = []
        for index, (column, kind) in enumerate(zip(columns, self.kinds)):
            if kind == "avg":
                (argument,) = _unwrap(column).clauses
                self.avg[index] = (len(helpers), len(helpers) + 1)
                helpers.extend([func.sum(argument), func.count(argument)])
            elif kind is None:
                if not any(_unwrap(column).compare(_unwrap(g)) for g in groups):
                    raise UnsupportedShardQuery(
                        f"column {column} is neither an aggregate (count, sum, min, max, avg) "
                        "nor in GROUP BY, so it cannot be merged across shards"
                    )
                self.keys.append(index)
        self.order = []
        for expr, descending, nulls_first in order:
            self.order.append((self._selected(columns, expr), descending, nulls_first))

    @staticmethod
    def _selected(columns: Sequence[Any], expr: Any) -> int:
        for index, column in enumerate(columns):
            if isinstance(expr, TextualLabelReference):
                if column.key == expr.element:
                    return index
            elif _unwrap(column).compare(_unwrap(expr)) or column is expr:
                return index
        raise UnsupportedShardQuery(
            f"ORDER BY {expr} of a grouped query across shards must name a selected column"
        )

    def _sort_key(self, row: Sequence[Any]) -> tuple[Any, ...]:
        parts: list[Any] = []
        for index, descending, nulls_first in self.order:
            value = row[index]
            if value is None:
                parts.append((0 if nulls_first else 2, None))
            else:
                parts.append((1, _Reversed(value) if descending else value))
        return tuple(parts)

    def _merge_groups(self, rows: Iterable[Sequence[Any]], width: int) -> list[tuple[Any, ...]]:
        groups: dict[tuple[Any, ...], list[Sequence[Any]]] = {}
        for row in rows:
            groups.setdefault(tuple(row[i] for i in self.keys), []).append(row)
        if not groups and not self.keys:
            return []
        merged = []
        for members in groups.values():
            out: list[Any] = list(members[0])
            for index, kind in enumerate(self.kinds):
                if kind == "avg":
                    sums, counts = self.avg[index]
                    total = _combine("sum", (r[sums] for r in members))
                    count = _combine("count", (r[counts] for r in members))
                    out[index] = _average(total, count, (r[index] for r in members))
                elif kind is not None:
                    out[index] = _combine(kind, (r[index] for r in members))
            merged.append(tuple(out))
        if self.order:
            merged.sort(key=self._sort_key)
        return merged

    def merge(self, results: Sequence[Result[Any]]) -> Result[Any]:
        """The statement's result, from each source's result of :attr:`source`."""
        frozen = [result.freeze() for result in results]
        parts = [list(f().all()) for f in frozen]
        width = self.width
        rows: Iterable[Sequence[Any]]
        if self.grouped:
            rows = self._merge_groups((r for part in parts for r in part), width)
        elif self.order:
            rows = heapq.merge(*parts, key=self._sort_key)
        else:
            rows = (r for part in parts for r in part)
        if self.distinct:
            rows = _unique(rows, width)
        kept = list(rows)
        end = None if self.limit is None else self.offset + self.limit
        kept = kept[self.offset : end]
        result = frozen[0].with_new_rows(kept)()  # type: ignore[arg-type]
        if self.helpers:
            return result.columns(*range(width))
        return result


def _unique(rows: Iterable[Sequence[Any]], width: int) -> Iterable[Sequence[Any]]:
    seen: set[tuple[Any, ...]] = set()
    for row in rows:
        key = tuple(row[:width])
        if key not in seen:
            seen.add(key)
            yield row
