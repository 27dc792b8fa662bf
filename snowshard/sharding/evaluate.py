"""Expressions over merged aggregates, computed in Python after a cross-shard merge.

``count() * 2``, ``max(x) - min(x)``, ``coalesce(sum(x), 0)``, ``CASE WHEN avg(x) > 3 ...``
cannot be merged from per-shard values of the whole expression; the merge pushes down
their *atoms* (the aggregates and the GROUP BY keys), merges those, and computes the
expression here with SQL's NULL rules. :func:`compile_expression` turns an expression into
a function of the merged atom values once, before any SQL runs, and refuses what it does
not know (unknown functions and operators) with
:class:`~snowshard.sharding.errors.UnsupportedShardQuery`.

Division and CAST are computed as the session's database computes the SQL SQLAlchemy
renders for it (:mod:`~snowshard.sharding.arith`); on other databases they are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any, Optional, cast

from sqlalchemy import literal_column
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BindParameter,
    BooleanClauseList,
    Case,
    Cast,
    ClauseList,
    False_,
    FunctionFilter,
    Grouping,
    Label,
    Null,
    True_,
    UnaryExpression,
)
from sqlalchemy.sql.functions import FunctionElement, func
from sqlalchemy.sql.selectable import Exists
from sqlalchemy.types import Integer, NullType

from snowshard._compat import LabelReference, plugin_subject_of
from snowshard.sharding.analysis import (
    aggregate_function,
    aggregate_named,
    describe,
    distinct_arguments,
    function_kind,
    walk,
)
from snowshard.sharding.arith import (
    DIALECTS,
    DIV_PRECISION_INCREMENT,
    Division,
    cast_function,
    coalesce_function,
    division_function,
)
from snowshard.sharding.decorated import check_decorated_sum
from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.intervals import (
    interval_key,
    interval_parts,
    is_interval,
    parts_key,
    timedelta_key,
)
from snowshard.sharding.nan import MergedNaNCast, PostgresNaN, is_infinite, pg_computed
from snowshard.sharding.opaque import check_summed
from snowshard.sharding.temporal import (
    check_arithmetic,
    check_average,
    check_choice,
    check_comparison,
)

__all__ = [
    "BY_VALUE",
    "Atoms",
    "Evaluator",
    "bare",
    "compile_expression",
    "compile_interval_key",
    "compares_intervals",
    "increment_in",
    "without_distinct_extremes",
]

BY_VALUE = ("count_distinct", "sum_distinct", "avg_distinct")
"""Kinds of helpers that carry the values an aggregate of DISTINCT values aggregates."""

Evaluator = Callable[[Sequence[Any]], Any]
"""A compiled expression: merged atom values -> the expression's value."""


def bare(element: Any) -> Any:
    """``element`` without the labels, parentheses and one-item lists around it."""
    while True:
        if isinstance(element, (Label, Grouping, LabelReference)):
            element = element.element
        elif type(element) is ClauseList and len(element.clauses) == 1:
            element = element.clauses[0]  # GROUP BY of a function: a list of one label
        else:
            return element


def _distinct_extreme(element: Any) -> bool:
    """Whether ``element`` is ``MIN(DISTINCT x)`` or ``MAX(DISTINCT x)``."""
    if not isinstance(element, FunctionElement) or str(element.name).lower() not in (
        "min",
        "max",
    ):
        return False
    arguments = list(element.clauses)
    return (
        len(arguments) == 1
        and isinstance(arguments[0], UnaryExpression)
        and arguments[0].operator is operators.distinct_op
    )


def without_distinct_extremes(expression: Any) -> Any:
    """``expression`` with each ``MIN(DISTINCT x)``/``MAX(DISTINCT x)`` in it written
    ``MIN(x)``/``MAX(x)``, of the same type: the least of the distinct values is the least
    value, so the merge then picks it as for any MIN/MAX (strings by weight or rank
    included). ``expression`` itself where it holds neither."""
    if expression is None or not any(_distinct_extreme(part) for part in walk(expression)):
        return expression

    def plain(element: Any, **kw: Any) -> Any:
        if not _distinct_extreme(element):
            return None
        (argument,) = element.clauses
        return getattr(func, str(element.name).lower())(argument.element, type_=element.type)

    no_options: dict[str, Any] = {}
    return visitors.replacement_traverse(expression, no_options, plain)


def _same(left: Any, right: Any) -> bool:
    """Whether two expressions are structurally equal.

    Expressions built from different ORM entities are never equal; they are told apart
    first because ``ClauseElement.compare`` fails on them (it compares their entities'
    mappers as if they were SQL elements). Telling two equal expressions apart only costs
    a helper column, never a wrong merge.
    """
    if plugin_subject_of(left) is not plugin_subject_of(right):
        return False
    return bool(left.compare(right))


class Atoms:
    """The expressions pushed down to every source: GROUP BY keys and aggregates.

    :attr:`helpers` is the list of expressions added to each source's SELECT; keys and
    aggregates are found again by structural comparison.
    """

    def __init__(
        self,
        dialect: str = "",
        distinct_value: Callable[[Any], Any] | None = None,
        partitioned: Callable[[Any], bool] | None = None,
    ) -> None:
        self.dialect = dialect
        """The database dialect whose arithmetic division and CAST follow."""
        self.distinct_value = distinct_value or (lambda value: value)
        """For ``count(DISTINCT x)``: what sources send beside their rows to tell ``x``'s
        distinct values apart (``x``, or its weight); refuses what cannot be."""
        self.partitioned = partitioned or (lambda value: False)
        """Whether equal values of ``x`` always come from one source (a shard key)."""
        self.helpers: list[Any] = []
        self.kinds: list[Optional[str]] = []
        """Per helper: None for a key, the aggregate's name, "avg_sum"/"avg_count",
        "weight" for a key's ``WEIGHT_STRING()``, "count_distinct", "sum_distinct" or
        "avg_distinct" for the value ``count``/``sum``/``avg(DISTINCT x)`` aggregates (the
        sources group by it: :data:`BY_VALUE`), "count_partitioned" for a count of
        distinct values that each source computes over values no other source has, or
        "setting" for a server setting the merge computes by (:meth:`division_increment`)."""
        self.keys: list[int] = []
        self.averages: list[tuple[int, int, int]] = []
        """(sum helper, count helper, avg helper) of each AVG."""
        self.interval_sums: list[tuple[int, int, int, int]] = []
        """(months, days, seconds helpers, sum helper) of each SUM of a PostgreSQL
        interval (:func:`~.intervals.interval_parts`)."""

    def _find(self, element: Any, kind: Optional[str]) -> Optional[int]:
        for index, helper in enumerate(self.helpers):
            if self.kinds[index] == kind and _same(bare(helper), element):
                return index
        return None

    def add_key(self, element: Any) -> int:
        element = bare(element)
        found = self._find(element, None)
        if found is None:
            found = self._add(element, None)
            self.keys.append(found)
        return found

    def key(self, element: Any) -> Optional[int]:
        return self._find(bare(element), None)

    def aggregate(self, element: FunctionElement[Any] | FunctionFilter[Any]) -> int:
        """The helper of an aggregate, or of one with a FILTER (:func:`aggregate_function`:
        each source aggregates the rows that pass it, combined like the aggregate's)."""
        function = aggregate_function(element)
        if function is None:
            raise _refuse(
                element, "FILTER is merged over count, sum, min, max and avg of values only"
            )
        name = str(function.name).lower()
        distinct = distinct_arguments(function)
        if distinct:
            return self._distinct(function, name, distinct)
        found = self._find(element, name)
        if found is not None:
            return found
        if name in ("sum", "avg"):
            check_summed(element, function.clauses, self.dialect)
            check_decorated_sum(element, self.dialect)
        index = self._add(element, name)
        if name == "sum" and all(is_interval(a, self.dialect) for a in function.clauses):
            parts = [self._add(part, "sum") for part in interval_parts(element)]
            self.interval_sums.append((parts[0], parts[1], parts[2], index))
        if name == "avg":
            check_average(element, function.clauses, self.dialect, _refuse)
            (argument,) = function.clauses
            total: Any = func.sum(argument, type_=NullType())  # raw: the driver's SUM
            count: Any = func.count(argument)
            if isinstance(element, FunctionFilter):  # both over the rows the filter keeps
                total, count = total.filter(element.criterion), count.filter(element.criterion)
            self.averages.append(
                (self._add(total, "avg_sum"), self._add(count, "avg_count"), index)
            )
        return index

    def _distinct(self, element: FunctionElement[Any], name: str, arguments: list[Any]) -> int:
        """The helper of ``count``/``sum``/``avg(DISTINCT x)``: for a count, the count
        itself where equal values of ``x`` come from one source (summed); else ``x`` (or
        its weight), by which the sources then also group, so that the merge aggregates
        the distinct values it gets. SUM and AVG of distinct integers only."""
        if name not in ("count", "sum", "avg"):
            raise UnsupportedShardQuery(
                f"{name}(DISTINCT ...) cannot be merged across shards (count, sum, avg, min "
                "and max of DISTINCT values can); select the distinct values and aggregate "
                "them in Python, or route the query to one shard"
            )
        if len(list(element.clauses)) != 1:
            raise UnsupportedShardQuery(
                f"{name}(DISTINCT ...) of several values cannot be merged across shards (of "
                f"one value it can); write {name}(DISTINCT x) of one expression, or route the "
                "query to one shard"
            )
        value = bare(arguments[0].element)
        if name == "count" and self.partitioned(value):
            found = self._find(element, "count_partitioned")
            return found if found is not None else self._add(element, "count_partitioned")
        if name != "count" and not isinstance(getattr(value, "type", None), Integer):
            raise UnsupportedShardQuery(
                f"{name}(DISTINCT {describe(value)}) across shards: merged for integers only "
                f"(this is {getattr(value, 'type', 'untyped')}), whose sum and average the "
                "merge computes as each database does; route the query to one shard, or "
                "select the distinct values and aggregate them in Python"
            )
        sent = self.distinct_value(value)
        kind = f"{name}_distinct"
        found = self._find(bare(sent), kind)
        return found if found is not None else self._add(sent, kind)

    def spread_distinct(self) -> list[Any]:
        """What the sources must also group by for the aggregates of DISTINCT values merged
        by value (:data:`BY_VALUE`). Once they group by anything more, a partitioned count
        would be counted per finer group, so those are merged by value too."""
        if not any(kind in BY_VALUE for kind in self.kinds):
            return []
        for index, kind in enumerate(self.kinds):
            if kind == "count_partitioned":
                (argument,) = self.helpers[index].clauses
                self.helpers[index] = bare(self.distinct_value(bare(argument.element)))
                self.kinds[index] = "count_distinct"
        spread: list[Any] = []
        for helper, kind in zip(self.helpers, self.kinds):
            if kind in BY_VALUE and not any(_same(helper, other) for other in spread):
                spread.append(helper)  # count and sum of DISTINCT x: grouped by x once
        return spread

    def exists(self, element: Any) -> int:
        """The helper of a selected ``EXISTS`` (kind ``"exists"``: the merge takes the
        greatest of the sources' values, true or 1 where any is)."""
        found = self._find(bare(element), "exists")
        return found if found is not None else self._add(element, "exists")

    def division_increment(self) -> int | None:
        """On MariaDB/MySQL, the helper of the session's ``div_precision_increment`` (kind
        ``"setting"``), by which a merge divides (``a / b``, AVG) as the server would; None
        on other dialects."""
        if self.dialect not in ("mysql", "mariadb"):
            return None
        found = self._find(_DIV_PRECISION_INCREMENT, "setting")
        return found if found is not None else self._add(_DIV_PRECISION_INCREMENT, "setting")

    def add_weight(self, element: Any) -> int:
        """The helper of ``element``, a GROUP BY key's ``WEIGHT_STRING()`` (kind
        ``"weight"``: read as the source sent it, like a key)."""
        found = self._find(bare(element), "weight")
        return found if found is not None else self._add(element, "weight")

    def _add(self, element: Any, kind: Optional[str]) -> int:
        self.helpers.append(bare(element))
        self.kinds.append(kind)
        return len(self.helpers) - 1


_DIV_PRECISION_INCREMENT = literal_column("@@div_precision_increment", Integer)
"""The session's ``div_precision_increment`` on MariaDB/MySQL, as a column."""


def _number(left: Any, right: Any) -> tuple[Any, Any]:
    # a float on either side makes the database compute in floating point
    if isinstance(left, float) and isinstance(right, Decimal):
        return left, float(right)
    if isinstance(left, Decimal) and isinstance(right, float):
        return float(left), right
    return left, right


_ARITHMETIC: dict[Any, Callable[[Any, Any], Any]] = {
    operators.add: lambda a, b: a + b,
    operators.sub: lambda a, b: a - b,
    operators.mul: lambda a, b: a * b,
}
_COMPARISON: dict[Any, Callable[[Any, Any], Any]] = {
    operators.eq: lambda a, b: a == b,
    operators.ne: lambda a, b: a != b,
    operators.lt: lambda a, b: a < b,
    operators.le: lambda a, b: a <= b,
    operators.gt: lambda a, b: a > b,
    operators.ge: lambda a, b: a >= b,
}


def _refuse(element: Any, why: str) -> UnsupportedShardQuery:
    return UnsupportedShardQuery(
        f"{describe(element)} over aggregates or GROUP BY keys across shards: {why}; "
        "compute it in Python from the merged aggregates, or route the query to one shard"
    )


def compile_expression(element: Any, atoms: Atoms) -> Evaluator:
    """``element`` as a function of the merged atom values (adding atoms as needed)."""
    plain = bare(element)
    key = atoms.key(plain)
    if key is not None:
        return lambda values: values[key]
    if isinstance(plain, FunctionElement):
        return _function(plain, atoms)
    if isinstance(plain, FunctionFilter):
        index = atoms.aggregate(plain)
        return lambda values: values[index]
    if isinstance(plain, BindParameter):
        constant = plain.effective_value
        return lambda values: constant
    if isinstance(plain, (Null, True_, False_)):
        constant = {Null: None, True_: True, False_: False}[type(plain)]
        return lambda values: constant
    if isinstance(plain, BinaryExpression):
        return _binary(plain, atoms)
    if isinstance(plain, BooleanClauseList):
        return _boolean(plain, atoms)
    if isinstance(plain, Exists):  # select(exists(...)): true where any source's is
        index = atoms.exists(plain)
        return lambda values: values[index]
    if isinstance(plain, UnaryExpression):
        if plain.operator is operators.neg:
            check_arithmetic(plain, atoms.dialect, _refuse)
            inner = compile_expression(plain.element, atoms)
            return lambda values: None if (v := inner(values)) is None else -v
        if plain.operator is operators.inv:
            inner = compile_expression(plain.element, atoms)
            return lambda values: None if (v := inner(values)) is None else not v
    if isinstance(plain, Case):
        return _case(plain, atoms)
    if isinstance(plain, Cast):
        return _cast(plain, atoms)
    raise _refuse(
        plain, "it is neither a GROUP BY key nor built from count/sum/min/max/avg with "
        "+, -, *, /, //, CAST, comparisons, CASE and COALESCE"
    )


def _function(element: FunctionElement[Any], atoms: Atoms) -> Evaluator:
    kind = function_kind(element)
    if kind == "aggregate":
        index = atoms.aggregate(element)
        return lambda values: values[index]
    if str(element.name).lower() == "coalesce":
        check_choice(element, map(bare, element.clauses), atoms.dialect, _refuse)
        parts = [compile_expression(argument, atoms) for argument in element.clauses]
        convert = coalesce_function(element, atoms.dialect, _refuse)

        def coalesce(values: Sequence[Any]) -> Any:
            for part in parts:
                value = part(values)
                if isinstance(value, PostgresNaN):
                    return value
                if value is not None:
                    return convert(value)
            return None

        return coalesce
    raise _refuse(element, f"function {element.name}() is not merged")


def _binary(element: BinaryExpression[Any], atoms: Atoms) -> Evaluator:
    operator = element.operator
    if operator in (operators.is_, operators.is_not):
        inner = compile_expression(element.left, atoms)
        if not isinstance(bare(element.right), Null):
            raise _refuse(element, "IS is merged only against NULL")
        wanted = operator is operators.is_
        return lambda values: (inner(values) is None) == wanted
    function = _ARITHMETIC.get(operator) or _COMPARISON.get(operator)
    divide: Division | None = None
    increment: int | None = None  # the helper of MariaDB's div_precision_increment
    if operator in (operators.truediv, operators.floordiv):
        if atoms.dialect not in DIALECTS:
            raise _refuse(element, f"division on {atoms.dialect or 'this database'} is not "
                          f"merged (only on {', '.join(sorted(DIALECTS))})")  # fmt: skip
        divide = division_function(element, atoms.dialect, _refuse)
        increment = atoms.division_increment()
    elif function is None:
        raise _refuse(element, f"the operator {getattr(operator, '__name__', operator)} is not merged")
    absorbs = operator not in _COMPARISON  # arithmetic on PostgreSQL's NaN is NaN
    if absorbs:
        check_arithmetic(element, atoms.dialect, _refuse)
    else:
        check_comparison(element, (bare(element.left), bare(element.right)), atoms.dialect, _refuse)
    if not absorbs and compares_intervals([element.left, element.right], atoms.dialect):
        left = compile_interval_key(element.left, atoms)
        right = compile_interval_key(element.right, atoms)
    else:
        left = compile_expression(element.left, atoms)
        right = compile_expression(element.right, atoms)
    postgres = absorbs and atoms.dialect == "postgresql"  # NaN from infinities as NaN
    compute = cast(Callable[[Any, Any], Any], function)  # None for a division only

    def apply(values: Sequence[Any]) -> Any:
        a, b = left(values), right(values)
        if a is None or b is None:
            return None
        if absorbs and isinstance(a, PostgresNaN):
            return a
        if absorbs and isinstance(b, PostgresNaN):
            return b
        x, y = _number(a, b)
        if divide is not None:
            if postgres:
                return pg_computed(divide, x, y, DIV_PRECISION_INCREMENT)
            return divide(x, y, increment_in(values, increment))
        if postgres:
            return pg_computed(compute, x, y)
        return compute(x, y)

    return apply


def increment_in(values: Sequence[Any], index: int | None) -> int:
    """The ``div_precision_increment`` in merged ``values`` (its helper at ``index``:
    :meth:`Atoms.division_increment`), or the default where there is none."""
    found = None if index is None else values[index]
    return DIV_PRECISION_INCREMENT if found is None else int(found)


def _cast(element: Cast[Any], atoms: Atoms) -> Evaluator:
    if atoms.dialect not in DIALECTS:
        raise _refuse(element, f"CAST on {atoms.dialect or 'this database'} is not merged")
    convert = cast_function(element, atoms.dialect, _refuse)
    inner = compile_expression(element.clause, atoms)
    to_integer = isinstance(element.type, Integer)

    def apply(values: Sequence[Any]) -> Any:
        value = inner(values)
        if isinstance(value, PostgresNaN) or is_infinite(value):
            if to_integer:
                raise MergedNaNCast(
                    f"{describe(element)}: cannot cast {value} to an integer (PostgreSQL "
                    "refuses it for one table too); filter NaN and infinities out (WHERE x "
                    "NOT IN ('NaN', 'Infinity', '-Infinity')) first"
                )
            return value
        return None if value is None else convert(value)

    return apply


def _boolean(element: BooleanClauseList, atoms: Atoms) -> Evaluator:
    parts = [compile_expression(clause, atoms) for clause in element.clauses]
    if element.operator is operators.and_:

        def both(values: Sequence[Any]) -> Any:
            found: Any = True
            for part in parts:
                value = part(values)
                if value is False:
                    return False
                if value is None:
                    found = None
            return found

        return both
    if element.operator is operators.or_:

        def either(values: Sequence[Any]) -> Any:
            found: Any = False
            for part in parts:
                value = part(values)
                if value is True:
                    return True
                if value is None:
                    found = None
            return found

        return either
    raise _refuse(element, "this list operator is not merged")


def _case(element: Case[Any], atoms: Atoms) -> Evaluator:
    results = [bare(result) for _, result in element.whens]
    check_choice(element, [*results, bare(element.else_)], atoms.dialect, _refuse)
    subject: Evaluator | None = None
    side = compile_expression  # a CASE x WHEN y compares y with x as SQL does, below
    if element.value is not None:
        compared = [element.value, *(condition for condition, _ in element.whens)]
        if compares_intervals(compared, atoms.dialect):
            side = compile_interval_key
        subject = side(element.value, atoms)
    whens = [
        (
            side(condition, atoms) if subject is not None else compile_expression(condition, atoms),
            compile_expression(result, atoms),
        )
        for condition, result in element.whens
    ]
    otherwise = compile_expression(element.else_, atoms) if element.else_ is not None else None

    def case(values: Sequence[Any]) -> Any:
        base = subject(values) if subject is not None else None
        for condition, result in whens:
            test = condition(values)
            if subject is not None:
                test = None if base is None or test is None else base == test
            if test is True:
                return result(values)
        return otherwise(values) if otherwise is not None else None

    return case


def compares_intervals(sides: Sequence[Any], dialect: str) -> bool:
    """Whether a comparison of ``sides`` compares PostgreSQL intervals (which the merge
    then compares by :func:`compile_interval_key`)."""
    return any(is_interval(bare(side), dialect) for side in sides)


def compile_interval_key(element: Any, atoms: Atoms) -> Evaluator:
    """``element``, a PostgreSQL interval the merge compares (HAVING, CASE, ORDER BY), as
    the seconds PostgreSQL compares it by, a month being 30 days
    (:mod:`~snowshard.sharding.intervals`; the values read count a year as 365 days): a
    GROUP BY key or MIN/MAX by the key its source sent beside it, a SUM from its parts, a
    ``timedelta`` by its seconds, ``timestamp - timestamp`` (days and time only) by the
    value read, and ``+``, ``-`` and COALESCE of those. Refuses other intervals."""
    plain = bare(element)
    dialect = atoms.dialect
    if isinstance(plain, Null):
        return lambda values: None
    if isinstance(plain, BindParameter):
        value = plain.effective_value
        if value is None or isinstance(value, timedelta):
            constant = None if value is None else timedelta_key(value)
            return lambda values: constant
        raise _refuse(element, f"it compares an interval with {type(value).__name__} "
                      f"{value!r}; compare with a timedelta")  # fmt: skip
    arithmetic = isinstance(plain, BinaryExpression) and plain.operator in _ADDITIVE
    if arithmetic and plain.operator is operators.sub and not compares_intervals(
        [plain.left, plain.right], dialect
    ):  # timestamp - timestamp: days and time, no months
        difference = compile_expression(plain, atoms)
        return lambda values: None if (v := difference(values)) is None else timedelta_key(v)
    if not is_interval(plain, dialect):
        raise _refuse(element, f"{_INTERVALS_COMPARED}; this is not an interval")
    if atoms.key(plain) is not None or aggregate_named(plain, ("min", "max")):
        if atoms.key(plain) is None:
            atoms.aggregate(plain)  # the MIN/MAX, picked by the key below
        index = atoms.add_weight(interval_key(plain, dialect))
        return lambda values: values[index]
    if aggregate_named(plain, ("sum",)):
        total = atoms.aggregate(plain)
        for months, days, seconds, summed in atoms.interval_sums:
            if summed == total:
                return lambda values: parts_key(values[months], values[days], values[seconds])
    if arithmetic:
        left = compile_interval_key(plain.left, atoms)
        right = compile_interval_key(plain.right, atoms)
        sign = 1 if plain.operator is operators.add else -1

        def combined(values: Sequence[Any]) -> Any:
            a, b = left(values), right(values)
            return None if a is None or b is None else a + sign * b

        return combined
    if isinstance(plain, FunctionElement) and str(plain.name).lower() == "coalesce":
        parts = [compile_interval_key(argument, atoms) for argument in plain.clauses]
        return lambda values: next((k for p in parts if (k := p(values)) is not None), None)
    raise _refuse(element, _INTERVALS_COMPARED)


_INTERVALS_COMPARED = (
    "the merge compares PostgreSQL intervals (which may hold months, 30 days each in "
    "PostgreSQL's comparison) only as GROUP BY keys, MIN, MAX, SUM, timedelta values, "
    "timestamp - timestamp, and + - and COALESCE of those"
)


_ADDITIVE = (operators.add, operators.sub)
