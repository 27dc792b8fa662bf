"""asyncio support: :class:`AsyncShardedSession`, async keyset pages and schema helpers.

Needs SQLAlchemy's asyncio extension, which needs ``greenlet``, and an async driver:
``pip install "snowshard[async]"`` (aiosqlite, aiomysql, greenlet; psycopg 3 is async
itself). Nothing else in snowshard imports this module, so the sync API works on the base
install; ``from snowshard.sharding import AsyncShardedSession`` loads it on first use and
raises :class:`~snowshard.errors.MissingExtra` naming the extra when greenlet is missing.

::

    engines = {"a": create_async_engine("sqlite+aiosqlite:///a.db"), ...}
    await create_all_async(Base.metadata, databases=engines)
    async with AsyncShardedSession(databases=engines) as session:
        session.add(Order(user_id=1820))
        await session.commit()
        page = await keyset_page_async(session, select(Order), Order.id)
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from snowshard.errors import MissingExtra

try:
    # SQLAlchemy 2.1's asyncio module raises ImportError without greenlet; 2.0's imports
    # and fails on first use, so greenlet is imported here too
    importlib.import_module("greenlet")
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
except ImportError as error:
    raise MissingExtra(
        f"snowshard's asyncio support needs SQLAlchemy's asyncio extension ({error}); "
        f"install it with: pip install \"snowshard[async]\""
    ) from error

from sqlalchemy import MetaData, Select, Table

from snowshard.sharding.keyset import Page, keyset, page_of
from snowshard.sharding.schema import plan_by_engine
from snowshard.sharding.session import ShardedSession

__all__ = ["AsyncShardedSession", "create_all_async", "drop_all_async", "keyset_page_async"]


class AsyncShardedSession(AsyncSession):
    """An :class:`~sqlalchemy.ext.asyncio.AsyncSession` over a :class:`ShardedSession`.

    ``AsyncShardedSession(engine)`` or ``AsyncShardedSession(bind=..., databases={...})``
    with async engines; it routes exactly as the sync session does.
    """

    sync_session_class = ShardedSession


async def keyset_page_async(
    session: AsyncSession,
    statement: Select[Any],
    key: Any,
    *,
    after: Any = None,
    size: int = 20,
    descending: bool = True,
) -> Page[Any]:
    """:func:`~snowshard.sharding.keyset.keyset_page` for an ``AsyncSession``."""
    paged = keyset(statement, key, after=after, size=size, descending=descending)
    return page_of(list((await session.scalars(paged)).all()), key, size)


async def _run(method: Any, plan: list[tuple[AsyncEngine, list[Table]]], checkfirst: bool) -> None:
    for engine, tables in plan:
        async with engine.begin() as conn:
            await conn.run_sync(method, tables=tables, checkfirst=checkfirst)


async def create_all_async(
    metadata: MetaData,
    *,
    bind: AsyncEngine | None = None,
    databases: Mapping[str, AsyncEngine] | None = None,
    checkfirst: bool = True,
) -> None:
    """:func:`~snowshard.sharding.schema.create_all` with async engines."""
    await _run(metadata.create_all, plan_by_engine(metadata, bind, databases), checkfirst)


async def drop_all_async(
    metadata: MetaData,
    *,
    bind: AsyncEngine | None = None,
    databases: Mapping[str, AsyncEngine] | None = None,
    checkfirst: bool = True,
) -> None:
    """:func:`~snowshard.sharding.schema.drop_all` with async engines."""
    await _run(metadata.drop_all, plan_by_engine(metadata, bind, databases), checkfirst)
