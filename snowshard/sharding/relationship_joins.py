"""Joins through a relationship attribute, read as the explicit joins they stand for.

``select(User).join(User.orders)`` joins along the relationship's ON clause, which
SQLAlchemy builds from the logical tables when it compiles the statement, too late to be
pointed at a shard. :func:`explicit_joins` rewrites each such join of a sharded model,
before anything is planned, as the join an application would write by hand::

    select(User).join(User.orders)           # the relationship join
    select(User).join_from(User, Order, User.id == Order.user_id)   # what is planned

The ON clause is the relationship's ``primaryjoin`` in the two classes' attributes, with
the criteria of ``User.orders.and_(...)`` added. On SQLAlchemy before 2.0.22, which gives
a relationship join the statement's ``with_loader_criteria()`` conditions but not an
explicit join, the ON clause also carries those of the target, and the WHERE clause those
of each model the ORM gives them in the WHERE of the statement as written but not of its
explicit form (a relationship join's parent, as its compile of each shows). Joins made
before ``with_only_columns()`` (``Query.with_entities()``) replaced the columns, which
SQLAlchemy keeps aside with the old columns, are rewritten too. ``outerjoin`` and
``full=True`` are kept, and so is an explicit left side (``join_from``). The statement is
then planned as any explicit join: exact table by table when the ON clause equates a shard
key of each model sharded alike, or with an unsharded model in the same database, and
refused otherwise.

Left as they are, and refused by the planner with the explicit form to write instead: a
relationship through a ``secondary`` table, one from a model to itself, ``of_type()``, a
relationship of an alias or of a physical class, and one whose ``primaryjoin`` names
columns of other tables or unmapped ones.

Statements are made explicit before their plan is looked up (:func:`explicit_joins`,
which looks at the statement's own joins only, so costs nothing to a statement without
any), and again, subqueries included, when a plan is made (:func:`explicit_nested_joins`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from sqlalchemy import and_
from sqlalchemy.orm import LoaderCriteriaOption, Mapper, RelationshipProperty
from sqlalchemy.orm.exc import UnmappedColumnError
from sqlalchemy.sql.elements import ColumnClause
from sqlalchemy.sql.visitors import iterate, replacement_traverse

from snowshard._compat import (
    EXPLICIT_JOINS_TAKE_CRITERIA,
    criteria_condition,
    explicit_join,
    joins_of,
    parent_entity,
    relationship_join_extras,
    where_criteria_mappers,
    with_joins,
)
from snowshard.sharding.analysis import nested_selects
from snowshard.sharding.criteria import applies_to, criteria_of
from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.model import model_of_mapper

__all__ = ["explicit_joins", "explicit_nested_joins"]


def explicit_joins(statement: Any) -> Any:
    """``statement`` with each join through a relationship of a sharded model written as
    its explicit join (module docstring); ``statement`` itself when it has none."""
    joins = joins_of(statement)
    if not joins:
        return statement
    criteria = [] if EXPLICIT_JOINS_TAKE_CRITERIA else criteria_of(statement)
    made = [_explicit(join, criteria) for join in joins]
    if all(m is None for m in made):
        return statement
    explicit = with_joins(statement, [j if m is None else m for j, m in zip(joins, made)])
    if not criteria:
        return explicit
    # before 2.0.22 the ORM may also put the criteria of a relationship join's parent in
    # the WHERE clause (when the FROM entry the join ends in is annotated with it), where
    # it gives the left side of an explicit join none: the WHERE gets what it would give
    where = [criteria_condition(o, m.class_) for m in _where_only_in(statement, explicit)
             for o in criteria if applies_to(o, m.class_)]  # fmt: skip
    return explicit.where(*where) if where else explicit


def _where_only_in(statement: Any, explicit: Any) -> list[Mapper[Any]]:
    """The mappers the ORM gives loader criteria in the WHERE of ``statement``, not of
    its ``explicit`` form; refuses one that only the explicit form gives them."""
    before, after = where_criteria_mappers(statement), where_criteria_mappers(explicit)
    if before is None or after is None:
        raise UnsupportedShardQuery(
            "with_loader_criteria() beside a join through a relationship of a sharded model "
            "is not supported on SQLAlchemy before 2.0.22 for a statement that compiles "
            "only for its database; join with an explicit ON clause instead"
        )
    if after - before:
        raise UnsupportedShardQuery(
            "with_loader_criteria() beside this join through a relationship of a sharded "
            "model is not supported on SQLAlchemy before 2.0.22: written as its explicit "
            "join, the ORM would apply the criteria to more rows; join with an explicit ON "
            "clause instead, or upgrade SQLAlchemy"
        )
    return sorted(before - after, key=lambda m: m.class_.__name__)


def explicit_nested_joins(statement: Any) -> Any:
    """:func:`explicit_joins` of ``statement`` and of every SELECT inside it (subqueries,
    EXISTS, CTEs); ``statement`` itself when none has such a join."""
    inner = {id(s) for s in nested_selects(statement) if _follows_relationships(s)}
    if inner:

        def replace(element: Any) -> Any:
            if element is not statement and id(element) in inner:
                return explicit_nested_joins(element)
            if isinstance(element, LoaderCriteriaOption):
                return element  # kept as it is: SQLAlchemy cannot copy one
            return None

        statement = replacement_traverse(statement, {}, replace)  # type: ignore[call-overload]
    return explicit_joins(statement)


def _follows_relationships(statement: Any) -> bool:
    return any(_followed(join) is not None for join in joins_of(statement))


def _followed(join: tuple[Any, ...]) -> Optional[tuple[RelationshipProperty[Any], Any]]:
    """``(relationship, attribute)`` of a ``join()`` tuple this module rewrites, or None:
    a relationship of :func:`_relationship`, into its own target, without ``of_type()``."""
    target, onclause = join[:2]
    attribute, named = (target, None) if onclause is None else (onclause, target)
    prop = _relationship(attribute)
    if prop is None or (named is not None and parent_entity(named) is not prop.mapper):
        return None
    if relationship_join_extras(attribute)[1] is not None:
        return None  # of_type()
    return prop, attribute


def _explicit(join: tuple[Any, ...], criteria: Sequence[Any]) -> Optional[tuple[Any, ...]]:
    """The explicit form of one ``join()`` tuple, or None to leave it as it is. The ON
    clause also carries the conditions of those of the statement's loader ``criteria``
    that apply to the target, which the ORM adds to a relationship join itself (and, on
    SQLAlchemy before 2.0.22, to no explicit join)."""
    followed = _followed(join)
    if followed is None:
        return None
    prop, attribute = followed
    on = _on_clause(prop)
    if on is None:
        return None
    extras = list(relationship_join_extras(attribute)[0])
    target = prop.mapper.class_
    extras += [criteria_condition(o, target) for o in criteria if applies_to(o, target)]
    if extras:
        on = and_(on, *extras)
    from_, flags = join[2:4]
    left = from_ if from_ is not None else prop.parent.class_
    return explicit_join(left, target, on, dict(flags))


def _relationship(attribute: Any) -> Optional[RelationshipProperty[Any]]:
    """The relationship ``attribute`` follows, if it is one this module rewrites: of a
    logical class (not an alias or a physical class), to another class, with no secondary
    table, and a sharded model at one end."""
    prop = getattr(attribute, "property", None)
    if not isinstance(prop, RelationshipProperty):
        return None
    if not isinstance(getattr(attribute, "parent", None), Mapper):
        return None  # an alias's relationship
    parent, target = prop.parent, prop.mapper
    ends = [model_of_mapper(parent), model_of_mapper(target)]
    if all(end is None for end in ends) or any(e is not None and e[1] is not None for e in ends):
        return None  # no sharded model (SQLAlchemy joins it), or a physical class
    if prop.secondary is not None or parent.local_table is target.local_table:
        return None
    return prop


def _on_clause(prop: RelationshipProperty[Any]) -> Any:
    """``prop``'s primaryjoin in its two classes' attributes, or None if it names a column
    of neither class's table, or one that neither maps."""
    sides = {prop.parent.local_table: prop.parent, prop.mapper.local_table: prop.mapper}
    for element in iterate(prop.primaryjoin):
        if isinstance(element, ColumnClause) and _attribute(sides, element) is None:
            return None

    def replace(element: Any) -> Any:
        if isinstance(element, ColumnClause):
            return _attribute(sides, element)
        return None

    return replacement_traverse(prop.primaryjoin, {}, replace)  # type: ignore[call-overload]


def _attribute(sides: dict[Any, Mapper[Any]], column: ColumnClause[Any]) -> Any:
    """The class attribute (as a column expression) mapping ``column`` on its side."""
    mapper = sides.get(getattr(column, "table", None))
    if mapper is None:
        return None
    try:
        key = mapper.get_property_by_column(column).key
    except UnmappedColumnError:
        return None
    return getattr(mapper.class_, key).__clause_element__()
