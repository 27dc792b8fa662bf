"""Event listeners on a sharded model's logical class must reach its physical classes.

The rows of ``Order`` are instances of its physical classes (``Order_00`` ..), which
inherit from it (:mod:`~snowshard.sharding.mapping`). SQLAlchemy runs a listener
registered on a class for its subclasses only when it was registered with
``propagate=True``; without it, ``before_insert``, ``load`` or an attribute's ``set``
listener on ``Order`` would silently never run. :func:`check_listeners` finds such
listeners (on the logical class, its mapper or its attributes, and on none of its physical
classes; SQLAlchemy's own, which each mapper installs for itself, aside) and raises
:class:`~snowshard.sharding.errors.UnpropagatedListener`, naming the first, before any
SQL. A :class:`~snowshard.sharding.session.ShardedSession` checks the models of each
read, ``get`` and flush; a model found clean costs a lookup until the next ``listen()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import inspect

from snowshard._compat import listener_function, listener_registrations, listeners_of
from snowshard.sharding.errors import UnpropagatedListener
from snowshard.sharding.model import ShardedModel

__all__ = ["check_listeners", "unpropagated"]

MAPPER_EVENTS = (
    "before_insert", "after_insert", "before_update", "after_update", "before_delete",
    "after_delete",
)  # fmt: skip
"""Mapper events a flush fires for each row (configuration events fire for the logical
mapper itself)."""
INSTANCE_EVENTS = (
    "init", "init_failure", "load", "refresh", "refresh_flush", "expire", "pickle", "unpickle"
)  # fmt: skip
ATTRIBUTE_EVENTS = (
    "set", "append", "append_wo_mutation", "bulk_replace", "remove", "modified",
    "init_scalar", "init_collection", "dispose_collection",
)  # fmt: skip


def _dispatches(model: ShardedModel) -> Iterator[tuple[str, Any, Any, tuple[str, ...]]]:
    """(what is listened to, its dispatch on the logical class, on a physical class, events)."""
    logical: Any = inspect(model.cls)
    physical: Any = model.mappers[0]
    yield model.name, logical.dispatch, physical.dispatch, MAPPER_EVENTS
    yield model.name, logical.class_manager.dispatch, physical.class_manager.dispatch, (
        INSTANCE_EVENTS
    )
    for key in logical.attrs.keys():
        mine = getattr(getattr(model.cls, key, None), "dispatch", None)
        theirs = getattr(getattr(physical.class_, key, None), "dispatch", None)
        if mine is not None and theirs is not None:
            yield f"{model.name}.{key}", mine, theirs, ATTRIBUTE_EVENTS


def unpropagated(model: ShardedModel) -> list[tuple[str, str, Any]]:
    """``(target, event, function)`` of each listener on ``model``'s logical class that its
    physical classes do not have."""
    found = []
    for target, mine, theirs, events in _dispatches(model):
        for event in events:
            listening = listeners_of(mine, event)
            if not listening:
                continue
            reached = set(listeners_of(theirs, event))
            for listener in listening:
                function = listener_function(listener)
                if listener not in reached and not _sqlalchemy_own(function):
                    found.append((target, event, function))
    return found


def _sqlalchemy_own(function: Any) -> bool:
    """SQLAlchemy's own listeners (``@validates``, backrefs): each mapper installs them on
    its own attributes, the physical classes' included."""
    return str(getattr(function, "__module__", "")).startswith("sqlalchemy.")


def _name(function: Any) -> str:
    return str(getattr(function, "__qualname__", None) or repr(function))


_clean: WeakKeyDictionary[ShardedModel, int] = WeakKeyDictionary()
"""Model -> :func:`listener_registrations` when it was last found to have no such listener
(weak: a model goes with its declarative base)."""


def check_listeners(models: Iterable[ShardedModel]) -> None:
    """Raise :class:`UnpropagatedListener` if a listener on one of ``models``' logical
    classes would never run (module docstring); a model is skipped while no listener was
    registered since it was last found clean."""
    registrations = listener_registrations()
    for model in models:
        if _clean.get(model) != registrations:
            _check(model)
            _clean[model] = registrations


def _check(model: ShardedModel) -> None:
    missing = unpropagated(model)
    if not missing:
        return
    target, event, function = missing[0]
    others = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    raise UnpropagatedListener(
        f"the {event!r} listener {_name(function)} on {target}{others} would never run: "
        f"{model.name}'s rows are instances of its physical classes ({model.classes[0].__name__} "
        f"..), which SQLAlchemy passes only listeners registered with propagate=True. "
        f"Register it with event.listen({target}, {event!r}, {_name(function)}, "
        f"propagate=True) or @event.listens_for({target}, {event!r}, propagate=True)"
    )
