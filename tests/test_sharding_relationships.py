"""Relationships into sharded models, and binding tables joined shard by shard."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import BigInteger, Integer, and_, exists, func, select
from sqlalchemy.orm import (
    Bundle,
    DeclarativeBase,
    Mapped,
    column_property,
    declared_attr,
    foreign,
    joinedload,
    mapped_column,
    relationship,
    selectinload,
)

from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    ShardConfigError,
    Sharded,
    ShardedSession,
    Shards,
    UnsupportedShardQuery,
    sharded_model,
)
from tests.worlds import IDS, SqlLog, WorldFactory, binary_string


class Base(DeclarativeBase):
    pass


class Customer(Base):
    """An unsharded parent of sharded orders."""

    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    orders: Mapped[list[Order]] = relationship(
        primaryjoin="Customer.id == foreign(Order.user_id)", viewonly=True, order_by="Order.id"
    )


class Account(Base):
    """An unsharded parent whose relationship to sharded orders is joined by default."""

    __tablename__ = "accounts"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    orders: Mapped[list[Order]] = relationship(
        primaryjoin="Account.id == foreign(Order.user_id)", viewonly=True, lazy="joined"
    )


class User(Sharded, Base):
    """A sharded parent: its ID carries the gene of its e-mail address."""

    __tablename__ = "users"
    __shards__ = Shards(4, key="id")
    id: Mapped[int] = snowflake_pk(IDS, gene_from="email")
    email: Mapped[str] = mapped_column(binary_string(60))

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
    __shards__ = Shards(4, key=("id", "user_id"))
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Integer, default=0)

    @declared_attr
    def user(cls) -> Mapped[User]:
        return relationship(
            "User", primaryjoin=lambda: foreign(cls.user_id) == User.id, viewonly=True
        )


class Item(Sharded, Base):
    """Order items: sharded like orders (same strategy and count), by the user's gene."""

    __tablename__ = "items"
    __shards__ = Shards(4, key=("id", "user_id"))
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    order_id: Mapped[int] = mapped_column(BigInteger)
    qty: Mapped[int] = mapped_column(Integer)


class Shopper(Base):
    """An unsharded class with a count of sharded orders loaded with each object."""

    __tablename__ = "shoppers"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)

    @declared_attr
    def orders_count(cls) -> Mapped[int]:
        count = select(func.count(Order.id)).where(Order.user_id == cls.id)
        return column_property(count.scalar_subquery())  # its FROM: from its columns


@pytest.fixture
def shop(
    sharded_world: WorldFactory, sql_backend: str, sql_log: SqlLog
) -> Iterator[tuple[ShardedSession, SqlLog, list[int]]]:
    """Six users with two orders of two items each, in one database of each backend."""
    world = sharded_world(Base, sql_backend)
    with world.session() as session:
        users = [User(email=f"user{i}@example.com") for i in range(6)]
        session.add_all(users)
        session.add_all(Customer(id=u.id) for u in users)
        session.flush()
        orders = [
            Order(user_id=u.id, amount=10 * i + j) for i, u in enumerate(users) for j in range(2)
        ]
        session.add_all(orders)
        session.flush()
        session.add_all(
            Item(user_id=o.user_id, order_id=o.id, qty=q) for o in orders for q in (1, 2)
        )
        session.commit()
        ids = [u.id for u in users]
        session.expunge_all()
        sql_log.clear()
        yield session, sql_log, ids


def _shard(user_id: int) -> str:
    return f"{sharded_model(Order).strategy.shard_of(user_id):02d}"


def test_parent_collection_loads_from_one_shard(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """user.orders reads only the orders table the user's gene names."""
    session, sql, ids = shop
    user = session.get(User, ids[2])
    assert user is not None
    sql.clear()
    assert [o.amount for o in user.orders] == [20, 21]
    assert sql.tables() == [{f"orders_{_shard(ids[2])}"}]


def test_child_loads_its_parent_from_one_shard(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """order.user reads only the users table of that user."""
    session, sql, ids = shop
    order = session.scalars(select(Order).where(Order.user_id == ids[4])).first()
    assert order is not None
    sql.clear()
    assert order.user.email == "user4@example.com"
    assert sql.tables() == [{f"users_{_shard(ids[4])}"}]


def test_unsharded_parent_loads_children_from_one_shard(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """An unsharded customer's orders come from the one table of its id."""
    session, sql, ids = shop
    customer = session.get(Customer, ids[1])
    assert customer is not None
    sql.clear()
    assert [o.amount for o in customer.orders] == [10, 11]
    assert sql.tables() == [{f"orders_{_shard(ids[1])}"}]


def test_selectinload_splits_the_parents_per_shard(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """selectinload(Customer.orders) asks each orders table only for its own users."""
    session, sql, ids = shop
    customers = session.scalars(select(Customer).options(selectinload(Customer.orders))).all()
    assert sorted(len(c.orders) for c in customers) == [2] * 6
    order_tables = [t for t in sql.tables() if t]
    assert all(len(t) == 1 for t in order_tables)
    assert set().union(*order_tables) == {f"orders_{_shard(i)}" for i in ids}


_JOINED_FROM_UNSHARDED = {
    "joinedload()": lambda: select(Customer).options(joinedload(Customer.orders)),
    "joinedload('*')": lambda: select(Customer).options(joinedload("*")),
    "lazy='joined'": lambda: select(Account),
}


@pytest.mark.parametrize("name", list(_JOINED_FROM_UNSHARDED))
def test_joined_eager_load_from_an_unsharded_parent_is_refused(
    shop: tuple[ShardedSession, SqlLog, list[int]], name: str
) -> None:
    """A joined eager load from an unsharded class would JOIN the logical orders table
    (no database holds it; an old unsharded table of that name would be read): refused
    before any SQL, naming selectinload."""
    session, sql, _ = shop
    with pytest.raises(UnsupportedShardQuery, match=r"selectinload\((Customer|Account)\.orders\)"):
        session.execute(_JOINED_FROM_UNSHARDED[name]())
    assert len(sql) == 0


@pytest.mark.parametrize("where", [False, True], ids=["selected", "filtered on"])
def test_column_property_reading_a_sharded_model_is_refused(
    shop: tuple[ShardedSession, SqlLog, list[int]], where: bool
) -> None:
    """A column_property of an unsharded class that counts sharded orders would name the
    logical table: loading the class is refused before any SQL, naming the property."""
    session, sql, _ = shop
    statement = select(Shopper)
    if where:
        statement = statement.where(Shopper.orders_count > 0)
    with pytest.raises(UnsupportedShardQuery, match="Shopper.orders_count .* reads the sharded Order"):
        session.execute(statement)
    assert len(sql) == 0


_COMPARISONS = {
    "User.orders.any(criteria)": (
        lambda: select(User.id).where(User.orders.any(Order.amount > 5)),
        lambda: select(User.id).where(exists().where(Order.user_id == User.id, Order.amount > 5)),
    ),
    "~User.orders.any(criteria)": (
        lambda: select(User.id).where(~User.orders.any(Order.amount > 5)),
        lambda: select(User.id).where(~exists().where(Order.user_id == User.id, Order.amount > 5)),
    ),
    "Order.user.has(criteria)": (
        lambda: select(Order.id).where(Order.user.has(User.email == "user2@example.com")),
        lambda: select(Order.id).where(
            exists().where(User.id == Order.user_id, User.email == "user2@example.com")
        ),
    ),
    "Customer.orders.any(criteria)": (
        lambda: select(Customer.id).where(Customer.orders.any(Order.amount < 12)),
        lambda: select(Customer.id).where(
            exists().where(Order.user_id == Customer.id, Order.amount < 12)
        ),
    ),
}


@pytest.mark.parametrize("name", list(_COMPARISONS))
def test_relationship_comparison_equals_its_explicit_exists(
    shop: tuple[ShardedSession, SqlLog, list[int]], name: str
) -> None:
    """.any() and .has() into a sharded model find the rows the EXISTS written out finds."""
    session, sql, _ = shop
    comparison, written = _COMPARISONS[name]
    found = sorted(session.scalars(comparison()))
    assert found == sorted(session.scalars(written())) and found
    assert not sql.logical


def test_comparison_inside_a_comparison_is_refused(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """.has() inside the criteria of .any() keeps SQLAlchemy's mark: refused before any SQL."""
    session, sql, _ = shop
    inner = Order.user.has(User.email.like("user%"))
    with pytest.raises(UnsupportedShardQuery, match="relationship comparison .* exists"):
        session.execute(select(User).where(User.orders.any(inner)))
    assert len(sql) == 0


def test_explicit_exists_replaces_any(shop: tuple[ShardedSession, SqlLog, list[int]]) -> None:
    """The EXISTS the refusal suggests, correlated on the shard key, finds the users with
    an order above 5 (all but the first, whose amounts are 0 and 1)."""
    session, _, ids = shop
    big = exists().where(Order.user_id == User.id, Order.amount > 5)
    assert sorted(session.scalars(select(User.id).where(big))) == sorted(ids[1:])


def test_selectinload_overrides_a_joined_default(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """An Account whose orders are joined by default loads them with selectinload()."""
    session, _, ids = shop
    session.add_all(Account(id=i) for i in ids)
    session.flush()
    accounts = session.scalars(select(Account).options(selectinload(Account.orders))).all()
    assert sorted(len(a.orders) for a in accounts) == [2] * 6
    session.rollback()


def test_joinedload_from_a_sharded_parent_joins_its_own_table(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """joinedload(User.orders) and joinedload(Order.user), between sharded classes, are
    joined per physical class and load every row."""
    session, _, ids = shop
    users = session.scalars(select(User).options(joinedload(User.orders))).unique().all()
    assert sorted(len(u.orders) for u in users) == [2] * 6
    orders = session.scalars(select(Order).options(joinedload(Order.user))).all()
    assert sorted({o.user.id for o in orders}) == sorted(ids)


def test_bundle_of_a_routed_read_names_only_its_table(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """select(Bundle(...)) keyed by user reads one physical table, never the logical one."""
    session, sql, ids = shop
    bundle = Bundle("order", Order.user_id, Order.amount)
    rows = session.execute(select(bundle).where(Order.user_id == ids[2])).all()
    assert [row.order.user_id for row in rows] == [ids[2], ids[2]]
    assert [t for t in sql.tables() if t] == [{f"orders_{_shard(ids[2])}"}]
    assert "orders" not in {name for sent in sql for name in sent.tables}  # the logical table
    assert not [s for s in sql.statements() if re.search(r"\borders\b", s)]


def test_loader_options_on_a_fan_out_read_each_table(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """select(User).options(selectinload(User.orders)) works over every users table."""
    session, _, ids = shop
    users = session.scalars(
        select(User).options(selectinload(User.orders)).order_by(User.email)
    ).all()
    assert [u.id for u in users] == ids
    assert [len(u.orders) for u in users] == [2] * 6


def test_binding_tables_join_within_one_shard(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """orders JOIN items with a user key is one statement on orders_k JOIN items_k."""
    session, sql, ids = shop
    rows = session.execute(
        select(Order.amount, func.sum(Item.qty))
        .join(Item, and_(Item.user_id == Order.user_id, Item.order_id == Order.id))
        .where(Order.user_id == ids[3])
        .group_by(Order.amount)
        .order_by(Order.amount)
    ).all()
    assert [tuple(r) for r in rows] == [(30, 3), (31, 3)]
    assert sql.tables() == [{f"orders_{_shard(ids[3])}", f"items_{_shard(ids[3])}"}]


def test_binding_tables_fan_out_pairs_equal_shards(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """Without a key, orders_i is joined with items_i only, never across shards."""
    session, sql, _ = shop
    rows = session.execute(
        select(Order.amount, Item.qty)
        .join(Item, and_(Item.user_id == Order.user_id, Item.order_id == Order.id))
        .order_by(Order.amount.desc(), Item.qty)
        .limit(4)
    ).all()
    assert [tuple(r) for r in rows] == [(51, 1), (51, 2), (50, 1), (50, 2)]
    assert sql.tables() == [{f"orders_{i:02d}", f"items_{i:02d}"} for i in range(4)]


def test_join_through_a_relationship_equals_its_explicit_join(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """join(User.orders) returns the rows of the join on User.id == Order.user_id."""
    session, sql, _ = shop
    through = session.execute(select(User.email, Order.amount).join(User.orders)).all()
    by_hand = select(User.email, Order.amount).join(Order, Order.user_id == User.id)
    assert sorted(through) == sorted(session.execute(by_hand).all()) and len(through) == 12
    assert not sql.logical


def test_join_through_a_parent_relationship_from_an_unsharded_class(
    shop: tuple[ShardedSession, SqlLog, list[int]],
) -> None:
    """join(Customer.orders), an unsharded parent in the same database, reads every order."""
    session, _, ids = shop
    found = session.execute(select(Customer.id, Order.amount).join(Customer.orders)).all()
    assert sorted(found) == sorted((ids[i], 10 * i + j) for i in range(6) for j in range(2))


def test_plain_relationship_on_a_sharded_model_is_refused() -> None:
    """A relationship() in a sharded class body must be a @declared_attr."""

    class Other(DeclarativeBase):
        pass

    namespace: dict[str, Any] = {
        "__tablename__": "things",
        "__shards__": Shards(2, key="id"),
        "__annotations__": {"id": Mapped[int]},
        "id": snowflake_pk(IDS),
        "parent": relationship("Thing"),
    }
    with pytest.raises(ShardConfigError, match="@declared_attr"):
        type("Thing", (Sharded, Other), namespace)
