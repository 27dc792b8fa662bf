"""Loader criteria (``with_loader_criteria()``) on sharded models.

``with_loader_criteria(Order, Order.deleted.is_(False))`` asks the ORM to add a condition
wherever ``Order`` is loaded. SQLAlchemy applies such an option to the entity it names
(and, with ``include_aliases=True``, to its aliases). A sharded statement reads ``Order``'s
physical classes (``Order_00`` ..: concrete subclasses, which an option naming ``Order``
does not reach) or a UNION ALL entity (an alias of ``Order``), and an expression over
``Order``'s columns names the logical table, which no database holds.

So each physical statement gets, for each sharded target it reads, one more option naming
that target, whose condition is made for it (:func:`conditions_for`): a lambda is called
with the target (a physical class, or the UNION ALL entity), as SQLAlchemy calls it with
each entity it applies to, and an expression is retargeted to the target's columns. (A
condition over the logical columns, left to SQLAlchemy to adapt to the union, would keep
the logical table in the statement the session checks before sending it.) The user's
option stays in the statement, so that it still reaches unsharded models and still
propagates to relationship loads (which are routed in their turn); one that SQLAlchemy
would itself apply to the targets with the logical table's columns (an expression with
``include_aliases=True``) is kept as a copy without aliases (:func:`inert`).

Refused before any SQL, with :class:`~snowshard.sharding.errors.UnsupportedShardQuery`:

* an option naming a physical class (``Order_03``): it would not reach a UNION ALL;
* an expression (not a lambda) for a base class or mixin of a sharded model: it names one
  table, not each model's;
* a condition that reads another sharded model, or reads one in a subquery: those
  tables would not be routed;
* an option on a subquery of the statement only (SQLAlchemy applies a subquery's own
  options to nothing; one the statement has too, as the legacy ``Query.count()`` gives
  it, applies from the statement);
* any option in a statement whose joins were made before ``with_only_columns()``
  (``Query.with_entities()``) replaced its columns: the ORM gives the models of such joins
  criteria by rules of its own (none to a parent whose old column was the whole entity).
  Options given before ``with_only_columns()``, which SQLAlchemy keeps aside with the old
  columns and still applies, count as the statement's own.

A ``do_orm_execute`` hook of a sharded session sees the physical statements (the session
routes first). An option it adds there reaches the tables only where SQLAlchemy applies it
to subclasses and aliases itself: a lambda with ``include_aliases=True``, the form of
SQLAlchemy's own recipe. Any other option it adds for a sharded model would be left out
silently, so :func:`unapplied` finds it, and the last check before SQL is sent
(:mod:`~snowshard.sharding.logical_guard`) raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.orm import LoaderCriteriaOption, with_loader_criteria
from sqlalchemy.sql.elements import ColumnElement

from snowshard._compat import criteria_condition, joins_set_aside, options_of
from snowshard.sharding.analysis import models_in_subqueries, models_named, nested_selects
from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.model import ShardedModel, model_of_mapper

__all__ = [
    "check_loader_criteria", "conditions_for", "covers", "criteria_of", "inert", "target_option",
    "unapplied",
]  # fmt: skip


def _root_class(option: LoaderCriteriaOption) -> Any:
    """The class an option's criteria apply to (with its subclasses)."""
    if option.root_entity is not None:
        return option.root_entity
    return getattr(option.entity, "class_", None)


def applies_to(option: LoaderCriteriaOption, cls: type) -> bool:
    """Whether ``option``'s criteria apply to the rows of the mapped class ``cls``."""
    root = _root_class(option)
    return isinstance(root, type) and issubclass(cls, root)


def criteria_of(statement: Any) -> list[LoaderCriteriaOption]:
    """The loader criteria options among a statement's own options."""
    return [o for o in options_of(statement) if isinstance(o, LoaderCriteriaOption)]


def covers(option: Any, model: ShardedModel) -> bool:
    """Whether ``option`` is a loader criteria option that applies to ``model``'s rows."""
    if not isinstance(option, LoaderCriteriaOption):
        return False
    root = _root_class(option)
    return isinstance(root, type) and (issubclass(model.cls, root) or root in model.classes)


def _named(option: LoaderCriteriaOption) -> str:
    root = _root_class(option)
    return f"with_loader_criteria({getattr(root, '__name__', root)}, ...)"


def _check_option(option: LoaderCriteriaOption, model: ShardedModel) -> None:
    root = _root_class(option)
    if root in model.classes:
        raise UnsupportedShardQuery(
            f"{_named(option)} names a physical class of the sharded model {model.name}, "
            "which the tables read together as one UNION ALL would not get: name the "
            f"model instead, with_loader_criteria({model.name}, ...)"
        )
    if option.root_entity is not None and not option.deferred_where_criteria:
        raise UnsupportedShardQuery(
            f"{_named(option)} gives an expression for a base class of the sharded model "
            f"{model.name}; an expression names one table, not each model's: give a "
            "lambda, with_loader_criteria(Base, lambda cls: cls.column == value)"
        )
    condition = criteria_condition(option, model.cls)
    outside = [m.name for m in models_named(condition) if m is not model]
    nested = models_in_subqueries(condition)
    if outside or nested:
        where = f"the sharded model {outside[0]}" if outside else "a sharded model in a subquery"
        raise UnsupportedShardQuery(
            f"the condition of {_named(option)} for {model.name} reads {where}, whose "
            "tables it would not route: keep the condition to the model's own columns"
        )


def check_loader_criteria(
    options: Iterable[Any], models: Iterable[ShardedModel], statement: Any = None
) -> None:
    """Raise :class:`UnsupportedShardQuery` for loader criteria on ``models`` that cannot
    be applied to their physical tables (module docstring); ``statement``: also for
    options given to its subqueries only."""
    options, models = list(options), list(models)
    for option in options:
        for model in models:
            if covers(option, model):
                _check_option(option, model)
    if statement is None:
        return
    if any(isinstance(o, LoaderCriteriaOption) for o in options):
        _check_joins_set_aside(statement)
    own = {id(option) for option in options}
    for select in nested_selects(statement):
        for option in options_of(select):
            if id(option) in own:
                continue  # the statement's own too (the legacy Query.count()): applied there
            for model in models:
                if covers(option, model):
                    raise UnsupportedShardQuery(
                        f"{_named(option)} is given to a subquery, not to the statement; "
                        f"for the sharded model {model.name} give it to the statement: "
                        "it applies to its subqueries too"
                    )


def _check_joins_set_aside(statement: Any) -> None:
    """Refuse loader criteria beside joins made before ``with_only_columns()`` replaced the
    columns: the ORM gives those joins' models criteria by rules of its own (none to a
    parent whose old column was the whole entity), which the per-table statements, whose
    joins are explicit, do not follow."""
    if any(joins_set_aside(select) for select in (statement, *nested_selects(statement))):
        raise UnsupportedShardQuery(
            "with_loader_criteria() in a statement whose joins were made before "
            "with_only_columns() (or Query.with_entities()) replaced its columns is not "
            "supported: SQLAlchemy gives the models of such joins the criteria by rules of "
            "its own, which the sharded statement would not follow; give the columns "
            "first, e.g. select(func.count()).select_from(Order).join(Order.items)"
        )


def inert(option: Any, models: Iterable[ShardedModel]) -> Any:
    """``option`` as it stays in a physical statement of ``models``: a copy without
    aliases when SQLAlchemy would otherwise apply its expression, over a model's logical
    table, to the targets (which are aliases or subclasses of the logical class)."""
    if (
        isinstance(option, LoaderCriteriaOption)
        and option.include_aliases
        and not option.deferred_where_criteria
        and option.entity is not None
        and any(covers(option, model) for model in models)
    ):
        return with_loader_criteria(
            option.entity.entity,
            option.where_criteria,
            propagate_to_loaders=option.propagate_to_loaders,
        )
    return option


def conditions_for(
    options: Sequence[Any], model: ShardedModel, entity: Any
) -> list[ColumnElement[bool]]:
    """The conditions of those of ``options`` that cover ``model``, made for ``entity`` (a
    physical class or a UNION ALL entity): a lambda is called with it; an expression is
    given as it is, naming the logical columns (the caller retargets it)."""
    return [criteria_condition(o, entity) for o in options if covers(o, model)]


def target_option(entity: Any, condition: ColumnElement[bool]) -> Any:
    """The option that applies ``condition`` to ``entity`` alone (relationship loads get
    the user's option instead)."""
    return with_loader_criteria(entity, condition, propagate_to_loaders=False)


def _entry(entity: Any) -> tuple[ShardedModel, int | None] | None:
    """``(model, shard)`` of an ORM entity of a sharded model (shard None for the logical
    class and a UNION ALL entity, whose mapper is the logical one), else None."""
    mapper = getattr(entity, "mapper", None)
    return model_of_mapper(mapper) if mapper is not None else None


def _target_model(option: LoaderCriteriaOption) -> ShardedModel | None:
    """The model whose physical class or UNION ALL entity ``option`` names (as the
    options :func:`target_option` makes do), or None."""
    found = _entry(option.entity)
    if found is None:
        return None
    model, shard = found
    aliased = getattr(option.entity, "is_aliased_class", False)
    return model if shard is not None or aliased else None


def unapplied(options: Sequence[Any], entities: Iterable[Any]) -> str | None:
    """A description of a loader criteria option among a physical statement's
    ``options`` that reaches none of the tables it reads of a sharded model (``entities``:
    the ORM entities the statement reads), or None. An option reaches them when options
    were made for the model's targets (:func:`target_option`) or when SQLAlchemy applies
    it to subclasses and aliases itself (a lambda with ``include_aliases=True``)."""
    models = {found[0] for found in map(_entry, entities) if found is not None}
    criteria = [(o, _target_model(o)) for o in options if isinstance(o, LoaderCriteriaOption)]
    targeted = {target for _, target in criteria}
    for option, target in criteria:
        if target is not None or (option.deferred_where_criteria and option.include_aliases):
            continue  # made for a target, or applied to the targets by SQLAlchemy itself
        for model in models:
            if covers(option, model) and model not in targeted:
                return f"{_named(option)} for the sharded model {model.name}"
    return None
