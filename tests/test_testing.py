"""snowshard.testing.max_fanout: statements touching too many tables fail the test."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event, func, select

from snowshard.sharding import FanOutExceeded, ShardedSession
from snowshard.sharding.errors import InvalidFanOutLimit
from snowshard.testing import max_fanout
from tests.backends import DatabaseFactory
from tests.test_sharding_reference import Order, Pair, _pair

@pytest.fixture
def pair(database_factory: DatabaseFactory) -> Pair:
    """Two SQLite databases with the orders (shards 0-1 in a, 2-3 in b)."""
    return _pair(database_factory, "sqlite")


@pytest.fixture
def session(pair: Pair) -> Iterator[ShardedSession]:
    """A session over both databases."""
    with pair.session() as found:
        yield found


def test_keyed_query_fits_one_table(session: ShardedSession) -> None:
    """A query on one key passes under tables=1, and its plan is recorded."""
    with max_fanout(session, tables=1) as plans:
        session.scalars(select(Order).where(Order.user_id == 7)).all()
    assert [p.tables for p in plans] == [1]


def test_keyless_query_exceeds_one_table(session: ShardedSession, pair: Pair) -> None:
    """A keyless query under tables=1 raises FanOutExceeded before sending SQL."""
    sent: list[str] = []
    for engine in (pair.a, pair.b):
        event.listen(engine, "before_cursor_execute", lambda *a: sent.append("sql"))
    with pytest.raises(FanOutExceeded, match="4 tables"), max_fanout(session, tables=1):
        session.scalars(select(Order)).all()
    assert sent == []


def test_fanout_exceeded_is_an_assertion_error() -> None:
    """FanOutExceeded derives from AssertionError, so pytest reports a failure."""
    assert issubclass(FanOutExceeded, AssertionError)


def test_database_cap_counts_databases(session: ShardedSession) -> None:
    """databases=1 refuses a count over both databases, allows one over b only."""
    statement = select(func.count()).select_from(Order)
    with max_fanout(session, databases=1):
        session.scalar(statement.execution_options(database="b"))
        with pytest.raises(FanOutExceeded, match="2 databases"):
            session.scalar(statement)


def test_cap_ends_with_the_block(session: ShardedSession) -> None:
    """After the block, a keyless query runs again."""
    with max_fanout(session, tables=1):
        pass
    assert session.scalars(select(Order)).all() == []


def test_other_sessions_are_not_capped(session: ShardedSession, pair: Pair) -> None:
    """The cap applies to the session it was given only."""
    with max_fanout(session, tables=1), pair.session() as other:
        assert other.scalars(select(Order)).all() == []


def test_cap_must_be_a_positive_int(session: ShardedSession) -> None:
    """tables=0 raises InvalidFanOutLimit naming the value."""
    with pytest.raises(InvalidFanOutLimit, match="tables=0"), max_fanout(session, tables=0):
        pass


def test_plugin_fixture_returns_max_fanout(tmp_path: Path) -> None:
    """With -p snowshard.testing, a test's max_fanout fixture is the context manager."""
    (tmp_path / "test_user.py").write_text(
        "import snowshard.testing\n"
        "def test_it(max_fanout):\n"
        "    assert max_fanout is snowshard.testing.max_fanout\n"
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "snowshard.testing", "-p", "no:cacheprovider"]
    done = subprocess.run([*command, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
