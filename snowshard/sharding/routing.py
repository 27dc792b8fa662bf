"""Which shards a statement needs: shard keys found in its WHERE clause.

The WHERE clause is walked as an expression tree (no SQL text is read). ``key == value``
and ``key IN (...)`` on a shard key column name the shards of their values; ``AND``
intersects, ``OR`` unites; anything else (``!=``, ``IS NULL``, ``NOT``, a subquery, a
function of the key) could match any shard. A key predicate that is a conjunct of the
WHERE clause is a :class:`KeyTerm`: per shard it can be narrowed to the values that live
there, so an ``IN`` list is split per shard.

With generations (:mod:`snowshard.sharding.generations`) a parent key's value names one
shard per generation, and a range term on the ID (``id >= x``, ``id > x``, ``id < y``,
``id <= y``, ``id BETWEEN x AND y``; what :func:`~snowshard.orm.timerange.id_between`
builds) names every shard of the generations whose IDs it can match. On a model without
generations a range names any shard.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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

from snowshard._compat import deannotated, untraversed_of
from snowshard.sharding.model import ShardedModel, model_of_table

__all__ = ["KeyTerm", "Route", "RouteRecipe", "find_models", "route", "route_recipe"]

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
    """The sharded models whose logical table the statement names, in order of appearance
    (an INSERT's ``values([...])`` rows included, which SQLAlchemy's traversal skips)."""
    found: list[ShardedModel] = []
    stack = [*reversed(untraversed_of(statement)), statement]
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
        if expr.operator in _FLIPPED or expr.operator is operators.between_op:
            return _id_range(expr, self.models, self.params)
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
                    for shard in model.shards_of(key, value):
                        by_shard.setdefault(shard, []).append(value)
            if conjunct:
                self.terms.append(KeyTerm(expr, _column(column), model, by_shard))
            return frozenset(by_shard)
        return None


_FLIPPED = {
    operators.ge: operators.le,
    operators.gt: operators.lt,
    operators.le: operators.ge,
    operators.lt: operators.gt,
}
"""Range operators, and what each becomes with its operands swapped (``5 < id``)."""


def _id_column(element: Any, models: Sequence[ShardedModel]) -> ShardedModel | None:
    """The model with generations whose ID column ``element`` is, else None."""
    found = _key_column(element, models)
    if found is None or found[0].timeline is None or found[1] != found[0].id_key:
        return None
    return found[0]


def _id_value(model: ShardedModel, element: Any, params: Mapping[str, Any]) -> int | None:
    values = _values(element, params)
    if values is None or len(values) != 1:
        return None
    value = values[0]
    if isinstance(value, str):
        assert model.id_key is not None
        value = model.normalize(model.id_key, value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None  # a float or an expression: no narrowing
    return value


def _bounded(model: ShardedModel, operator: Any, value: int) -> frozenset[int]:
    timeline = model.timeline
    assert timeline is not None
    if operator is operators.ge:
        return timeline.shards_from(value)
    if operator is operators.gt:
        return timeline.shards_from(value + 1)
    if operator is operators.le:
        return timeline.shards_to(value)
    return timeline.shards_to(value - 1)


def _between_of(
    expr: BinaryExpression[Any], models: Sequence[ShardedModel]
) -> Optional[tuple[ShardedModel, Any, Any, bool]]:
    """``id BETWEEN low AND high`` on the ID of a model with generations: the model, the two
    bound elements and whether it is SYMMETRIC; else None."""
    model = _id_column(expr.left, models)
    bounds = getattr(_plain(expr.right), "clauses", None)
    if model is None or bounds is None or len(bounds) != 2:
        return None
    return model, bounds[0], bounds[1], bool(expr.modifiers.get("symmetric"))


def _within(model: ShardedModel, low: int | None, high: int | None, symmetric: bool) -> Shards:
    if low is None or high is None:
        return None
    if symmetric:
        low, high = min(low, high), max(low, high)
    return _bounded(model, operators.ge, low) & _bounded(model, operators.le, high)


def _range_side(
    expr: BinaryExpression[Any], models: Sequence[ShardedModel]
) -> Optional[tuple[ShardedModel, Any, Any]]:
    """A range term on the ID of a model with generations, read ID first (``5 < id`` is
    ``id > 5``): the model, the value side and the operator; else None."""
    sides = (
        (expr.left, expr.right, expr.operator),
        (expr.right, expr.left, _FLIPPED[expr.operator]),
    )
    for column, other, operator in sides:
        model = _id_column(column, models)
        if model is not None:
            return model, other, operator
    return None


def _id_range(
    expr: BinaryExpression[Any], models: Sequence[ShardedModel], params: Mapping[str, Any]
) -> Shards:
    """The shards a range term on the ID of a model with generations can match."""
    if expr.operator is operators.between_op:
        found = _between_of(expr, models)
        if found is None:
            return None
        model, low, high, symmetric = found
        return _within(
            model, _id_value(model, low, params), _id_value(model, high, params), symmetric
        )
    side = _range_side(expr, models)
    if side is None:
        return None
    model, other, operator = side
    value = _id_value(model, other, params)
    return None if value is None else _bounded(model, operator, value)


def _plain(element: Any) -> Any:
    while isinstance(element, Grouping):
        element = element.element
    return element


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


RouteRecipe = Callable[[Sequence[Any]], Shards]
"""The shards of a statement of one shape, from its bound parameters in cache-key order."""


class _Opaque(Exception):
    """A WHERE clause :func:`route_recipe` cannot turn into a recipe (use :func:`route`)."""


def route_recipe(
    models: Sequence[ShardedModel], where: Optional[ClauseElement], binds: Sequence[Any]
) -> Optional[RouteRecipe]:
    """What :func:`route` computes for ``where``, as a function of the bound parameters.

    Statements of one shape (equal cache keys) have WHERE clauses of one structure whose
    bound parameters line up by position in their cache keys' ``bindparams`` (``binds``
    are this statement's). The recipe reads the values at the key terms' positions, so
    routing a statement of a known shape costs no walk of its WHERE clause. None when a key
    term's value is not one of ``binds`` (then :func:`route` must walk the clause).
    Only for statements executed without execution parameters, which :func:`route` would
    read first.
    """
    if where is None:
        return _every_shard
    positions = {id(bind): index for index, bind in enumerate(binds)}
    try:
        return _recipe(where, models, positions)
    except _Opaque:
        return None


def _every_shard(binds: Sequence[Any]) -> Shards:
    return None


def _recipe(expr: Any, models: Sequence[ShardedModel], positions: dict[int, int]) -> RouteRecipe:
    expr = _plain(expr)
    if isinstance(expr, BooleanClauseList) and expr.operator is operators.and_:
        parts = [_recipe(clause, models, positions) for clause in expr.clauses]
        return _all_of(parts)
    if isinstance(expr, BooleanClauseList) and expr.operator is operators.or_:
        parts = [_recipe(clause, models, positions) for clause in expr.clauses]
        return _any_of(parts)
    if not isinstance(expr, BinaryExpression):
        return _every_shard
    if expr.operator in _FLIPPED or expr.operator is operators.between_op:
        return _range_recipe(expr, models, positions)
    if expr.operator not in (operators.eq, operators.in_op):
        return _every_shard
    for column, other in ((expr.left, expr.right), (expr.right, expr.left)):
        found = _key_column(column, models)
        if found is not None and isinstance(_plain(other), BindParameter):
            return _key_term(*found, _position(other, positions), _plain(other).expanding)
    return _every_shard


def _position(element: Any, positions: dict[int, int]) -> int:
    found = positions.get(id(_plain(element)))
    if found is None:
        raise _Opaque
    return found


def _all_of(parts: list[RouteRecipe]) -> RouteRecipe:
    def shards(binds: Sequence[Any]) -> Shards:
        result: Shards = None
        for part in parts:
            found = part(binds)
            if found is not None:
                result = found if result is None else result & found
        return result

    return shards


def _any_of(parts: list[RouteRecipe]) -> RouteRecipe:
    def shards(binds: Sequence[Any]) -> Shards:
        union: set[int] = set()
        for part in parts:
            found = part(binds)
            if found is None:
                return None
            union |= found
        return frozenset(union)

    return shards


def _key_term(model: ShardedModel, key: str, index: int, expanding: bool) -> RouteRecipe:
    def shards(binds: Sequence[Any]) -> Shards:
        value = binds[index].effective_value
        if expanding:
            if value is None:
                return None
            found: set[int] = set()
            for item in value:
                if item is not None:
                    found.update(model.shards_of(key, item))
            return frozenset(found)
        return frozenset(model.shards_of(key, value)) if value is not None else frozenset()

    return shards


def _range_recipe(
    expr: BinaryExpression[Any], models: Sequence[ShardedModel], positions: dict[int, int]
) -> RouteRecipe:
    """:func:`_id_range` as a recipe: the bounds' values are read at their positions."""
    if expr.operator is operators.between_op:
        found = _between_of(expr, models)
        if found is None:
            return _every_shard
        ranged, low, high, symmetric = found
        first, last = _bound_position(low, positions), _bound_position(high, positions)

        def between(binds: Sequence[Any]) -> Shards:
            return _within(
                ranged,
                _bound_value(ranged, binds, first),
                _bound_value(ranged, binds, last),
                symmetric,
            )

        return between
    side = _range_side(expr, models)
    if side is None:
        return _every_shard
    model, other, operator = side
    index = _bound_position(other, positions)

    def bounded(binds: Sequence[Any]) -> Shards:
        value = _bound_value(model, binds, index)
        return None if value is None else _bounded(model, operator, value)

    return bounded


def _bound_position(element: Any, positions: dict[int, int]) -> Optional[int]:
    """The position of a bound value (None: not a bound parameter, so no narrowing)."""
    element = _plain(element)
    if not isinstance(element, BindParameter):
        return None
    if element.expanding:  # route() reads a one-item list as a bound; leave that to it
        raise _Opaque
    return _position(element, positions)


def _bound_value(model: ShardedModel, binds: Sequence[Any], index: Optional[int]) -> int | None:
    """:func:`_id_value` of the bound value at ``index``."""
    if index is None:
        return None
    value = binds[index].effective_value
    if isinstance(value, str):
        assert model.id_key is not None
        value = model.normalize(model.id_key, value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value
