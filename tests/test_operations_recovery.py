"""Recovery of two-phase groups interrupted at each step (writer "crashes" in-process)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from snowshard.operations import recover
from snowshard.sharding import ShardedSession
from snowshard.sharding.commit_errors import CommitFailed
from snowshard.sharding.twophase import TwoPhase, read_decisions
from tests.backends import DatabaseFactory
from tests.faults.twophase_support import (
    branches,
    create_items,
    ids,
    insert,
    pair,
    row_is_free,
)

__all__ = ["pair"]  # the fixture, imported


class Crash(Exception):
    """The writer dies here (its session rolls back; prepared branches stay in doubt)."""


def write_until(engines: dict[str, sa.Engine], stop: tuple[str, str | None]) -> str:
    """Write item 1 to "a" and 2 to "b" with twophase, dying right after step ``stop``."""
    groups: list[str] = []

    def on_step(step: str, group: str, database: str | None) -> None:
        groups.append(group)
        if (step, database) == stop:
            raise Crash(step)

    with ShardedSession(engines["a"], databases=engines, twophase=TwoPhase(on_step=on_step)) as s:
        insert(s, engines["a"], 1)
        insert(s, engines["b"], 2)
        with pytest.raises(Crash):
            s.commit()
    return groups[0]


def test_recovery_rolls_back_a_group_that_never_decided(pair: dict[str, sa.Engine]) -> None:
    """Killed after every prepare, no decision: recovery rolls both back (presumed abort)."""
    write_until(pair, ("prepared", "b"))
    assert len(branches(pair["a"]) + branches(pair["b"])) >= 2
    report = recover(pair, grace=0)
    assert sorted(a.outcome for a in report.actions) == ["rolled back", "rolled back"]
    assert ids(pair["a"]) == ids(pair["b"]) == set()
    assert branches(pair["a"]) == branches(pair["b"]) == []
    assert row_is_free(pair["a"], 1) and row_is_free(pair["b"], 2)


def test_recovery_commits_a_decided_group(pair: dict[str, sa.Engine]) -> None:
    """Killed after the decision: recovery commits both branches and drops the decision."""
    write_until(pair, ("decided", None))
    report = recover(pair, grace=0)
    assert sorted(a.outcome for a in report.actions) == ["committed", "committed"]
    assert ids(pair["a"]) == {1} and ids(pair["b"]) == {2}
    assert read_decisions(pair["a"]) == {}


def test_recovery_finishes_a_group_after_its_first_commit(pair: dict[str, sa.Engine]) -> None:
    """Killed after "a" committed: recovery commits "b" too; nothing is left in doubt."""
    write_until(pair, ("committed", "a"))
    assert ids(pair["a"]) == {1} and ids(pair["b"]) == set()
    report = recover(pair, grace=0)
    assert [(a.database, a.outcome) for a in report.actions] == [("b", "committed")]
    assert ids(pair["b"]) == {2} and not report.unresolved


def test_recovery_leaves_young_groups_alone(pair: dict[str, sa.Engine]) -> None:
    """A group younger than the grace period is reported as waiting and not touched."""
    write_until(pair, ("decided", None))
    report = recover(pair, grace=3600)
    assert {a.outcome for a in report.actions} == {"waiting"}
    assert len(branches(pair["a"]) + branches(pair["b"])) >= 2
    recover(pair, grace=0)


def test_dry_run_reports_without_acting(pair: dict[str, sa.Engine]) -> None:
    """dry_run=True says what it would do, leaves the branches, and counts them unresolved."""
    write_until(pair, ("decided", None))
    report = recover(pair, grace=0, dry_run=True)
    assert {a.outcome for a in report.actions} == {"would commit"}
    assert len(report.unresolved) == 2
    assert len(branches(pair["a"]) + branches(pair["b"])) >= 2
    recover(pair, grace=0)


def test_commit_decision_is_kept_when_a_database_was_not_given(
    pair: dict[str, sa.Engine],
) -> None:
    """Given engines without keys, recovery commits but keeps the group's commit decision."""
    group = write_until(pair, ("decided", None))
    report = recover([pair["a"], pair["b"]], grace=0)
    assert report.decisions_kept == [group]
    assert ids(pair["b"]) == {2}
    assert recover(pair, grace=0).decisions_removed == [group]


def _another_database(pair: dict[str, sa.Engine], database_factory: DatabaseFactory) -> sa.Engine:
    """A fresh database on the server of ``pair["a"]`` (another application's)."""
    (url,) = database_factory(pair["a"].dialect.name, 1)  # a call's first: the first server
    engine = database_factory.engine(url)
    assert (engine.url.host, engine.url.port) == (pair["a"].url.host, pair["a"].url.port)
    return engine


def test_recovery_with_another_decisions_database_leaves_the_group_alone(
    pair: dict[str, sa.Engine], database_factory: DatabaseFactory
) -> None:
    """Given a decisions database that is not the writer's, recovery reports the branches as
    not its own and touches nothing (it cannot know they were decided committed); the
    writer's decisions database then commits them."""
    write_until(pair, ("decided", None))
    elsewhere = _another_database(pair, database_factory)
    report = recover(pair, decisions=elsewhere, grace=0)
    assert [a.outcome for a in report.actions] == ["not ours", "not ours"]
    assert len(report.not_ours) == 2 and not report.unresolved
    assert "recover it with that one" in report.actions[0].detail
    assert ids(pair["a"]) == ids(pair["b"]) == set()
    assert len(branches(pair["a"]) + branches(pair["b"])) >= 2
    report = recover(pair, grace=0)
    assert sorted(a.outcome for a in report.actions) == ["committed", "committed"]
    assert ids(pair["a"]) == {1} and ids(pair["b"]) == {2}


def test_another_applications_recovery_on_the_server_leaves_the_group_alone(
    pair: dict[str, sa.Engine], database_factory: DatabaseFactory
) -> None:
    """Another application's recovery on the same server (on MariaDB it lists every branch
    of the server) leaves this application's decided group to its own recovery."""
    write_until(pair, ("decided", None))
    other = _another_database(pair, database_factory)
    recover({"default": other}, grace=0)
    assert ids(pair["a"]) == ids(pair["b"]) == set()
    report = recover(pair, grace=0)
    assert sorted(a.outcome for a in report.actions) == ["committed", "committed"]
    assert ids(pair["a"]) == {1} and ids(pair["b"]) == {2}


@pytest.mark.postgres
def test_a_writer_slower_than_recovery_rolls_back(database_factory: DatabaseFactory) -> None:
    """Recovery aborts a group before its writer decides: the writer gets CommitFailed."""
    a, b = (database_factory.engine(u) for u in database_factory("postgresql", 2))
    create_items(a, b)
    engines = {"a": a, "b": b}

    def on_step(step: str, group: str, database: str | None) -> None:
        if (step, database) == ("prepared", "b"):
            recover(engines, grace=0)

    with ShardedSession(a, databases=engines, twophase=TwoPhase(on_step=on_step)) as s:
        insert(s, a, 1)
        insert(s, b, 2)
        with pytest.raises(CommitFailed, match="recovery rolled back") as caught:
            s.commit()
    assert caught.value.retry_safe
    assert ids(a) == ids(b) == set() and branches(a) == []
