"""Which shards a statement needs: shard keys found in its WHERE clause.

The WHERE clause is walked as an expression tree (no SQL text is read). ``key == value``
and ``key IN (...)`` on a shard key column name the shards of their values; ``AND``
intersects, ``OR`` unites; anything else (``!=``, ``IS NULL``, ``NOT``, a subquery, a
function of the key) could match any shard. A key predicate that is a conjunct of the
WHERE clause is a :class:`KeyTerm`: per shard it can be narrowed to the values that live
there, so an ``IN`` list is split per shard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from sqlalchemy import Table, TableClause
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BindParameter,
    BooleanClauseList,
    ClauseElement,
    ColumnClause,
    Grouping,
)

from snowshard._compat import deannotated
from snowshard.sharding.model import ShardedModel, model_of_table

__all__ = ["KeyTerm", "Route", "find_models", "route"]

Shards = Optional[frozenset[int]]
"""A set of shard indices; None means every shard."""


@dataclass
class KeyTerm:
    """A conjunct ``key == v`` or ``key IN (...)`` of the WHERE clause."""

    expr: BinaryExpression[Any]
    column: ColumnClause[Any]
    model: ShardedModel
    by_shard: dict[int, list[Any]]


@dataclass
class Route:
    """The shards a statement must read (None: all) and its splittable key terms."""

    shards: Shards
    terms: list[KeyTerm] = field(default_factory=list)


def _base(element: Any) -> Any:
    # ORM statements name tables and columns through annotated copies
    return deannotated(element)


def find_models(statement: Any) -> list[ShardedModel]:
    """The sharded models whose logical table the statement names, in order of appearance."""
    found: list[ShardedModel] = []
    stack = [statement]
    while stack:
        element = stack.pop()
        if isinstance(element, ColumnClause):
            table = element.table
        elif isinstance(element, TableClause):
            table = element
        else:
            stack.extend(reversed(list(element.get_children())))
            continue
        if isinstance(table, Table):  # a table's own children are only its columns
            model = model_of_table(_base(table))
            if model is not None and model not in found:
                found.append(model)
    return found


def _key_column(element: Any, models: Sequence[ShardedModel]) -> Optional[tuple[ShardedModel, str]]:
    while isinstance(element, Grouping):
        element = element.element
    if not isinstance(element, ColumnClause):
        return None
    for model in models:
        if element.table is model.table and element.key in model.keys:
            return model, element.key
    return None


def _column(element: Any) -> ColumnClause[Any]:
    while isinstance(element, Grouping):
        element = element.element
    assert isinstance(element, ColumnClause)
    return element


def _values(element: Any, params: Mapping[str, Any]) -> Optional[list[Any]]:
    while isinstance(element, Grouping):
        element = element.element
    if not isinstance(element, BindParameter):
        return None
    value = params[element.key] if element.key in params else element.effective_value
    if element.expanding:
        return None if value is None else list(value)
    return [value]


class _Finder:
    def __init__(self, models: Sequence[ShardedModel], params: Mapping[str, Any]) -> None:
        self.models = models
        self.params = params
        self.terms: list[KeyTerm] = []

    def visit(self, expr: Any, conjunct: bool) -> Shards:
        while isinstance(expr, Grouping):
            expr = expr.element
        if isinstance(expr, BooleanClauseList):
            if expr.operator is operators.and_:
                result: Shards = None
                for clause in expr.clauses:
                    shards = self.visit(clause, conjunct)
                    if shards is not None:
                        result = shards if result is None else result & shards
                return result
            if expr.operator is operators.or_:
                union: set[int] = set()
                for clause in expr.clauses:
                    shards = self.visit(clause, False)
                    if shards is None:
                        return None
                    union |= shards
                return frozenset(union)
            return None
        if isinstance(expr, BinaryExpression):
            return self.binary(expr, conjunct)
        return None

    def binary(self, expr: BinaryExpression[Any], conjunct: bool) -> Shards:
        if expr.operator not in (operators.eq, operators.in_op):
            return None
        for column, other in ((expr.left, expr.right), (expr.right, expr.left)):
            found = _key_column(column, self.models)
            values = _values(other, self.params) if found else None
            if found is None or values is None:
                continue
            model, key = found
            by_shard: dict[int, list[Any]] = {}
            for value in values:
                if value is not None:
                    by_shard.setdefault(model.shard_of(key, value), []).append(value)
            if conjunct:
                self.terms.append(KeyTerm(expr, _column(column), model, by_shard))
            return frozenset(by_shard)
        return None


def route(
    models: Sequence[ShardedModel], where: Optional[ClauseElement], params: Mapping[str, Any]
) -> Route:
    """The shards ``where`` can match rows of ``models`` in (they must bind together).

    ``params`` are the statement's execution parameters, which supply the values of bound
    parameters given at execution time (relationship loads, ``session.get``).
    """
    finder = _Finder(models, params)
    shards = finder.visit(where, True) if where is not None else None
    return Route(shards, finder.terms)
