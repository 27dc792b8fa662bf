"""The exceptions snowshard raises: one tree under :class:`SnowshardError`.

``except SnowshardError`` catches everything the library raises on purpose. Errors caused
by a bad argument also derive from ``ValueError`` or ``TypeError``, so generic callers can
treat them as such. Each failure has one class; the tree groups them by what went wrong::

    SnowshardError
    ├── ConfigurationError (ValueError)   something declared or configured is invalid;
    │   │                                 raised when it is built, before any work
    │   ├── LayoutError                   bit widths, epoch, tick, layout options
    │   ├── StrategyError                 a shard strategy's parameters
    │   ├── ShardConfigError              a sharded table's declaration or spec
    │   ├── TwoPhaseConfigError           two-phase commit options (snowshard.sharding)
    │   └── WorkerConfigError             a worker ID setting (also a WorkerIdError)
    ├── FieldOutOfRange (ValueError)      a value does not fit its field of the layout
    ├── InvalidId (ValueError)            not an ID of this layout
    ├── IdTypeError (TypeError)           an ID or key of an unsupported type
    ├── IssuerTypeError (TypeError)       an object that is not an ID issuer
    ├── ClockMovedBackwards, ClockStalled, LayoutExpired     issuing IDs over time
    ├── WorkerIdError                     no valid worker ID (leases: snowshard.workers)
    ├── IssuerError                       the Redis issuer's store answered with an error
    │   └── IssuerUnavailable             ... or could not be reached
    ├── MissingExtra (ImportError)        an optional extra is not installed
    ├── ShardingError                     routing and running statements (snowshard.sharding)
    └── ORM-layer errors                  gene parents, naive datetimes (snowshard.orm)

The SQLAlchemy layer raises some of these through subclasses that also derive from
SQLAlchemy's ``DontWrapMixin``, so they reach the caller as themselves rather than wrapped
in ``StatementError``; catch them by the names above. The docs' errors page lists every
class with when it is raised.
"""

from __future__ import annotations

__all__ = [
    "ClockMovedBackwards",
    "ClockStalled",
    "ConfigurationError",
    "FieldOutOfRange",
    "IdTypeError",
    "InvalidId",
    "IssuerError",
    "IssuerTypeError",
    "IssuerUnavailable",
    "LayoutError",
    "LayoutExpired",
    "MissingExtra",
    "ShardConfigError",
    "SnowshardError",
    "StrategyError",
    "WorkerIdError",
]


class SnowshardError(Exception):
    """Base class of every error snowshard raises."""


class ConfigurationError(SnowshardError, ValueError):
    """Something declared or configured is invalid; raised when it is built, before any work."""


class LayoutError(ConfigurationError):
    """A layout's bit widths, epoch or tick are invalid, or an option contradicts it."""


class StrategyError(ConfigurationError):
    """A strategy's parameters are invalid (shard count, shift)."""


class ShardConfigError(ConfigurationError):
    """A sharded table is declared inconsistently (counts, names, databases)."""


class FieldOutOfRange(SnowshardError, ValueError):
    """A value does not fit the bits the layout gives its field (or predates the epoch)."""


class InvalidId(SnowshardError, ValueError):
    """A value is not an ID of this layout: negative, too wide or not a decimal number."""


class IdTypeError(SnowshardError, TypeError):
    """An ID or key of an unsupported type (``bool``, ``float``, ``None``, ...)."""


class IssuerTypeError(SnowshardError, TypeError):
    """An object given as an ID issuer lacks ``layout`` or ``next_id``."""


class ClockMovedBackwards(SnowshardError):
    """The clock went back further (or for longer) than the generator may wait out."""


class ClockStalled(SnowshardError):
    """An injected clock did not advance while the generator waited for the next tick."""


class WorkerIdError(SnowshardError):
    """No valid worker ID: out of range, shared after ``fork()``, or its lease is gone."""


class LayoutExpired(SnowshardError):
    """The layout's timestamp field is exhausted; no later ID fits in it."""


class IssuerError(SnowshardError):
    """Redis answered the issuer with an error (a wrong key type, a script error, ...)."""


class IssuerUnavailable(IssuerError):
    """Redis could not be reached, timed out, or refused the credentials."""


class MissingExtra(SnowshardError, ImportError):
    """A feature needs a package of an optional extra that is not installed (says which)."""
