"""SQLAlchemy integration: snowflake ID columns, client-side ID defaults, time ranges.

Works for plain, unsharded models on SQLite, PostgreSQL and MariaDB/MySQL;
:mod:`snowshard.sharding` builds sharded models on these pieces::

    from sqlalchemy.orm import DeclarativeBase, Mapped
    from snowshard import Layout, Snowflake
    from snowshard.orm import id_between, snowflake_pk

    ids = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)

    class Base(DeclarativeBase): ...

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")   # client-side, user's gene
        user_id: Mapped[int]

    select(Order).where(id_between(Order.id, ids.layout, hour_ago, now))  # PK range scan
"""

from __future__ import annotations

from snowshard.orm.defaults import SnowflakeDefault, snowflake_default, snowflake_pk
from snowshard.orm.errors import (
    GeneParentError,
    MissingGeneParent,
    NaiveDatetimeError,
    TimeRangeError,
)
from snowshard.orm.timerange import (
    IdColumn,
    IdTime,
    UtcDateTime,
    id_between,
    id_since,
    id_time,
    id_unix_ms,
)
from snowshard.orm.types import MAX_ID, SnowflakeType, to_id

__all__ = [
    "MAX_ID",
    "GeneParentError",
    "IdColumn",
    "IdTime",
    "MissingGeneParent",
    "NaiveDatetimeError",
    "SnowflakeDefault",
    "SnowflakeType",
    "TimeRangeError",
    "UtcDateTime",
    "id_between",
    "id_since",
    "id_time",
    "id_unix_ms",
    "snowflake_default",
    "snowflake_pk",
    "to_id",
]
