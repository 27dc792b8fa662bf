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
    "IdValueError",
    "IdValueTypeError",
    "MissingGeneParent",
    "NaiveDatetimeError",
    "TimeRangeError",
]


class IdValueError(InvalidId, DontWrapMixin):
    """A value bound to a snowflake column is negative, above 2**63-1 or not decimal."""


class IdValueTypeError(IdTypeError, DontWrapMixin):
    """A value bound to a snowflake column is not an ``int`` or decimal ``str``."""


class GeneParentError(SnowshardError, ValueError, DontWrapMixin):
    """The column a snowflake default takes its gene from holds no usable key."""


class MissingGeneParent(GeneParentError):
    """The gene parent column of a row being inserted is NULL or absent."""


class NaiveDatetimeError(SnowshardError, ValueError, DontWrapMixin):
    """A naive datetime was given where an instant (an aware datetime) is needed."""


class TimeRangeError(SnowshardError, ValueError):
    """A time range whose start lies after its end."""
