"""The configurations of the twin-shop differential tests, and their databases.

Each configuration is a backend, a number of databases and a variant of the twin shop of
``tests/worlds.py``: as declared, with ``user_id`` NULL in some rows ("nullable"), or with a
second layout from a later instant ("generations"). :func:`build_setup` creates its
databases, tables and rows once per test module (the ``setup`` fixture of each module).

:func:`differential` sets a differential test's examples: ``SNOWSHARD_DIFFERENTIAL_EXAMPLES``
per configuration (300 by default), the same on every run (derandomized), or another fixed
set with ``SNOWSHARD_DIFFERENTIAL_SEED=N``, to look further afield.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, seed, settings

from tests.backends import DatabaseFactory
from tests.worlds import (
    SqlLog,
    TwinShop,
    TwoEras,
    World,
    declare_twin_shop,
    fill_twin_shop,
    open_world,
    twin_generations,
)

__all__ = ["CONFIGS", "EXAMPLES", "Setup", "build_setup", "differential"]

EXAMPLES = int(os.environ.get("SNOWSHARD_DIFFERENTIAL_EXAMPLES", "300"))
SEED = os.environ.get("SNOWSHARD_DIFFERENTIAL_SEED")
"""Another fixed set of examples than the derandomized one (module docstring); unset in CI."""


@dataclass
class Setup:
    """One configuration: the twin shop on its world (whose log holds the SQL sent)."""

    name: str
    shop: TwinShop
    world: World


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
        yield Setup("-".join(filter(None, (backend, str(count), variant))), shop, world)
    finally:
        log.close()
        factory.cleanup()


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
