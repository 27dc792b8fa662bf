"""Shared fixtures and settings of the test suite.

* Real-database fixtures (PostgreSQL, MySQL/MariaDB, Redis, SQLite) live in
  ``tests/backends.py``, loaded as a plugin: ``database_factory``, ``db_url``, ``redis_db``...
* ``module_databases``: a database factory shared by a test module's tests.
* ``shop``: ``tests/shop_setup.py``'s orders over two databases of each backend in turn,
  with their unsharded twins, made once per module.
* Sharded worlds (``tests/worlds.py``): ``sql_log`` records the statements engines send,
  ``sharded_world(models, backend)`` puts a shop (or any declarative base) on brand-new
  databases, and ``sql_backend`` parametrizes a test over SQLite, PostgreSQL and MariaDB.
* Hypothesis profiles: ``dev`` (the default: quick, random) and ``ci`` (at least 200
  examples, no deadline, derandomized so a failure reproduces on any machine). Choose one
  with ``HYPOTHESIS_PROFILE=ci``; when that is unset, ``CI=true`` selects ``ci``.
  Property tests leave ``max_examples`` to the profile; one whose every example costs
  database round trips may take a fixed share of it
  (``max_examples=settings.default.max_examples // 10``), still set by the profile.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import pytest
from hypothesis import settings

# Helper modules imported here get pytest's assertion rewriting like test modules do.
pytest.register_assert_rewrite("tests.backends", "tests.shop_setup", "tests.worlds")

from tests.backends import DatabaseFactory
from tests.shop_setup import Setup, build_setup
from tests.twin_setups import Filled, filled_twin_shops
from tests.worlds import SqlLog, WorldFactory

pytest_plugins = ["tests.backends"]

PROFILE_ENV = "HYPOTHESIS_PROFILE"
PROFILES = ("dev", "ci")

settings.register_profile("dev", max_examples=50)
settings.register_profile(
    "ci", max_examples=200, deadline=None, derandomize=True, database=None, print_blob=True
)


def hypothesis_profile(environ: Mapping[str, str] | None = None) -> str:
    """The profile ``HYPOTHESIS_PROFILE`` names; else ``ci`` under ``CI=true``, else ``dev``."""
    env = os.environ if environ is None else environ
    chosen = env.get(PROFILE_ENV, "").strip()
    if not chosen:
        return "ci" if env.get("CI", "").strip().lower() in {"1", "true", "yes"} else "dev"
    if chosen not in PROFILES:
        raise pytest.UsageError(f"{PROFILE_ENV}={chosen!r}: choose one of {', '.join(PROFILES)}")
    return chosen


settings.load_profile(hypothesis_profile())


_BACKEND_PARAMS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


@pytest.fixture(params=_BACKEND_PARAMS)
def sql_backend(request: pytest.FixtureRequest) -> str:
    """Each SQL backend in turn: sqlite, postgresql, mysql (MariaDB)."""
    backend: str = request.param
    return backend


@pytest.fixture
def sql_log() -> Iterator[SqlLog]:
    """Records what the engines it watches send; ``sql_log.watch(engine, "name")``."""
    log = SqlLog()
    try:
        yield log
    finally:
        log.close()
    # a sharded session never names a logical table in SQL (no database holds one)
    assert not log.logical, f"SQL naming a logical table was sent: {log.logical[:3]}"


@pytest.fixture
def sharded_world(database_factory: DatabaseFactory, sql_log: SqlLog) -> WorldFactory:
    """``sharded_world(shop_or_base, backend="sqlite") -> World`` on brand-new databases."""
    return WorldFactory(database_factory, sql_log)


@pytest.fixture(scope="module")
def module_databases(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DatabaseFactory]:
    """A database factory whose databases live as long as the test module (spread over both
    servers of a kind, like ``database_factory``), for worlds that tests only read."""
    factory = DatabaseFactory.for_request(request, tmp_path_factory.mktemp("module"))
    try:
        yield factory
    finally:
        factory.cleanup()


@pytest.fixture(scope="module", params=_BACKEND_PARAMS)
def shop(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """The shop's orders over two databases of each backend in turn, and their unsharded
    twin (``tests/shop_setup.py``), made once per module and only read."""
    yield from build_setup(request, tmp_path_factory.mktemp("shop"), request.param, 2)


@pytest.fixture(scope="module")
def filled(module_databases: DatabaseFactory) -> Iterator[Filled]:
    """``filled(backend, databases)``: a filled twin shop, made once per module and reused
    (tests using it only read)."""
    with filled_twin_shops(module_databases) as get:
        yield get
