"""AsyncShardedSession routes exactly like the sync session (aiosqlite, psycopg, aiomysql)."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import BigInteger, Integer, delete, event, func, select, update
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    AsyncShardedSession,
    Sharded,
    Shards,
    create_all_async,
    drop_all_async,
    keyset_page_async,
)
from tests.backends import async_url

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=17)


class Base(DeclarativeBase):
    pass


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(4, key=("id", "user_id"), databases={"a": [0, 1], "b": [2, 3]})
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Integer, default=0)


async def _scenario(urls: list[str]) -> dict[str, Any]:
    a, b = (create_async_engine(async_url(u)) for u in urls)
    sent: list[tuple[str, str]] = []
    for name, engine in (("a", a), ("b", b)):
        event.listen(
            engine.sync_engine,
            "before_cursor_execute",
            lambda c, cur, s, *rest, name=name: sent.append((name, s)),
        )
    databases = {"a": a, "b": b}
    out: dict[str, Any] = {}
    try:
        await create_all_async(Base.metadata, databases=databases)
        async with AsyncShardedSession(databases=databases) as session:
            session.add_all([Order(user_id=u, amount=u) for u in range(12)])
            await session.commit()
            sent.clear()
            routed = (await session.scalars(select(Order).where(Order.user_id == 6))).all()
            out["routed"] = ([o.amount for o in routed], list(sent))
            sent.clear()
            out["top"] = (
                await session.scalars(
                    select(Order.amount).order_by(Order.amount.desc()).limit(3).offset(1)
                )
            ).all()
            out["fan_out_databases"] = {name for name, _ in sent}
            out["count"] = await session.scalar(select(func.count()).select_from(Order))
            session.expunge_all()
            got = await session.get(Order, routed[0].id)
            out["get"] = got.amount if got is not None else None
            out["update"] = (
                await session.execute(
                    update(Order).where(Order.user_id.in_([1, 2])).values(amount=0)
                )
            ).rowcount
            out["delete"] = (await session.execute(delete(Order).where(Order.amount == 0))).rowcount
            await session.commit()
            first = await keyset_page_async(session, select(Order), Order.id, size=5)
            second = await keyset_page_async(
                session, select(Order), Order.id, after=first.after, size=5
            )
            out["pages"] = [len(first.items), len(second.items)]
        await drop_all_async(Base.metadata, databases=databases)
    finally:
        await a.dispose()
        await b.dispose()
    return out


def test_async_session_routes_writes_reads_and_fan_out(db_urls_2: list[str]) -> None:
    """Inserts, a routed read, a merged fan-out, get, bulk update/delete and keyset pages."""
    out = asyncio.run(_scenario(db_urls_2))
    amounts, sent = out["routed"]
    assert amounts == [6]
    assert [(db, "orders_02" in sql) for db, sql in sent] == [("b", True)]
    assert out["top"] == [10, 9, 8]
    assert out["fan_out_databases"] == {"a", "b"}
    assert out["count"] == 12
    assert out["get"] == 6
    assert out["update"] == 2 and out["delete"] == 3  # users 1, 2 and the amount-0 user 0
    assert out["pages"] == [5, 4]
