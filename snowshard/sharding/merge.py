"""Merging the results of one SELECT run on several shards (or databases), in Python.

The rules:

* rows: each source runs the statement with ``LIMIT offset+n`` and no OFFSET, sorted by
  its ORDER BY; the sorted sources are merged with a heap (:func:`heapq.merge`) on the
  ORDER BY values, then DISTINCT, OFFSET and LIMIT are applied;
* aggregates: each source returns the GROUP BY keys (selected or not) and the aggregates
  (:class:`~snowshard.sharding.evaluate.Atoms`); ``COUNT`` and ``SUM`` add up (SUM is NULL
  if every source is NULL), ``MIN``/``MAX`` take the least/greatest, ``AVG`` is rebuilt
  from ``SUM``/``COUNT``; each also with a FILTER (each source aggregates the rows that
  pass it; a filtered AVG from a SUM and a COUNT under the same filter). The groups are
  merged by key; then the selected expressions,
  ``HAVING`` and ``ORDER BY`` (arithmetic, comparisons, ``CASE`` and ``COALESCE`` over
  aggregates and keys) are computed in Python (:mod:`~snowshard.sharding.evaluate`),
  followed by DISTINCT, OFFSET and LIMIT.

ORDER BY values are compared in Python: NULLs sort as the database's dialect does (last
in ascending order on PostgreSQL, first on SQLite and MySQL) unless ``nulls_first()`` /
``nulls_last()`` says otherwise; strings compare by code point, so a merge that orders,
groups or matches strings is refused unless their collation compares them that way too,
or, for ORDER BY, GROUP BY, MIN/MAX and DISTINCT on MariaDB and MySQL, the sources send
the strings' weights to sort, group, pick and match by, or, for ORDER BY and MIN/MAX on
PostgreSQL, one database ranks the sources' strings and the merge compares the ranks
(:mod:`~snowshard.sharding.collation`, :mod:`~snowshard.sharding.ranking`).
Division and CAST over aggregates are computed as the session's database computes them
(:mod:`~snowshard.sharding.arith`). ``count(DISTINCT x)`` is summed where ``x`` is a
shard key (equal keys live in one table), else each source also groups by ``x`` and the
merge counts the distinct values (or, for ``sum``/``avg(DISTINCT x)`` of integers, sums or
averages them); ``MIN``/``MAX(DISTINCT x)`` are ``MIN``/``MAX(x)``. PostgreSQL's DISTINCT
ON keeps the first merged row of each value. What cannot be merged exactly (SUM/AVG of
distinct non-integers, window functions not partitioned by the shard key, unknown
functions, division and CAST on other databases, SQL text in ORDER BY, prefixes and
suffixes: :mod:`~.modifiers`) raises
:class:`~snowshard.sharding.errors.UnsupportedShardQuery` (see :mod:`~.analysis`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import localcontext
from functools import partial
from operator import add, itemgetter
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Integer,
    Select,
    Table,
    literal,
    literal_column,
    null,
    type_coerce,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.engine import Result
from sqlalchemy.exc import CompileError
from sqlalchemy.orm import Bundle
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    BinaryExpression,
    Case,
    ColumnClause,
    ColumnElement,
    Label,
    TextClause,
    Tuple,
    UnaryExpression,
)
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import NullType

from snowshard._compat import (
    LabelReference,
    TextualLabelReference,
    as_single_entity,
    distinct_of,
    distinct_on_of,
    fetch_clause_of,
    group_by_of,
    having_of,
    limit_offset_of,
    order_by_of,
    with_only_columns_keeping_froms,
    without_having,
)
from snowshard.sharding.analysis import (
    aggregate_function,
    aggregate_named,
    check_row_expression,
    describe,
    exists_selects,
    filtered_aggregate,
    null_extended_tables,
    selected_entities,
    walk,
)
from snowshard.sharding.arith import (
    DIV_PRECISION_INCREMENT,
    EXACT,
    integer_average,
    integer_sum,
    raw_average,
)
from snowshard.sharding.collation import (
    EQUALITY,
    ORDERING,
    ServerOrder,
    check_array_order,
    check_read_order,
    check_strings,
    check_uuid_order,
    collation_of,
    extreme_order,
    extreme_weight,
    orders_by_code_point,
    server_order,
    sort_value,
    weight_of,
)
from snowshard.sharding.criteria import criteria_of
from snowshard.sharding.decorated import (
    check_decorated_merged,
    decorated_refusal,
    decorator_of,
)
from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.evaluate import (
    BY_VALUE,
    Atoms,
    Evaluator,
    compares_intervals,
    compile_expression,
    compile_interval_key,
    increment_in,
    without_distinct_extremes,
)
from snowshard.sharding.instants import instant_extreme
from snowshard.sharding.intervals import interval_from_parts
from snowshard.sharding.merged_types import (
    converter,
    is_numeric,
    is_raw_sum,
    raw_helper,
    read_as,
    shown_as,
    typed_distinct,
    unlabelled,
)
from snowshard.sharding.model import ShardedModel, model_of_table
from snowshard.sharding.modifiers import check_modifiers
from snowshard.sharding.nan import (
    PostgresNaN,
    canonical,
    canonical_key,
    may_hold_nan,
    pg_computed,
    restore,
)
from snowshard.sharding.ranges import is_range, range_keyed
from snowshard.sharding.ranking import Ranker, rank_columns, required
from snowshard.sharding.single_floats import check_real_compared

__all__ = ["MergePlan", "sort_key"]

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


def _check_sql_text(element: Any) -> None:
    """Refuse ordering a merge by SQL text (``text()``, ``literal_column()``): the text may
    hold its own direction, NULLS or COLLATE, which the merge cannot read."""
    plain = unlabelled(element)
    if isinstance(plain, TextClause) or (isinstance(plain, ColumnClause) and plain.is_literal):
        raise UnsupportedShardQuery(
            f"ORDER BY {describe(plain)} across shards: SQL text (text(), literal_column()) "
            "may hold its own direction, NULLS or COLLATE, which the merge cannot read; "
            "order by a column expression instead, e.g. Order.amount.desc()"
        )


def _labelled(element: Any, statement: Select[Any]) -> Any:
    """``element``, or the selected column it names by label (``order_by("total")``)."""
    if isinstance(element, TextualLabelReference):
        return statement.selected_columns[element.element]
    return element


def _direction(element: Any, nulls_large: bool) -> tuple[Any, bool, bool]:
    """(expression, descending, nulls_first) of one ORDER BY element."""
    descending = False
    nulls_first: bool | None = None
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


def _partitioned(models: Sequence[ShardedModel], value: Any) -> bool:
    """Whether equal values of ``value`` always live in one table, so in one source: a
    shard key column of one of ``models`` (without generations, whose tables of
    different periods may hold one key)."""
    table = getattr(value, "table", None)
    model = model_of_table(table) if isinstance(value, Column) and table is not None else None
    return (
        model is not None
        and model in models
        and model.timeline is None
        and value.key in model.keys
    )


def _of_distinct(
    kind: str, column: Sequence[Any], helper: Any, dialect: str, increment: int
) -> Any:
    """``count``, ``sum`` or ``avg`` (``kind``: :data:`BY_VALUE`) of the distinct non-NULL
    values of ``column`` (``helper``'s, the sources' finer groups), as ``dialect`` types it
    (``increment``: MariaDB's ``div_precision_increment``)."""
    present = {canonical(v) for v in column if v is not None}  # every NaN one value
    if kind == "count_distinct":
        return len(present)
    if not present:
        return None
    if kind == "sum_distinct":
        return integer_sum(sum(present), helper, dialect)
    return integer_average(sum(present), len(present), dialect, increment)


def _is_avg(element: Any) -> bool:
    function = aggregate_function(element)
    return isinstance(function, FunctionElement) and str(function.name).lower() == "avg"


def _check_avg_inside(element: Any, dialect: str, where: str) -> None:
    """Refuse, on MariaDB/MySQL, AVG inside an expression (arithmetic, CASE, COALESCE, a
    comparison in HAVING): the database computes it there with more digits than it returns
    (``AVG(x) * 2`` doubles 5.444444444, not the 5.4444 the merge gets), so the merge
    cannot rebuild the expression. AVG as a column of its own, or an ORDER BY item of its
    own (sorted by the value returned), is merged."""
    if element is None or dialect not in ("mysql", "mariadb"):
        return
    plain = unlabelled(element)
    if where != "HAVING" and _is_avg(plain):
        return
    if any(_is_avg(item) for item in walk(plain)):
        raise UnsupportedShardQuery(
            f"{describe(element)} in {where} across shards: {dialect} computes AVG inside an "
            "expression with more digits than it returns, so the merge cannot rebuild it "
            "from the returned AVG; select AVG(x) as a column of its own, write SUM(x) / "
            "COUNT(x) instead (in HAVING, compare SUM(x) with n * COUNT(x)), or route the "
            "query to one shard"
        )


def _check_tuples(elements: Iterable[Any], what: str) -> None:
    """Refuse a row value (``tuple_(a, b)``) as an ORDER BY or GROUP BY item: a merge sends
    each item as a column, and a row value is no column (SQLAlchemy cannot select it)."""
    for element in elements:
        if isinstance(unlabelled(element), Tuple):
            columns = ", ".join(describe(c) for c in unlabelled(element).clauses)
            raise UnsupportedShardQuery(
                f"{what} {describe(element)} across shards: a merge reads each {what} item "
                "as a column of the sources' rows, and a row value (tuple_()) is not one; "
                "list its columns instead (each in the item's direction): "
                f"{what.lower().replace(' ', '_')}({columns})"
            )


def _source_limit(limit: int, offset: int) -> Any:
    """The LIMIT each source runs with (OFFSET+LIMIT rows, no OFFSET), as SQL.

    A merged plan is kept per bound values (:mod:`~snowshard.sharding.plan_cache`), so a
    plain LIMIT is written into the SQL when it compiles: one compiled form per value and
    no post-compile pass on each execution (about 20 µs per source). With an OFFSET the
    sum changes page by page: it is rendered at execution (``literal_execute``), so every
    page reuses one compiled statement.
    """
    if offset:
        return literal(offset + limit, Integer, literal_execute=True)
    return literal_column(str(limit), Integer)


def _average(total: Any, count: Any, dialect: str, increment: int) -> Any:
    """AVG over every source's rows from the sum of their raw SUMs (``total``) and their
    COUNTs: the value the database computes for one table (:func:`~.arith.raw_average`,
    under MariaDB's ``div_precision_increment`` ``increment``), which expressions over the
    AVG start from."""
    if not count or total is None:
        return None
    if isinstance(total, PostgresNaN):  # PostgreSQL's AVG over a NaN is NaN
        return total
    return raw_average(total, count, dialect, increment)


def _combine(kind: str, values: Iterable[Any], add: Callable[[Any, Any], Any] = add) -> Any:
    present = [v for v in values if v is not None]
    if kind == "count":
        return sum(present)
    if not present:
        return None
    if kind == "sum":
        total = present[0]
        for value in present[1:]:
            total = add(total, value)
        return total
    return min(present) if kind == "min" else max(present)  # "max", "exists"


class MergePlan:
    """How to run ``statement`` on each source and merge the partial results.

    :attr:`source` is the statement each source runs (helper columns added, OFFSET removed,
    LIMIT raised; for grouped queries also HAVING, ORDER BY and LIMIT removed);
    :meth:`merge` turns the sources' results into the statement's result. Everything it
    cannot merge exactly raises :class:`UnsupportedShardQuery` here, before any SQL runs
    (see :mod:`~snowshard.sharding.analysis`).
    """

    def __init__(
        self, statement: Select[Any], dialect: str, models: Sequence[ShardedModel] = ()
    ) -> None:
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
        check_modifiers(statement, dialect)
        # DISTINCT ON is PostgreSQL's; other dialects render .distinct(x) as DISTINCT
        distinct_on = distinct_on_of(statement) if dialect == "postgresql" else ()
        self.distinct_on = bool(distinct_on)
        """Whether DISTINCT keeps the first row per DISTINCT ON values (:attr:`unique`)."""
        self.width = len(statement.column_descriptions)
        """Columns of a result row (an ORM entity is one)."""
        self.single_entity = _single_entity(statement)
        """Whether the statement selects one ORM entity alone (:meth:`flag_single_entity`)."""
        self.dialect = dialect
        self.nan_aware = dialect == "postgresql"
        """Whether values may be NaN, compared as PostgreSQL does (:mod:`~.nan`)."""
        self.order_keys: dict[int, Callable[[Callable[[Any], Any]], Callable[[Any], Any]]] = {}
        """ORDER BY helper (of a merge on rows) -> what makes its reader compare as
        PostgreSQL does: numbers that may be NaN (:func:`~.nan.canonical_key`), ranges
        (:func:`~.ranges.range_keyed`)."""
        self._add: Callable[[Any, Any], Any] = (
            partial(pg_computed, add) if self.nan_aware else add
        )
        """How the merge adds sources' sums: on PostgreSQL, ``Infinity + -Infinity`` is NaN."""
        self.increment: int | None = None
        """The helper of MariaDB's ``div_precision_increment``, by which merged AVGs and
        divisions divide (:meth:`~.evaluate.Atoms.division_increment`), if any."""
        nulls_large = dialect in _NULLS_LARGE
        columns = [without_distinct_extremes(c) for c in statement.selected_columns]
        order = [_direction(e, nulls_large) for e in order_by_of(statement)]
        order = [(without_distinct_extremes(e), d, n) for e, d, n in order]
        _check_tuples([e for e, _, _ in order], "ORDER BY")
        _check_tuples(group_by_of(statement), "GROUP BY")
        having = without_distinct_extremes(having_of(statement))
        extended = null_extended_tables(statement)
        aggregated = [check_row_expression(c, models, extended) for c in columns]
        ordered = [check_row_expression(e, models, extended) for e, _, _ in order]
        if having is not None:
            check_row_expression(having, models, extended)
        self.grouped = bool(group_by_of(statement)) or any(aggregated) or any(ordered)
        self.grouped = self.grouped or having is not None or bool(exists_selects(statement))
        if self.grouped and distinct_on:
            raise UnsupportedShardQuery(
                "DISTINCT ON with GROUP BY or aggregates across shards is not merged; route "
                "the query to one shard, or pick the first row per group in Python"
            )
        self.atoms = Atoms(
            dialect, self._distinct_value, lambda value: _partitioned(models, value)
        )
        self.outputs: list[Evaluator] = []
        self.direct: list[bool] = []
        """Per output: whether it is a GROUP BY key or aggregate, read as the source sent it."""
        self.averages: dict[int, int] = {}
        """Column position -> helper of the AVG that is the whole column (handed out as
        the sources' AVGs are: :func:`~.merged_types.shown_as`)."""
        self.having: Evaluator | None = None
        self.order: list[tuple[Any, bool, bool]] = []
        self.grouping: list[int] = []
        """Helpers whose values make a group: each GROUP BY key, or its WEIGHT_STRING()."""
        self.extremes: dict[int, int] = {}
        """MIN/MAX helper -> the WEIGHT_STRING() helper of its value (strings whose
        collation Python does not reproduce: the merge picks by weight)."""
        self.ranked: dict[int, ServerOrder] = {}
        """Helper -> the PostgreSQL collation its strings are ranked by before the merge
        orders (ORDER BY) or picks (MIN/MAX) them (:mod:`~snowshard.sharding.ranking`)."""
        self.distinct_keys: dict[int, Evaluator] = {}
        """Selected column -> the key a grouped DISTINCT matches it by, of the merged
        helpers: PostgreSQL intervals' (:func:`~.evaluate.compile_interval_key`), a
        TypeDecorator's stored value (:mod:`~.decorated`)."""
        helpers: list[ColumnElement[Any]]
        distinct_weights: dict[int, int] = {}
        """Selected column -> the helper of its WEIGHT_STRING(), which DISTINCT matches by."""
        if self.grouped:
            self._plan_groups(statement, columns, order, having)
            if any(kind in ("avg", "avg_distinct") for kind in self.atoms.kinds):
                self.atoms.division_increment()
            self.increment = next(
                (i for i, kind in enumerate(self.atoms.kinds) if kind == "setting"), None
            )
            helpers = self.atoms.helpers
            source = without_having(statement).order_by(None).limit(None).offset(None)
            spread = self.atoms.spread_distinct()
            if spread:  # aggregates of DISTINCT x: each source's groups split by x
                source = source.group_by(*spread)
            # a computed column is rebuilt from the helpers: a source must not compute it
            # over its own rows only (a division by a partial count of 0, a CAST...)
            source = with_only_columns_keeping_froms(
                source,
                *[
                    c if kept else _placeholder(c, i)
                    for i, (c, kept) in enumerate(zip(columns, self.direct))
                ],
            )
            # with_only_columns() sets the statement's options aside with its old columns,
            # where loader criteria no longer reach the FROM list: give them back
            criteria = criteria_of(statement)
            if criteria:
                source = source.options(*criteria)
        else:
            helpers = []
            for named, descending, nulls_first in order:
                expr = _labelled(named, statement)
                _check_sql_text(expr)
                check_uuid_order("ORDER BY", expr, dialect)
                check_array_order("ORDER BY", expr, dialect)
                self.order.append((len(helpers), descending, nulls_first))
                if is_range(expr, dialect):
                    self.order_keys[len(helpers)] = range_keyed
                elif may_hold_nan(expr, dialect):
                    self.order_keys[len(helpers)] = canonical_key
                value, ranked = sort_value(expr, dialect)
                if ranked is not None:
                    self.ranked[len(helpers)] = ranked
                helpers.append(value)
            firsts = []
            for named in distinct_on:  # the values whose first row each source keeps
                expr = _labelled(named, statement)
                check_strings(expr, dialect, EQUALITY, "DISTINCT ON")
                firsts.append(len(helpers))
                helpers.append(expr)
            if self.distinct and not distinct_on and not _unique_rows(columns):
                entities = self.width != len(columns)  # their columns are matched as they are
                for index, column in enumerate(columns):
                    if entities:
                        check_strings(column, dialect, EQUALITY, "DISTINCT")
                        continue
                    weight = weight_of(column, dialect, EQUALITY, "DISTINCT")
                    if weight is not None:
                        distinct_weights[index] = len(helpers)
                        helpers.append(weight)
            source = statement.offset(None)
            if self.limit is not None:
                source = source.limit(_source_limit(self.limit, self.offset))
        if self.grouped:  # numeric SUMs and keys as the drivers return them (raw_helper)
            helpers = [
                raw_helper(_sent(h, dialect), k, dialect) for h, k in zip(helpers, self.atoms.kinds)
            ]
        labels = [h.label(f"snowshard_merge_{i}") for i, h in enumerate(helpers)]
        self.helpers = len(labels)
        if not self.grouped:  # helper number -> index from the end of the row
            self.order = [(i - self.helpers, d, n) for i, d, n in self.order]
            self.order_keys = {i - self.helpers: k for i, k in self.order_keys.items()}
        self.unique = (
            [i - self.helpers for i in firsts]
            if distinct_on
            else [
                distinct_weights[i] - self.helpers if i in distinct_weights else i
                for i in range(self.width)
            ]
        )
        """Where DISTINCT reads each selected column's identity in a merged row: the column,
        or (negative: from the row's end) the WEIGHT_STRING() helper it matches by; for
        DISTINCT ON, the helpers of its values (rows come in ORDER BY order, so the first
        row of each is the one a single table keeps)."""
        self.distinct_by_weight = bool(distinct_weights)
        """Whether DISTINCT matches some selected strings by weight (:attr:`unique`)."""
        self.source = source.add_columns(*labels) if labels else source
        self.types = [c.type for c in columns]
        self.processors: list[Any] | None = None
        """Result processors of the selected columns computed in Python (set on first merge)."""
        computed = [*columns, having] if self.grouped else []
        self.code_point = any(
            orders_by_code_point(e, dialect) for e in _ordered_strings(order, computed)
        )
        """Whether the merge orders PostgreSQL strings of a collation named ``C`` or
        ``POSIX`` in Python, by code point: exact only in a UTF-8 or LATIN1 database, which
        the merge checks before it reads (:func:`~.ranking.check_code_point`)."""

    def _process(self) -> list[Any]:
        """What SQLAlchemy does to each computed column's value: on SQLite its type's result
        processor (NUMERIC -> Decimal); elsewhere what its numeric types do to the value the
        database computes (:func:`~.merged_types.converter`)."""
        if self.processors is None:
            self.processors = [converter(t, self.dialect) for t in self.types]
        return self.processors

    def _plan_groups(
        self, statement: Select[Any], columns: list[Any], order: Sequence[Any], having: Any
    ) -> None:
        if self.width != len(columns):
            raise UnsupportedShardQuery(
                "a grouped or aggregate query across shards must select columns and "
                "aggregates, not whole entities; select the columns you need"
            )
        atoms = self.atoms
        weights: dict[int, int] = {}
        """GROUP BY key helper -> its WEIGHT_STRING() helper (strings grouped by weight)."""
        for named in group_by_of(statement):
            group = _labelled(named, statement)
            check_row_expression(group, ())
            weight = weight_of(group, self.dialect, EQUALITY, "GROUP BY")
            key = atoms.add_key(group)
            if weight is not None:
                weights[key] = atoms.add_weight(weight)
            self.grouping.append(weights.get(key, key))
        for part, where in [*((c, "the columns") for c in columns), (having, "HAVING"),
                            *((e, "ORDER BY") for e, _, _ in order)]:  # fmt: skip
            _check_avg_inside(part, self.dialect, where)
        for column in columns:
            try:
                output = compile_expression(column, atoms)
                self.outputs.append(typed_distinct(output, column, self.dialect))
                plain = unlabelled(column)
                as_key = atoms.key(plain)
                if _is_avg(plain):
                    average = atoms.aggregate(plain)
                    if atoms.kinds[average] == "avg":
                        self.averages[len(self.outputs) - 1] = average
                if (as_key is not None and is_numeric(plain)) or is_raw_sum(plain, self.dialect):
                    # merged raw, read as SQLAlchemy reads it
                    self.outputs[-1] = read_as(self.outputs[-1], plain.type, self.dialect)
                self.direct.append(
                    as_key is not None
                    or isinstance(plain, FunctionElement)
                    and plain.name.lower() in _AGGREGATES
                    or filtered_aggregate(plain) is not None
                )
            except UnsupportedShardQuery:
                if not any(isinstance(i, FunctionElement) for i in walk(column)) and not (
                    atoms.keys
                ):
                    raise UnsupportedShardQuery(
                        f"column {describe(column)} is neither an aggregate (count, sum, min, "
                        "max, avg) nor in GROUP BY, so it cannot be merged across shards"
                    ) from None
                raise
        if having is not None:
            self.having = compile_expression(having, atoms)
        for expr, descending, nulls_first in order:
            index = None
            if isinstance(expr, TextualLabelReference):
                index = [c.key for c in columns].index(expr.element)
                expr = columns[index]
            found = atoms.key(expr)
            if found is not None and found in weights:  # a key grouped by weight sorts by it
                self.order.append((itemgetter(weights[found]), descending, nulls_first))
                continue
            ranked = self._register_rank(expr)
            if ranked is not None:  # a PostgreSQL string: sorted by the database's ranks
                self.order.append((_ByRank(ranked), descending, nulls_first))
                continue
            extreme = self._extreme(unlabelled(expr))
            if extreme is not None:  # so does MIN/MAX of such a string
                self.order.append((itemgetter(extreme), descending, nulls_first))
                continue
            if compares_intervals([expr], self.dialect):  # as PostgreSQL compares them
                self.order.append((compile_interval_key(expr, atoms), descending, nulls_first))
                continue
            if is_range(expr, self.dialect):  # so are ranges
                keyed = range_keyed(compile_expression(expr, atoms))
                self.order.append((keyed, descending, nulls_first))
                continue
            check_strings(expr, self.dialect, ORDERING, "ORDER BY")
            check_read_order("ORDER BY", expr, self.dialect)  # compared as read
            stored_total = is_raw_sum(unlabelled(expr), self.dialect)  # ordered as added
            if not stored_total:
                check_decorated_merged("ORDER BY", expr, self.dialect)
            if index is not None and not stored_total:
                self.order.append((_output(index), descending, nulls_first))
            else:
                self.order.append((compile_expression(expr, atoms), descending, nulls_first))
        computed = [c for c, kept in zip(columns, self.direct) if not kept]
        for column in computed:
            check_decorated_merged("column", column, self.dialect)
        _check_comparisons([*computed, having, *(e for e, _, _ in order)], self.dialect)
        for helper in list(atoms.helpers):
            if self._extreme(helper) is None and _is_extreme(helper):  # compared as read
                function = aggregate_function(helper)
                for argument in function.clauses:
                    check_read_order(str(function.name).upper(), argument, self.dialect)
        if self.distinct:
            for index, column in enumerate(columns):
                if compares_intervals([column], self.dialect):  # '1 year' = '360 days'
                    self.distinct_keys[index] = compile_interval_key(column, atoms)
                elif decorator_of(column, self.dialect) is not None:  # as stored: 'AB' != 'ab'
                    self.distinct_keys[index] = itemgetter(self._stored(column, weights))
                check_strings(column, self.dialect, EQUALITY, "DISTINCT")

    def _stored(self, column: Any, weights: dict[int, int]) -> int:
        """The helper of the stored value of ``column``, a GROUP BY key or MIN/MAX of a
        TypeDecorator's values (:mod:`~.decorated`); refused for anything else."""
        found = self.atoms.key(column)
        if found is not None and found in weights:
            return weights[found]
        extreme = self._extreme(unlabelled(column))
        if extreme is not None:
            return extreme
        raise decorated_refusal("DISTINCT", column, self.dialect)

    def _distinct_value(self, value: Any) -> Any:
        """What sources send to tell the values of ``count(DISTINCT value)`` apart: the
        value, or where the database matches strings otherwise than Python, its weight
        (MariaDB); refused for what cannot be matched. Floats match as the databases
        match them: -0.0 equals 0.0 in Python too, PostgreSQL's NaNs are one value
        (:func:`~.nan.canonical`), a MariaDB FLOAT is matched by its every digit
        (:func:`~.single_floats.float_key`) and a NUMERIC read as a float is sent raw
        (:func:`~.merged_types.raw_helper`)."""
        if isinstance(value, Tuple):
            raise UnsupportedShardQuery(
                f"count(DISTINCT {describe(value)}) across shards: a merge reads the counted "
                "value as a column, and a row value (tuple_()) is not one; count distinct "
                "values of one expression (e.g. a concatenation), or route the query to one "
                "shard"
            )
        weight = weight_of(value, self.dialect, EQUALITY, "COUNT(DISTINCT)")
        return value if weight is None else weight

    def _register_rank(self, expr: Any) -> int | None:
        """For a GROUP BY key or ``MIN(x)``/``MAX(x)`` of a PostgreSQL string whose collation
        Python does not reproduce (:func:`~.collation.server_order`): its helper, now in
        :attr:`ranked` (the merge ranks its values). None for anything else."""
        plain = unlabelled(expr)
        found = self.atoms.key(plain)
        if found is not None:
            order = server_order(plain, self.dialect)
        elif _is_extreme(plain):
            order = extreme_order(plain, self.dialect)
            found = None if order is None else self.atoms.aggregate(plain)
        else:
            return None
        if order is None or found is None:
            return None
        self.ranked[found] = order
        return found

    def _extreme(self, element: Any) -> int | None:
        """For ``MIN(x)``/``MAX(x)`` of a string that the merge picks by weight
        (:func:`~.collation.extreme_weight`): the helper of that weight, pushed down beside
        the aggregate's. None for other expressions, for values Python compares as the
        database does, and for PostgreSQL strings picked by rank (registered here, by
        :meth:`_register_rank`)."""
        if not _is_extreme(element) or self._register_rank(element) is not None:
            return None
        weight = extreme_weight(element, self.dialect)
        if weight is None:
            return None
        index = self.atoms.aggregate(element)
        found = self.extremes.get(index)
        if found is None:
            found = self.extremes[index] = self.atoms.add_weight(weight)
        return found

    def _ranks(
        self, rank: Ranker | None, rows: Sequence[Sequence[Any]], offset: int
    ) -> dict[int, dict[str, int]]:
        """Each ranked helper's table of ranks over ``rows`` (the helper ``i`` of a row at
        ``offset + i``), from one statement per collation."""
        if not self.ranked:
            return {}
        columns = {
            helper: (order, [row[offset + helper] for row in rows])
            for helper, order in self.ranked.items()
        }
        return rank_columns(required(rank), columns)

    def _increment(self, rows: Sequence[Sequence[Any]]) -> int:
        """MariaDB's ``div_precision_increment`` in the sources' ``rows`` (the default
        where the merge divides nothing or read no row); refused where the databases
        read differ, since one table's quotients would depend on which server held it."""
        if self.increment is None:
            return DIV_PRECISION_INCREMENT
        found = {row[self.width + self.increment] for row in rows}
        if len(found) > 1:
            raise UnsupportedShardQuery(
                "AVG or a division across shards on servers whose div_precision_increment "
                f"differs ({', '.join(str(v) for v in sorted(found))}): each server divides "
                "to its own number of decimals, so no merged quotient is one table's; set "
                "the same div_precision_increment on every server"
            )
        return increment_in(list(found), 0) if found else DIV_PRECISION_INCREMENT

    def _merge_groups(
        self,
        rows: Sequence[Sequence[Any]],
        processors: Sequence[Any] = (),
        rank: Ranker | None = None,
    ) -> list[tuple[Any, ...]]:
        atoms = self.atoms
        base = self.width
        ranks = self._ranks(rank, rows, base)
        groups: dict[tuple[Any, ...], list[Sequence[Any]]] = {}
        for row in rows:
            groups.setdefault(tuple(row[base + i] for i in self.grouping), []).append(row)
        if not groups and not self.grouping and any(k in BY_VALUE for k in atoms.kinds):
            # no GROUP BY: one row, as the sources (grouped by x) may return none
            groups[()] = []
        merged: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = []
        increment = self._increment(rows)
        for members in groups.values():
            values: list[Any] = [None] * len(atoms.helpers)
            if self.increment is not None:
                values[self.increment] = increment
            for index, kind in enumerate(atoms.kinds):
                column = [r[base + index] for r in members]
                if kind == "setting":
                    continue
                if kind is None or kind == "weight":
                    values[index] = column[0]  # equal within the group (a key's first spelling)
                elif kind in BY_VALUE:
                    values[index] = _of_distinct(
                        kind, column, atoms.helpers[index], self.dialect, increment
                    )
                elif kind == "count_partitioned":
                    values[index] = _combine("count", column)
                elif kind in ("avg", "avg_sum"):
                    values[index] = _combine("sum", column, self._add)
                elif index in self.extremes:  # MIN/MAX picked by weight, below
                    values[index] = None
                elif index in ranks:  # MIN/MAX of strings the database ranked
                    present = [v for v in column if v is not None]
                    pick = min if kind == "min" else max
                    values[index] = pick(present, key=ranks[index].__getitem__) if present else None
                else:
                    values[index] = _combine(
                        "count" if kind == "avg_count" else kind, column, self._add
                    )
            for index, weight in self.extremes.items():
                weighed = [r for r in members if r[base + weight] is not None]
                if weighed:
                    pick = min if atoms.kinds[index] == "min" else max
                    chosen = pick(weighed, key=itemgetter(base + weight))
                    values[index] = chosen[base + index]
                    values[weight] = chosen[base + weight]
            for total, count, average in atoms.averages:
                values[average] = _average(values[total], values[count], self.dialect, increment)
            for months, days, seconds, total in atoms.interval_sums:  # as one table's sum
                values[total] = interval_from_parts(values[months], values[days], values[seconds])
            if self.having is not None and self.having(values) is not True:
                continue
            outputs = tuple(output(values) for output in self.outputs)
            if self.averages:
                shown = list(outputs)
                for position, average in self.averages.items():
                    partial = [r[base + average] for r in members]
                    shown[position] = shown_as(shown[position], partial)
                outputs = tuple(shown)
            if self.nan_aware:  # the driver's NaN, which the types read as they read it
                outputs = tuple(restore(v) for v in outputs)
            if any(processors):
                outputs = tuple(
                    v if f is None or v is None or k else f(v)
                    for v, f, k in zip(outputs, processors, self.direct)
                )
            merged.append((outputs, tuple(values)))
        if self.order:
            readers = [(self._nan_key(_pair_reader(fn, ranks)), d, n) for fn, d, n in self.order]
            key, reverse = sort_key(readers)
            merged.sort(key=key, reverse=reverse)
        if self.nan_aware:
            return [outputs + tuple(map(restore, values)) for outputs, values in merged]
        return [outputs + values for outputs, values in merged]

    def order_reader(self, index: int, position: int) -> Callable[[Any], Any]:
        """How a merge on rows reads ORDER BY helper ``index`` (from the row's end), found at
        ``position`` of a row: as it is, or as :attr:`order_keys` says (NaNs, ranges),
        compared as PostgreSQL compares them."""
        read = itemgetter(position)
        keyed = self.order_keys.get(index)
        return read if keyed is None else keyed(read)

    def _nan_key(self, read: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``read``, comparing NaNs as PostgreSQL does where they may occur."""
        return canonical_key(read) if self.nan_aware else read

    def flag_single_entity(self, result: Result[Any], tuples: bool) -> Result[Any]:
        """The merged ``result``, flagged as a result of one ORM entity when the statement
        selects one (:attr:`single_entity`) and its ``Query`` did not ask for rows
        (``tuples``: ``only_return_tuples(True)``): the legacy ``Query`` then hands out
        objects, as for one table. The sources' results lack the flag when helper columns
        follow the entity."""
        return as_single_entity(result) if self.single_entity and not tuples else result

    def merge(self, results: Sequence[Result[Any]], rank: Ranker | None = None) -> Result[Any]:
        """The statement's result, from each source's result of :attr:`source`; ``rank``
        ranks strings for a plan with :attr:`ranked` helpers."""
        frozen = [result.freeze() for result in results]
        parts = [list(f().all()) for f in frozen]
        width = self.width
        rows: Iterable[Sequence[Any]]
        if self.grouped:
            every: list[Sequence[Any]] = [r for part in parts for r in part]
            if self.nan_aware:  # NaNs group, compare and add up as PostgreSQL's
                every = [tuple(canonical(v) for v in r) for r in every]
            with localcontext(EXACT):  # NUMERIC sums and products keep every digit
                rows = self._merge_groups(every, self._process(), rank)
        elif self.order:
            # ranked helpers: a row's helper i is at i - helpers (helpers end the row)
            ranks = self._ranks(rank, [r for part in parts for r in part], -self.helpers)
            readers = [
                (_ranked_reader(i, ranks[self.helpers + i]) if self.helpers + i in ranks
                 else self.order_reader(i, i), d, n)
                for i, d, n in self.order
            ]  # fmt: skip
            key, reverse = sort_key(readers)
            rows = heapq.merge(*parts, key=key, reverse=reverse)
        else:
            rows = (r for part in parts for r in part)
        if self.distinct:
            identity = canonical if self.nan_aware else None
            rows = _unique(rows, self.unique, identity, self.distinct_keys, width)
        kept = list(rows)
        end = None if self.limit is None else self.offset + self.limit
        kept = kept[self.offset : end]
        result = frozen[0].with_new_rows(kept)()  # type: ignore[arg-type]
        if self.helpers:
            return result.columns(*range(width))
        return result


def _single_entity(statement: Any) -> bool:
    """Whether ``statement`` selects one ORM entity, or one single-entity ``Bundle``, alone."""
    descriptions = statement.column_descriptions
    if len(descriptions) != 1:
        return False
    expr = descriptions[0].get("expr")
    if isinstance(expr, Bundle):
        return bool(expr.single_entity)
    return bool(selected_entities(statement))


def sort_key(
    order: Sequence[tuple[Callable[[Any], Any], bool, bool]],
) -> tuple[Callable[[Any], Any], bool]:
    """``(key, reverse)`` that sort rows (``sorted``, ``heapq.merge``) by ORDER BY parts.

    Each part is ``(read, descending, nulls_first)``, ``read`` giving the part's value of a
    row. ``reverse`` is the first part's direction, so a one-way ORDER BY compares plain
    values (a part going the other way compares inverted ones); a NULL sorts before or
    after every value as ``nulls_first`` says.
    """
    reverse = order[0][1]
    # with reverse=True the largest key comes first, so "first" means rank 2 there
    parts = [(read, d != reverse, 0 if n != reverse else 2) for read, d, n in order]
    if len(parts) == 1:
        read, _, rank = parts[0]
        null = (rank, None)

        def one(row: Any) -> Any:
            value = read(row)
            return null if value is None else (1, value)

        return one, reverse

    def several(row: Any) -> Any:
        key: list[tuple[int, Any]] = []
        for read, flip, rank in parts:
            value = read(row)
            if value is None:
                key.append((rank, None))
            else:
                key.append((1, _Reversed(value) if flip else value))
        return tuple(key)

    return several, reverse


def _pair_reader(
    fn: Any, ranks: dict[int, dict[str, int]]
) -> Callable[[tuple[Any, Any]], Any]:
    """Reads an ORDER BY value of a merged group (outputs, values) with ``fn``."""
    if isinstance(fn, _output):
        return lambda pair: fn(pair[0])
    if isinstance(fn, _ByRank):
        read = _ranked_reader(fn.helper, ranks[fn.helper])
        return lambda pair: read(pair[1])
    return lambda pair: fn(pair[1])


def _ranked_reader(index: int, table: dict[str, int]) -> Callable[[Sequence[Any]], Any]:
    """Reads the rank of a row's string at ``index`` (None stays None)."""

    def read(row: Sequence[Any]) -> Any:
        value = row[index]
        return None if value is None else table[value]

    return read


def _is_extreme(element: Any) -> bool:
    """Whether ``element`` is ``MIN(...)`` or ``MAX(...)``, with a FILTER or without."""
    return aggregate_named(element, ("min", "max"))


class _ByRank:
    """An ORDER BY of a merged group by the rank of a helper's string (a GROUP BY key or
    MIN/MAX the database ranked)."""

    def __init__(self, helper: int) -> None:
        self.helper = helper


def _placeholder(column: Any, index: int) -> Any:
    """NULL in place of a computed column, with its type and its label (or a unique one)."""
    type_ = column.type
    value: Any
    if isinstance(type_, NullType):
        value = null()
    elif isinstance(type_, Boolean) or getattr(type_, "collation", None):
        # MySQL/MariaDB cannot CAST to BOOL, and SQLAlchemy 2.0.2 renders a string type's
        # COLLATE inside CAST, which PostgreSQL refuses; NULL needs no CAST
        value = type_coerce(null(), type_)
    else:
        value = sql_cast(null(), type_)
    return value.label(column.name if isinstance(column, Label) else f"snowshard_output_{index}")


class _output:
    """An ORDER BY that names a selected column by its label: reads the merged output."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, outputs: Sequence[Any]) -> Any:
        return outputs[self.index]


_ORDERING_OPERATORS = (operators.lt, operators.le, operators.gt, operators.ge)
_EQUALITY_OPERATORS = (operators.eq, operators.ne)


def _ordered_strings(
    order: Iterable[tuple[Any, bool, bool]], computed: Iterable[Any]
) -> Iterator[Any]:
    """What a merge orders or compares in Python: each ORDER BY item, and in ``computed``
    (a grouped merge's columns and HAVING) the operands of <, <=, >, >= and the
    arguments of MIN/MAX."""
    for expr, _, _ in order:
        yield expr
    for expression in computed:
        if expression is None:
            continue
        for part in walk(expression):
            if isinstance(part, BinaryExpression) and part.operator in _ORDERING_OPERATORS:
                yield from (part.left, part.right)
            elif _is_extreme(part) and isinstance(part, FunctionElement):
                yield from part.clauses  # (under a FILTER, the walk reaches the function)


def _sent(helper: Any, dialect: str) -> Any:
    """What sources send for a grouped merge's helper: itself, or for MIN/MAX of a MariaDB
    TIMESTAMP, the local time of its least or greatest instant (:mod:`~.instants`)."""
    found = instant_extreme(helper, dialect)
    return helper if found is None else found[0]


def _check_comparisons(expressions: Iterable[Any], dialect: str) -> None:
    """Refuse string comparisons computed in Python (HAVING, CASE, comparisons over
    aggregates) where the database compares the strings otherwise (:mod:`~.collation`)."""
    for expression in expressions:
        if expression is None:
            continue
        for part in walk(expression):
            if isinstance(part, BinaryExpression):
                if part.operator in _ORDERING_OPERATORS:
                    need = ORDERING
                elif part.operator in _EQUALITY_OPERATORS:
                    need = EQUALITY
                else:
                    continue
                for side in (part.left, part.right):
                    check_decorated_merged("comparison", side, dialect)
                    check_strings(side, dialect, need, "comparison")  # instants too
                    if need == ORDERING:  # every value Python orders otherwise
                        check_read_order("comparison", side, dialect)
                check_real_compared(part, [part.left, part.right], dialect)
            elif isinstance(part, Case) and part.value is not None:
                check_decorated_merged("CASE", part.value, dialect)
                check_strings(part.value, dialect, EQUALITY, "CASE")
                whens = [condition for condition, _ in part.whens]
                check_real_compared(part, [part.value, *whens], dialect)


def _unique_rows(columns: Sequence[Any]) -> bool:
    """Whether the selected columns include a primary key of one column that is not a
    string: then no two rows are equal, whatever the collation. Only a table's: the
    column of a derived table proxies its table's flag, and a UNION ALL there can return
    one row twice."""
    for column in columns:
        table = getattr(column, "table", None)
        if (
            getattr(column, "primary_key", False)
            and isinstance(table, Table)
            and len(table.primary_key.columns) == 1
            and not collation_of(column, "")[0]
        ):
            return True
    return False


def _unique(
    rows: Iterable[Sequence[Any]],
    positions: Sequence[int],
    identity: Callable[[Any], Any] | None = None,
    keyed: dict[int, Evaluator] | None = None,
    width: int = 0,
) -> Iterable[Sequence[Any]]:
    """``rows`` without repeats of their values at ``positions`` (each value as
    ``identity`` makes it, if given; at a position ``keyed`` holds, as its evaluator makes
    it of the row's merged helpers, from ``width`` on)."""
    seen: set[tuple[Any, ...]] = set()
    for row in rows:
        key = tuple(row[p] for p in positions)
        if identity is not None:
            key = tuple(map(identity, key))
        if keyed:
            values = row[width:]
            key = tuple(keyed[p](values) if p in keyed else k for p, k in zip(positions, key))
        if key not in seen:
            seen.add(key)
            yield row
