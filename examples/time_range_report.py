"""A report of the last hour's orders, by primary key alone, over 16 SQLite tables.

Snowflake IDs start with their creation time, so "the last hour" is an ID range
(``id_between``), served by each table's primary key index: no ``created_at`` column.
The per-10-minute buckets are computed in SQL from the IDs (``id_unix_ms``). Three hours
of orders are simulated with a manual clock, so the report is the same on every run.
Needs no extra, only snowshard itself: ``pip install -e .``.
Run: ``python examples/time_range_report.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import BigInteger, Integer, create_engine, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, ManualClock, Snowflake
from snowshard.orm import id_between, id_unix_ms, snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all

LAYOUT = Layout(worker_bits=6, gene_bits=4)
NOW = datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)
clock = ManualClock(int((NOW - timedelta(hours=3)).timestamp() * 1000))
ids = Snowflake(LAYOUT, worker=4, clock=clock, sleep=clock.sleep)


class Base(DeclarativeBase):
    pass


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(16, key=("id", "user_id"))
    id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    cents: Mapped[int] = mapped_column(Integer)


def main() -> None:
    engine = create_engine("sqlite://")
    try:
        create_all(Base.metadata, bind=engine)
        made: list[tuple[datetime, int]] = []
        with ShardedSession(engine) as session:
            for minute in range(180):  # one order a minute, two in even minutes
                for extra in range(1 + (minute % 2 == 0)):
                    at = NOW - timedelta(hours=3) + timedelta(minutes=minute, seconds=20 * extra)
                    clock.set(int(at.timestamp() * 1000))
                    session.add(Order(user_id=minute * 7 + extra, cents=100 + minute))
                    session.flush()
                    made.append((at, 100 + minute))
            session.commit()

            start = NOW - timedelta(hours=1)
            last_hour = id_between(Order.id, LAYOUT, start, NOW)
            count, revenue = session.execute(
                select(func.count(), func.sum(Order.cents)).where(last_hour)
            ).one()
            expected = [cents for at, cents in made if start <= at < NOW]
            assert (count, revenue) == (len(expected), sum(expected))
            span = f"{start:%H:%M}-{NOW:%H:%M} UTC"
            print(f"last hour ({span}): {count} orders, {revenue / 100:.2f} total")

            bucket = func.floor(
                (id_unix_ms(Order.id, LAYOUT) - int(start.timestamp() * 1000)) / 600_000
            )
            rows = session.execute(
                select(bucket, func.count(), func.sum(Order.cents))
                .where(last_hour)
                .group_by(bucket)
                .order_by(bucket)
            ).all()
            assert sum(r[1] for r in rows) == count
            for index, orders, cents in rows:
                begin = start + timedelta(minutes=10 * int(index))
                print(f"  {begin:%H:%M}  {orders:>3} orders  {cents / 100:>8.2f}")
            assert [r[1] for r in rows] == [15] * 6
    finally:
        engine.dispose()


if __name__ == "__main__":
    main()
