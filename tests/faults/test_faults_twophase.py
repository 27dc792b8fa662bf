"""Two-phase commit under SIGKILL at every step, on PostgreSQL and MariaDB, then recovery.

A forked writer commits item 1 to database "a" and item 2 to "b" with ``twophase=True`` and
stops itself (SIGSTOP, from the ``on_step`` hook) right after one step; the test SIGKILLs it,
runs recovery, and checks the group is wholly committed or wholly absent, that no lock and
no snowshard branch is left, and that the databases can be dropped.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from snowshard.operations import recover
from snowshard.sharding import ShardedSession
from snowshard.sharding.twophase import TwoPhase, read_decisions
from tests.faults.twophase_support import branches, ids, insert, pair, row_is_free

__all__ = ["pair"]  # the fixture, imported

pytestmark = pytest.mark.slow

_FORK = multiprocessing.get_context("fork")

STEPS = [
    pytest.param(("prepared", "a"), False, id="after-some-prepares"),
    pytest.param(("prepared", "b"), False, id="after-all-prepares"),
    pytest.param(("decided", None), True, id="after-the-decision"),
    pytest.param(("committed", "a"), True, id="after-the-first-commit"),
]


def _writer(urls: dict[str, str], stop: tuple[str, str | None], marker: str) -> None:
    """The child: write both items, SIGSTOP itself right after step ``stop``."""
    engines = {key: sa.create_engine(url, poolclass=sa.pool.NullPool) for key, url in urls.items()}

    def on_step(step: str, group: str, database: str | None) -> None:
        if (step, database) == stop:
            Path(marker).write_text(group)
            os.kill(os.getpid(), signal.SIGSTOP)

    with ShardedSession(engines["a"], databases=engines, twophase=TwoPhase(on_step=on_step)) as s:
        insert(s, engines["a"], 1)
        insert(s, engines["b"], 2)
        s.commit()
    os._exit(3)  # not stopped: the step never came


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def _kill_at(urls: dict[str, str], stop: tuple[str, str | None], tmp_path: Path) -> str:
    """Run the writer until ``stop``, SIGKILL it; return its group ID."""
    marker = tmp_path / "group"
    child = _FORK.Process(target=_writer, args=(urls, stop, str(marker)))
    child.start()
    assert child.pid is not None
    deadline = time.monotonic() + 30
    try:
        while not (marker.exists() and _stopped(child.pid)):
            assert child.exitcode is None, f"writer ended with {child.exitcode} before {stop}"
            assert time.monotonic() < deadline, f"writer never reached {stop}"
            time.sleep(0.01)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join()
    assert child.exitcode == -signal.SIGKILL
    return marker.read_text()


@pytest.mark.parametrize(("stop", "committed"), STEPS)
def test_sigkill_then_recovery_leaves_all_or_nothing(
    pair: dict[str, sa.Engine], stop: tuple[str, str | None], committed: bool, tmp_path: Path
) -> None:
    """After SIGKILL at the step and recovery: both items or neither, no lock, no branch."""
    urls = {k: e.url.render_as_string(hide_password=False) for k, e in pair.items()}
    group = _kill_at(urls, stop, tmp_path)
    before = ids(pair["a"]) | ids(pair["b"])
    assert before == ({1} if stop[0] == "committed" else set())
    report = recover(pair, grace=0)
    assert not report.unresolved
    found = (ids(pair["a"]), ids(pair["b"]))
    assert found == (({1}, {2}) if committed else (set(), set()))
    assert branches(pair["a"]) == branches(pair["b"]) == []
    assert row_is_free(pair["a"], 1) and row_is_free(pair["b"], 2)
    if committed:
        assert group not in read_decisions(pair["a"])  # finished: its decision is cleaned
