"""The reshard job lock: one process per job at a time, refused up front, dies with its holder."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import threading
import time

import pytest
import sqlalchemy as sa

from snowshard.operations.reshard import Reshard, ReshardJobBusy, ReshardPlanError
from snowshard.operations.reshard.lock import JobLock, lock_name
from tests.backends import DatabaseFactory
from tests.reshard_world import ReshardWorld, build
from tests.test_sharding_helpers import BACKEND_MARKS

ONE_DB = [pytest.param(b, id=b, marks=BACKEND_MARKS[b]) for b in ("sqlite", "postgresql", "mysql")]
SERVERS = [pytest.param(b, id=b, marks=BACKEND_MARKS[b]) for b in ("postgresql", "mysql")]


@pytest.fixture(params=ONE_DB)
def world(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> Iterator[ReshardWorld]:
    """The old layout (4 tables, 300 rows) in one database of each backend."""
    (url,) = database_factory(request.param, 1)
    kw: dict[str, Any] = {"connect_args": {"timeout": 30}} if request.param == "sqlite" else {}
    yield build({"default": database_factory.engine(url, **kw)}, two_databases=False)


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> sa.Engine:
    """An engine on a fresh database of each server backend."""
    (url,) = database_factory(request.param, 1)
    return database_factory.engine(url)


def _job(world: ReshardWorld, lock_wait: float = 0.0) -> Reshard:
    """The world's job, refused at once (no wait) while another holds its lock."""
    return Reshard(world.plan(), world.engines, lock_wait=lock_wait)


def _holding(engine: sa.Engine, job: str) -> JobLock:
    lock = JobLock(engine, job)
    lock.acquire()
    return lock


def test_start_is_refused_while_another_holds_the_job(world: ReshardWorld) -> None:
    """A held job lock makes start raise ReshardJobBusy before anything is written."""
    job = _job(world)
    other = _holding(world.bind, job.plan.job)
    try:
        with pytest.raises(ReshardJobBusy, match="'rs-orders' is running in another process"):
            job.start()
        assert job.phase() is None
        assert "rs_orders_v2_00" not in sa.inspect(world.bind).get_table_names()
    finally:
        other.release()


@pytest.mark.parametrize("step", ["cutover", "rollback", "cleanup", "verify", "catch_up"])
def test_every_writing_step_takes_the_lock(world: ReshardWorld, step: str) -> None:
    """cutover, rollback, cleanup, verify and catch_up are refused too, phase unchanged."""
    job = _job(world)
    job.start()
    other = _holding(world.bind, job.plan.job)
    try:
        with pytest.raises(ReshardJobBusy):
            getattr(job, step)()
        assert job.phase() == "copied"
    finally:
        other.release()


def test_status_needs_no_lock(world: ReshardWorld) -> None:
    """status reads while another process holds the job."""
    job = _job(world)
    other = _holding(world.bind, job.plan.job)
    try:
        assert job.status().phase == "not started"
    finally:
        other.release()


def test_a_finished_step_gives_the_lock_back(world: ReshardWorld) -> None:
    """After start returns (or fails), another process can take the job's lock."""
    job = _job(world)
    job.start()
    _holding(world.bind, job.plan.job).release()
    with pytest.raises(Exception):  # noqa: B017 - any failure must release the lock too
        job.cleanup()  # needs a cutover first: refused after taking the lock
    _holding(world.bind, job.plan.job).release()


def test_steps_within_a_step_reuse_the_lock(world: ReshardWorld) -> None:
    """cutover (which catches up inside) runs through without refusing itself."""
    job = _job(world)
    job.start()
    assert job.cutover().map_version == 1


def test_another_job_is_not_blocked(world: ReshardWorld) -> None:
    """A held lock of job 'a' does not stop job 'b' on the same database."""
    a = _holding(world.bind, "a")
    try:
        _holding(world.bind, "b").release()
        with pytest.raises(ReshardJobBusy):
            JobLock(world.bind, "a").acquire()
    finally:
        a.release()


def test_the_lock_is_taken_again_once_released(world: ReshardWorld) -> None:
    """acquire, release, acquire: the second acquire succeeds; release is idempotent."""
    lock = _holding(world.bind, "x")
    lock.release()
    lock.release()
    lock.acquire()
    assert lock.held
    lock.release()
    assert not lock.held


def test_a_lost_server_lock_stops_the_step(server: sa.Engine) -> None:
    """check() raises ReshardJobBusy once the server dropped the connection holding the lock."""
    lock = _holding(server, "lost")
    assert lock._connection is not None
    with server.connect() as admin:
        if server.dialect.name == "postgresql":
            pid = lock._connection.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        else:
            cid = lock._connection.execute(sa.text("SELECT CONNECTION_ID()")).scalar()
            admin.execute(sa.text(f"KILL CONNECTION {int(cid)}"))  # type: ignore[arg-type]
    with pytest.raises(ReshardJobBusy, match="'lost' lost its lock"):
        lock.check()
    lock.release()
    _holding(server, "lost").release()  # the server freed it with the connection


def test_check_passes_while_the_lock_is_held(server: sa.Engine) -> None:
    """check() is silent while this process holds the lock."""
    lock = _holding(server, "kept")
    try:
        lock.check()
    finally:
        lock.release()


def test_the_mariadb_lock_name_fits_any_job() -> None:
    """MariaDB lock names stay within 64 characters and differ between jobs and between
    control databases."""
    assert len(lock_name("j" * 64, "d" * 64)) <= 64
    assert lock_name("a", "shop") != lock_name("b", "shop")
    assert lock_name("a", "shop") != lock_name("a", "blog")


@pytest.mark.parametrize("backend", SERVERS)
def test_a_job_name_in_another_control_database_is_another_job(
    backend: str, database_factory: DatabaseFactory
) -> None:
    """Two databases of one server each hold the lock of a job of the same name at once."""
    engines = [database_factory.engine(url) for url in database_factory(backend, 1)]
    engines += [database_factory.engine(url) for url in database_factory(backend, 1)]
    assert engines[0].url.host == engines[1].url.host  # one server (each call's first)
    assert engines[0].url.port == engines[1].url.port
    first, second = JobLock(engines[0], "rs-orders"), JobLock(engines[1], "rs-orders")
    first.acquire()
    try:
        second.acquire()
        assert (first.held, second.held) == (True, True)
        second.release()
    finally:
        first.release()


def test_in_memory_sqlite_uses_a_lock_of_the_process() -> None:
    """Two locks of one job on an in-memory SQLite engine: the second is refused."""
    engine = sa.create_engine("sqlite://")
    first = _holding(engine, "mem")
    try:
        with pytest.raises(ReshardJobBusy, match="another thread of this process"):
            JobLock(engine, "mem").acquire()
    finally:
        first.release()
    _holding(engine, "mem").release()


def test_an_unsupported_control_database_is_refused() -> None:
    """A control database other than SQLite, PostgreSQL or MariaDB raises ReshardPlanError."""
    engine = sa.create_mock_engine("oracle://scott@localhost/db", lambda *a, **k: None)
    with pytest.raises(ReshardPlanError, match="no job lock on a oracle database"):
        JobLock(engine, "x").acquire()  # type: ignore[arg-type]


def test_a_step_waits_for_a_lock_released_within_lock_wait(world: ReshardWorld) -> None:
    """A lock freed 0.3 s into a 5 s lock_wait is taken: start runs instead of refusing."""
    job = _job(world, lock_wait=5.0)
    other = _holding(world.bind, job.plan.job)
    threading.Timer(0.3, other.release).start()
    started = time.monotonic()
    assert job.start().phase == "copied"
    assert time.monotonic() - started >= 0.3


def test_lock_wait_bounds_the_wait(world: ReshardWorld) -> None:
    """A lock held throughout makes start raise after about lock_wait seconds."""
    job = _job(world, lock_wait=0.4)
    other = _holding(world.bind, job.plan.job)
    try:
        started = time.monotonic()
        with pytest.raises(ReshardJobBusy):
            job.start()
        assert 0.4 <= time.monotonic() - started < 3
    finally:
        other.release()


@pytest.mark.parametrize("bad", [-1, 3601, "5", True])
def test_a_bad_lock_wait_is_refused(world: ReshardWorld, bad: object) -> None:
    """lock_wait outside 0..3600 seconds, or not a number, raises ReshardPlanError."""
    with pytest.raises(ReshardPlanError, match="lock_wait must be seconds in 0..3600"):
        Reshard(world.plan(), world.engines, lock_wait=bad)  # type: ignore[arg-type]
