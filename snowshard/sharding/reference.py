"""Reference (broadcast) tables: small unsharded tables copied into every database.

::

    class Country(Reference, Base):
        __tablename__ = "countries"
        code: Mapped[str] = mapped_column(String(2), primary_key=True)
        name: Mapped[str] = mapped_column(String(80))

    create_all(Base.metadata, bind=main, databases={"a": engine_a, "b": engine_b})
    # countries exists in main, a and b

A reference table exists in every database of a session (:func:`~.schema.create_all`
creates it in each engine once). In a :class:`~snowshard.sharding.ShardedSession` over
several databases:

* writes go to every copy in the session's transaction: a flush (``session.add``,
  changes, ``session.delete``) through mapper events, and ``insert``/``update``/``delete``
  statements run once per copy; ``twophase=True`` commits all copies or none;
* a read of the reference table alone goes to one copy, the session's ``bind``;
* a join or subquery between a sharded model and a reference table runs on each database
  against its local copy, so it is exact.

A Core :class:`~sqlalchemy.schema.Table` becomes a reference table with
:func:`reference_table`. Rows are copied as the ORM holds them after the write: a column
filled by a server default that the ORM does not fetch back is left to each copy's own
default. Writes made outside the session (raw connections) are not copied.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

from sqlalchemy import Table, delete, event, insert, inspect, update
from sqlalchemy.engine import Connection, Result
from sqlalchemy.orm import Mapper, ORMExecuteState, object_session

from snowshard._compat import deannotated
from snowshard.sharding.bulk import BIND_KEY, writing_to
from snowshard.sharding.model import model_of_table
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError

__all__ = [
    "REFERENCE_INFO",
    "Reference",
    "copies",
    "is_reference",
    "reference_table",
    "reference_target",
    "write_copies",
]

REFERENCE_INFO = "snowshard_reference"
"""``Table.info`` key set to True on a reference table."""


class Reference:
    """Mixin making a declarative model a reference table; put it before the base.

    ``class Country(Reference, Base)``: the table is created in every database and every
    write reaches each copy (module docstring). An intermediate class may set
    ``__abstract__ = True``.
    """

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("__abstract__", False):
            return
        table = cls.__dict__.get("__table__")
        if not isinstance(table, Table) or table.metadata is None:
            raise ShardConfigError(
                f"{cls.__name__} derives from Reference but maps no single table; a "
                "reference model needs __tablename__ (or __table__) and a declarative base "
                "after Reference: class Country(Reference, Base)"
            )
        if model_of_table(table) is not None or "snowshard" in table.info:
            raise ShardConfigError(
                f"{cls.__name__} is sharded and cannot also be a reference table; "
                "derive from Sharded or from Reference, not both"
            )
        reference_table(table)
        for name, handler in (
            ("after_insert", _copy_insert),
            ("after_update", _copy_update),
            ("after_delete", _copy_delete),
        ):
            event.listen(cls, name, handler, propagate=True)


def reference_table(table: Table) -> Table:
    """Mark a Core ``table`` as a reference table (created in, and written to, every
    database); returns it. Statements on it must run through a ``ShardedSession``."""
    if not isinstance(table, Table):
        raise ShardConfigError(
            f"reference_table() takes a sqlalchemy Table, got {type(table).__name__} {table!r}"
        )
    if "snowshard" in table.info or model_of_table(table) is not None:
        raise ShardConfigError(f"{table.name} is sharded and cannot be a reference table")
    table.info[REFERENCE_INFO] = True
    return table


def is_reference(table: Any) -> bool:
    """Whether ``table`` (or an ORM-annotated copy of it) is a reference table."""
    return isinstance(table, Table) and bool(deannotated(table).info.get(REFERENCE_INFO))


def copies(session: Any) -> list[str]:
    """Database keys holding one copy each: ``"default"`` (the bind) first, then each
    database whose engine is not already listed."""
    databases: dict[str, Any] = getattr(session, "databases", None) or {}
    if not databases:
        return [DEFAULT_DATABASE]
    seen: list[Any] = []
    keys: list[str] = []
    candidates = ([DEFAULT_DATABASE] if session.bind is not None else []) + list(databases)
    for key in candidates:
        engine = session.engine_for(key)
        if not any(engine is other for other in seen):
            seen.append(engine)
            keys.append(key)
    return keys


def reference_target(statement: Any) -> Optional[Table]:
    """The reference table an INSERT, UPDATE or DELETE writes to, else None."""
    if not getattr(statement, "is_dml", False):
        return None
    table = getattr(statement, "table", None)
    return deannotated(table) if is_reference(table) else None


def write_copies(state: ORMExecuteState, keys: list[str]) -> Result[Any]:
    """Run a write on a reference table once per copy in ``keys``; the first copy's result
    is returned (the others' are closed)."""
    results: list[Result[Any]] = []
    for key in keys:
        with writing_to(state.session, key):
            results.append(state.invoke_statement(bind_arguments={BIND_KEY: key}))
    for other in results[1:]:
        other.close()
    return results[0]


def _other_connections(mapper: Mapper[Any], connection: Connection, target: Any) -> Iterator[Connection]:
    """Connections (in the session's transaction) to every copy but the one just written."""
    session: Any = object_session(target)
    if session is None or not getattr(session, "databases", None):
        return
    for key in copies(session):
        bind = session.engine_for(key)
        if bind is connection or bind is connection.engine:
            continue
        yield session.connection(bind_arguments={BIND_KEY: key})


def _values(mapper: Mapper[Any], target: Any) -> dict[Any, Any]:
    loaded = inspect(target).dict
    table = mapper.local_table
    values: dict[Any, Any] = {}
    for prop in mapper.column_attrs:
        column = prop.columns[0]
        if column.table is table and prop.key in loaded:
            values[column] = loaded[prop.key]
    return values


def _identity(mapper: Mapper[Any], target: Any) -> Any:
    identity = inspect(target).identity
    assert identity is not None
    pk = list(mapper.primary_key)
    return [c == v for c, v in zip(pk, identity)]


def _table(mapper: Mapper[Any]) -> Table:
    table = mapper.local_table
    assert isinstance(table, Table)
    return table


def _copy_insert(mapper: Mapper[Any], connection: Connection, target: Any) -> None:
    for other in _other_connections(mapper, connection, target):
        other.execute(insert(_table(mapper)).values(_values(mapper, target)))


def _copy_update(mapper: Mapper[Any], connection: Connection, target: Any) -> None:
    for other in _other_connections(mapper, connection, target):
        statement = update(_table(mapper)).where(*_identity(mapper, target))
        other.execute(statement.values(_values(mapper, target)))


def _copy_delete(mapper: Mapper[Any], connection: Connection, target: Any) -> None:
    for other in _other_connections(mapper, connection, target):
        other.execute(delete(_table(mapper)).where(*_identity(mapper, target)))
