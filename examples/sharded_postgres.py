"""Orders on 8 tables spread over two PostgreSQL databases, committed with two-phase commit.

Tables ``orders_00``..``orders_03`` live in database "east", ``orders_04``..``orders_07``
in "west". Each write goes to the database of its table; a query with a user key reads
one table in one database; a query without one runs one ``UNION ALL`` per database and
the two results are merged in Python (ORDER BY, LIMIT, COUNT/SUM/AVG).

The server comes from ``SNOWSHARD_TEST_POSTGRES_URL`` (default: the local ``postgres``
database); two throw-away databases are created and dropped. Two-phase commit needs
``max_prepared_transactions > 0`` on the server; without it the example commits each
database in turn and says so.

Needs the ``postgres`` extra (psycopg 3): ``pip install -e ".[postgres]"``. Without it the
script exits with that hint. Run: ``python examples/sharded_postgres.py``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

try:
    import psycopg  # noqa: F401  (the driver behind postgresql+psycopg://)
except ImportError:
    raise SystemExit(
        "examples/sharded_postgres.py needs the postgres extra (cannot import psycopg): "
        'pip install -e ".[postgres]"'
    ) from None

from sqlalchemy import BigInteger, Engine, Integer, String, create_engine, event, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all, sharded_model

SERVER = os.environ.get(
    "SNOWSHARD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
ids = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=2)


class Base(DeclarativeBase):
    pass


class Customer(Base):
    """Unsharded: lives in the session's bind (east)."""

    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(40))


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(
        8, key=("id", "user_id"), databases={"east": range(0, 4), "west": range(4, 8)}
    )
    id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    total: Mapped[int] = mapped_column(Integer)


@contextmanager
def databases(*names: str) -> Iterator[dict[str, Engine]]:
    """Fresh databases on the server, one engine each; dropped afterwards."""
    admin = create_engine(SERVER, isolation_level="AUTOCOMMIT")
    suffix = secrets.token_hex(4)
    created = {name: f"snowshard_example_{suffix}_{name}" for name in names}
    engines: dict[str, Engine] = {}
    try:
        with admin.connect() as conn:
            for database in created.values():
                conn.execute(text(f'CREATE DATABASE "{database}"'))
        url = make_url(SERVER)
        engines = {name: create_engine(url.set(database=db)) for name, db in created.items()}
        yield engines
    finally:
        for engine in engines.values():
            engine.dispose()
        with admin.connect() as conn:
            for database in created.values():
                conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


def main() -> None:
    with databases("east", "west") as engines:
        east = engines["east"]
        create_all(Base.metadata, bind=east, databases=engines)
        with east.connect() as conn:
            twophase = conn.execute(text("SHOW max_prepared_transactions")).scalar() != "0"
        seen: list[str] = []
        for name, engine in engines.items():
            event.listen(engine, "before_cursor_execute", lambda *a, name=name: seen.append(name))

        with ShardedSession(east, databases=engines, twophase=twophase) as session:
            customers = [Customer(id=n, name=f"customer {n}") for n in range(1, 11)]
            session.add_all(customers)
            session.add_all(
                Order(user_id=c.id, total=c.id * 10 + k) for c in customers for k in range(3)
            )
            session.commit()
            how = "two-phase" if twophase else "one by one"
            print(f"committed 30 orders to two databases ({how})")

            model = sharded_model(Order)
            for name, engine in engines.items():
                with engine.connect() as conn:
                    counts = [
                        conn.execute(text(f"SELECT count(*) FROM {t.name}")).scalar()
                        for t in model.tables
                        if model.database_of(int(t.name[-2:])) == name
                    ]
                print(f"  {name}: {counts} rows in its 4 tables")
                mine = [
                    c for c in range(1, 11) if model.database_of(model.strategy.shard_of(c)) == name
                ]
                assert sum(counts) == 3 * len(mine)  # east holds users 1, 2, 3, 8, 9, 10

            seen.clear()
            mine = session.scalars(select(Order).where(Order.user_id == 6)).all()
            assert [o.total for o in mine] == [60, 61, 62] and seen == ["west"]
            print(f"  orders of customer 6 read from {seen[0]} only: {[o.total for o in mine]}")

            seen.clear()
            top = session.scalars(
                select(Order.total).order_by(Order.total.desc()).limit(4).offset(1)
            ).all()
            assert top == [101, 100, 92, 91] and sorted(seen) == ["east", "west"]
            count, total, average = session.execute(
                select(func.count(), func.sum(Order.total), func.avg(Order.total))
            ).one()
            assert (count, total) == (30, sum(c * 10 + k for c in range(1, 11) for k in range(3)))
            assert abs(float(average) - total / 30) < 1e-9
            print(
                f"  fan-out merged from both databases: top {top}, count {count}, "
                f"sum {total}, avg {average}"
            )


if __name__ == "__main__":
    main()
