"""Plans computed once per statement shape, so a new bound value costs a routing decision only.

Applications build a new statement per call (``select(Order).where(Order.user_id ==
user)``). Statements of one *shape* (equal SQLAlchemy cache keys: same structure, any
bound values) name the same models, pass the same checks and are rewritten alike; only
the shards their key values name differ. This module keeps, per shape, in a bounded LRU
per ORM entity (the statement's subject):

* the sharded models the statement names;
* per routing outcome (the shards its WHERE names, the shard hint, the session's
  databases): the plan of a statement read from one source (one shard, or one UNION ALL),
  whose physical statements take the bound values of the statement being executed as
  execution parameters under their own keys (:class:`~snowshard._compat.SlotParameter`).
  Their SQLAlchemy cache keys are computed once, so the compiled cache hits without
  walking them again. The values travel with the execution, never through shared state,
  so a statement run in between (by an autoflush's hook, say) cannot lend its values;
* per shape, how its WHERE clause routes (:func:`~.routing.route_recipe`): the key terms'
  positions among the bound values, so routing a new statement walks nothing;
* plans merged from several sources are kept only for equal bound values (their merge
  depends on LIMIT, OFFSET and constants), and never when execution parameters are given.

Keys are cache-key tuples, never ``id()``; a plan is only reused for the same routing
outcome and the same map of databases, and never for a shape that names unsharded tables
when the session has several databases (whether those may be read depends on the
session). Statements SQLAlchemy cannot cache, UPDATE and DELETE always take the full path.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple, Optional

from sqlalchemy import Select
from sqlalchemy.orm import LoaderCriteriaOption
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.visitors import replacement_traverse

from snowshard._compat import (
    KeyedSubquery,
    SlotParameter,
    cache_key_of,
    forget_clone_origin,
    options_of,
    plugin_subject_of,
    slot_parameter,
)
from snowshard.sharding.analysis import unsharded_tables
from snowshard.sharding.criteria import covers
from snowshard.sharding.hints import Hint, apply_hint
from snowshard.sharding.model import ShardedModel
from snowshard.sharding.routing import Route, route, route_recipe

__all__ = ["PLANS_INFO", "Lookup", "PlanCache", "cached_plan", "plan_cache_of", "shape_models"]

_values: ContextVar[Mapping[object, Sequence[Any]]] = ContextVar(
    "snowshard_shape_values", default={}
)
"""Per cached plan (its owner token): the bound parameters of the statement being executed
(read while it compiles; its SQL gets the values as execution parameters)."""

_UNCACHEABLE = object()
_UNKNOWN = object()
_NONE: Mapping[str, Any] = {}


class _Slot:
    """The value of one bound parameter of the executing statement of its plan."""

    __slots__ = ("default", "index", "owner")

    def __init__(self, owner: object, index: int, default: Any) -> None:
        self.owner = owner
        self.index = index
        self.default = default

    def __call__(self) -> Any:
        found = _values.get().get(self.owner)
        return self.default if found is None else found[self.index].effective_value


class _Shape:
    """What is known about one statement shape."""

    __slots__ = ("column_load", "models", "plans", "recipe", "unsharded")

    def __init__(self, models: list[ShardedModel], unsharded: bool) -> None:
        self.models = models
        self.unsharded = unsharded
        self.column_load: Optional[bool] = None
        """Whether the shape's statements refresh an object's attributes (None: not yet known)."""
        self.plans: dict[Hashable, Any] = {}
        self.recipe: Any = _UNKNOWN
        """The shape's :data:`~snowshard.sharding.routing.RouteRecipe` (None: walk)."""


class _Template:
    """A cached plan whose statements read the executing statement's values.

    ``keys`` are its bound parameters' keys by position in the logical statement's cache
    key: each execution passes its values as execution parameters under those keys, so
    the SQL gets them even if another statement of the same shape runs in between (a
    ``before_flush`` hook querying during autoflush); the context variable only serves
    reads of a value while the statement is compiled.
    """

    __slots__ = ("keys", "owner", "plan")

    def __init__(self, owner: object, plan: Any, keys: list[tuple[str, int]]) -> None:
        self.owner = owner
        self.plan = plan
        self.keys = keys

    def parameters(self, binds: Sequence[Any]) -> dict[str, Any]:
        """The execution parameters that give this template ``binds``' values."""
        return {key: binds[index].effective_value for key, index in self.keys}


_caches: weakref.WeakSet[PlanCache] = weakref.WeakSet()
"""Every live :class:`PlanCache`, so a forked child can give each a lock of its own."""


def _after_fork_in_child() -> None:
    for cache in list(_caches):
        cache._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class PlanCache:
    """A bounded, thread-safe LRU mapping: statement cache key -> what its shape needs.

    A hit hashes its key once and takes no lock: it stamps the entry with a counter, and a
    put past the size drops the entries with the oldest stamps (as SQLAlchemy's own
    statement cache does). A statement's cache key is a long tuple, rehashed on every
    lookup, so each extra dictionary operation per execution shows in keyed reads.
    """

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._entries: dict[Hashable, list[Any]] = {}
        self._clock = itertools.count()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        _caches.add(self)

    def _after_fork(self) -> None:
        # a thread of the parent may have held the lock at the fork; it does not exist here
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Optional[_Shape]:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        entry[0] = next(self._clock)
        return entry[1]  # type: ignore[no-any-return]

    def put(self, key: Hashable, shape: _Shape) -> _Shape:
        with self._lock:
            entry = self._entries.setdefault(key, [0, shape])
            entry[0] = next(self._clock)
            if len(self._entries) > self.size:
                by_age = sorted(self._entries.items(), key=lambda item: item[1][0])
                for old, _ in by_age[: len(self._entries) - self.size]:
                    del self._entries[old]
            return entry[1]  # type: ignore[no-any-return]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


PLANS_INFO = "snowshard_plans"
"""``info`` key of the class manager of an ORM statement's subject: its :class:`PlanCache`.

Kept with the mapped class, not in a registry of this module, so a declarative base that
is dropped takes its cached plans (which name its tables and classes) with it."""


def plan_cache_of(statement: Any) -> Optional[PlanCache]:
    """The cache of statements about the same ORM entity as ``statement`` (None for Core
    statements, which take the full path)."""
    subject = plugin_subject_of(statement)
    try:
        info = subject.mapper.class_manager.info
    except AttributeError:  # no subject (None), or one that is not about a mapped class
        return None
    found: Optional[PlanCache] = info.get(PLANS_INFO)
    if found is None:
        found = info.setdefault(PLANS_INFO, PlanCache())
    return found


class Lookup(NamedTuple):
    """A statement's cache key (None if uncacheable) and what its shape's entry holds."""

    key: Any
    shape: Optional[_Shape]


def shape_models(
    statement: Any, find: Callable[[Any], list[ShardedModel]]
) -> tuple[list[ShardedModel], Lookup]:
    """The sharded models ``statement`` names (``find(statement)`` once per shape), and
    the statement's :class:`Lookup` for :func:`cached_plan` (computed once per execution)."""
    key = cache_key_of(statement)
    cache = plan_cache_of(statement) if key is not None else None
    shape = cache.get(key.key) if cache is not None else None
    if shape is not None:
        return shape.models, Lookup(key, shape)
    models = find(statement)
    if cache is not None:
        shape = cache.put(key.key, _Shape(models, bool(models and unsharded_tables(statement))))
    return models, Lookup(key, shape)


def is_column_load(state: Any, lookup: Lookup) -> bool:
    """``state.is_column_load`` (a refresh of an object's attributes), decided once per
    shape: the refresh flag changes the SQL SQLAlchemy compiles, so it is part of the
    statement's cache key, and statements of one shape are all refreshes or none."""
    shape = lookup.shape
    if shape is not None and shape.column_load is not None:
        return shape.column_load
    found = bool(state.is_orm_statement and state.is_column_load)  # text(): fails on 2.0.x
    if shape is not None:
        shape.column_load = found
    return found


def _hashable(values: Sequence[Any]) -> Optional[tuple[Any, ...]]:
    frozen = tuple(tuple(v) if isinstance(v, list) else v for v in values)
    try:
        hash(frozen)
    except TypeError:
        return None
    return frozen


def _same(left: Any, right: Any) -> bool:
    try:
        return bool(left == right) and type(left) is type(right)
    except Exception:  # a value type whose == raises or is ambiguous
        return False


def _slotted(
    statement: Any, logical: Any, owner: object, keys: dict[str, int]
) -> Optional[Any]:
    """``statement`` (a physical rewrite of the statement with cache key ``logical``) with
    each bound parameter reading the executing statement's value, or None if its bound
    parameters do not line up one to one with the logical statement's, or if one key would
    stand for two positions. Each parameter's key goes into ``keys`` with its position."""
    physical = cache_key_of(statement)
    if physical is None or len(physical.bindparams) != len(logical.bindparams):
        return None
    slots: dict[BindParameter[Any], SlotParameter] = {}
    for index, (mine, theirs) in enumerate(zip(physical.bindparams, logical.bindparams)):
        if mine.expanding != theirs.expanding or not _same(
            mine.effective_value, theirs.effective_value
        ):
            return None
        slot = slots[mine] = slot_parameter(mine, _Slot(owner, index, mine.effective_value))
        if keys.setdefault(slot.key, index) != index:
            return None

    def replace(element: Any) -> Any:
        if isinstance(element, LoaderCriteriaOption):
            return element  # holds no bound value of the statement; SQLAlchemy cannot copy it
        if isinstance(element, KeyedSubquery):
            # the UNION ALL of a model's tables holds no bound values; copying it would
            # make the FROM list and the ORM columns name two different copies of it,
            # which SQL renders as two FROM entries (FROM union JOIN t ..., union)
            return element
        return slots.get(element) if isinstance(element, BindParameter) else None

    copy = forget_clone_origin(replacement_traverse(statement, {}, replace))  # type: ignore[call-overload]
    rebuilt = cache_key_of(copy)
    expected = [slots[b] for b in physical.bindparams]
    if rebuilt is None or len(rebuilt.bindparams) != len(expected):
        return None
    if any(a is not b for a, b in zip(rebuilt.bindparams, expected)):
        return None
    return copy


def _template(plan: Any, logical: Any) -> Any:
    owner = object()
    steps = []
    keys: dict[str, int] = {}
    for step in plan.steps:
        slotted = _slotted(step.statement, logical, owner, keys)
        if slotted is None:
            return _UNCACHEABLE
        steps.append(dataclasses.replace(step, statement=slotted))
    return _Template(owner, dataclasses.replace(plan, steps=steps), list(keys.items()))


def _dialect(session: Any, model: ShardedModel) -> Hashable:
    return session.get_bind(mapper=model.mappers[0]).dialect.name  # type: ignore[no-any-return]


def _route(
    shape: _Shape, statement: Any, params: Any, models: Sequence[ShardedModel], binds: Any
) -> Route:
    """:func:`route` of ``statement``, by its shape's recipe when it has one."""
    if params:  # execution parameters override bound values: only the walk reads them
        return route(models, statement.whereclause, params)
    recipe = shape.recipe
    if recipe is _UNKNOWN:
        recipe = shape.recipe = route_recipe(models, statement.whereclause, binds)
    if recipe is None:
        return route(models, statement.whereclause, params)
    return Route(recipe(binds))


def cached_plan(
    session: Any,
    statement: Any,
    params: Any,
    hint: Optional[Hint],
    models: Sequence[ShardedModel],
    build: Callable[[], Any],
    lookup: Lookup,
) -> tuple[Any, Mapping[str, Any]]:
    """The plan ``build()`` makes for ``statement``, reused across statements of its shape,
    and the execution parameters its statements must run with (empty unless it is a
    template: the values of ``statement``'s bound parameters).

    ``build`` is called (and may raise) whenever no plan is cached for this shape and
    routing outcome; refusals are never cached, so they are raised every time.
    """
    if not isinstance(statement, Select) or not isinstance(params, Mapping):
        return build(), _NONE
    if any(covers(o, m) for o in options_of(statement) for m in models):
        # loader criteria on a model: its plan holds conditions made from the option
        # (a lambda's closure values included), so it is made anew for each statement
        return build(), _NONE
    key, shape = lookup
    databases = getattr(session, "databases", None) or {}
    if (
        shape is None
        or (shape.models is not models and shape.models != list(models))
        or (shape.unsharded and databases)
    ):
        return build(), _NONE
    route_ = _route(shape, statement, params, models, key.bindparams)
    if hint is not None:
        route_ = apply_hint(hint, models, route_)
    outcome = (route_.shards, hint, session.bind, tuple(databases.items()))
    found = shape.plans.get(outcome)
    plan = None
    if found is None:  # first time: the full plan (or a refusal), then its template
        plan = build()
        if plan.merge is None:
            found = shape.plans[outcome] = _template(plan, key)
        else:
            found = shape.plans[outcome] = {}
    if isinstance(found, _Template):  # run the template even now: one compiled form
        binds = key.bindparams
        _values.set({found.owner: binds})
        return found.plan, found.parameters(binds)
    values = _hashable([b.effective_value for b in key.bindparams])
    if found is _UNCACHEABLE or params or values is None:
        return (plan if plan is not None else build()), _NONE
    merged_key = (values, _dialect(session, models[0]))
    cached = found.get(merged_key)
    if cached is not None:
        return cached, _NONE
    if plan is None:
        plan = build()
    if len(found) < 64:  # per routing outcome: the most common values only
        found[merged_key] = plan
    return plan, _NONE
