"""Relationship comparisons of sharded models, read as the EXISTS they stand for.

``select(User).where(User.orders.any(Order.amount > 5))`` (and ``.has()``, and ``==`` of
a many-to-one) is an ``EXISTS`` that SQLAlchemy builds when the expression is written:
the relationship's ON clause and the criteria, with the criteria and the target's FROM
entry marked as not to be rewritten (so that an enclosing query's aliasing leaves them
alone). Marked so, they would keep naming the logical table, which no database holds.
:func:`explicit_comparisons` rebuilds each such ``EXISTS`` of a sharded model without the
mark and otherwise as it was, the same SQL an application would write by hand::

    exists().where(User.id == Order.user_id, Order.amount > 5)

which is then planned as any correlated EXISTS: exact shard by shard when it correlates
on the shard key with a model sharded alike (or reads a reference table), refused
otherwise. Left as SQLAlchemy built them, and refused: comparisons inside another
comparison's criteria (``User.orders.any(Order.user.has(...))``), and those of a statement
with ``with_loader_criteria()`` options, which the ORM applies inside the ``EXISTS``
through the marks the rebuild would change.
"""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import Select, exists
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import BooleanClauseList, Grouping
from sqlalchemy.sql.selectable import Exists
from sqlalchemy.sql.visitors import replacement_traverse

from snowshard._compat import (
    blocked_froms,
    correlation_exceptions_of,
    deannotated,
    exists_select,
    froms_of,
    replacement_blocked,
    unblocked,
)
from snowshard.sharding.analysis import from_entries, models_named, nested_selects, walk
from snowshard.sharding.criteria import criteria_of

__all__ = ["explicit_comparisons"]


def explicit_comparisons(statement: Any) -> Any:
    """``statement`` with each relationship comparison of a sharded model rebuilt as a
    plain ``EXISTS`` (module docstring); ``statement`` itself when it has none."""
    if criteria_of(statement):
        return statement
    found: dict[int, Select[Any]] = {}
    for element in walk(statement, nested=True):
        inner = _comparison(element)
        if inner is not None:
            found[id(element)] = inner
    if not found:
        return statement

    def replace(element: Any) -> Any:
        inner = found.get(id(element))
        if inner is None:
            return None
        return _rebuilt(inner, _named_elsewhere(statement, inner))

    return replacement_traverse(statement, {}, replace)  # type: ignore[call-overload]


def _clauses(where: Any) -> list[Any]:
    """The conditions ANDed in a WHERE clause, each out of its parentheses (SQLAlchemy puts
    them back where precedence needs them)."""
    if isinstance(where, BooleanClauseList) and where.operator is operators.and_:
        found = list(where.clauses)
    else:
        found = [] if where is None else [where]
    return [c.element if isinstance(c, Grouping) else c for c in found]


def _comparison(element: Any) -> Optional[Select[Any]]:
    """The SELECT of ``element`` if it is a relationship comparison's EXISTS reading a
    sharded model, else None."""
    if not isinstance(element, Exists):
        return None
    inner: Optional[Select[Any]] = exists_select(element)
    if inner is None:
        return None
    marked = any(replacement_blocked(c) for c in _clauses(inner.whereclause))
    if not (marked or blocked_froms(inner)) or not models_named(inner):
        return None
    return inner


def _named_elsewhere(statement: Any, inner: Select[Any]) -> bool:
    """Whether a FROM entry of ``inner`` (a comparison's SELECT) is also a FROM entry of a
    SELECT (or the table of an UPDATE or DELETE) of ``statement`` outside it."""
    mine = {deannotated(f) for f in froms_of(inner)}
    inside = {id(s) for s in (inner, *nested_selects(inner))}
    for select in (statement, *nested_selects(statement)):
        if id(select) not in inside and mine & from_entries(select):
            return True
    return False


def _rebuilt(inner: Select[Any], correlate_by_hand: bool) -> Any:
    """The EXISTS of a comparison's SELECT ``inner`` as written by hand: its conditions and
    FROM entries without the mark (a comparison inside its criteria keeps its own, and is
    refused).

    SQLAlchemy sets its correlation by hand (everything but the target's table), which is
    what automatic correlation does when no enclosing SELECT names that table: then it is
    left automatic, as an application writes it (and as the planner reads it); otherwise
    it is kept (and the planner counts every model it names as read inside)."""
    made = exists().where(*[unblocked(c) for c in _clauses(inner.whereclause)])
    made = made.select_from(*[unblocked(f) for f in froms_of(inner)])
    excepted = correlation_exceptions_of(inner)
    if excepted and correlate_by_hand:
        made = made.correlate_except(*[unblocked(f) for f in excepted])
    return made
