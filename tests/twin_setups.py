"""The configurations of the twin-shop differential tests, and their databases.

Each configuration is a backend, a number of databases and a variant of the twin shop of
``tests/worlds.py``: as declared, with ``user_id`` NULL in some rows ("nullable"), with a
second layout from a later instant ("generations"), or as declared but queried through an
:class:`~snowshard.sharding.AsyncShardedSession` on asyncio drivers ("async"). :func:`build_setup` creates its
databases, tables and rows once per test module (the ``setup`` fixture of each module).

:func:`differential` sets a differential test's examples: ``SNOWSHARD_DIFFERENTIAL_EXAMPLES``
per configuration (300 by default), the same on every run (derandomized), or another fixed
set with ``SNOWSHARD_DIFFERENTIAL_SEED=N``, to look further afield.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, seed, settings
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from snowshard.sharding import AsyncShardedSession
from snowshard.spec import DEFAULT_DATABASE
from tests.backends import DatabaseFactory, async_url
from tests.shop_setup import rows_of, sort_rows
from tests.worlds import (
    Models,
    SqlLog,
    TwinShop,
    TwoEras,
    World,
    declare_twin_shop,
    fill_twin_shop,
    open_world,
    twin_generations,
)

__all__ = [
    "CONFIGS",
    "EXAMPLES",
    "TWIN_BACKENDS",
    "AsyncSide",
    "BlockingSession",
    "Filled",
    "Setup",
    "both_rows",
    "build_setup",
    "differential",
    "filled_twin_shops",
]

_T = TypeVar("_T")

EXAMPLES = int(os.environ.get("SNOWSHARD_DIFFERENTIAL_EXAMPLES", "300"))
SEED = os.environ.get("SNOWSHARD_DIFFERENTIAL_SEED")
"""Another fixed set of examples than the derandomized one (module docstring); unset in CI."""


@dataclass
class AsyncSide:
    """The databases of a world through asyncio engines, and the event loop that runs them."""

    loop: asyncio.AbstractEventLoop
    engines: dict[str, AsyncEngine]

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return self.loop.run_until_complete(coroutine)


class BlockingSession:
    """An :class:`AsyncShardedSession` over an :class:`AsyncSide`'s engines, driven from
    sync code: each call runs to completion on the side's loop (``await session.execute``
    as an application awaits it)."""

    def __init__(self, aio: AsyncSide) -> None:
        bind = aio.engines.get(DEFAULT_DATABASE) or next(iter(aio.engines.values()))
        named = {k: e for k, e in aio.engines.items() if k != DEFAULT_DATABASE}
        self._aio = aio
        self._session = AsyncShardedSession(bind, databases=named)

    def execute(self, statement: Any, params: Any = None) -> Any:
        return self._aio.run(self._session.execute(statement, params))

    def rollback(self) -> None:
        self._aio.run(self._session.rollback())

    def __enter__(self) -> BlockingSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self._aio.run(self._session.close())


@dataclass
class Setup:
    """One configuration: the twin shop on its world (whose log holds the SQL sent), and
    for the "async" variant the same databases through asyncio engines."""

    name: str
    shop: TwinShop
    world: World
    aio: AsyncSide | None = None

    def session(self) -> Any:
        """A new sharded session over every database: a :class:`ShardedSession`, or for the
        "async" variant a :class:`BlockingSession`."""
        return self.world.session() if self.aio is None else BlockingSession(self.aio)


CONFIGS = [
    pytest.param(("sqlite", 1, ""), id="sqlite"),
    pytest.param(("postgresql", 1, ""), id="postgresql-1", marks=pytest.mark.postgres),
    pytest.param(("postgresql", 2, ""), id="postgresql-2", marks=pytest.mark.postgres),
    pytest.param(("mysql", 1, ""), id="mariadb-1", marks=pytest.mark.mysql),
    pytest.param(("mysql", 2, ""), id="mariadb-2", marks=pytest.mark.mysql),
    pytest.param(("sqlite", 1, "nullable"), id="sqlite-nullable"),
    pytest.param(
        ("postgresql", 2, "nullable"), id="postgresql-2-nullable", marks=pytest.mark.postgres
    ),
    pytest.param(("mysql", 2, "nullable"), id="mariadb-2-nullable", marks=pytest.mark.mysql),
    pytest.param(("sqlite", 1, "generations"), id="sqlite-generations"),
    pytest.param(
        ("postgresql", 2, "generations"), id="postgresql-2-generations", marks=pytest.mark.postgres
    ),
    pytest.param(("mysql", 2, "generations"), id="mariadb-2-generations", marks=pytest.mark.mysql),
    pytest.param(("sqlite", 1, "async"), id="sqlite-async"),
    pytest.param(("postgresql", 2, "async"), id="postgresql-2-async", marks=pytest.mark.postgres),
    pytest.param(("mysql", 2, "async"), id="mariadb-2-async", marks=pytest.mark.mysql),
]
"""(backend, databases, variant) of each configuration (module docstring)."""


def build_setup(
    request: pytest.FixtureRequest, tmp_path: Any, backend: str, count: int, variant: str
) -> Iterator[Setup]:
    """Databases, tables and rows of one configuration (dropped afterwards).

    With two databases the unsharded tables get a third one (the bind), so ``notes`` lives
    where no sharded table does.
    """
    factory = DatabaseFactory.for_request(request, tmp_path)
    log = SqlLog()
    try:
        if variant == "generations":
            shop = declare_twin_shop(
                4, databases=count, ids=TwoEras(), generations=twin_generations(count)
            )
        else:
            shop = declare_twin_shop(4, databases=count, nullable_keys=variant == "nullable")
        world = open_world(factory, shop.base, backend, log=log, bind_apart=True)
        with world.session() as session:
            fill_twin_shop(session, shop)
        name = "-".join(filter(None, (backend, str(count), variant)))
        if variant != "async":
            yield Setup(name, shop, world)
            return
        aio = _async_side(world)
        try:
            yield Setup(name, shop, world, aio)
        finally:
            for engine in aio.engines.values():
                aio.run(engine.dispose())
            aio.loop.close()
    finally:
        log.close()
        factory.cleanup()


def _async_side(world: World) -> AsyncSide:
    engines: dict[str, AsyncEngine] = {}
    for key, engine in world.engines.items():
        url = async_url(engine.url.render_as_string(hide_password=False))
        engines[key] = create_async_engine(url)
        world.log.watch(engines[key], key)
    return AsyncSide(asyncio.new_event_loop(), engines)


def differential(test: Callable[..., None]) -> Callable[..., None]:
    """The settings of a differential test (module docstring); put it above ``@given``."""
    configured = settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )(test)
    return seed(int(SEED))(configured) if SEED else configured


TWIN_BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mariadb", marks=pytest.mark.mysql),
]
"""The backends a test of :func:`filled_twin_shops` runs on, marked for the servers."""

Filled = Callable[[str, int], tuple[TwinShop, World]]
"""``filled(backend, databases)``: a filled twin shop of 4 tables over that many databases."""


@contextmanager
def filled_twin_shops(factory: DatabaseFactory) -> Iterator[Filled]:
    """Filled twin shops made on first use and kept until the block ends (for tests that
    only read them); the conftest fixture ``filled`` holds one per module."""
    made: dict[tuple[str, int], tuple[TwinShop, World]] = {}

    def get(backend: str, databases: int) -> tuple[TwinShop, World]:
        if (backend, databases) not in made:
            shop = declare_twin_shop(4, databases=databases)
            world = open_world(factory, shop.base, backend)
            with world.session() as session:
                fill_twin_shop(session, shop)
            made[backend, databases] = shop, world
        return made[backend, databases]

    try:
        yield get
    finally:
        for _, world in made.values():
            world.log.close()


def both_rows(
    world: World, shop: TwinShop, build: Callable[[Models], Any]
) -> tuple[list[Any], list[Any]]:
    """(sharded rows, twin rows) of the statement ``build`` makes, each sorted."""
    with world.session() as session:
        twin = sort_rows(rows_of(session.execute(build(shop.twin))))
        got = sort_rows(rows_of(session.execute(build(shop.sharded))))
    return got, twin
