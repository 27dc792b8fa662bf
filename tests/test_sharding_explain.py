"""explain(session, statement): the physical statements, what is merged, refusals, fan-out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import distinct, event, func, insert, select, update

from snowshard.sharding import ShardedSession, explain, sharded_model
from tests.test_sharding_reference import Country, Note, Order

MODEL = sharded_model(Order)


@pytest.fixture
def session() -> Iterator[ShardedSession]:
    """A session over two SQLite databases, a (shards 0-1, the bind) and b (shards 2-3)."""
    a, b = sa.create_engine("sqlite://"), sa.create_engine("sqlite://")
    with ShardedSession(a, databases={"a": a, "b": b}) as found:
        yield found
    a.dispose()
    b.dispose()


def test_keyless_query_reads_every_table_of_both_databases(session: ShardedSession) -> None:
    """A query without a key: one UNION ALL per database, 4 tables, 2 databases."""
    plan = explain(session, select(Order).order_by(Order.id.desc()).limit(5))
    assert (plan.tables, plan.databases) == (4, 2)
    assert set(plan.by_database()) == {"a", "b"}
    assert plan.by_database()["b"][0].tables == ("ref_orders_02", "ref_orders_03")
    assert "UNION ALL" in plan.statements[0].sql


def test_merged_constructs_are_listed(session: ShardedSession) -> None:
    """ORDER BY and LIMIT across databases are listed as merged in Python."""
    plan = explain(session, select(Order).order_by(Order.id.desc()).limit(5))
    assert any("heap" in item for item in plan.merged)
    assert any("LIMIT 5" in item for item in plan.merged)


def test_grouped_join_with_reference_table_merges_groups(session: ShardedSession) -> None:
    """A grouped join with a reference table pushes the join down and merges the counts."""
    statement = (
        select(Country.name, func.count())
        .select_from(Order)
        .join(Country, Country.code == Order.country)
        .group_by(Country.name)
    )
    plan = explain(session, statement)
    assert plan.refused is None
    assert any("count" in item for item in plan.merged)
    assert all("ref_countries" in s.sql for s in plan.statements)


def test_count_distinct_says_how_it_is_counted(session: ShardedSession) -> None:
    """count(DISTINCT) of the shard key is summed; of another column, the sources group by
    it and the merge counts its values."""
    keyed = explain(session, select(func.count(distinct(Order.user_id))))
    assert any("summed" in item for item in keyed.merged)
    assert all("GROUP BY" not in s.sql for s in keyed.statements)
    valued = explain(session, select(func.count(distinct(Order.country))))
    assert any("also groups by x" in item for item in valued.pushed_down)
    assert all("GROUP BY ref_orders.country" in s.sql for s in valued.statements)
    both = explain(
        session, select(func.count(distinct(Order.amount)), func.sum(distinct(Order.amount)))
    )
    assert all(s.sql.endswith("GROUP BY ref_orders.amount") for s in both.statements)


def test_keyed_query_runs_on_one_table(session: ShardedSession) -> None:
    """A query on one key: one statement on its table, in its database, nothing merged."""
    shard = MODEL.shard_of("user_id", 7)
    plan = explain(session, select(Order).where(Order.user_id == 7))
    [physical] = plan.statements
    assert physical.tables == (f"ref_orders_{shard:02d}",)
    assert physical.database == MODEL.database_of(shard)
    assert f"ref_orders_{shard:02d}.user_id = 7" in physical.sql
    assert plan.merged == () and (plan.tables, plan.databases) == (1, 1)


def test_refused_statement_is_explained_not_raised(session: ShardedSession) -> None:
    """A join with a plain unsharded table across databases shows the refusal."""
    plan = explain(session, select(Order.id).join(Note, Note.id == Order.id))
    assert plan.refused is not None and "reference table" in plan.refused
    assert plan.statements == () and "REFUSED" in str(plan)


def test_hinted_query_is_explained_with_its_hint(session: ShardedSession) -> None:
    """database="b" restricts the plan to b's tables and is shown in the text."""
    plan = explain(session, select(Order).execution_options(database="b"))
    assert set(plan.by_database()) == {"b"} and plan.tables == 2
    assert "hint: database='b'" in str(plan)


def test_reference_write_is_explained_per_copy(session: ShardedSession) -> None:
    """An UPDATE of a reference table runs once per copy: a and b."""
    plan = explain(session, update(Country).values(name="x"))
    assert [s.database for s in plan.statements] == ["default", "b"]


def test_keyed_insert_names_its_table(session: ShardedSession) -> None:
    """insert().values() with the key names the one table the row goes to."""
    shard = MODEL.shard_of("user_id", 9)
    plan = explain(session, insert(Order).values(id=1, user_id=9, country="fr", amount=1))
    assert plan.statements[0].tables == (f"ref_orders_{shard:02d}",)


def test_text_shows_each_database_and_the_fan_out(session: ShardedSession) -> None:
    """str(plan) names each database, the fan-out and the way the statement runs."""
    text = str(explain(session, select(func.count()).select_from(Order)))
    assert "database 'a'" in text and "database 'b'" in text
    assert "fan-out: 4 table(s), 2 database(s)" in text
    assert "runs as: one UNION ALL per database, merged" in text


def test_explain_sends_no_sql(session: ShardedSession) -> None:
    """Explaining a statement connects to no database."""
    sent: list[str] = []
    for engine in session.databases.values():
        event.listen(engine, "connect", lambda *a: sent.append("connect"))
    explain(session, select(Order).order_by(Order.id).limit(3))
    assert sent == []


def test_as_dict_is_json_ready(session: ShardedSession) -> None:
    """as_dict() holds the fan-out and each statement's database, tables and SQL."""
    found = explain(session, select(Order).where(Order.user_id == 7)).as_dict()
    assert found["fan_out"] == {"tables": 1, "databases": 1}
    assert set(found["statements"][0]) == {"database", "tables", "sql"}
