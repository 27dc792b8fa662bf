"""Shard hints force statements to named tables or databases, and refuse contradictions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import delete, event, func, insert, select

from snowshard.sharding import (
    InvalidShardHint,
    ShardHintConflict,
    UnknownDatabase,
    UnknownShard,
    shard_hint,
    sharded_model,
)
from tests.backends import DatabaseFactory
from tests.test_sharding_reference import COUNTRIES, ROWS, Country, Order, Pair, _pair

MODEL = sharded_model(Order)
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", marks=pytest.mark.postgres, id="postgresql"),
]


def _ids_in(shards: set[int]) -> list[int]:
    return sorted(int(str(r["id"])) for r in ROWS if MODEL.shard_of("user_id", r["user_id"]) in shards)


class Sent:
    """Counts the statements the engines send."""

    def __init__(self, *engines: sa.Engine) -> None:
        self.count = 0
        for engine in engines:
            event.listen(engine, "before_cursor_execute", self.seen)

    def seen(self, *args: Any) -> None:
        self.count += 1


@pytest.fixture(params=BACKENDS)
def shop(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> Iterator[Pair]:
    """Orders over two databases (shards 0-1 in a, 2-3 in b) and the countries."""
    found = _pair(database_factory, request.param)
    with found.session() as session:
        session.add_all(Country(code=c, name=n) for c, n in COUNTRIES.items())
        session.flush()
        session.execute(insert(Order), ROWS)
        session.commit()
    yield found


def test_shard_option_reads_one_table(shop: Pair) -> None:
    """execution_options(shard=3) reads the rows of table 3 only."""
    with shop.session() as session:
        got = session.scalars(select(Order.id).order_by(Order.id).execution_options(shard=3))
        assert list(got) == _ids_in({3})


def test_shard_list_reads_tables_in_both_databases(shop: Pair) -> None:
    """shard=[0, 2] reads tables 0 (database a) and 2 (database b), merged in order."""
    with shop.session() as session:
        statement = select(Order.id).order_by(Order.id)
        got = session.scalars(statement, execution_options={"shard": [0, 2]})
        assert list(got) == _ids_in({0, 2})


def test_database_option_reads_that_database_only(shop: Pair) -> None:
    """database="b" counts the rows of b's tables (2 and 3) only."""
    with shop.session() as session:
        count = session.scalar(
            select(func.count()).select_from(Order).execution_options(database="b")
        )
    assert count == len(_ids_in({2, 3}))


def test_context_manager_hints_statements_inside_only(shop: Pair) -> None:
    """shard_hint(session, shard=1) applies inside the block, not after it."""
    statement = select(Order.id).order_by(Order.id)
    with shop.session() as session:
        with shard_hint(session, shard=1):
            inside = list(session.scalars(statement))
        after = list(session.scalars(statement))
    assert inside == _ids_in({1}) and after == _ids_in({0, 1, 2, 3})


def test_delete_with_a_hint_deletes_in_that_table_only(shop: Pair) -> None:
    """A keyless DELETE hinted to shard 2 leaves the other tables' rows."""
    with shop.session() as session:
        session.execute(delete(Order).execution_options(shard=2))
        session.commit()
        left = list(session.scalars(select(Order.id).order_by(Order.id)))
    assert left == _ids_in({0, 1, 3})


def test_hint_contradicting_the_where_clause_is_refused_before_sql(shop: Pair) -> None:
    """A key routing to one shard with a hint naming another raises, sending nothing."""
    user = ROWS[0]["user_id"]
    other = (MODEL.shard_of("user_id", user) + 1) % 4
    sent = Sent(shop.a, shop.b)
    with shop.session() as session, pytest.raises(ShardHintConflict, match="WHERE clause"):
        session.execute(select(Order).where(Order.user_id == user).execution_options(shard=other))
    assert sent.count == 0


def test_hint_agreeing_with_the_where_clause_is_allowed(shop: Pair) -> None:
    """A hint naming the shard the key routes to returns the key's rows."""
    user = ROWS[0]["user_id"]
    hint = MODEL.shard_of("user_id", user)
    with shop.session() as session:
        got = session.scalars(
            select(Order.id).where(Order.user_id == user).execution_options(shard=hint)
        )
        assert list(got) == [ROWS[0]["id"]]


def test_insert_into_another_shard_than_hinted_is_refused(shop: Pair) -> None:
    """An inserted row routed to a shard the hint leaves out raises ShardHintConflict."""
    row = {"id": 99, "user_id": 5, "country": "fr", "amount": 1}
    other = (MODEL.shard_of("user_id", 5) + 1) % 4
    with shop.session() as session, pytest.raises(ShardHintConflict, match="shard hint"):
        session.execute(insert(Order).execution_options(shard=other), [row])


def test_unknown_shard_in_a_hint_is_unknown_shard(shop: Pair) -> None:
    """shard=7 on a model with 4 tables raises UnknownShard."""
    with shop.session() as session, pytest.raises(UnknownShard, match="0..3"):
        session.execute(select(Order).execution_options(shard=7))


def test_unknown_database_in_a_hint_is_unknown_database(shop: Pair) -> None:
    """database="c", where the model has no tables, raises UnknownDatabase naming a and b."""
    with shop.session() as session, pytest.raises(UnknownDatabase, match=r"\['a', 'b'\]"):
        session.execute(select(Order).execution_options(database="c"))


def test_shard_and_database_hints_must_agree(shop: Pair) -> None:
    """shard=0 (in a) with database="b" raises ShardHintConflict."""
    with shop.session() as session, pytest.raises(ShardHintConflict, match="disagree"):
        session.execute(select(Order).execution_options(shard=0, database="b"))


def test_bad_shard_hint_type_is_invalid(shop: Pair) -> None:
    """shard="3" (a str) raises InvalidShardHint naming the value."""
    with shop.session() as session, pytest.raises(InvalidShardHint, match="shard='3'"):
        session.execute(select(Order).execution_options(shard="3"))


def test_database_hint_reads_a_chosen_reference_copy(shop: Pair) -> None:
    """database="b" on a reference table reads b's copy (admin checks of one copy)."""
    with shop.b.begin() as conn:
        conn.execute(insert(Country).values(code="zz", name="only in b"))
    with shop.session() as session:
        statement = select(func.count()).select_from(Country)
        assert session.scalar(statement.execution_options(database="b")) == len(COUNTRIES) + 1
        assert session.scalar(statement) == len(COUNTRIES)


def test_shard_hint_on_an_unsharded_statement_is_invalid(shop: Pair) -> None:
    """shard=1 on a statement naming no sharded model raises InvalidShardHint."""
    with shop.session() as session, pytest.raises(InvalidShardHint, match="database="):
        session.execute(select(Country).execution_options(shard=1))
