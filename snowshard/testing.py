"""Test helpers for applications using sharded models: cap the fan-out of queries.

::

    from snowshard.testing import max_fanout

    def test_order_page_reads_one_table(session):
        with max_fanout(session, tables=1):
            orders_of_user(session, 1820)        # fails if any statement read 2+ tables

A statement routed by a :class:`~snowshard.sharding.ShardedSession` inside the block that
would touch more tables (per model) or databases than allowed raises
:class:`~snowshard.sharding.errors.FanOutExceeded` (an ``AssertionError``) before its SQL is
sent. The check reads the plan the session is about to run, not SQL text. Writes made by
a flush (one table per row) are not statements and are not counted.

With pytest, the ``max_fanout`` fixture (this module is a pytest plugin: add
``pytest_plugins = ["snowshard.testing"]`` to ``conftest.py``) returns the same function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

from snowshard.sharding.errors import FanOutExceeded, InvalidFanOutLimit
from snowshard.sharding.execute import Plan, watch_plans

__all__ = ["FanOutExceeded", "max_fanout", "max_fanout_fixture"]


def _check_limit(name: str, value: Optional[int]) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidFanOutLimit(
            f"max_fanout({name}={value!r}): give a positive int (or leave it out for no cap)"
        )


@contextmanager
def max_fanout(
    session: Any, *, tables: Optional[int] = None, databases: Optional[int] = None
) -> Iterator[list[Plan]]:
    """Fail any statement ``session`` runs in the block that touches more than ``tables``
    tables (per model) or ``databases`` databases; yields the plans seen, in order."""
    _check_limit("tables", tables)
    _check_limit("databases", databases)
    if tables is None and databases is None:
        raise InvalidFanOutLimit("max_fanout() needs tables=... and/or databases=...")
    seen: list[Plan] = []

    def check(owner: Any, plan: Plan) -> None:
        if owner is not session:
            return
        seen.append(plan)
        over = []
        if tables is not None and plan.tables > tables:
            over.append(f"{plan.tables} tables (allowed {tables})")
        if databases is not None and plan.databases > databases:
            over.append(f"{plan.databases} databases (allowed {databases})")
        if over:
            names = ", ".join(m.name for m in plan.models)
            raise FanOutExceeded(
                f"a statement on {names} would touch {' and '.join(over)}; it runs as "
                f"{plan.how}. Add a shard key condition (== or IN) so it routes to fewer "
                "tables, or raise the cap if this fan-out is intended"
            )

    with watch_plans(check):
        yield seen


def max_fanout_fixture() -> Callable[..., Any]:
    """The pytest fixture's value: :func:`max_fanout` itself."""
    return max_fanout


try:  # the fixture, when pytest is installed (it is not a dependency of snowshard)
    import pytest
except ImportError:  # pragma: no cover - pytest missing
    pass
else:
    max_fanout_fixture = pytest.fixture(name="max_fanout")(max_fanout_fixture)
