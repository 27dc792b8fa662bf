"""The test suite's own sharded worlds, SQL log and Hypothesis profiles do what they say."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from hypothesis import settings
from sqlalchemy import func, select

from snowshard.sharding import sharded_model
from snowshard.spec import DEFAULT_DATABASE
from tests.conftest import hypothesis_profile
from tests.worlds import SqlLog, WorldFactory, declare_shop, split_databases

ONE = declare_shop(4)
TWO = declare_shop(4, databases=2)


def test_shop_binds_items_to_orders() -> None:
    """Item has Order's count, keys, strategy and databases, so they join shard by shard."""
    orders, items = TWO.orders, sharded_model(TWO.Item)
    assert (items.spec.count, items.keys, items.strategy) == (4, orders.keys, orders.strategy)
    assert [items.database_of(i) for i in range(4)] == [orders.database_of(i) for i in range(4)]
    assert orders.binds_with(items)


def test_split_databases_runs_tables_in_order() -> None:
    """Eight tables over three databases: contiguous runs a, b, c; one database is none named."""
    assert split_databases(8, 3) == {"a": [0, 1], "b": [2, 3, 4], "c": [5, 6, 7]}
    assert split_databases(8, 1) == {}
    with pytest.raises(ValueError, match="1..8"):
        split_databases(8, 9)


def test_world_has_one_database_per_key(sharded_world: WorldFactory, sql_backend: str) -> None:
    """Two-database shop: users and the first half in a, the rest in b, each a new database."""
    world = sharded_world(TWO, sql_backend)
    assert list(world.engines) == ["a", "b"] and world.bind is world.engines["a"]
    assert world.engines["a"].url.database != world.engines["b"].url.database
    names = {key: set(sa.inspect(e).get_table_names()) for key, e in world.engines.items()}
    assert names == {
        "a": {"users", "orders_00", "orders_01", "items_00", "items_01"},
        "b": {"orders_02", "orders_03", "items_02", "items_03"},
    }


def test_one_database_world_is_the_default(sharded_world: WorldFactory) -> None:
    """A shop without databases gets one database, the default, and a plain session."""
    world = sharded_world(ONE)
    assert list(world.engines) == [DEFAULT_DATABASE] and world.databases == {}


def test_sql_log_names_database_and_tables(sharded_world: WorldFactory, sql_log: SqlLog) -> None:
    """A routed read is logged once, as sent to its database, naming its physical table."""
    world = sharded_world(TWO)
    assert world.log is sql_log and len(sql_log) == 0  # the CREATEs were cleared
    with world.session() as session:
        session.scalars(select(world.Order).where(world.Order.user_id == 6)).all()
    (sent,) = sql_log
    assert (sent.database, sent.verb, sent.shards) == ("b", "SELECT", {"orders_02"})
    assert sql_log.touched() == {"orders_02"} and sql_log.databases() == {"b"}


def test_sql_log_tells_sharded_from_unsharded_tables(
    sharded_world: WorldFactory, sql_log: SqlLog
) -> None:
    """tables names every table of a statement, shards only the physical sharded ones."""
    world = sharded_world(ONE)
    with world.session() as session:
        session.execute(select(func.count()).select_from(world.User)).one()
        session.execute(select(world.Order.id).where(world.Order.user_id == 1)).all()
    assert [(s.tables, s.shards) for s in sql_log] == [
        ({"users"}, frozenset()),
        ({"orders_01"}, {"orders_01"}),
    ]


def test_sql_log_reads_tables_of_ddl_not_of_text(sqlite_url: str) -> None:
    """CREATE TABLE names its table; a statement sent as plain text names none."""
    engine = sa.create_engine(sqlite_url)
    log = SqlLog()
    log.watch(engine, "here")
    try:
        ONE.metadata.create_all(engine, tables=[ONE.metadata.tables["orders_03"]])
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM orders_03")
        log.close()
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    finally:
        engine.dispose()
    creates = [s for s in log if s.verb == "CREATE"]
    assert creates and all(s.shards == {"orders_03"} for s in creates)
    assert log.sent[-1].statement == "SELECT count(*) FROM orders_03"  # not "SELECT 1": closed
    assert log.sent[-1].tables == frozenset()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "dev"),
        ({"CI": "true"}, "ci"),
        ({"HYPOTHESIS_PROFILE": "dev", "CI": "true"}, "dev"),
        ({"HYPOTHESIS_PROFILE": "ci"}, "ci"),
    ],
    ids=["default", "ci-env", "explicit-dev", "explicit-ci"],
)
def test_hypothesis_profile_choice(environ: dict[str, str], expected: str) -> None:
    """HYPOTHESIS_PROFILE picks the profile; without it CI=true means ci, else dev."""
    assert hypothesis_profile(environ) == expected


def test_unknown_hypothesis_profile_is_refused() -> None:
    """A misspelt profile stops the run, naming the profiles there are."""
    with pytest.raises(pytest.UsageError, match="'cl'.*dev, ci"):
        hypothesis_profile({"HYPOTHESIS_PROFILE": "cl"})


def test_ci_profile_runs_many_examples_reproducibly() -> None:
    """The ci profile: at least 200 examples, no deadline, derandomized."""
    ci = settings.get_profile("ci")
    assert ci.max_examples >= 200 and ci.deadline is None and ci.derandomize
