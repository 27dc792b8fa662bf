"""``snowshard txn recover``: finishes in-doubt branches, prints them, masks passwords."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from snowshard.cli.cmd_txn import txn_group
from snowshard.sharding import ShardedSession
from snowshard.sharding.twophase import TwoPhase
from tests.backends import DatabaseFactory
from tests.faults.twophase_support import branches, create_items, ids, insert

pytestmark = pytest.mark.postgres


class Crash(Exception):
    """The writer dies after deciding."""


def _crash_after_decision(engines: dict[str, sa.Engine]) -> None:
    def on_step(step: str, group: str, database: str | None) -> None:
        if step == "decided":
            raise Crash

    with ShardedSession(engines["a"], databases=engines, twophase=TwoPhase(on_step=on_step)) as s:
        insert(s, engines["a"], 1)
        insert(s, engines["b"], 2)
        with pytest.raises(Crash):
            s.commit()


@pytest.fixture
def urls(database_factory: DatabaseFactory) -> list[str]:
    """Two PostgreSQL databases (URLs with a password trust auth ignores) left in doubt."""
    found = [u.replace("postgres@", "postgres:s3cretpw@") for u in database_factory("postgresql", 2)]
    a, b = (database_factory.engine(u) for u in found)
    create_items(a, b)
    _crash_after_decision({"a": a, "b": b})
    return found


def test_recover_commits_and_prints_a_table(urls: list[str], database_factory: DatabaseFactory) -> None:
    """The command commits both branches, lists them as committed and exits 0."""
    result = CliRunner().invoke(txn_group, ["recover", f"a={urls[0]}", f"b={urls[1]}", "--grace", "0"])
    assert result.exit_code == 0, result.output
    assert result.output.count("committed") == 2
    assert "decision records removed: 1" in result.output
    engine = database_factory.engine(urls[1])
    assert ids(engine) == {2} and branches(engine) == []


def test_recover_masks_passwords(urls: list[str]) -> None:
    """No password of a URL appears in the output."""
    result = CliRunner().invoke(txn_group, ["recover", *urls, "--grace", "0"])
    assert "s3cretpw" not in result.output and "***" in result.output


def test_dry_run_exits_non_zero_while_branches_stay(urls: list[str], database_factory: DatabaseFactory) -> None:
    """--dry-run reports "would commit", changes nothing, and exits 1 (left unresolved)."""
    result = CliRunner().invoke(txn_group, ["recover", *urls, "--grace", "0", "--dry-run"])
    assert result.exit_code == 1
    assert result.output.count("would commit") == 2
    assert ids(database_factory.engine(urls[1])) == set()
    CliRunner().invoke(txn_group, ["recover", *urls, "--grace", "0"])


def test_another_decisions_database_lists_the_branches_as_not_ours(
    urls: list[str], database_factory: DatabaseFactory
) -> None:
    """--decisions naming another database leaves both branches alone, says why, exits 0."""
    (elsewhere,) = database_factory("postgresql", 1)
    result = CliRunner().invoke(
        txn_group, ["recover", *urls, "--grace", "0", "--decisions", elsewhere]
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("not ours") == 2
    assert ids(database_factory.engine(urls[1])) == set()
    result = CliRunner().invoke(txn_group, ["recover", *urls, "--grace", "0"])
    assert result.output.count("committed") == 2
