"""Creating and dropping every physical table in every database.

::

    create_all(Base.metadata, bind=engine)                                   # one database
    create_all(Base.metadata, bind=main, databases={"a": engine_a, "b": engine_b})
    await create_all_async(Base.metadata, bind=async_engine)    # snowshard.sharding.aio

A table with ``info["snowshard"]`` is created in the database its
:class:`~snowshard.spec.ShardSpec` names (``databases[key]``, or ``bind`` for the
default database); a reference table (:mod:`~snowshard.sharding.reference`) in ``bind``
and in every database; every other table of the metadata in ``bind``. Each database is
handled in one transaction. For schema changes over time, hand the same ``MetaData`` to
Alembic: it holds exactly the physical tables, each tagged with its ``ShardInfo``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional, TypeVar

from sqlalchemy import Engine, MetaData, Table

from snowshard.sharding.errors import UnknownDatabase
from snowshard.sharding.reference import is_reference
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError, ShardInfo

__all__ = ["create_all", "drop_all", "plan_by_engine", "tables_by_database"]

_E = TypeVar("_E")  # Engine here; AsyncEngine in snowshard.sharding.aio


def _check_metadata(metadata: object) -> None:
    if not isinstance(metadata, MetaData):
        raise ShardConfigError(
            f"expected a sqlalchemy MetaData (Base.metadata), got {type(metadata).__name__} "
            f"{metadata!r}"
        )


def tables_by_database(metadata: MetaData) -> dict[Optional[str], list[Table]]:
    """Tables of ``metadata`` per database key; None holds the unsharded tables."""
    _check_metadata(metadata)
    grouped: dict[Optional[str], list[Table]] = {}
    for table in metadata.sorted_tables:
        info = table.info.get("snowshard")
        key = info.spec.database_of(info.shard) if isinstance(info, ShardInfo) else None
        grouped.setdefault(key, []).append(table)
    return grouped


def plan_by_engine(
    metadata: MetaData, bind: Optional[_E], databases: Optional[Mapping[str, _E]]
) -> list[tuple[_E, list[Table]]]:
    """``(engine, tables)`` for each engine that holds tables of ``metadata``."""
    engines = dict(databases or {})
    per_engine: dict[int, tuple[_E, list[Table]]] = {}
    for key, tables in tables_by_database(metadata).items():
        engine = engines.get(key) if key is not None else bind
        if engine is None and key is not None and (key == DEFAULT_DATABASE or not engines):
            engine = bind
        if engine is None:
            if key is None:
                continue  # unsharded tables and no bind: leave them to the caller
            raise UnknownDatabase(
                f"tables {[t.name for t in tables][:3]}... live in database {key!r}; pass "
                f"databases={{{key!r}: engine}}"
            )
        per_engine.setdefault(id(engine), (engine, []))[1].extend(tables)
    references = [t for t in metadata.sorted_tables if is_reference(t)]
    if references:
        for engine in [bind, *engines.values()]:
            if engine is not None:
                held = per_engine.setdefault(id(engine), (engine, []))[1]
                held.extend(t for t in references if t not in held)
    return list(per_engine.values())


def create_all(
    metadata: MetaData,
    *,
    bind: Optional[Engine] = None,
    databases: Optional[Mapping[str, Engine]] = None,
    checkfirst: bool = True,
) -> None:
    """Create every table of ``metadata`` in its database (see the module docstring)."""
    for engine, tables in plan_by_engine(metadata, bind, databases):
        assert isinstance(engine, Engine)
        metadata.create_all(engine, tables=tables, checkfirst=checkfirst)


def drop_all(
    metadata: MetaData,
    *,
    bind: Optional[Engine] = None,
    databases: Optional[Mapping[str, Engine]] = None,
    checkfirst: bool = True,
) -> None:
    """Drop every table of ``metadata`` from its database."""
    for engine, tables in plan_by_engine(metadata, bind, databases):
        assert isinstance(engine, Engine)
        metadata.drop_all(engine, tables=tables, checkfirst=checkfirst)

