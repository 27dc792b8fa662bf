"""The async variant: AsyncShardedSession over two SQLite databases (aiosqlite).

Orders are sharded over 8 tables, 4 per database file. Writes, routed reads, a merged
fan-out, ``get`` and keyset pagination are awaited exactly like with ``AsyncSession``.

Needs the ``async`` extra (aiosqlite, and greenlet for SQLAlchemy's asyncio bridge):
``pip install -e ".[async]"``. Without it the script exits with that hint.
Run: ``python examples/sharded_async.py``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

try:
    import aiosqlite  # noqa: F401  (the driver behind sqlite+aiosqlite://)
    import greenlet  # noqa: F401  (SQLAlchemy runs async drivers through it)
except ImportError as missing:
    raise SystemExit(
        f"examples/sharded_async.py needs the async extra (cannot import {missing.name}): "
        'pip install -e ".[async]"'
    ) from None

from sqlalchemy import BigInteger, Integer, func, select
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    AsyncShardedSession,
    Sharded,
    Shards,
    create_all_async,
    keyset_page_async,
)

ids = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=3)


class Base(DeclarativeBase):
    pass


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(8, key=("id", "user_id"), databases={"a": range(0, 4), "b": range(4, 8)})
    id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    total: Mapped[int] = mapped_column(Integer)


async def run(folder: Path) -> None:
    engines = {
        name: create_async_engine(f"sqlite+aiosqlite:///{folder / name}.db") for name in "ab"
    }
    try:
        await create_all_async(Base.metadata, databases=engines)
        async with AsyncShardedSession(databases=engines) as session:
            session.add_all(
                Order(user_id=user, total=user * 3 + k) for user in range(1, 25) for k in range(2)
            )
            await session.commit()

            mine = (await session.scalars(select(Order).where(Order.user_id == 13))).all()
            assert [o.total for o in mine] == [39, 40]
            print(
                f"user 13's orders, from {type(mine[0]).__table__.name}: {[o.total for o in mine]}"
            )

            count = await session.scalar(select(func.count()).select_from(Order))
            top = (
                await session.scalars(select(Order.total).order_by(Order.total.desc()).limit(3))
            ).all()
            assert count == 48 and top == [73, 72, 70]
            print(f"{count} orders in both files; largest totals {top}")

            fetched = await session.get(Order, mine[0].id)
            assert fetched is mine[0]

            pages, after = 0, None
            while True:
                page = await keyset_page_async(
                    session, select(Order), Order.id, after=after, size=10
                )
                pages += 1
                if page.after is None:
                    break
                after = page.after
            assert pages == 5
            print(f"read every order newest first in {pages} keyset pages of 10")
    finally:
        for engine in engines.values():
            await engine.dispose()


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(Path(folder)))


if __name__ == "__main__":
    main()
