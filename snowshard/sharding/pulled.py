"""Subqueries run first: a subquery that its statement cannot read where the statement
runs, run as a query of its own and passed to the statement as values.

``select(User).where(User.id.in_(select(Order.user_id).where(Order.amount > 100)))`` over
orders in several databases cannot run as one statement in any of them (each would see
its own orders only), and is refused (:mod:`~snowshard.sharding.analysis`). With the
execution option ``subqueries_first=True`` the session instead runs the subquery first,
as a sharded query of its own (routed and merged as any), and then the statement with
the subquery's result in its place (only for a statement refused as it is: one that runs
as it is stays one statement):

* ``expr IN (subquery)`` / ``NOT IN``: the subquery's values, as an expanding bound
  parameter (NULLs included, so ``NOT IN`` keeps SQL's answer); an empty result gives
  SQLAlchemy's empty IN, which is false (``NOT IN``: true) as for an empty subquery;
* ``EXISTS (subquery)``: true or false;
* a scalar subquery: its one value, or NULL when it returns no row; more than one row
  raises :class:`~snowshard.sharding.errors.SubqueryResultError`, as the database would.

Only an *uncorrelated* subquery can run on its own: one that reads nothing of the queries
around it. SQLAlchemy correlates a SELECT automatically only when it has several FROM
entries, some of which an enclosing SELECT also reads; such a subquery, one with
correlation set by hand, and one holding a SELECT that could correlate past it, stay
where they are (and are refused as before), as does one of an UPDATE or DELETE that may
correlate with the table it writes. So do subqueries in a FROM list or a CTE, those of
more than one column in an IN, and those given loader criteria of their own (SQLAlchemy
applies those to nothing inside a statement; the statement's own criteria are given to
each subquery run first, as SQLAlchemy applies them to subqueries).

The subquery and the statement are two statements in the session's transaction: under
READ COMMITTED a row committed by another transaction between them is seen by the second
only (as between the databases of any fan-out, which have no common snapshot); REPEATABLE
READ gives both one snapshot per database. An IN list is capped at :data:`MAX_VALUES`.
This module finds the subqueries and builds the statement; :mod:`~.execute` runs them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Delete, Select, Table, Update, bindparam, false, literal, true, type_coerce
from sqlalchemy.exc import CompileError
from sqlalchemy.orm import LoaderCriteriaOption
from sqlalchemy.sql.elements import BinaryExpression
from sqlalchemy.sql.selectable import Exists, ScalarSelect
from sqlalchemy.sql.visitors import replacement_traverse

from snowshard._compat import (
    explicit_correlation,
    final_froms,
    limit_offset_of,
    with_only_columns_keeping_froms,
)
from snowshard.sharding.analysis import IN_OPERATORS, from_entries, nested_selects
from snowshard.sharding.criteria import criteria_of
from snowshard.sharding.errors import SubqueryResultError, UnsupportedShardQuery
from snowshard.spec import ShardConfigError

__all__ = [
    "MAX_VALUES", "SUBQUERIES_FIRST_OPTION", "Pulled", "pulled_subqueries", "substitute",
    "value_of", "wants_subqueries_first",
]  # fmt: skip

SUBQUERIES_FIRST_OPTION = "subqueries_first"
"""Execution option: run what would be refused for its subqueries with them run first."""

MAX_VALUES = 10_000
"""The most values an IN subquery run first may pass to its statement."""


def wants_subqueries_first(session: Any, options: Mapping[str, Any]) -> bool:
    """Whether a statement runs its subqueries first: its execution option
    ``subqueries_first``, else ``ShardedSession(subqueries_first=...)``."""
    value = options.get(SUBQUERIES_FIRST_OPTION)
    if value is None:
        return bool(getattr(session, "subqueries_first", False))
    if not isinstance(value, bool):
        raise ShardConfigError(
            f"execution option subqueries_first={value!r}: must be True or False; pass "
            "execution_options(subqueries_first=True) to run subqueries first"
        )
    return value


@dataclass(frozen=True)
class Pulled:
    """A subquery to run first: where it is, what it gives and the SELECT to run."""

    kind: str
    """``in`` (its values), ``exists`` (whether it has a row), ``scalar`` (its value)."""
    element: Any
    """The element of the statement that the subquery's result replaces."""
    select: Select[Any]
    """The subquery as a statement of its own."""

    def run_form(self) -> Select[Any]:
        """The SELECT as it is run: an EXISTS needs one row at most."""
        if self.kind == "exists":  # its columns do not matter (and may be "*")
            one = with_only_columns_keeping_froms(self.select, literal(1))
            return one.limit(1) if _unbounded(one) else one
        if self.kind == "scalar":
            return self.select.limit(2) if _unbounded(self.select) else self.select
        return self.select


def _unbounded(select: Select[Any]) -> bool:
    try:
        return limit_offset_of(select) == (None, None)
    except CompileError:  # a LIMIT or OFFSET given as an expression
        return False


def _select_in(element: Any) -> Select[Any] | None:
    """The SELECT an IN's right side, an EXISTS or a scalar subquery wraps, or None."""
    seen = 0
    while element is not None and seen < 4:
        if isinstance(element, Select):
            return element
        element = getattr(element, "element", None)
        seen += 1
    return None


def _froms(select: Any) -> list[Any]:
    return list(final_froms(select))


def _may_correlate(select: Any, enclosing: set[Any]) -> bool:
    """Whether SQLAlchemy could correlate ``select`` with ``enclosing`` (FROM entries of
    the SELECTs around it): correlation set by hand, or several FROM entries some of
    which are enclosing ones (SQLAlchemy's automatic correlation)."""
    if explicit_correlation(select):
        return True
    return len(_froms(select)) > 1 and bool(from_entries(select) & enclosing)


def _self_contained(select: Select[Any], enclosing: set[Any]) -> bool:
    """Whether ``select`` reads nothing of the queries around it: neither it nor a SELECT
    inside it may correlate with ``enclosing``."""
    return not any(_may_correlate(s, enclosing) for s in (select, *nested_selects(select)))


def _candidate(element: Any, parent_in: bool) -> tuple[str, Select[Any]] | None:
    if isinstance(element, BinaryExpression) and element.operator in IN_OPERATORS:
        inner = _select_in(element.right)
        return ("in", inner) if inner is not None else None
    if isinstance(element, Exists):
        inner = _select_in(element)
        return ("exists", inner) if inner is not None else None
    if isinstance(element, ScalarSelect) and not parent_in:
        inner = _select_in(element)
        return ("scalar", inner) if inner is not None else None
    return None


def pulled_subqueries(statement: Any) -> list[Pulled]:
    """The subqueries of ``statement`` that can run first (module docstring), outermost
    only (one run first runs its own in turn). Each carries the statement's loader
    criteria, which SQLAlchemy applies to subqueries too."""
    found: list[Pulled] = []
    criteria = criteria_of(statement)

    own = {id(o) for o in criteria}

    def visit(element: Any, enclosing: set[Any], parent_in: bool) -> None:
        if isinstance(element, Table):
            return
        if hasattr(element, "get_final_froms") or isinstance(element, (Update, Delete)):
            enclosing = enclosing | from_entries(element)
        candidate = _candidate(element, parent_in)
        if candidate is not None:
            kind, select = candidate
            if (
                (kind == "exists" or len(select.selected_columns) == 1)
                and _self_contained(select, enclosing)
                # criteria given to the subquery alone, which SQLAlchemy applies to nothing
                # there, would apply to it as a statement of its own
                and all(id(o) in own for o in criteria_of(select))
            ):
                target = element.right if kind == "in" else element
                found.append(Pulled(kind, target, select.options(*criteria)))
                if kind != "in":
                    return
                visit(element.left, enclosing, False)
                return
        is_in = isinstance(element, BinaryExpression) and element.operator in IN_OPERATORS
        for child in element.get_children():
            visit(child, enclosing, is_in and child is element.right)

    visit(statement, set(), False)
    return found


def _type_of(select: Select[Any]) -> Any:
    return select.selected_columns[0].type


def _placeholder(pulled: Pulled, number: int) -> Any:
    """What stands for a subquery's result while the statement is checked or explained:
    a parameter ``snowshard_subquery_<number>`` without a value, which routing reads
    nothing from (a statement that would be refused is refused whatever the values)."""
    key, type_ = f"snowshard_subquery_{number}", _type_of(pulled.select)
    if pulled.kind == "in":
        return bindparam(key, expanding=True, required=True, type_=type_)
    if pulled.kind == "exists":
        return true()
    return type_coerce(bindparam(key, required=True, type_=type_), type_)


def _replacement(pulled: Pulled, value: Any) -> Any:
    if pulled.kind == "in":
        return bindparam(None, list(value), expanding=True, type_=_type_of(pulled.select))
    if pulled.kind == "exists":
        return true() if value else false()
    return bindparam(None, value, type_=_type_of(pulled.select))


def substitute(
    statement: Any, pulled: Sequence[Pulled], values: Mapping[int, Any] | None = None
) -> Any:
    """``statement`` with each subquery of ``pulled`` replaced by its result (``values``,
    by ``id`` of its element), or by a placeholder when ``values`` is None."""
    swaps = {
        id(p.element): (
            _placeholder(p, n) if values is None else _replacement(p, values[id(p.element)])
        )
        for n, p in enumerate(pulled, 1)
    }

    def replace(element: Any) -> Any:
        if isinstance(element, LoaderCriteriaOption):
            return element  # kept as it is (SQLAlchemy cannot copy one)
        return swaps.get(id(element))

    return replacement_traverse(statement, {}, replace)  # type: ignore[call-overload]


def _unique(values: Iterator[Any]) -> list[Any]:
    kept: list[Any] = []
    seen: set[Any] = set()
    for value in values:
        try:
            if value in seen:
                continue
            seen.add(value)
        except TypeError:  # an unhashable value (JSON): kept as it is
            pass
        kept.append(value)
    return kept


def value_of(pulled: Pulled, rows: Sequence[Any]) -> Any:
    """What ``pulled``'s rows stand for in its statement (module docstring)."""
    if pulled.kind == "exists":
        return bool(rows)
    if pulled.kind == "scalar":
        if len(rows) > 1:
            raise SubqueryResultError(
                f"the scalar subquery {_sql(pulled.select)} returned more than one row; a "
                "database refuses that too: make it return one (an aggregate, a key, LIMIT 1)"
            )
        return rows[0][0] if rows else None
    values = _unique(row[0] for row in rows)
    if len(values) > MAX_VALUES:
        raise UnsupportedShardQuery(
            f"the IN subquery {_sql(pulled.select)}, run first, returned {len(values)} "
            f"values, more than the {MAX_VALUES} a statement takes here: join on the shard "
            "key instead, or narrow the subquery"
        )
    return values


def _sql(select: Select[Any]) -> str:
    text = " ".join(str(select).split())
    return f"({text[:120]}{'...' if len(text) > 120 else ''})"

