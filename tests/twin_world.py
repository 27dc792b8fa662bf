"""A small sharded model and its unsharded twin, holding the same rows, for twin tests of
one kind of value (dates, NaNs, enums...): ``world = twin_world_fixture(table, columns,
rows)`` in a test module gives its tests a :class:`TwinWorld` per backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger
from sqlalchemy.orm import DeclarativeBase, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, UnsupportedShardQuery, create_all
from tests.backends import DatabaseFactory
from tests.conftest import _BACKEND_PARAMS

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=4)
"""The twin worlds' IDs (a row's gene is its ``user_id``)."""


@dataclass
class TwinWorld:
    """One backend's sharded ``Model`` (4 tables over 2 databases) and its ``Twin`` (one
    plain table), with the same rows; ``sent``: SQL sent since the last ``clear()``;
    ``engines``: the twin's database's, then the sharded databases'."""

    backend: str
    Model: Any
    Twin: Any
    session: Callable[[], ShardedSession]
    sent: list[str]
    engines: list[Any] = field(default_factory=list)

    def exact(self, build: Any, ordered: bool = False) -> list[tuple[Any, ...]]:
        """``build(Model)``'s rows as (type name, text) pairs, asserted equal to
        ``build(Twin)``'s (sorted first unless ``ordered``)."""
        with self.session() as session:
            got = _shown(session.execute(build(self.Model)))
            twin = _shown(session.execute(build(self.Twin)))
        if not ordered:
            got, twin = sorted(got), sorted(twin)
        assert got == twin
        return got

    def refused(self, build: Any, match: str) -> None:
        """``build(Model)`` raises UnsupportedShardQuery matching ``match``, before any SQL."""
        self.sent.clear()
        with self.session() as session, pytest.raises(UnsupportedShardQuery, match=match):
            session.execute(build(self.Model))
        assert self.sent == []


@contextmanager
def connected_with(world: TwinWorld, statements: Sequence[str | None]) -> Iterator[None]:
    """New connections of each of ``world.engines`` run the statement given for that
    engine first (a session setting; None for none); the pools are emptied before and
    after, so every connection of the block has it."""
    listeners = []
    for engine, statement in zip(world.engines, statements):
        if statement is None:
            continue

        def connect(dbapi: Any, record: Any, sql: str = statement) -> None:
            cursor = dbapi.cursor()
            cursor.execute(sql)
            cursor.close()

        engine.dispose()
        sa.event.listen(engine, "connect", connect)
        listeners.append((engine, connect))
    try:
        yield
    finally:
        for engine, connect in listeners:
            sa.event.remove(engine, "connect", connect)
            engine.dispose()


def _shown(rows: Any) -> list[tuple[Any, ...]]:
    return [tuple((type(v).__name__, str(v)) for v in row) for row in rows]


def _models(table: str, columns: Callable[[], dict[str, Any]]) -> tuple[Any, Any, Any]:
    """(Base, Model, Twin): ``id``, ``user_id`` and ``columns()`` in each."""

    class Base(DeclarativeBase):
        pass

    name = table.title().replace("_", "")
    model = type(name, (Sharded, Base), {
        "__tablename__": table,
        "__shards__": Shards(4, key=("id", "user_id"), databases={"a": range(2), "b": range(2, 4)}),
        "id": snowflake_pk(IDS, gene_from="user_id"),
        "user_id": mapped_column(BigInteger),
        **columns(),
    })  # fmt: skip
    twin = type(f"{name}Twin", (Base,), {
        "__tablename__": f"{table}_twin",
        "id": mapped_column(BigInteger, primary_key=True, autoincrement=False),
        "user_id": mapped_column(BigInteger),
        **columns(),
    })  # fmt: skip
    return Base, model, twin


def build_twin_world(
    request: pytest.FixtureRequest,
    tmp_path: Any,
    backend: str,
    table: str,
    columns: Callable[[], dict[str, Any]],
    rows: list[dict[str, Any]],
    prepare: str | None = None,
) -> Iterator[TwinWorld]:
    """A :class:`TwinWorld` of ``table`` with ``columns()`` on ``backend``, holding ``rows``
    (each with ``user_id``; IDs are given here), dropped afterwards; ``prepare`` is run in
    each database first."""
    factory = DatabaseFactory.for_request(request, tmp_path)
    try:
        base, model, twin = _models(table, columns)
        engines = [factory.engine(url) for url in factory(backend, 3)]
        databases = {"a": engines[1], "b": engines[2]}
        sent: list[str] = []

        def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            sent.append(statement)

        for engine in engines:
            if prepare is not None:
                with engine.begin() as conn:
                    conn.exec_driver_sql(prepare)
            sa.event.listen(engine, "before_cursor_execute", record)
        create_all(base.metadata, bind=engines[0], databases=databases)
        session = partial(ShardedSession, engines[0], databases=databases)
        world = TwinWorld(backend, model, twin, session, sent, engines)
        with world.session() as opened:
            for row in rows:
                values = {"id": IDS.next_id(gene=row["user_id"]), **row}
                opened.add_all([model(**values), twin(**values)])
            opened.commit()
        yield world
    finally:
        factory.cleanup()


def twin_world_fixture(
    table: str,
    columns: Callable[[], dict[str, Any]],
    rows: Callable[[], list[dict[str, Any]]],
    backends: list[Any] | None = None,
    prepare: str | None = None,
) -> Any:
    """A module-scoped fixture of :class:`TwinWorld` s of ``table`` (built once per backend
    of ``backends``, default all three, and only read by the tests); ``prepare``: SQL run
    in each database before the tables are created (an extension, say)."""

    @pytest.fixture(scope="module", params=backends or _BACKEND_PARAMS)
    def world(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[TwinWorld]:
        tmp = tmp_path_factory.mktemp(table)
        yield from build_twin_world(
            request, tmp, request.param, table, columns, rows(), prepare
        )

    return world
