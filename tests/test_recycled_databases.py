"""Tests for tests/recycled_databases.py: PostgreSQL test databases emptied and renamed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tests.backends import (
    _admin,
    _create_database,
    _drop_database,
    _new_name,
    list_test_databases,
)
from tests.recycled_databases import RecycledDatabases

pytestmark = pytest.mark.postgres


class Named:
    """New database names, remembered in order."""

    def __init__(self) -> None:
        self.given: list[str] = []

    def __call__(self) -> str:
        self.given.append(_new_name())
        return self.given[-1]


@pytest.fixture
def pool(postgres_url: str) -> Iterator[tuple[RecycledDatabases, Named]]:
    """A pool of its own and the names it gave; its databases are dropped afterwards."""
    named = Named()
    recycled = RecycledDatabases(_admin, named, partial(_drop_database, "postgresql"))
    try:
        yield recycled, named
    finally:
        assert recycled.drop_all() == []
        for name in named.given:
            _drop_database("postgresql", postgres_url, name)


@pytest.fixture
def used(postgres_url: str) -> Iterator[str]:
    """A database's name (dropped afterwards if still there)."""
    name = _new_name()
    _create_database("postgresql", postgres_url, name)
    try:
        yield name
    finally:
        _drop_database("postgresql", postgres_url, name)


def _url(server: str, name: str) -> str:
    return make_url(server).set(database=name).render_as_string(hide_password=False)


def _run(url: str, *statements: str) -> None:
    with _admin(url) as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)


def _schemas_and_tables(url: str) -> tuple[list[str], list[str]]:
    with _admin(url) as conn:
        schemas = conn.execute(sa.text(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%'"
            " AND nspname <> 'information_schema' ORDER BY 1"
        )).scalars().all()
        tables = conn.execute(sa.text(
            "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'"
        )).scalars().all()
    return list(schemas), list(tables)


def test_a_used_database_comes_back_empty_under_a_new_name(
    pool: tuple[RecycledDatabases, Named], used: str, postgres_url: str
) -> None:
    """Tables, schemas, publications and settings go, a held connection is ended, the name
    changes."""
    recycled, named = pool
    _run(
        _url(postgres_url, used),
        "CREATE TABLE t (id INTEGER PRIMARY KEY)",
        "CREATE SCHEMA extra",
        "CREATE TABLE extra.u (id INTEGER)",
        "CREATE PUBLICATION snowshard_t_pub FOR TABLE t",
        f"ALTER DATABASE \"{used}\" SET work_mem = '5MB'",
    )
    engine = sa.create_engine(_url(postgres_url, used))
    held = engine.connect()
    try:
        held.exec_driver_sql("SELECT 1")
        assert recycled.give_back(postgres_url, None, used) is True
    finally:
        with contextlib.suppress(sa.exc.DBAPIError):
            held.close()
        engine.dispose()
    names = list_test_databases("postgresql", postgres_url)
    assert used not in names and named.given[0] in names
    assert recycled.take(postgres_url, None) == named.given[0]
    assert _schemas_and_tables(_url(postgres_url, named.given[0])) == (["public"], [])
    with _admin(_url(postgres_url, named.given[0])) as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM pg_publication").scalar() == 0
        assert conn.exec_driver_sql("SHOW work_mem").scalar() == "4MB"


def test_a_database_is_kept_for_its_own_creation_options(
    pool: tuple[RecycledDatabases, Named], used: str, postgres_url: str
) -> None:
    """A database made with other options (a locale) is not handed out for the default."""
    recycled, named = pool
    assert recycled.give_back(postgres_url, "LOCALE 'C'", used) is True
    assert recycled.take(postgres_url, None) is None
    assert recycled.take(postgres_url, "LOCALE 'C'") == named.given[0]


def test_a_database_with_a_prepared_transaction_is_left_to_the_caller(
    pool: tuple[RecycledDatabases, Named], used: str, postgres_url: str
) -> None:
    """Something outside its schemas holds it: not renamed, not kept (the caller drops it)."""
    recycled, _ = pool
    url = _url(postgres_url, used)
    _run(url, "CREATE TABLE t (id INTEGER)")
    with _admin(url) as conn:
        conn.exec_driver_sql("BEGIN")
        conn.exec_driver_sql("INSERT INTO t VALUES (1)")
        conn.exec_driver_sql("PREPARE TRANSACTION 'snowshard_t_recycle'")
    try:
        assert recycled.give_back(postgres_url, None, used) is False
        assert used in list_test_databases("postgresql", postgres_url)
        assert recycled.take(postgres_url, None) is None
    finally:
        _run(url, "ROLLBACK PREPARED 'snowshard_t_recycle'")


def test_a_database_left_with_a_large_object_is_dropped_not_kept(
    pool: tuple[RecycledDatabases, Named], used: str, postgres_url: str
) -> None:
    """What dropping the schemas leaves (a large object) makes it dropped under its new name."""
    recycled, named = pool
    _run(_url(postgres_url, used), "SELECT lo_create(0)")
    assert recycled.give_back(postgres_url, None, used) is True
    names = list_test_databases("postgresql", postgres_url)
    assert used not in names and named.given[0] not in names
    assert recycled.take(postgres_url, None) is None
