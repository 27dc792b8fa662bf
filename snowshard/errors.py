"""The exceptions snowshard raises.

Every error derives from :class:`SnowshardError`, so ``except SnowshardError`` catches
everything the library raises on purpose. Errors caused by a bad argument also derive from
``ValueError`` or ``TypeError`` so generic callers can treat them as such.
"""

from __future__ import annotations

__all__ = [
    "ClockMovedBackwards",
    "ClockStalled",
    "FieldOutOfRange",
    "IdTypeError",
    "InvalidId",
    "LayoutError",
    "LayoutExpired",
    "MissingExtra",
    "SnowshardError",
    "WorkerIdError",
]


class SnowshardError(Exception):
    """Base class of every error snowshard raises."""


class LayoutError(SnowshardError, ValueError):
    """A layout's bit widths, epoch or tick are invalid, or an option contradicts it."""


class FieldOutOfRange(SnowshardError, ValueError):
    """A value does not fit the bits the layout gives its field (or predates the epoch)."""


class InvalidId(SnowshardError, ValueError):
    """A value is not an ID of this layout: negative, too wide or not a decimal number."""


class IdTypeError(SnowshardError, TypeError):
    """An ID or key of an unsupported type (``bool``, ``float``, ``None``, ...)."""


class ClockMovedBackwards(SnowshardError):
    """The clock went back further (or for longer) than the generator may wait out."""


class ClockStalled(SnowshardError):
    """An injected clock did not advance while the generator waited for the next tick."""


class WorkerIdError(SnowshardError):
    """No valid worker ID: out of range, shared after ``fork()``, or its lease is gone."""


class LayoutExpired(SnowshardError):
    """The layout's timestamp field is exhausted; no later ID fits in it."""


class MissingExtra(SnowshardError, ImportError):
    """A feature needs a package of an optional extra that is not installed (says which)."""
