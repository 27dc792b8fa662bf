"""Real-database fixtures for the snowshard test suite (a pytest plugin).

Loaded by ``tests/conftest.py`` through ``pytest_plugins = ["tests.backends"]``.

Where the servers come from, per backend (PostgreSQL, MySQL/MariaDB, Redis):

1. an environment URL, if set::

       SNOWSHARD_TEST_POSTGRES_URL          postgresql+psycopg://postgres@127.0.0.1:5432/postgres
       SNOWSHARD_TEST_POSTGRES2_URL         postgresql+psycopg://postgres@127.0.0.1:5433/postgres
       SNOWSHARD_TEST_POSTGRES_PRIMARY_URL  postgresql+psycopg://postgres@127.0.0.1:5435/postgres
       SNOWSHARD_TEST_POSTGRES_REPLICA_URL  postgresql+psycopg://postgres@127.0.0.1:5434/postgres
       SNOWSHARD_TEST_MYSQL_URL             mysql+pymysql://root@127.0.0.1:3306/test
       SNOWSHARD_TEST_MYSQL2_URL            mysql+pymysql://root@127.0.0.1:3307/test
       SNOWSHARD_TEST_MYSQL_PRIMARY_URL     mysql+pymysql://root@127.0.0.1:3310/test
       SNOWSHARD_TEST_MYSQL_REPLICA_URL     mysql+pymysql://root@127.0.0.1:3311/test
       SNOWSHARD_TEST_REDIS_URL             redis://127.0.0.1:6379/0

   ``POSTGRES2`` and ``MYSQL2`` are second servers of each kind (``.ci/servers.sh`` starts
   them in CI; ``docker-compose.yml`` describes them); when one is unset, its fixture falls
   back to the first server of its kind, so the multi-database tests still run, on one
   server. ``POSTGRES_PRIMARY`` and ``POSTGRES_REPLICA`` are a PostgreSQL primary and its
   streaming replica (hot standby), a pair of their own (a replica of the first server
   replayed every test database's creation); no fallback: tests that need them skip
   without them. ``MYSQL_PRIMARY`` and ``MYSQL_REPLICA`` are a MariaDB primary (binary log
   on) and its replica, a pair of their own (the main MariaDB keeps no binary log); no
   fallback either.

   A URL that is set but does not answer is reported (skip, or fail, see below); it never
   silently falls back to a container.
2. otherwise a throw-away testcontainers container, when a Docker engine answers (at most
   one container per backend per session);
3. otherwise the test is skipped with the reason.

With ``SNOWSHARD_REQUIRE_BACKENDS=1`` every "skip" above becomes a failure instead, so CI
cannot go green by silently skipping the database tests; a second server or the replica
that is unset then fails its fixture too, instead of falling back.

Isolation: every test gets brand-new databases named ``snowshard_t_<random>`` (SQLite files in
``tmp_path``) and they are dropped on teardown, from the server each was created on, so runs
can be repeated against the same servers. On the shared PostgreSQL servers a test's
database is instead emptied and renamed for a later test (``tests/recycled_databases.py``:
creating one costs far more), so its name is gone all the same; those are dropped when the
session ends. Redis tests get a unique key prefix and only keys under it are deleted afterwards.

Fixtures (all return plain strings / small objects, never engines):

* session: ``postgres_url``, ``postgres2_url``, ``postgres_replica_url``, ``mysql_url``,
  ``mysql2_url``, ``mysql_primary_url``, ``mysql_replica_url``, ``redis_url`` - server-level admin URLs (psycopg 3 / PyMySQL / redis-py).
* function: ``database_factory(backend, count=1, *, server_url=None) -> list[str]`` with
  backend in ``"sqlite"``, ``"postgresql"``, ``"mysql"``; ``database_factory.engine(url, **kw)``
  creates an engine that is disposed before the databases are dropped. Without
  ``server_url``, the databases of one call alternate between the first and the second
  server of their kind (first, second, first, ...), so every test that asks for two or more
  databases - and every sharded world - spans two servers when two are configured.
* function: ``sqlite_url``, ``pg_database_url``, ``pg2_database_url``, ``mysql_database_url``,
  ``mysql2_database_url`` (one fresh database each, on the server their name says),
  ``db_url`` (parametrized over sqlite/postgresql/mysql, one fresh database) and
  ``db_urls_2`` (same params, two fresh databases: the second on the second server).
* function: ``redis_db`` -> :class:`RedisNamespace` (``.client``, ``.url``, ``.prefix``,
  ``.key(*parts)``).

Helpers: :func:`async_url` maps a sync URL to its asyncio driver.

Engines that a test creates itself must be disposed by the test (async engines with
``await engine.dispose()``); the suite runs with ``filterwarnings = error``, so a leaked
connection shows up as a ``ResourceWarning`` failure.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import secrets
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.pool import NullPool

from tests.recycled_databases import RecycledDatabases

__all__ = [
    "DB_NAME_PREFIX",
    "ENV_URLS",
    "MYSQL2_ENV",
    "MYSQL_PRIMARY_ENV",
    "MYSQL_REPLICA_ENV",
    "POSTGRES2_ENV",
    "POSTGRES_REPLICA_ENV",
    "REQUIRE_ENV",
    "SECOND_SERVER_ENV_URLS",
    "DatabaseFactory",
    "RedisNamespace",
    "async_url",
    "backend_unavailable",
    "check_reachable",
    "docker_unavailable_reason",
    "env_server_url",
    "list_test_databases",
    "locate_backend",
    "requires_backends",
    "table_names",
]

DB_NAME_PREFIX = "snowshard_t_"
REQUIRE_ENV = "SNOWSHARD_REQUIRE_BACKENDS"
POSTGRES2_ENV = "SNOWSHARD_TEST_POSTGRES2_URL"
MYSQL2_ENV = "SNOWSHARD_TEST_MYSQL2_URL"
POSTGRES_PRIMARY_ENV = "SNOWSHARD_TEST_POSTGRES_PRIMARY_URL"
POSTGRES_REPLICA_ENV = "SNOWSHARD_TEST_POSTGRES_REPLICA_URL"
MYSQL_PRIMARY_ENV = "SNOWSHARD_TEST_MYSQL_PRIMARY_URL"
MYSQL_REPLICA_ENV = "SNOWSHARD_TEST_MYSQL_REPLICA_URL"
SECOND_SERVER_ENV_URLS: dict[str, str] = {"postgresql": POSTGRES2_ENV, "mysql": MYSQL2_ENV}
ENV_URLS: dict[str, str] = {
    "postgresql": "SNOWSHARD_TEST_POSTGRES_URL",
    "mysql": "SNOWSHARD_TEST_MYSQL_URL",
    "redis": "SNOWSHARD_TEST_REDIS_URL",
}
SQL_BACKENDS = ("sqlite", "postgresql", "mysql")
_ALIASES = {
    "sqlite": "sqlite",
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "pg": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
}
CONNECT_TIMEOUT = 5  # seconds, for every probe and admin connection
CONTAINER_START_TIMEOUT = 180.0  # seconds, image pull excluded (done by start())

_TRUE = {"1", "true", "yes", "on"}


# --------------------------------------------------------------------------- skip or fail


def table_names(url: str) -> set[str]:
    """The tables of the database at ``url`` (a fresh connection, disposed before returning)."""
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return set(sa.inspect(connection).get_table_names())
    finally:
        engine.dispose()


def requires_backends(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``SNOWSHARD_REQUIRE_BACKENDS`` asks for missing backends to fail."""
    env = os.environ if environ is None else environ
    return env.get(REQUIRE_ENV, "").strip().lower() in _TRUE


def backend_unavailable(
    reason: str, environ: Mapping[str, str] | None = None
) -> NoReturn:
    """Skip the current test with ``reason`` - or fail it under SNOWSHARD_REQUIRE_BACKENDS=1."""
    if requires_backends(environ):
        pytest.fail(f"{reason} (and {REQUIRE_ENV}=1 is set)", pytrace=False)
    pytest.skip(reason)


# --------------------------------------------------------------------------- URLs


def _redact(url: str) -> str:
    """The URL with any password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not an SQLAlchemy URL (e.g. redis://)
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))


def _render(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _normalize(backend: str, url: str) -> str:
    """Force the drivers the suite uses: psycopg 3 and PyMySQL."""
    if backend == "redis":
        return url
    parsed = make_url(url)
    driver = "postgresql+psycopg" if backend == "postgresql" else "mysql+pymysql"
    return _render(parsed.set(drivername=driver))


def async_url(url: str) -> str:
    """Map a sync database URL to its asyncio driver (psycopg 3 is both sync and async)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _render(parsed.set(drivername="sqlite+aiosqlite"))
    if backend == "postgresql":
        return _render(parsed.set(drivername="postgresql+psycopg"))
    if backend in ("mysql", "mariadb"):
        return _render(parsed.set(drivername="mysql+aiomysql"))
    raise ValueError(f"no async mapping for {backend!r} URLs")


def _sql_connect_args(url: URL) -> dict[str, Any]:
    if url.get_backend_name() in ("postgresql", "mysql", "mariadb"):
        return {"connect_timeout": CONNECT_TIMEOUT}
    return {}


def _admin_engine(url: str, *, drop_database: bool = False) -> Engine:
    """A NullPool autocommit engine for CREATE/DROP DATABASE; dispose it after use."""
    parsed = make_url(url)
    if drop_database:  # URL.set(database=None) would keep the database
        parsed = parsed._replace(database=None)
    return sa.create_engine(
        parsed,
        poolclass=NullPool,
        isolation_level="AUTOCOMMIT",
        connect_args=_sql_connect_args(parsed),
    )


@contextlib.contextmanager
def _admin(url: str, *, drop_database: bool = False) -> Iterator[sa.Connection]:
    engine = _admin_engine(url, drop_database=drop_database)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- discovery


def check_reachable(
    backend: str, url: str, timeout: float = CONNECT_TIMEOUT
) -> str | None:
    """Connect once to ``url``; return None if it answered, else a one-line reason."""
    try:
        if backend == "redis":
            import redis

            client = redis.Redis.from_url(
                url, socket_connect_timeout=timeout, socket_timeout=timeout
            )
            try:
                client.ping()
            finally:
                client.close()
        else:
            engine = sa.create_engine(
                url, poolclass=NullPool, connect_args=_sql_connect_args(make_url(url))
            )
            try:
                with engine.connect() as conn:
                    conn.execute(sa.text("SELECT 1"))
            finally:
                engine.dispose()
    except Exception as exc:  # noqa: BLE001 - any driver / network / auth error
        detail = " ".join(str(exc).split())[:300]
        return f"{backend} at {_redact(url)} is unreachable: {type(exc).__name__}: {detail}"
    return None


_docker_reason_cache: list[str | None] = []


def docker_unavailable_reason() -> str | None:
    """None when a Docker engine answers, else why not (cached for the session).

    Cheap: with no DOCKER_HOST and no docker socket this returns at once; otherwise the
    engine is pinged in a child process (3 s timeout), which keeps the docker SDK's sockets
    and warnings out of the test process.
    """
    if _docker_reason_cache:
        return _docker_reason_cache[0]
    reason: str | None
    sockets = ("/var/run/docker.sock", str(Path.home() / ".docker/run/docker.sock"))
    if not os.environ.get("DOCKER_HOST") and not any(
        os.path.exists(s) for s in sockets
    ):
        reason = "no Docker engine (DOCKER_HOST unset and no docker socket)"
    else:
        probe = "import docker; c = docker.from_env(timeout=3); c.ping(); c.close()"
        try:
            done = subprocess.run(
                [sys.executable, "-W", "ignore", "-c", probe],
                capture_output=True,
                check=False,
                text=True,
                timeout=6,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            reason = "Docker engine did not answer within 6 s"
        else:
            if done.returncode == 0:
                reason = None
            else:
                tail = (done.stderr.strip().splitlines() or ["?"])[-1][:200]
                reason = f"Docker engine not usable: {tail}"
    _docker_reason_cache.append(reason)
    return reason


def locate_backend(
    backend: str,
    environ: Mapping[str, str] | None = None,
    *,
    docker_reason: Callable[[], str | None] = docker_unavailable_reason,
) -> str | None:
    """Decide where ``backend``'s server comes from.

    Returns the (normalized, reachable) environment URL, or None when the caller should
    start a container. Skips - or fails under SNOWSHARD_REQUIRE_BACKENDS=1 - when the
    environment URL does not answer, or when it is unset and Docker is unusable.
    """
    env = os.environ if environ is None else environ
    var = ENV_URLS[backend]
    url = env.get(var, "").strip()
    if url:
        url = _normalize(backend, url)
        problem = check_reachable(backend, url)
        if problem is not None:
            backend_unavailable(f"{problem} (from ${var})", env)
        return url
    why = docker_reason()
    if why is not None:
        backend_unavailable(f"{backend}: ${var} is not set and {why}", env)
    return None


# --------------------------------------------------------------------------- containers

_CONTAINER_SPECS: dict[str, dict[str, Any]] = {
    "postgresql": {
        "image": "postgres:16-alpine",
        "port": 5432,
        "env": {"POSTGRES_HOST_AUTH_METHOD": "trust"},
        "url": "postgresql+psycopg://postgres@{host}:{port}/postgres",
    },
    "mysql": {
        "image": "mariadb:10.11",
        "port": 3306,
        "env": {"MARIADB_ALLOW_EMPTY_ROOT_PASSWORD": "1", "MARIADB_DATABASE": "test"},
        "url": "mysql+pymysql://root@{host}:{port}/test",
    },
    "redis": {
        "image": "redis:7-alpine",
        "port": 6379,
        "env": {},
        "url": "redis://{host}:{port}/0",
    },
}


@contextlib.contextmanager
def _quietly() -> Iterator[None]:
    """Silence warnings from testcontainers / the docker SDK (not our code), including the
    ResourceWarnings of sockets they leave to the garbage collector."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            gc.collect()


def _start_container(backend: str) -> tuple[Any, str]:
    """Start the backend's container and wait (over TCP) until it answers."""
    spec = _CONTAINER_SPECS[backend]
    try:
        with _quietly():
            from testcontainers.core.container import DockerContainer
    except ImportError as exc:
        backend_unavailable(
            f"{backend}: a Docker engine answers but testcontainers is missing ({exc})"
        )
    container = None
    try:
        with _quietly():
            container = DockerContainer(spec["image"]).with_exposed_ports(spec["port"])
            for key, value in spec["env"].items():
                container = container.with_env(key, value)
            container.start()
            host = container.get_container_host_ip()
            port = container.get_exposed_port(spec["port"])
        url = spec["url"].format(host=host, port=port)
        deadline = time.monotonic() + CONTAINER_START_TIMEOUT
        while (problem := check_reachable(backend, url, timeout=2)) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(problem)
            time.sleep(0.5)
    except Exception as exc:  # noqa: BLE001 - docker/testcontainers errors vary by version
        if container is not None:
            _stop_container(container)
        backend_unavailable(
            f"{backend}: could not start a {spec['image']} container: {exc}"
        )
    return container, url


def _stop_container(container: Any) -> None:
    with _quietly(), contextlib.suppress(Exception):
        container.stop()


def _server_url(backend: str) -> Iterator[str]:
    url = locate_backend(backend)
    if url is not None:
        yield url
        return
    container, url = _start_container(backend)
    try:
        yield url
    finally:
        _stop_container(container)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """Server-level PostgreSQL URL (postgresql+psycopg://...) for admin work."""
    yield from _server_url("postgresql")


def env_server_url(
    backend: str, var: str, role: str, environ: Mapping[str, str] | None = None
) -> str | None:
    """The normalized, reachable URL in ``$var``, or None when it is unset.

    For the optional servers (second servers, the replica). Unset under
    SNOWSHARD_REQUIRE_BACKENDS=1 fails; unreachable skips (fails when required), like the
    first servers' URLs.
    """
    env = os.environ if environ is None else environ
    raw = env.get(var, "").strip()
    if not raw:
        if requires_backends(env):
            backend_unavailable(
                f"{backend}: ${var} ({role}) is not set; .ci/servers.sh starts one"
                " and prints the URL",
                env,
            )
        return None
    url = _normalize(backend, raw)
    problem = check_reachable(backend, url)
    if problem is not None:
        backend_unavailable(f"{problem} (from ${var}, {role})", env)
    return url


def _second_server(request: pytest.FixtureRequest, backend: str) -> str:
    url = env_server_url(backend, SECOND_SERVER_ENV_URLS[backend], "the second server")
    if url is None:
        first: str = request.getfixturevalue(_SERVER_FIXTURES[backend])
        return first
    return url


@pytest.fixture(scope="session")
def postgres2_url(request: pytest.FixtureRequest) -> str:
    """A second PostgreSQL server ($SNOWSHARD_TEST_POSTGRES2_URL), else the first one."""
    return _second_server(request, "postgresql")


@pytest.fixture(scope="session")
def postgres_primary_url() -> str:
    """The PostgreSQL server :func:`postgres_replica_url` streams from
    ($SNOWSHARD_TEST_POSTGRES_PRIMARY_URL; .ci/servers.sh: 5435, written to by the replica
    tests only, so the replica replays little). Skips when unset - fails under
    SNOWSHARD_REQUIRE_BACKENDS=1."""
    return _required_server("postgresql", POSTGRES_PRIMARY_ENV, "the replica's primary")


@pytest.fixture(scope="session")
def postgres_replica_url() -> str:
    """A streaming replica of :func:`postgres_primary_url` ($SNOWSHARD_TEST_POSTGRES_REPLICA_URL).

    Read-only (hot standby). Skips when unset - fails under SNOWSHARD_REQUIRE_BACKENDS=1.
    """
    url = env_server_url("postgresql", POSTGRES_REPLICA_ENV, "the replica")
    if url is None:
        backend_unavailable(f"postgresql: ${POSTGRES_REPLICA_ENV} (a replica) is not set")
    return url


@pytest.fixture(scope="session")
def mysql_url() -> Iterator[str]:
    """Server-level MySQL/MariaDB URL (mysql+pymysql://...) for admin work."""
    yield from _server_url("mysql")


@pytest.fixture(scope="session")
def mysql2_url(request: pytest.FixtureRequest) -> str:
    """A second MySQL/MariaDB server ($SNOWSHARD_TEST_MYSQL2_URL), else the first one."""
    return _second_server(request, "mysql")


def _required_server(backend: str, var: str, role: str) -> str:
    url = env_server_url(backend, var, role)
    if url is None:
        backend_unavailable(f"{backend}: ${var} ({role}) is not set")
    return url


@pytest.fixture(scope="session")
def mysql_primary_url() -> str:
    """A MariaDB primary with a binary log ($SNOWSHARD_TEST_MYSQL_PRIMARY_URL), the source
    of :func:`mysql_replica_url`. Skips when unset - fails under SNOWSHARD_REQUIRE_BACKENDS=1."""
    return _required_server("mysql", MYSQL_PRIMARY_ENV, "a MariaDB primary")


@pytest.fixture(scope="session")
def mysql_replica_url() -> str:
    """A MariaDB replica of :func:`mysql_primary_url` ($SNOWSHARD_TEST_MYSQL_REPLICA_URL)."""
    return _required_server("mysql", MYSQL_REPLICA_ENV, "the replica of the MariaDB primary")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """Redis server URL (redis://...)."""
    yield from _server_url("redis")


REPLICA_WAIT = 30.0  # seconds a real replica may take to show what the primary committed


def wait_for_replica(check: Callable[[], Any], what: str) -> Any:
    """Poll ``check`` (a read on a streaming replica) until it returns something truthy,
    at most :data:`REPLICA_WAIT` seconds; driver errors count as not yet (the replica may
    not have the database yet)."""
    deadline = time.monotonic() + REPLICA_WAIT
    while True:
        try:
            found = check()
        except sa.exc.DBAPIError:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"the replica did not show {what} within {REPLICA_WAIT:g} s")
        time.sleep(0.05)


# --------------------------------------------------------------------------- databases


def _new_name() -> str:
    return DB_NAME_PREFIX + secrets.token_hex(6)


def _mysql_quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _pg_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def list_test_databases(backend: str, server_url: str) -> list[str]:
    """Names of ``snowshard_t_*`` databases currently on the server (for leak checks)."""
    pattern = DB_NAME_PREFIX.replace("_", r"\_") + "%"
    if backend == "postgresql":
        sql = "SELECT datname FROM pg_database WHERE datname LIKE :p ORDER BY 1"
    elif backend == "mysql":
        sql = (
            "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA"
            " WHERE SCHEMA_NAME LIKE :p ORDER BY 1"
        )
    else:
        raise ValueError(f"not a database server backend: {backend!r}")
    with _admin(server_url, drop_database=backend == "mysql") as conn:
        return [row[0] for row in conn.execute(sa.text(sql), {"p": pattern})]


def icu_locale(locale: str) -> str:
    """A PostgreSQL database's default collation: ICU's ``locale`` (language rules)."""
    return f"LOCALE_PROVIDER icu ICU_LOCALE '{locale}'"


def libc_locale(locale: str) -> str:
    """A PostgreSQL database's default collation: the C library's ``locale``."""
    return f"LOCALE_PROVIDER libc LOCALE '{locale}'"


def _create_database(
    backend: str, server_url: str, name: str, pg_locale: str | None = None
) -> str:
    if backend == "postgresql":
        locale = "" if pg_locale is None else f" {pg_locale}"
        with _admin(server_url) as conn:
            # template0: never blocked by someone else sitting in template1.
            conn.exec_driver_sql(
                f"CREATE DATABASE {_pg_quote(name)} TEMPLATE template0{locale}"
            )
    else:
        with _admin(server_url, drop_database=True) as conn:
            conn.exec_driver_sql(
                f"CREATE DATABASE {_mysql_quote(name)} CHARACTER SET utf8mb4"
            )
    return _render(make_url(server_url).set(database=name))


def _drop_database(backend: str, server_url: str, name: str) -> None:
    if backend == "postgresql":
        with _admin(server_url) as conn:
            conn.exec_driver_sql(
                f"DROP DATABASE IF EXISTS {_pg_quote(name)} WITH (FORCE)"
            )
        return
    with _admin(server_url, drop_database=True) as conn:
        # MySQL has no WITH (FORCE): end sessions still using the database so DROP cannot
        # hang on a metadata lock held by a leaked connection.
        conn.exec_driver_sql("SET SESSION lock_wait_timeout = 30")
        ids = conn.execute(
            sa.text(
                "SELECT ID FROM information_schema.PROCESSLIST"
                " WHERE DB = :db AND ID <> CONNECTION_ID()"
            ),
            {"db": name},
        ).scalars()
        for thread_id in list(ids):
            with contextlib.suppress(sa.exc.DBAPIError):  # it may have gone already
                conn.exec_driver_sql(f"KILL CONNECTION {int(thread_id)}")
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {_mysql_quote(name)}")


# PostgreSQL databases of the shared servers are emptied and renamed after a test, for the
# next one, instead of dropped (tests/recycled_databases.py says why); dropped at the end.
_RECYCLED = RecycledDatabases(_admin, _new_name, functools.partial(_drop_database, "postgresql"))
_RECYCLED_SERVER_ENVS = (ENV_URLS["postgresql"], POSTGRES2_ENV)


def _recyclable(kind: str, server: str) -> bool:
    """Whether ``server`` is a shared PostgreSQL server of the environment (not one a test
    started, which it may stop)."""
    if kind != "postgresql":
        return False
    shared = (os.environ.get(var, "").strip() for var in _RECYCLED_SERVER_ENVS)
    return server in {_normalize(kind, url) for url in shared if url}


@pytest.fixture(scope="session", autouse=True)
def _recycled_postgres_databases() -> Iterator[None]:
    """Drops the recycled PostgreSQL databases when the session ends."""
    yield
    problems = _RECYCLED.drop_all()
    if problems:
        raise RuntimeError("could not drop test databases: " + "; ".join(problems))


class DatabaseFactory:
    """Creates fresh empty databases and drops them (after disposing engines) on cleanup;
    on the shared PostgreSQL servers, recycles them instead (emptied, under a new name).

    ``factory(backend, count=1, *, server_url=None, pg_locale=None) -> list[str]`` returns
    SQLAlchemy URLs (sqlite:///..., postgresql+psycopg://..., mysql+pymysql://...).
    ``server_url`` overrides the server (an admin URL) the databases are created on;
    ``pg_locale`` (:func:`icu_locale`, :func:`libc_locale`; one for all, or a list the
    databases take in turn) sets each PostgreSQL database's default collation. Otherwise the databases of one
    call alternate between ``server_url(kind)`` and ``second_server_url(kind)`` (when given):
    the first, third, ... on the first server, the second, fourth, ... on the second.
    """

    def __init__(
        self,
        tmp_path: Path,
        server_url: Callable[[str], str],
        second_server_url: Callable[[str], str] | None = None,
    ) -> None:
        self._tmp_path = tmp_path
        self._server_url = server_url
        self._second_server_url = second_server_url
        # (backend, server_url, name or path, PostgreSQL creation options)
        self._created: list[tuple[str, str, str, str | None]] = []
        self._engines: list[Engine] = []

    def __call__(
        self,
        backend: str,
        count: int = 1,
        *,
        server_url: str | None = None,
        pg_locale: str | Sequence[str] | None = None,
    ) -> list[str]:
        try:
            kind = _ALIASES[backend.lower()]
        except KeyError:
            raise ValueError(
                f"backend must be one of {SQL_BACKENDS}, not {backend!r}"
            ) from None
        if count < 1:
            raise ValueError(f"count must be >= 1, not {count}")
        urls = []
        for index in range(count):
            name = _new_name()
            if kind == "sqlite":
                path = self._tmp_path / f"{name}.sqlite3"
                path.touch(
                    exist_ok=False
                )  # a 0-byte file is a valid, empty SQLite database
                self._created.append((kind, "", str(path), None))
                urls.append(_render(URL.create("sqlite", database=str(path))))
                continue
            server = server_url if server_url is not None else self._default_server(kind, index)
            server = _normalize(kind, server)
            locale = pg_locale if pg_locale is None or isinstance(pg_locale, str) else (
                pg_locale[index % len(pg_locale)]
            )
            recycled = _RECYCLED.take(server, locale) if _recyclable(kind, server) else None
            if recycled is not None:
                self._created.append((kind, server, recycled, locale))
                urls.append(_render(make_url(server).set(database=recycled)))
                continue
            # Record first: if CREATE half-worked, cleanup still tries the DROP.
            self._created.append((kind, server, name, locale))
            urls.append(_create_database(kind, server, name, locale))
        return urls

    def _default_server(self, kind: str, index: int) -> str:
        """The server of a call's ``index``-th database: the second one for odd indexes."""
        if index % 2 == 1 and self._second_server_url is not None:
            return self._second_server_url(kind)
        return self._server_url(kind)

    @classmethod
    def for_request(cls, request: pytest.FixtureRequest, tmp_path: Path) -> DatabaseFactory:
        """A factory on the session's servers (both of each kind), like ``database_factory``.

        For fixtures that manage a factory's lifetime themselves; call ``cleanup()``.
        """

        def server_url(kind: str) -> str:
            url: str = request.getfixturevalue(_SERVER_FIXTURES[kind])
            return url

        def second_server_url(kind: str) -> str:
            url: str = request.getfixturevalue(_SECOND_SERVER_FIXTURES[kind])
            return url

        return cls(tmp_path, server_url, second_server_url)

    def engine(self, url: str, **kwargs: Any) -> Engine:
        """``create_engine(url, **kwargs)``, disposed automatically before the DROP."""
        engine = sa.create_engine(url, **kwargs)
        self._engines.append(engine)
        return engine

    def cleanup(self) -> None:
        """Dispose tracked engines, then drop every database created (newest first)."""
        errors: list[str] = []
        while self._engines:
            self._engines.pop().dispose()
        while self._created:
            kind, server, name, locale = self._created.pop()
            try:
                if kind == "sqlite":
                    for suffix in ("", "-journal", "-wal", "-shm"):
                        Path(name + suffix).unlink(missing_ok=True)
                elif _recyclable(kind, server) and _RECYCLED.give_back(server, locale, name):
                    pass  # emptied and kept under a new name: this name is gone
                else:
                    _drop_database(kind, server, name)
            except Exception as exc:  # noqa: BLE001 - keep dropping the others, report all
                errors.append(f"{kind} {name}: {type(exc).__name__}: {exc}")
        if errors:
            raise RuntimeError("could not drop test databases: " + "; ".join(errors))


_SERVER_FIXTURES = {"postgresql": "postgres_url", "mysql": "mysql_url"}
_SECOND_SERVER_FIXTURES = {"postgresql": "postgres2_url", "mysql": "mysql2_url"}


@pytest.fixture
def database_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[DatabaseFactory]:
    """``database_factory(backend, count=1) -> list[str]`` of brand-new empty databases.

    The databases of one call alternate between the two servers of their kind.
    """
    factory = DatabaseFactory.for_request(request, tmp_path)
    try:
        yield factory
    finally:
        factory.cleanup()


@pytest.fixture
def sqlite_url(database_factory: DatabaseFactory) -> str:
    """One fresh SQLite database file (sqlite:///.../snowshard_t_*.sqlite3)."""
    return database_factory("sqlite")[0]


@pytest.fixture
def pg_database_url(database_factory: DatabaseFactory, postgres_url: str) -> str:
    """One fresh PostgreSQL database."""
    return database_factory("postgresql", server_url=postgres_url)[0]


@pytest.fixture
def pg2_database_url(database_factory: DatabaseFactory, postgres2_url: str) -> str:
    """One fresh database on the second PostgreSQL server (the first, when none is configured)."""
    return database_factory("postgresql", server_url=postgres2_url)[0]


@pytest.fixture
def mysql_database_url(database_factory: DatabaseFactory, mysql_url: str) -> str:
    """One fresh MySQL/MariaDB database."""
    return database_factory("mysql", server_url=mysql_url)[0]


@pytest.fixture
def mysql2_database_url(database_factory: DatabaseFactory, mysql2_url: str) -> str:
    """One fresh database on the second MySQL/MariaDB server (the first, when none is configured)."""
    return database_factory("mysql", server_url=mysql2_url)[0]


_DB_PARAMS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


@pytest.fixture(params=_DB_PARAMS)
def db_url(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> str:
    """One fresh database URL per backend (sqlite, postgresql, mysql)."""
    return database_factory(request.param)[0]


@pytest.fixture(params=_DB_PARAMS)
def db_urls_2(
    request: pytest.FixtureRequest, database_factory: DatabaseFactory
) -> list[str]:
    """Two fresh, distinct databases per backend; the second on the second server, if any."""
    return database_factory(request.param, 2)


# --------------------------------------------------------------------------- redis


@dataclass
class RedisNamespace:
    """A redis-py client plus the key prefix this test owns (keys are deleted afterwards)."""

    client: Any  # redis.Redis (bytes responses, like redis.Redis.from_url's default)
    url: str
    prefix: str  # e.g. "snowshard_t_1a2b3c4d5e6f:"

    def key(self, *parts: object) -> str:
        """``prefix`` + the parts joined by ':'."""
        return self.prefix + ":".join(str(p) for p in parts)

    def keys(self) -> list[bytes]:
        """Every key currently under ``prefix``."""
        return sorted(
            self.client.scan_iter(match=_glob_escape(self.prefix) + "*", count=500)
        )

    def cleanup(self) -> None:
        """Delete every key under ``prefix`` (and nothing else)."""
        batch: list[bytes] = []
        for key in self.client.scan_iter(
            match=_glob_escape(self.prefix) + "*", count=500
        ):
            batch.append(key)
            if len(batch) >= 500:
                self.client.delete(*batch)
                batch.clear()
        if batch:
            self.client.delete(*batch)


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


@pytest.fixture
def redis_db(redis_url: str) -> Iterator[RedisNamespace]:
    """A redis client and a unique key prefix; keys under the prefix are deleted afterwards."""
    import redis

    client = redis.Redis.from_url(
        redis_url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=30
    )
    namespace = RedisNamespace(client=client, url=redis_url, prefix=_new_name() + ":")
    try:
        yield namespace
    finally:
        try:
            namespace.cleanup()
        finally:
            client.close()


# --------------------------------------------------------------------------- markers

_FIXTURE_MARKERS = {
    "postgres_url": "postgres",
    "postgres2_url": "postgres",
    "postgres_replica_url": "postgres",
    "pg_database_url": "postgres",
    "pg2_database_url": "postgres",
    "mysql_url": "mysql",
    "mysql2_url": "mysql",
    "mysql2_database_url": "mysql",
    "mysql_primary_url": "mysql",
    "mysql_replica_url": "mysql",
    "mysql_database_url": "mysql",
    "redis_url": "redis",
    "redis_db": "redis",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tag tests using a server fixture with its marker, so ``-m "not mysql"`` works."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in _FIXTURE_MARKERS.items():
            if fixture in names and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
