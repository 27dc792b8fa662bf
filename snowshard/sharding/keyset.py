"""Keyset pagination: the way to page through a large sharded table.

``OFFSET`` makes every shard read and send ``offset + n`` rows; a deep page is slow
everywhere and slowest across shards. Keyset pagination remembers the last key seen and
asks each shard for the next ``n`` after it, which an index on the key serves::

    page = keyset_page(session, select(Order).where(Order.amount > 10), Order.id)
    while page.items:
        ...
        page = keyset_page(session, select(Order).where(...), Order.id, after=page.after)

The statement is ``... WHERE id < :after ORDER BY id DESC LIMIT n`` (``>`` and ASC with
``descending=False``); a routed statement reads one shard, a fan-out reads each shard
(one UNION ALL per database) and merges. The key must be unique, like a primary key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Optional, TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import Session

from snowshard.errors import ShardConfigError
from snowshard.sharding.errors import InvalidPage

__all__ = ["Page", "keyset", "keyset_page", "page_of"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Page(Generic[_T]):
    """One page: its objects, and the key to pass as ``after`` for the next (None: last)."""

    items: list[_T]
    after: Optional[Any]


def keyset(
    statement: Select[Any], key: Any, *, after: Any = None, size: int = 20, descending: bool = True
) -> Select[Any]:
    """``statement`` restricted to the ``size`` rows after ``after`` in ``key`` order."""
    if not isinstance(statement, Select):
        raise ShardConfigError(
            f"keyset() pages a Select statement, got {type(statement).__name__} {statement!r}; "
            "pass select(Model)"
        )
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidPage(f"page size must be an int >= 1, got {size!r}")
    if after is not None:
        statement = statement.where(key < after if descending else key > after)
    order = key.desc() if descending else key.asc()
    return statement.order_by(None).order_by(order).limit(size)


def page_of(items: list[Any], key: Any, size: int) -> Page[Any]:
    """The :class:`Page` of ``items`` fetched by :func:`keyset` with ``size``."""
    after = getattr(items[-1], key.key) if len(items) == size else None
    return Page(items, after)


def keyset_page(
    session: Session,
    statement: Select[Any],
    key: Any,
    *,
    after: Any = None,
    size: int = 20,
    descending: bool = True,
) -> Page[Any]:
    """Run :func:`keyset` for an entity ``statement`` and return the :class:`Page`."""
    paged = keyset(statement, key, after=after, size=size, descending=descending)
    return page_of(list(session.scalars(paged).all()), key, size)

