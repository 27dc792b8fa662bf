"""Tests for the real-database fixtures in tests/backends.py."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tests.backends import (
    DB_NAME_PREFIX,
    ENV_URLS,
    MYSQL2_ENV,
    POSTGRES_REPLICA_ENV,
    REQUIRE_ENV,
    DatabaseFactory,
    RedisNamespace,
    async_url,
    env_server_url,
    list_test_databases,
    locate_backend,
)

UNREACHABLE_PG = "postgresql+psycopg://postgres@127.0.0.1:1/x"
SERVER_FIXTURE = {"postgresql": "postgres_url", "mysql": "mysql_url"}
SECOND_SERVER_FIXTURE = {"postgresql": "postgres2_url", "mysql": "mysql2_url"}
SERVER_PARAMS = [
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]
BACKEND_PARAMS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]

# Filled by the "record" tests, read by the "was dropped" tests that run after them
# (pytest runs tests in file order; function-scoped params do not reorder).
_RECORDED_DBS: dict[str, str] = {}
_RECORDED_REDIS: dict[str, str] = {}
_RECORDED_SECOND: dict[str, str] = {}


def _server_of(url: str) -> tuple[str | None, int | None]:
    """(host, port) of a URL."""
    parsed = make_url(url)
    return parsed.host, parsed.port


def _exists(request: pytest.FixtureRequest, url: str) -> bool:
    """Whether the database behind ``url`` still exists (asked from the server side)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return Path(str(parsed.database)).exists()
    # Asked on the server the URL points at (databases of one call span two servers).
    server = parsed.set(database="postgres") if backend == "postgresql" else parsed
    return str(parsed.database) in list_test_databases(
        backend, server.render_as_string(hide_password=False)
    )


def _table_names(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        return sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- databases


def test_db_url_is_fresh_empty_and_usable(
    db_url: str, database_factory: DatabaseFactory
) -> None:
    """A db_url database is newly named, has no tables, and accepts DDL and DML."""
    name = Path(str(make_url(db_url).database)).name
    assert name.startswith(DB_NAME_PREFIX)
    engine = database_factory.engine(db_url)
    assert sa.inspect(engine).get_table_names() == []
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE probe (id BIGINT PRIMARY KEY)")
        conn.exec_driver_sql("INSERT INTO probe (id) VALUES (9007199254740993)")
    with engine.connect() as conn:
        assert (
            conn.exec_driver_sql("SELECT id FROM probe").scalar_one()
            == 9007199254740993
        )


def test_db_url_record_for_drop_check(
    db_url: str, request: pytest.FixtureRequest
) -> None:
    """Record this test's database (it exists now) for the drop check that follows."""
    backend = make_url(db_url).get_backend_name()
    assert _exists(request, db_url)
    _RECORDED_DBS[backend] = db_url


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_db_url_was_dropped_after_test(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """The database recorded by the previous test no longer exists."""
    if backend not in _RECORDED_DBS:
        pytest.skip(f"needs test_db_url_record_for_drop_check[{backend}] to run first")
    assert not _exists(request, _RECORDED_DBS[backend])


def test_db_urls_2_are_distinct_databases(db_urls_2: list[str]) -> None:
    """The two db_urls_2 databases differ and do not share tables."""
    first, second = (make_url(u) for u in db_urls_2)
    assert len(db_urls_2) == 2
    assert first.database != second.database
    engine = sa.create_engine(first)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE only_in_first (id INTEGER PRIMARY KEY)")
    finally:
        engine.dispose()
    assert _table_names(db_urls_2[0]) == ["only_in_first"]
    assert _table_names(db_urls_2[1]) == []


@pytest.mark.parametrize("backend", SERVER_PARAMS)
def test_db_urls_2_second_database_is_on_the_second_server(
    backend: str, request: pytest.FixtureRequest, database_factory: DatabaseFactory
) -> None:
    """Two databases of one call: the first on the first server, the second on the second."""
    first_server = request.getfixturevalue(SERVER_FIXTURE[backend])
    second_server = request.getfixturevalue(SECOND_SERVER_FIXTURE[backend])
    urls = database_factory(backend, 3)
    names = [str(make_url(u).database) for u in urls]
    assert [_server_of(u) for u in urls] == [
        _server_of(first_server), _server_of(second_server), _server_of(first_server)
    ]
    on_first = set(list_test_databases(backend, first_server))
    on_second = set(list_test_databases(backend, second_server))
    if _server_of(first_server) == _server_of(second_server):
        pytest.skip(f"one {backend} server only: no second server configured")
    assert (names[0] in on_first, names[0] in on_second) == (True, False)
    assert (names[1] in on_first, names[1] in on_second) == (False, True)


@pytest.mark.parametrize("backend", SERVER_PARAMS)
def test_record_second_server_database_for_drop_check(
    backend: str, request: pytest.FixtureRequest, database_factory: DatabaseFactory
) -> None:
    """Record a database made on the second server for the drop check that follows."""
    second_server = request.getfixturevalue(SECOND_SERVER_FIXTURE[backend])
    url = database_factory(backend, 2)[1]
    assert str(make_url(url).database) in list_test_databases(backend, second_server)
    _RECORDED_SECOND[backend] = url


@pytest.mark.parametrize("backend", SERVER_PARAMS)
def test_second_server_database_was_dropped_after_test(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """The second-server database recorded by the previous test no longer exists there."""
    if backend not in _RECORDED_SECOND:
        pytest.skip(f"needs test_record_second_server_database_for_drop_check[{backend}]")
    second_server = request.getfixturevalue(SECOND_SERVER_FIXTURE[backend])
    name = str(make_url(_RECORDED_SECOND[backend]).database)
    assert name not in list_test_databases(backend, second_server)


def test_database_factory_can_still_put_both_databases_on_one_server(
    database_factory: DatabaseFactory, postgres_url: str
) -> None:
    """server_url= keeps every database of a call on the server it names."""
    urls = database_factory("postgresql", 2, server_url=postgres_url)
    assert {_server_of(u) for u in urls} == {_server_of(postgres_url)}


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_factory_cleanup_drops_even_with_a_leaked_connection(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """cleanup() drops its databases although a connection still holds one open."""
    factory = DatabaseFactory.for_request(request, tmp_path)
    urls = factory(backend, 2)
    assert all(_exists(request, u) for u in urls)
    leaked = sa.create_engine(urls[0])  # deliberately not tracked by the factory
    conn = leaked.connect()
    try:
        trans = conn.begin()
        conn.exec_driver_sql("CREATE TABLE held (id INTEGER PRIMARY KEY)")
        conn.exec_driver_sql("INSERT INTO held (id) VALUES (1)")
        if backend == "sqlite":  # a file is only unlinked; close first (Windows-safe)
            trans.rollback()
            conn.close()
        factory.cleanup()
    finally:
        with contextlib.suppress(sa.exc.DBAPIError):
            conn.close()  # the server has killed this session; closing it must not leak
        leaked.dispose()
    assert not any(_exists(request, u) for u in urls)


def test_postgres_markers_are_added_from_fixtures(
    pg_database_url: str, request: pytest.FixtureRequest
) -> None:
    """Using a PostgreSQL fixture tags the test with the postgres marker."""
    assert request.node.get_closest_marker("postgres") is not None
    assert make_url(pg_database_url).drivername == "postgresql+psycopg"


def test_mysql_fixture_gets_mysql_marker(
    mysql_database_url: str, request: pytest.FixtureRequest
) -> None:
    """The mysql marker is added automatically and the URL uses PyMySQL."""
    assert request.node.get_closest_marker("mysql") is not None
    assert make_url(mysql_database_url).drivername == "mysql+pymysql"


def test_pg2_database_is_separate_from_pg_database(
    pg_database_url: str, pg2_database_url: str
) -> None:
    """The second-server PostgreSQL database is a different database."""
    assert make_url(pg_database_url).database != make_url(pg2_database_url).database


def test_async_url_maps_drivers() -> None:
    """async_url picks aiosqlite, psycopg (async-capable) and aiomysql."""
    assert async_url("sqlite:////tmp/x.sqlite3") == "sqlite+aiosqlite:////tmp/x.sqlite3"
    assert (
        async_url("postgresql+psycopg://u:p@h:5/db")
        == "postgresql+psycopg://u:p@h:5/db"
    )
    assert (
        async_url("mysql+pymysql://root@h:3306/db") == "mysql+aiomysql://root@h:3306/db"
    )
    with pytest.raises(ValueError):
        async_url("oracle+oracledb://u@h/db")


def test_database_factory_rejects_unknown_backend(
    database_factory: DatabaseFactory,
) -> None:
    """An unknown backend name is a ValueError, not a silent skip."""
    with pytest.raises(ValueError, match="backend must be one of"):
        database_factory("oracle")


# --------------------------------------------------------------------------- skip vs fail


def test_require_backends_turns_unreachable_url_into_failure() -> None:
    """With SNOWSHARD_REQUIRE_BACKENDS=1 an unreachable URL fails instead of skipping."""
    env = {ENV_URLS["postgresql"]: UNREACHABLE_PG, REQUIRE_ENV: "1"}
    with pytest.raises(pytest.fail.Exception, match=r"127\.0\.0\.1:1/x is unreachable"):
        locate_backend("postgresql", env)


def test_unreachable_url_skips_without_require() -> None:
    """Without SNOWSHARD_REQUIRE_BACKENDS an unreachable URL only skips."""
    env = {ENV_URLS["postgresql"]: UNREACHABLE_PG, REQUIRE_ENV: "0"}
    with pytest.raises(pytest.skip.Exception, match="unreachable"):
        locate_backend("postgresql", env)


@pytest.mark.parametrize(
    ("require", "outcome"),
    [("1", pytest.fail.Exception), ("", pytest.skip.Exception)],
    ids=["required-fails", "optional-skips"],
)
def test_missing_url_without_docker_skips_or_fails(
    require: str, outcome: type[BaseException]
) -> None:
    """No URL and no Docker: skip normally, fail under SNOWSHARD_REQUIRE_BACKENDS=1."""
    with pytest.raises(
        outcome, match="SNOWSHARD_TEST_MYSQL_URL is not set and no docker here"
    ):
        locate_backend(
            "mysql", {REQUIRE_ENV: require}, docker_reason=lambda: "no docker here"
        )


def test_unset_second_server_falls_back_when_not_required() -> None:
    """An unset second server is None (its fixture then uses the first server)."""
    assert env_server_url("mysql", MYSQL2_ENV, "the second server", {REQUIRE_ENV: ""}) is None


def test_unset_second_server_fails_when_required() -> None:
    """An unset second server fails under SNOWSHARD_REQUIRE_BACKENDS=1, naming its variable."""
    with pytest.raises(
        pytest.fail.Exception, match=r"\$SNOWSHARD_TEST_MYSQL2_URL \(the second server\)"
    ):
        env_server_url("mysql", MYSQL2_ENV, "the second server", {REQUIRE_ENV: "1"})


def test_unreachable_replica_fails_when_required() -> None:
    """A replica URL that does not answer fails under SNOWSHARD_REQUIRE_BACKENDS=1."""
    env = {POSTGRES_REPLICA_ENV: UNREACHABLE_PG, REQUIRE_ENV: "1"}
    with pytest.raises(pytest.fail.Exception, match=r"127\.0\.0\.1:1/x is unreachable"):
        env_server_url("postgresql", POSTGRES_REPLICA_ENV, "the replica", env)


def test_missing_url_with_docker_asks_for_a_container() -> None:
    """No URL but a Docker engine: locate_backend returns None (start a container)."""
    assert locate_backend("redis", {}, docker_reason=lambda: None) is None


# --------------------------------------------------------------------------- redis


def test_redis_db_cleanup_deletes_only_its_own_keys(redis_db: RedisNamespace) -> None:
    """cleanup() removes the keys under the prefix and leaves other keys alone."""
    assert redis_db.prefix.startswith(DB_NAME_PREFIX)
    assert redis_db.keys() == []
    redis_db.client.set(redis_db.key("a"), b"1")
    redis_db.client.hset(redis_db.key("b", 2), "f", "v")
    outsider = (
        redis_db.prefix.rstrip(":") + "_outsider"
    )  # shares the prefix text, not the ':'
    redis_db.client.set(outsider, b"keep")
    try:
        assert redis_db.keys() == sorted(
            [redis_db.key("a").encode(), redis_db.key("b", 2).encode()]
        )
        redis_db.cleanup()
        assert redis_db.keys() == []
        assert redis_db.client.get(outsider) == b"keep"
    finally:
        redis_db.client.delete(outsider)


def test_redis_db_record_for_cleanup_check(redis_db: RedisNamespace) -> None:
    """Write a key under this test's prefix for the check that follows."""
    redis_db.client.set(redis_db.key("left", "behind"), b"x", ex=600)
    assert redis_db.client.exists(redis_db.key("left", "behind")) == 1
    _RECORDED_REDIS["prefix"] = redis_db.prefix


def test_redis_db_previous_keys_are_gone(redis_db: RedisNamespace) -> None:
    """The previous test's keys were deleted on teardown and this prefix is new."""
    if "prefix" not in _RECORDED_REDIS:
        pytest.skip("needs test_redis_db_record_for_cleanup_check to run first")
    old = _RECORDED_REDIS["prefix"]
    assert redis_db.prefix != old
    assert list(redis_db.client.scan_iter(match=old + "*")) == []
