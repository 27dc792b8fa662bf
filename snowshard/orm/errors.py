"""The errors of the SQLAlchemy layer.

Errors raised while SQLAlchemy prepares a statement (bind values, column defaults) also
derive from :class:`sqlalchemy.exc.DontWrapMixin`, so they reach the caller as themselves,
not wrapped in ``sqlalchemy.exc.StatementError``. They are raised before any SQL is sent.
"""

from __future__ import annotations

from sqlalchemy.exc import DontWrapMixin

from snowshard.errors import IdTypeError, InvalidId, SnowshardError

__all__ = [
    "GeneParentError",
    "MissingGeneParent",
    "NaiveDatetimeError",
    "TimeRangeError",
]


class _UnwrappedInvalidId(InvalidId, DontWrapMixin):
    """:class:`~snowshard.InvalidId` raised while binding a value to a snowflake column.

    Private: catch :class:`~snowshard.InvalidId`. This subclass only keeps SQLAlchemy from
    wrapping the error in ``StatementError``.
    """


class _UnwrappedIdTypeError(IdTypeError, DontWrapMixin):
    """:class:`~snowshard.IdTypeError` raised while binding a value to a snowflake column.

    Private: catch :class:`~snowshard.IdTypeError` (see :class:`_UnwrappedInvalidId`).
    """


class GeneParentError(SnowshardError, ValueError, DontWrapMixin):
    """The column a snowflake default takes its gene from holds no usable key."""


class MissingGeneParent(GeneParentError):
    """The gene parent column of a row being inserted is NULL or absent."""


class NaiveDatetimeError(SnowshardError, ValueError, DontWrapMixin):
    """A naive datetime was given where an instant (an aware datetime) is needed."""


class TimeRangeError(SnowshardError, ValueError):
    """A time range whose start lies after its end."""
