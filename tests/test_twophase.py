"""Two-phase commit over two databases, and commits that fail: named, with what committed."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from snowshard.sharding import ShardedSession
from snowshard.sharding.commit_errors import (
    CommitFailed,
    PartialCommitError,
    TwoPhaseConfigError,
    TwoPhaseUnavailable,
)
from snowshard.sharding.errors import ShardingError
from snowshard.sharding.twophase import (
    PREFIX,
    TwoPhase,
    Xid,
    branch_name,
    group_created_ms,
    new_group,
    read_decisions,
)
from snowshard.sharding.txn_ids import scope_of
from tests.backends import DatabaseFactory
from tests.faults.twophase_support import branches, create_items, ids, insert, pair

__all__ = ["pair"]  # the fixture, imported

def test_group_id_encodes_its_creation_time() -> None:
    """A group ID starts with the Unix ms it was made at, which group_created_ms reads."""
    assert group_created_ms(new_group(1_718_000_000_123)) == 1_718_000_000_123
    assert group_created_ms("not-a-group") is None


@pytest.mark.parametrize("scope", [scope_of("shop"), ""], ids=["scoped", "unscoped"])
def test_xid_round_trips_through_its_database_forms(scope: str) -> None:
    """A branch's PostgreSQL GID and MySQL parts parse back to the same branch, with its
    scope or without one (an XID of an earlier version)."""
    xid = Xid(new_group(), "east", scope)
    assert Xid.parse_gid(str(xid)) == xid
    assert Xid.parse(xid.gtrid, "east") == xid
    assert len(xid.gtrid) <= 64 and len(str(xid)) < 200
    assert Xid.parse_gid("_sa_1234:east") is None


def test_a_scope_names_its_decisions_database() -> None:
    """Scopes are 8 hex digits, differ between databases, and are empty without a name."""
    assert len(scope_of("shop")) == 8 and int(scope_of("shop"), 16) >= 0
    assert scope_of("shop") == scope_of("shop") != scope_of("blog")
    assert scope_of(None) == scope_of("") == ""


@pytest.mark.parametrize("gtrid", ["snowshard-xyz.1718000000123-0123456789ab",
                                   "snowshard-0123456.1718000000123-0123456789ab"])
def test_an_xid_with_a_malformed_scope_is_not_snowshards(gtrid: str) -> None:
    """A scope that is not 8 hex digits makes the branch someone else's."""
    assert Xid.parse(gtrid, "east") is None


def test_branch_names_are_safe_and_unique() -> None:
    """Database keys with quotes or long names become safe, distinct XID parts."""
    assert branch_name("a'b", []) == "a_b"
    assert branch_name("a'b", ["a_b"]) == "a_b.2"
    assert len(branch_name("k" * 300, [])) <= 64


@given(st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=8))
def test_every_branch_name_is_one_recovery_reads_back(keys: list[str]) -> None:
    """Whatever the database keys, their branch names are distinct and parse back, so
    recovery sees every branch (a name it could not parse would stay in doubt unseen)."""
    names: list[str] = []
    for key in keys:
        names.append(branch_name(key, names))
    group = new_group()
    assert len(set(names)) == len(names)
    assert all(Xid.parse(PREFIX + group, name) == Xid(group, name) for name in names), names


def test_twophase_commits_rows_in_both_databases(pair: dict[str, sa.Engine]) -> None:
    """twophase=True stores the rows of both databases and leaves no prepared branch."""
    with ShardedSession(pair["a"], databases=pair, twophase=True) as session:
        insert(session, pair["a"], 1)
        insert(session, pair["b"], 2)
        session.commit()
    assert ids(pair["a"]) == {1} and ids(pair["b"]) == {2}
    assert branches(pair["a"]) == branches(pair["b"]) == []


def test_prepared_branches_carry_the_group_and_database(pair: dict[str, sa.Engine]) -> None:
    """While prepared, each branch is listed as snowshard-<scope>.<group>:<key> on its
    server, the scope naming the decisions database."""
    seen: dict[str, list[Xid]] = {}

    def on_step(step: str, group: str, database: str | None) -> None:
        if step == "decided":
            seen[group] = branches(pair["a"]) + branches(pair["b"])

    with ShardedSession(pair["a"], databases=pair, twophase=TwoPhase(on_step=on_step)) as s:
        insert(s, pair["a"], 1)
        insert(s, pair["b"], 2)
        s.commit()
    [(group, found)] = seen.items()
    scope = scope_of(pair["a"].url.database)  # the decisions database: the session's bind
    assert {Xid(group, "a", scope), Xid(group, "b", scope)} == set(found)


def test_decision_is_recorded_before_the_first_commit(pair: dict[str, sa.Engine]) -> None:
    """The commit decision row exists once decided, and is deleted after the commits."""
    at_decision: dict[str, Any] = {}

    def on_step(step: str, group: str, database: str | None) -> None:
        if step == "decided":
            at_decision.update(read_decisions(pair["a"], [group]))
            at_decision["committed"] = ids(pair["a"]) | ids(pair["b"])

    with ShardedSession(pair["a"], databases=pair, twophase=TwoPhase(on_step=on_step)) as s:
        insert(s, pair["a"], 1)
        insert(s, pair["b"], 2)
        s.commit()
    [group] = [k for k in at_decision if k != "committed"]
    assert at_decision[group][:2] == ("commit", ("a", "b"))
    assert at_decision["committed"] == set()
    assert read_decisions(pair["a"]) == {}


def test_twophase_rollback_leaves_no_branch(pair: dict[str, sa.Engine]) -> None:
    """A rolled-back two-phase session stores nothing and leaves no XA/prepared branch."""
    with ShardedSession(pair["a"], databases=pair, twophase=True) as session:
        insert(session, pair["a"], 1)
        insert(session, pair["b"], 2)
        session.rollback()
        insert(session, pair["a"], 3)
    assert ids(pair["a"]) == ids(pair["b"]) == set()
    assert branches(pair["a"]) == []


def test_twophase_on_sqlite_is_refused_at_first_use(database_factory: DatabaseFactory) -> None:
    """twophase=True on SQLite raises TwoPhaseUnavailable naming the database, before SQL."""
    engine = database_factory.engine(database_factory("sqlite")[0])
    with ShardedSession(engine, twophase=True) as session, pytest.raises(
        TwoPhaseUnavailable, match="'default' is sqlite"
    ):
        session.connection()


def test_twophase_grace_must_be_positive() -> None:
    """TwoPhase(grace=0) raises TwoPhaseConfigError naming the value."""
    with pytest.raises(TwoPhaseConfigError, match="grace=0"):
        TwoPhase(grace=0)


def _deferred_child(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE parent (id INT PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE child (id INT PRIMARY KEY, parent_id INT REFERENCES parent (id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )


def _orphan(session: ShardedSession, engine: sa.Engine) -> None:
    """A child row whose parent is missing: accepted now, rejected at COMMIT/PREPARE."""
    session.connection(bind_arguments={"bind": engine}).exec_driver_sql(
        "INSERT INTO child VALUES (1, 99)"
    )


@pytest.fixture
def pg_pair(database_factory: DatabaseFactory, postgres_url: str) -> dict[str, sa.Engine]:
    """Two PostgreSQL databases with ``items``, and a deferred foreign key in "b"."""
    a, b = (database_factory.engine(u) for u in database_factory("postgresql", 2))
    create_items(a, b)
    _deferred_child(b)
    return {"a": a, "b": b}


def test_partial_commit_names_what_committed(pg_pair: dict[str, sa.Engine]) -> None:
    """A deferred constraint failing at COMMIT in "b" after "a" committed: PartialCommitError."""
    with ShardedSession(pg_pair["a"], databases=pg_pair) as session:
        insert(session, pg_pair["a"], 1)
        _orphan(session, pg_pair["b"])
        with pytest.raises(PartialCommitError) as caught:
            session.commit()
    error = caught.value
    assert (error.committed, error.failed, error.retry_safe) == (("a",), "b", False)
    assert "database 'b'" in str(error) and "['a'] committed" in str(error)
    assert isinstance(error.__cause__, pg_pair["b"].dialect.loaded_dbapi.IntegrityError)
    assert ids(pg_pair["a"]) == {1}


def test_failure_in_the_first_database_says_nothing_committed(
    pg_pair: dict[str, sa.Engine],
) -> None:
    """A COMMIT rejected in the first database: CommitFailed, the rest rolled back, retry safe."""
    with ShardedSession(pg_pair["a"], databases=pg_pair) as session:
        _orphan(session, pg_pair["b"])
        insert(session, pg_pair["a"], 1)
        with pytest.raises(CommitFailed, match="nothing was committed") as caught:
            session.commit()
    assert (caught.value.failed, caught.value.not_attempted) == ("b", ("a",))
    assert caught.value.retry_safe
    assert ids(pg_pair["a"]) == set()


def test_twophase_prepare_failure_commits_nothing(pg_pair: dict[str, sa.Engine]) -> None:
    """With twophase=True the deferred failure happens at PREPARE: nothing commits anywhere."""
    with ShardedSession(pg_pair["a"], databases=pg_pair, twophase=True) as session:
        insert(session, pg_pair["a"], 1)
        _orphan(session, pg_pair["b"])
        with pytest.raises(CommitFailed, match="could not prepare database 'b'") as caught:
            session.commit()
    assert caught.value.retry_safe and caught.value.committed == ()
    assert ids(pg_pair["a"]) == set()
    assert branches(pg_pair["a"]) == branches(pg_pair["b"]) == []


@pytest.mark.mysql
@pytest.mark.parametrize("pair", ["mysql"], indirect=True)
def test_mysql_connection_killed_before_commit_is_a_partial_commit(pair: dict[str, sa.Engine]) -> None:
    """MariaDB: "b"'s connection killed before COMMIT after "a" committed: named, unsafe retry."""
    engines = pair
    a, b = engines["a"], engines["b"]
    with ShardedSession(a, databases=engines) as session:
        insert(session, a, 1)
        insert(session, b, 2)
        victim = session.connection(bind_arguments={"bind": b}).exec_driver_sql(
            "SELECT CONNECTION_ID()"
        ).scalar_one()
        with b.connect() as admin:  # on b's server: connection IDs are per server
            admin.exec_driver_sql(f"KILL CONNECTION {int(victim)}")
        with pytest.raises(PartialCommitError) as caught:
            session.commit()
    assert (caught.value.committed, caught.value.failed) == (("a",), "b")
    assert not caught.value.retry_safe
    assert ids(a) == {1} and ids(b) == set()


def _kill(admin_engine: sa.Engine, connection: sa.Connection) -> None:
    """KILL the MariaDB connection ``connection`` from a connection of ``admin_engine``."""
    victim = connection.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()
    with admin_engine.connect() as admin:
        admin.exec_driver_sql(f"KILL CONNECTION {int(victim)}")


@pytest.mark.mysql
@pytest.mark.parametrize("pair", ["mysql"], indirect=True)
def test_mysql_twophase_branch_killed_before_prepare_is_a_safe_failure(pair: dict[str, sa.Engine]) -> None:
    """MariaDB: "b"'s connection killed before PREPARE: CommitFailed, retry safe, nothing left."""
    engines = pair
    a, b = engines["a"], engines["b"]
    with ShardedSession(a, databases=engines, twophase=True) as session:
        insert(session, a, 1)
        insert(session, b, 2)
        _kill(b, session.connection(bind_arguments={"bind": b}))
        with pytest.raises(CommitFailed, match="could not prepare database 'b'") as caught:
            session.commit()
    assert caught.value.retry_safe
    assert ids(a) == ids(b) == set()
    assert [x for x in branches(a) if x.group == caught.value.group] == []


@pytest.mark.mysql
@pytest.mark.parametrize("pair", ["mysql"], indirect=True)
def test_mysql_twophase_rollback_after_a_killed_branch_does_not_raise(pair: dict[str, sa.Engine]) -> None:
    """MariaDB: rolling back a session whose XA branch lost its connection raises nothing."""
    engines = pair
    a, b = engines["a"], engines["b"]
    with ShardedSession(a, databases=engines, twophase=True) as session:
        insert(session, a, 1)
        insert(session, b, 2)
        _kill(b, session.connection(bind_arguments={"bind": b}))
        with pytest.raises((sa.exc.OperationalError, ShardingError)):  # named, or the driver's
            insert(session, b, 3)
        session.rollback()
    assert ids(a) == ids(b) == set()


def _backend_id(connection: sa.Connection) -> int:
    """The server's ID of ``connection`` (PostgreSQL backend PID, MariaDB connection ID)."""
    sql = "SELECT pg_backend_pid()" if connection.dialect.name == "postgresql" else (
        "SELECT CONNECTION_ID()"
    )
    return int(connection.exec_driver_sql(sql).scalar_one())


def _terminate(admin_engine: sa.Engine, backend_id: int) -> None:
    """End the server connection ``backend_id``, from a connection of ``admin_engine``."""
    with admin_engine.connect() as admin:
        if admin.dialect.name == "postgresql":
            admin.exec_driver_sql(f"SELECT pg_terminate_backend({backend_id})")
        else:
            admin.exec_driver_sql(f"KILL CONNECTION {backend_id}")


@pytest.mark.parametrize("step", [("committed", "a"), ("committed", "b")], ids=["before", "after"])
def test_connection_killed_around_its_last_commit_is_a_success(
    pair: dict[str, sa.Engine], step: tuple[str, str]
) -> None:
    """"b"'s connection killed just before or after its commit: commit() still succeeds."""
    a, b = pair["a"], pair["b"]
    victim: list[int] = []
    groups: set[str] = set()

    def on_step(kind: str, group: str, database: str | None) -> None:
        groups.add(group)
        if (kind, database) == step:
            _terminate(b, victim[0])

    with ShardedSession(a, databases=pair, twophase=TwoPhase(on_step=on_step)) as session:
        insert(session, a, 1)
        insert(session, b, 2)
        victim.append(_backend_id(session.connection(bind_arguments={"bind": b})))
        session.commit()
        assert not session.in_transaction()
        session.connection(bind_arguments={"bind": a}).exec_driver_sql("SELECT 1")  # usable
    b.dispose()  # its pool still holds the killed connection
    assert ids(a) == {1} and ids(b) == {2}
    assert [x for x in branches(a) + branches(b) if x.group in groups] == []


PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def no_prepare_server() -> Iterator[str]:
    """A private PostgreSQL cluster with max_prepared_transactions = 0 (its URL); removed after."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"no PostgreSQL binaries in {PG_BIN}")
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    home = Path(tempfile.mkdtemp(prefix="snowshard_t_pg_"))
    if as_postgres:
        shutil.chown(home, "postgres")
    data, port = home / "data", _free_port()
    run = functools.partial(subprocess.run, check=True, capture_output=True, timeout=120)
    run([*as_postgres, str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"])
    options = f"-p {port} -k {home} -c listen_addresses='' -c max_prepared_transactions=0"
    pg_ctl = [*as_postgres, str(PG_BIN / "pg_ctl"), "-D", str(data)]
    run([*pg_ctl, "-o", options, "-w", "-l", str(home / "log"), "start"])
    try:
        yield f"postgresql+psycopg://postgres@/postgres?host={home}&port={port}"
    finally:
        run([*pg_ctl, "-m", "immediate", "-w", "stop"])
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_prepared_transactions_disabled_is_named_at_first_use(no_prepare_server: str) -> None:
    """max_prepared_transactions = 0: TwoPhaseUnavailable says how to enable it, before SQL."""
    engine = sa.create_engine(no_prepare_server)
    try:
        session = ShardedSession(engine, databases={"a": engine}, twophase=True)
        with session, pytest.raises(TwoPhaseUnavailable) as caught:
            session.connection(bind_arguments={"bind": engine})
        message = str(caught.value)
        assert "max_prepared_transactions = 0" in message
        assert "ALTER SYSTEM SET max_prepared_transactions" in message and "restart" in message
    finally:
        engine.dispose()
