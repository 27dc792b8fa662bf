"""The tables a reshard keeps its state in: everything it needs to resume is in them.

* ``snowshard_reshard_jobs`` (control database): one row per job, its phase and plan.
* ``snowshard_reshard_copied`` (every target database): for each source table, the highest
  primary key copied into this database, written in the same transaction as the rows, so
  a copy resumed after a crash neither skips nor repeats a row.
* ``snowshard_reshard_log`` (every database whose tables are captured): one row per change
  of a captured table, written by triggers in the writer's own transaction. Applying a row
  makes the target equal the source's *current* row for that key, so it is idempotent; a
  row is deleted once applied, so a transaction that commits late (with a lower ``seq``)
  is still found.
* ``snowshard_shard_map`` (control database): the versioned map - for each logical table,
  the fingerprint of the layout that holds its rows now (:mod:`snowshard.sharding.shard_map`).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, Text

from snowshard.sharding.shard_map import MAP_TABLE

__all__ = ["COPIED", "JOBS", "LOG", "MAP", "METADATA", "SHARD_MAP"]

METADATA = MetaData()

JOBS = Table(
    "snowshard_reshard_jobs",
    METADATA,
    Column("job", String(64), primary_key=True),
    Column("phase", String(20), nullable=False),
    Column("plan", Text, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

COPIED = Table(
    "snowshard_reshard_copied",
    METADATA,
    Column("job", String(64), primary_key=True),
    Column("source_table", String(128), primary_key=True),
    Column("last_pk", BigInteger, nullable=False),
    Column("rows", BigInteger, nullable=False),
)

LOG = Table(
    "snowshard_reshard_log",
    METADATA,
    Column("seq", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("job", String(64), nullable=False),
    Column("tbl", String(128), nullable=False),
    Column("pk", BigInteger, nullable=False),
    Column("shard_key", BigInteger, nullable=True),
)
"""Change log: ``tbl`` changed the row with primary key ``pk``, whose shard key (before
the change for a DELETE, after it for an INSERT; both, as two rows, for an UPDATE that
changes it) was ``shard_key``."""

SHARD_MAP = MAP_TABLE.to_metadata(METADATA)
MAP = SHARD_MAP
