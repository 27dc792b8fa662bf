"""Users and orders with genes on 16 tables in one SQLite database.

Users are sharded by their own snowflake ID, which carries the gene of their e-mail
address (a root entity takes its gene from a natural key, never from another snowflake's
low bits). Orders and their items carry the user's gene, so a user, the user's orders and
their items all live in tables of the same index: ``users_07``, ``orders_07``,
``items_07``. Needs no extra, only snowshard itself: ``pip install -e .``.
Run: ``python examples/sharded_sqlite.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sqlalchemy import (
    BigInteger,
    Engine,
    Integer,
    String,
    and_,
    create_engine,
    event,
    func,
    select,
)
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    declared_attr,
    foreign,
    mapped_column,
    relationship,
)

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all, sharded_model

ids = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)


class Base(DeclarativeBase):
    pass


class User(Sharded, Base):
    __tablename__ = "users"
    __shards__ = Shards(16, key="id")
    id: Mapped[int] = snowflake_pk(ids, gene_from="email")
    # unique per table is unique overall: the same e-mail always has the same gene
    email: Mapped[str] = mapped_column(String(80), unique=True)

    @declared_attr
    def orders(cls) -> Mapped[list[Order]]:
        return relationship(
            "Order",
            primaryjoin=lambda: cls.id == foreign(Order.user_id),
            viewonly=True,
            order_by=lambda: Order.id,
        )


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(16, key=("id", "user_id"))
    id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    total: Mapped[int] = mapped_column(Integer)


class Item(Sharded, Base):
    __tablename__ = "items"
    __shards__ = Shards(16, key=("id", "user_id"))
    id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    order_id: Mapped[int] = mapped_column(BigInteger, index=True)
    sku: Mapped[str] = mapped_column(String(20))
    quantity: Mapped[int] = mapped_column(Integer)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        engine = create_engine(f"sqlite:///{Path(folder) / 'shop.db'}")
        sent: list[str] = []
        event.listen(engine, "before_cursor_execute", lambda c, cur, sql, *rest: sent.append(sql))
        try:
            run(engine, sent)
        finally:
            engine.dispose()


def run(engine: Engine, sent: list[str]) -> None:
    create_all(Base.metadata, bind=engine)
    assert len(Base.metadata.tables) == 48
    with ShardedSession(engine) as session:
        users = [User(email=f"customer{n}@example.com") for n in range(20)]
        session.add_all(users)
        session.flush()
        for n, user in enumerate(users):
            order = Order(user_id=user.id, total=10 * n)
            session.add(order)
            session.flush()
            session.add_all(
                Item(user_id=user.id, order_id=order.id, sku=f"sku-{q}", quantity=q) for q in (1, 2)
            )
        session.commit()

        model = sharded_model(User)
        alice = users[7]
        table = model.strategy.shard_of(alice.id)
        print(f"{alice.email}: user {alice.id} in users_{table:02d}")
        assert type(alice).__table__.name == f"users_{table:02d}"  # type: ignore[attr-defined]

        sent.clear()
        orders = alice.orders  # lazy load: one table, named by the gene
        assert [o.total for o in orders] == [70]
        assert len(sent) == 1 and f"orders_{table:02d}" in sent[0]
        print(f"  her orders come from orders_{table:02d}: {[o.id for o in orders]}")
        assert all(o.id % 16 == alice.id % 16 for o in orders)

        sent.clear()
        lines = session.execute(  # orders_k JOIN items_k: binding tables, one shard
            select(Order.id, Item.sku, Item.quantity)
            .join(Item, and_(Item.user_id == Order.user_id, Item.order_id == Order.id))
            .where(Order.user_id == alice.id)
            .order_by(Item.sku)
        ).all()
        assert [(sku, q) for _, sku, q in lines] == [("sku-1", 1), ("sku-2", 2)]
        assert len(sent) == 1 and f"items_{table:02d}" in sent[0]
        print(f"  her order lines: {[(sku, q) for _, sku, q in lines]}")

        sent.clear()
        biggest = session.scalars(select(Order).order_by(Order.total.desc()).limit(3)).all()
        assert [o.total for o in biggest] == [190, 180, 170] and len(sent) == 1
        revenue = session.scalar(select(func.sum(Order.total)))
        assert revenue == sum(10 * n for n in range(20))
        print(f"  top 3 orders over all 16 tables: {[o.total for o in biggest]}; revenue {revenue}")


if __name__ == "__main__":
    main()
