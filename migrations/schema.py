"""The example schema the ``migrations/`` environment migrates.

Two databases (bind keys, listed in ``alembic.ini``):

* ``default``: ``users``, snowshard's worker lease table (``snowshard_worker_leases``, see
  :mod:`snowshard.workers.db_lease`) and the physical tables 0..7 of each sharded table;
* ``db1``: the physical tables 8..15.

``orders`` is sharded over 16 tables by the gene its snowflake ``id`` carries (the gene of
``user_id``), and ``order_items`` is co-sharded with it: ``order_items_07`` holds the items
of the orders in ``orders_07`` and has a foreign key to that table only. ``users`` is not
sharded, so sharded tables cannot have a foreign key to it (they live in other databases).

The physical tables are plain Core tables carrying ``info["snowshard"] = ShardInfo(spec, i)``,
the contract :mod:`snowshard.migrations` relies on; models declared with
:mod:`snowshard.sharding` produce the same tables.
"""

from __future__ import annotations

import sqlalchemy as sa

from snowshard.orm.types import SnowflakeType
from snowshard.spec import ShardInfo, ShardSpec
from snowshard.workers.db_lease import make_lease_table

__all__ = ["DATABASES", "ORDERS", "ORDER_ITEMS", "UNSHARDED_DATABASE", "build_metadata"]

DATABASES = ("default", "db1")
UNSHARDED_DATABASE = "default"
"""Where tables that are not sharded (users, worker leases) live."""

_PLACEMENT = {"default": range(8), "db1": range(8, 16)}
ORDERS = ShardSpec("orders", 16, databases=_PLACEMENT)
ORDER_ITEMS = ShardSpec("order_items", 16, databases=_PLACEMENT)

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s",
    "pk": "pk_%(table_name)s",
}


def build_metadata() -> sa.MetaData:
    """A fresh :class:`~sqlalchemy.MetaData` with every table of the example schema."""
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    sa.Table(
        "users",
        metadata,
        sa.Column("id", SnowflakeType(), primary_key=True, autoincrement=False),
        sa.Column("email", sa.String(255), nullable=False, unique=True),
        sa.Column("name", sa.String(100), nullable=False),
    )
    make_lease_table(metadata)
    for index in range(ORDERS.count):
        sa.Table(
            ORDERS.table_name(index),
            metadata,
            sa.Column("id", SnowflakeType(), primary_key=True, autoincrement=False),
            sa.Column("user_id", sa.BigInteger, nullable=False, index=True),
            sa.Column("status", sa.String(20), nullable=False, server_default="new"),
            sa.Column("total_cents", sa.BigInteger, nullable=False),
            info={"snowshard": ShardInfo(ORDERS, index)},
        )
    for index in range(ORDER_ITEMS.count):
        sa.Table(
            ORDER_ITEMS.table_name(index),
            metadata,
            sa.Column("id", SnowflakeType(), primary_key=True, autoincrement=False),
            sa.Column(
                "order_id",
                sa.BigInteger,
                sa.ForeignKey(f"{ORDERS.table_name(index)}.id", ondelete="CASCADE"),
                nullable=False,
                index=True,
            ),
            sa.Column("sku", sa.String(40), nullable=False),
            sa.Column("quantity", sa.Integer, nullable=False),
            info={"snowshard": ShardInfo(ORDER_ITEMS, index)},
        )
    return metadata


metadata = build_metadata()
