"""Turning a statement about logical models into one about physical tables.

:func:`retarget` copies a statement with :func:`sqlalchemy.sql.visitors.replacement_traverse`,
replacing every reference to a logical model: the entity and its attributes (ORM) or
its table and columns (Core) become those of a physical class, or of a
:func:`~snowshard.sharding.mapping.union_entity` reading several tables. Key terms can be
narrowed to the values of one shard. Nothing is done to SQL text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypeVar, Union

from sqlalchemy import Table, inspect
from sqlalchemy.orm import LoaderCriteriaOption
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.elements import ClauseElement, ColumnClause, ColumnElement
from sqlalchemy.sql.visitors import replacement_traverse

from snowshard._compat import (
    bundle_of,
    deannotated,
    options_of,
    orm_annotated,
    plugin_subject_of,
    set_plugin_subject,
)
from snowshard.sharding.criteria import conditions_for, inert, target_option
from snowshard.sharding.mapping import union_entity
from snowshard.sharding.model import ShardedModel, model_of_table
from snowshard.sharding.routing import KeyTerm

__all__ = ["Target", "criteria_options", "narrow", "retarget"]

_S = TypeVar("_S", bound=Union[Executable, ClauseElement])
"""A statement, or an expression (a value the flush writes)."""


class Target:
    """What a logical model becomes in one statement: one physical class, or a union."""

    def __init__(self, model: ShardedModel, shards: tuple[int, ...]) -> None:
        self.model = model
        self.shards = shards
        self.entity: Any = (
            model.classes[shards[0]] if len(shards) == 1 else union_entity(model, shards)
        )
        self.inspected: Any = inspect(self.entity)
        self.selectable: Any = self.inspected.selectable

    def column(self, column: ColumnClause[Any], orm: bool) -> ColumnElement[Any]:
        if orm:
            return getattr(self.entity, column.key).__clause_element__()  # type: ignore[no-any-return]
        found: Optional[ColumnElement[Any]] = self.selectable.c.get(column.key)
        return found if found is not None else self.selectable.c[column.name]

    def from_clause(self, orm: bool) -> Any:
        return self.inspected.__clause_element__() if orm else self.selectable


def narrow(term: KeyTerm, target: Target, shard: int) -> ColumnElement[bool]:
    """``term`` restricted to the values that live in ``shard``."""
    column = target.column(term.column, orm_annotated(term.column))
    values = term.by_shard.get(shard, [])
    narrowed: ColumnElement[bool] = column == values[0] if len(values) == 1 else column.in_(values)
    return narrowed


def retarget(
    statement: _S,
    targets: Mapping[ShardedModel, Target],
    replacements: Optional[Mapping[int, ClauseElement]] = None,
) -> _S:
    """A copy of ``statement`` naming each model's target instead of its logical table.

    ``replacements`` maps ``id()`` of elements of ``statement`` to what replaces them.
    """
    swaps = replacements or {}

    def replace(element: Any) -> Any:
        swap = swaps.get(id(element))
        if swap is not None:
            return swap
        if isinstance(element, LoaderCriteriaOption):
            # kept for unsharded models and relationship loads; the targets get their
            # own options below (criteria). SQLAlchemy cannot copy one, and need not
            return inert(element, targets)
        bundle = bundle_of(element)
        if bundle is not None:
            # the ORM reads a bundle's columns from the Bundle object, not from this
            # element's children, so a new bundle over the retargeted columns replaces it
            # (selectinload on SQLAlchemy 2.0 selects Bundle("pk", ...): without this, its
            # SQL named the logical table too: FROM orders_01, orders)
            exprs = [replacement_traverse(e, {}, replace) for e in bundle.exprs]  # type: ignore[call-overload]
            new = type(bundle)(bundle.name, *exprs, single_entity=bundle.single_entity)
            return new.__clause_element__()
        if isinstance(element, ColumnClause):
            table = element.table
            model = model_of_table(table)
            target = targets.get(model) if model is not None else None
            if target is not None:
                return target.column(element, orm_annotated(element))
            return None
        if isinstance(element, Table):
            model = model_of_table(deannotated(element))
            target = targets.get(model) if model is not None else None
            if target is not None:
                return target.from_clause(orm_annotated(element))
        return None

    copy: Any = replacement_traverse(statement, {}, replace)  # type: ignore[call-overload]
    subject = plugin_subject_of(statement)
    for target in targets.values():
        if subject is not None and subject.mapper is target.model.cls.__mapper__:  # type: ignore[attr-defined]
            # the ORM takes the statement's subject (bind, DML mapper) from these attributes,
            # which the copy would otherwise keep pointing at the logical mapper
            set_plugin_subject(copy, target.inspected)
            break
    extra = criteria_options(options_of(statement), targets)
    if extra:
        copy = copy.options(*extra)
    return copy  # type: ignore[no-any-return]


def criteria_options(
    options: Sequence[Any], targets: Mapping[ShardedModel, Target]
) -> list[Any]:
    """One loader criteria option per target of a model that one of ``options`` covers,
    its condition made for the target (:mod:`~snowshard.sharding.criteria`)."""
    if not options:
        return []
    found: list[Any] = []
    for model, target in targets.items():
        for condition in conditions_for(options, model, target.entity):
            found.append(target_option(target.entity, retarget(condition, targets)))
    return found
