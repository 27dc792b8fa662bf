"""AsyncShardedSession routes exactly like the sync session (aiosqlite, psycopg, aiomysql)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import create_async_engine

from snowshard.sharding import (
    AsyncShardedSession,
    create_all_async,
    drop_all_async,
    keyset_page_async,
)
from tests.backends import DatabaseFactory, async_url
from tests.worlds import SqlLog, declare_shop

SHOP = declare_shop(4, databases=2)
Order = SHOP.Order


async def _scenario(urls: list[str], log: SqlLog) -> dict[str, Any]:
    a, b = (create_async_engine(async_url(u)) for u in urls)
    log.watch(a, "a")
    log.watch(b, "b")
    databases = {"a": a, "b": b}
    out: dict[str, Any] = {}
    try:
        await create_all_async(SHOP.metadata, databases=databases)
        async with AsyncShardedSession(databases=databases) as session:
            session.add_all([Order(user_id=u, amount=u) for u in range(12)])
            await session.commit()
            log.clear()
            routed = (await session.scalars(select(Order).where(Order.user_id == 6))).all()
            out["routed"] = ([o.amount for o in routed], list(log))
            log.clear()
            out["top"] = (
                await session.scalars(
                    select(Order.amount).order_by(Order.amount.desc()).limit(3).offset(1)
                )
            ).all()
            out["fan_out_databases"] = log.databases()
            out["count"] = await session.scalar(select(func.count()).select_from(Order))
            session.expunge_all()
            got = await session.get(Order, routed[0].id)
            out["get"] = got.amount if got is not None else None
            updated = await session.execute(
                update(Order).where(Order.user_id.in_([1, 2])).values(amount=0)
            )
            out["update"] = cast("CursorResult[Any]", updated).rowcount
            deleted = await session.execute(delete(Order).where(Order.amount == 0))
            out["delete"] = cast("CursorResult[Any]", deleted).rowcount
            await session.commit()
            first = await keyset_page_async(session, select(Order), Order.id, size=5)
            second = await keyset_page_async(
                session, select(Order), Order.id, after=first.after, size=5
            )
            out["pages"] = [len(first.items), len(second.items)]
        await drop_all_async(SHOP.metadata, databases=databases)
    finally:
        await a.dispose()
        await b.dispose()
    return out


def test_async_session_routes_writes_reads_and_fan_out(
    database_factory: DatabaseFactory, sql_backend: str, sql_log: SqlLog
) -> None:
    """Inserts, a routed read, a merged fan-out, get, bulk update/delete and keyset pages."""
    out = asyncio.run(_scenario(database_factory(sql_backend, 2), sql_log))
    amounts, sent = out["routed"]
    assert amounts == [6]
    assert [(s.database, s.shards) for s in sent] == [("b", {"orders_02"})]
    assert out["top"] == [10, 9, 8]
    assert out["fan_out_databases"] == {"a", "b"}
    assert out["count"] == 12
    assert out["get"] == 6
    assert out["update"] == 2 and out["delete"] == 3  # users 1, 2 and the amount-0 user 0
    assert out["pages"] == [5, 4]
