"""A reshard process killed with SIGKILL in every phase, then resumed: nothing lost or doubled.

Each test builds the old layout (300 rows) and its unsharded twin, keeps writers writing
through the shard map (they retry while a fence is up), runs one reshard step in a child
process that SIGKILLs itself at a chosen progress point, then resumes the job in the
test process and finishes it. The layout that holds the rows at the end must equal the
twin: every row once, in the table its shard key routes to.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from snowshard.operations.reshard import Reshard, ReshardJobBusy
from tests.backends import DatabaseFactory
from tests.reshard_world import ReshardWorld, Writers, build
from tests.test_sharding_helpers import BACKEND_MARKS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 40


def _on(*cases: tuple[str, Any]) -> Any:
    """Parametrize ``world`` (indirect: the backend) and ``case``: every phase is killed on
    PostgreSQL and, spread between them, on SQLite and MariaDB (CI time is finite)."""
    return pytest.mark.parametrize(
        ("world", "case"),
        [pytest.param(b, c, id=f"{b}-{c}", marks=BACKEND_MARKS[b]) for b, c in cases],
        indirect=["world"],
    )


@pytest.fixture
def world(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> Iterator[ReshardWorld]:
    """The old layout in one database of the backend asked for, with 300 rows and the twin."""
    (url,) = database_factory(request.param, 1)
    kw: dict[str, Any] = {"connect_args": {"timeout": 30}} if request.param == "sqlite" else {}
    yield build({"default": database_factory.engine(url, **kw)}, two_databases=False)


def _urls(world: ReshardWorld) -> dict[str, str]:
    return {k: e.url.render_as_string(hide_password=False) for k, e in world.engines.items()}


def _killed(world: ReshardWorld, step: str, kill_at: tuple[str, int], capture: str = "triggers") -> None:
    """Run ``step`` in a child that SIGKILLs itself at ``kill_at``; assert it was killed."""
    spec = {"urls": _urls(world), "two_databases": world.control == "a", "step": step,
            "kill_at": list(kill_at), "chunk_rows": CHUNK, "capture": capture}
    done = subprocess.run(
        [sys.executable, "-m", "tests.faults.reshard_child", json.dumps(spec)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]


def _stopped(world: ReshardWorld, step: str, stop_at: tuple[str, int]) -> subprocess.Popen[str]:
    """Run ``step`` in a child that SIGSTOPs itself at ``stop_at``; return it once stopped."""
    spec = {"urls": _urls(world), "two_databases": world.control == "a", "step": step,
            "kill_at": list(stop_at), "signal": "SIGSTOP", "chunk_rows": CHUNK}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.reshard_child", json.dumps(spec)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat", encoding="ascii") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "T":
                return child
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        time.sleep(0.05)
    child.kill()
    raise AssertionError(f"the child never stopped at {stop_at}")


def _finish(job: Reshard) -> None:
    """Resume from whatever phase the kill left and cut over (cleanup comes after the
    writers stop: a writer that picked the old model just before the flip would find its
    tables gone)."""
    phase = job.phase()
    if phase in (None, "copying", "copied"):
        job.start()
    if job.phase() in ("copied", "cutting"):
        job.cutover()


def _assert_equal_to_twin(world: ReshardWorld, model: type) -> None:
    assert world.rows_of(model) == world.twin_rows()
    assert world.placed_right(model)


@_on(("sqlite", "copy-2"), ("postgresql", "copy-2"), ("mysql", "copy-6"),
     ("postgresql", "catch up-1"), ("mysql", "catch up-1"))
def test_kill_during_start_then_resume(world: ReshardWorld, case: str) -> None:
    """start killed during the copy or the catch-up, resumed: the new layout equals the twin."""
    step, calls = case.rsplit("-", 1)
    job = world.job(chunk_rows=CHUNK)
    with Writers(world):
        _killed(world, "start", (step, int(calls)))
        assert job.phase() == "copying"
        _finish(job)
    job.cleanup()
    _assert_equal_to_twin(world, world.new)


CUTOVER_STAGES = {"fenced": 1, "drained": 2, "compared": 3}


@_on(("sqlite", "fenced"), ("postgresql", "fenced"), ("mysql", "fenced"),
     ("postgresql", "drained"), ("sqlite", "compared"), ("postgresql", "compared"))
def test_kill_during_cutover_then_resume(world: ReshardWorld, case: str) -> None:
    """cutover killed after the fence, the drain, or the comparison, then run again."""
    job = world.job(chunk_rows=CHUNK)
    with Writers(world):
        job.start()
        _killed(world, "cutover", ("cutover", CUTOVER_STAGES[case]))
        assert job.phase() == "cutting"
        _finish(job)
    job.cleanup()
    _assert_equal_to_twin(world, world.new)


ROLLBACK_STAGES = {"fenced": 1, "copied-back": 2}


@_on(("postgresql", "fenced"), ("mysql", "fenced"), ("sqlite", "copied-back"),
     ("postgresql", "copied-back"))
def test_kill_during_rollback_then_resume(world: ReshardWorld, case: str) -> None:
    """rollback after cutover killed mid-way, run again: the old layout equals the twin."""
    job = world.job(chunk_rows=CHUNK)
    with Writers(world):
        job.start()
        job.cutover()
        _killed(world, "rollback", ("rollback", ROLLBACK_STAGES[case]))
        assert job.phase() == "rolling_back"
        job.rollback()
    job.cleanup()
    _assert_equal_to_twin(world, world.old)


@_on(("postgresql", "cleanup"), ("sqlite", "cleanup"))
def test_kill_during_cleanup_then_resume(world: ReshardWorld, case: str) -> None:
    """cleanup killed after dropping one old table, run again: finishes, rows intact."""
    job = world.job(chunk_rows=CHUNK)
    job.start()
    job.cutover()
    _killed(world, "cleanup", ("cleanup", 1))
    job.cleanup()
    assert job.phase() == "done"
    assert not {f"rs_orders_{i:02d}" for i in range(4)} & set(sa.inspect(world.bind).get_table_names())
    _assert_equal_to_twin(world, world.new)


@pytest.mark.postgres
def test_kill_during_a_move_between_two_servers(database_factory: DatabaseFactory) -> None:
    """A copy across two PostgreSQL servers killed mid-way and resumed equals the twin."""
    engines = {k: database_factory.engine(u) for k, u in zip("ab", database_factory("postgresql", 2))}
    world = build(engines, two_databases=True)
    job = world.job(chunk_rows=CHUNK)
    with Writers(world):
        _killed(world, "start", ("copy", 3))
        job.start()
        _killed(world, "cutover", ("cutover", 2))
        _finish(job)
    job.cleanup()
    _assert_equal_to_twin(world, world.new)


@_on(("sqlite", "copy-2"), ("postgresql", "copy-2"), ("mysql", "copy-2"))
def test_a_second_run_is_refused_while_the_first_is_stopped(world: ReshardWorld, case: str) -> None:
    """start stopped (SIGSTOP) mid-copy holds the job: a second start is refused with
    ReshardJobBusy naming the holder and writes nothing; once the first is killed, the
    second resumes at once and the new layout equals the twin."""
    step, calls = case.rsplit("-", 1)
    job = world.job(chunk_rows=CHUNK)
    with Writers(world):
        child = _stopped(world, "start", (step, int(calls)))
        try:
            copied = job.status().copied
            second = Reshard(world.plan(chunk_rows=CHUNK), world.engines, lock_wait=0.5)
            with pytest.raises(ReshardJobBusy, match="running in another process") as busy:
                second.start()
            holder = {"sqlite": f"process {child.pid} on", "postgresql": "held by server process",
                      "mysql": "held by server connection"}[world.bind.dialect.name.replace("mariadb", "mysql")]
            assert holder in str(busy.value)
            assert job.status().copied == copied  # the refused run copied nothing
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.communicate(timeout=30)
        _finish(job)
    job.cleanup()
    _assert_equal_to_twin(world, world.new)


@pytest.mark.postgres
@pytest.mark.parametrize("kill_at", [("copy", 2), ("cutover", 2)], ids=["copy", "cutover-drained"])
def test_kill_during_a_logical_capture_move_then_resume(
    database_factory: DatabaseFactory, postgres2_url: str, kill_at: tuple[str, int]
) -> None:
    """capture='logical' (a replication slot, no triggers): start or cutover killed mid-way
    and resumed under writers; the new layout equals the twin and the slot is gone."""
    (url,) = database_factory("postgresql", 1, server_url=postgres2_url)
    world = build({"default": database_factory.engine(url)}, two_databases=False)
    job = Reshard(world.plan(chunk_rows=CHUNK, capture="logical"), world.engines)
    with Writers(world):
        if kill_at[0] == "cutover":
            job.start()
        _killed(world, "start" if kill_at[0] == "copy" else "cutover", kill_at, capture="logical")
        if job.phase() in (None, "copying", "copied"):
            job.start()
        job.cutover()
    job.cleanup()
    _assert_equal_to_twin(world, world.new)
    with world.bind.connect() as connection:
        slots = connection.execute(sa.text(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
        )).scalar_one()
    assert slots == 0
