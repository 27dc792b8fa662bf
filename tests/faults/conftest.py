"""Fixtures of the fault tests: a lease store per backend, and child processes to abuse."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from snowshard import Layout
from snowshard.workers import Lease, create_table, worker_leases
from snowshard.workers.db_lease import _NOW_MS
from tests.backends import DatabaseFactory, RedisNamespace
from tests.faults.procs import make_lease, run_forked

_FORK = multiprocessing.get_context("fork")

STORES = [
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


@dataclass
class Target:
    """Where leases live: ``store`` is "redis" or a database backend; ``url`` its URL."""

    store: str
    url: str
    prefix: str
    leases: list[Lease] = field(default_factory=list)

    def lease(self, layout: Layout, ttl: float) -> Lease:
        """A lease in this store, closed at the end of the test."""
        lease = make_lease(self.store, self.url, self.prefix, layout, ttl)
        self.leases.append(lease)
        return lease

    def row_lock_free(self, worker: int) -> bool:
        """False if some session holds a lock on ``worker``'s lease (row, or SQLite file).

        A holder frozen inside its renewal transaction keeps that lock: nobody can take the
        row over until it resumes. Tests that freeze holders check this first.
        """
        if self.store == "redis":
            return True
        if self.store == "sqlite":
            probe = sqlite3.connect(str(make_url(self.url).database), timeout=0.1)
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.rollback()
                return True
            except sqlite3.OperationalError:
                return False
            finally:
                probe.close()
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        t = worker_leases.c
        query = (
            sa.select(t.worker_id)
            .where(t.namespace == self.prefix, t.worker_id == worker)
            .with_for_update(nowait=True)
        )
        try:
            with engine.begin() as conn:
                conn.execute(query).all()
            return True
        except sa.exc.DBAPIError:
            return False
        finally:
            engine.dispose()

    def expires_in_ms(self, worker: int) -> int:
        """How long the store keeps ``worker``'s current lease without renewal (its clock)."""
        if self.store == "redis":
            with redis.Redis.from_url(self.url) as client:
                return int(client.pttl(f"{self.prefix}:lease:{worker}"))
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                t = worker_leases.c
                now = sa.literal_column(_NOW_MS[engine.dialect.name], sa.BigInteger)
                query = sa.select(t.expires_at_ms - now).where(
                    t.namespace == self.prefix, t.worker_id == worker
                )
                return int(conn.execute(query).scalar_one())
        finally:
            engine.dispose()


@pytest.fixture(params=STORES)
def target(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> Iterator[Target]:
    """A fresh lease store of each kind (a Redis key prefix, or a database with the table)."""
    if request.param == "redis":
        ns: RedisNamespace = request.getfixturevalue("redis_db")
        found = Target("redis", ns.url, ns.prefix + "leases")
    else:
        url = database_factory(request.param)[0]
        create_table(database_factory.engine(url))
        found = Target(request.param, url, "faults")
    yield found
    for lease in found.leases:
        lease.close()


@dataclass
class Record:
    """What a ``hold``/``issue`` child wrote: IDs with the wall time, and errors."""

    ids: list[tuple[int, int]]  # (id, wall ms when returned)
    errors: list[tuple[int, str, str]]  # (wall ms, class name, message)


class Child:
    """A forked child running :mod:`tests.faults.procs`, with its files in ``directory``."""

    def __init__(self, directory: Path, name: str, mode: str, *options: str) -> None:
        self.out = directory / f"{name}.out"
        self.ready_file = directory / f"{name}.ready"
        self.stop_file = directory / f"{name}.stop"
        self.log = directory / f"{name}.log"
        argv = [
            mode, "--out", str(self.out), "--ready", str(self.ready_file),
            "--stop", str(self.stop_file), *options,
        ]
        # fork, not spawn: no interpreter start-up and imports per child. The test process
        # runs no threads of ours at this point (every lease of earlier tests is closed).
        self.process = _FORK.Process(target=run_forked, args=(argv, str(self.log)), name=name)
        self.process.start()

    @property
    def pid(self) -> int:
        pid = self.process.pid
        assert pid is not None
        return pid

    def wait_ready(self, timeout: float = 30.0) -> dict[str, object]:
        """Wait for the child's ready file (it holds a lease and issues IDs)."""
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists() or not self.ready_file.read_text():
            if not self.process.is_alive() or time.monotonic() > deadline:
                pytest.fail(f"child {self.pid} not ready: {self._log_tail()}")
            time.sleep(0.01)
        info: dict[str, object] = json.loads(self.ready_file.read_text())
        return info

    def wait_issued_after(self, wall: int, timeout: float) -> None:
        """Wait until the child has written an ID returned after Unix ms ``wall``."""
        deadline = time.monotonic() + timeout
        while not any(at > wall for _, at in self.record().ids):
            if time.monotonic() > deadline:
                log = self._log_tail()
                stacks = self.stacks()
                record = self.record()
                last = max((at for _, at in record.ids), default=None)
                pytest.fail(
                    f"child {self.pid} issued nothing after {wall} in {timeout} s (alive: "
                    f"{self.process.is_alive()}; last ID at {last}; last errors "
                    f"{record.errors[-3:]}; log: {log}; where it is: {stacks})"
                )
            time.sleep(0.05)

    def finish(self, timeout: float = 60.0) -> None:
        """Ask the child to stop (or wait for it to end) and check it exited cleanly."""
        self.stop_file.touch()
        self.process.join(timeout)
        if self.process.exitcode is None:
            log, stacks = self._log_tail(), self.stacks()
            self.terminate()
            pytest.fail(f"child {self.pid} did not finish: {log}; where it is: {stacks}")
        code = self.process.exitcode
        assert code == 0, f"child {self.pid} exited {code}: {self._log_tail()}"

    def stacks(self) -> str:
        """The stacks of the child's threads, if it is alive (SIGUSR1: see ``run_forked``)."""
        if not self.process.is_alive():
            return "(not running)"
        size = self.log.stat().st_size if self.log.exists() else 0
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if self.log.exists() and self.log.stat().st_size > size:
                time.sleep(0.1)  # let it finish writing
                break
        text = self.log.read_bytes()[size:].decode(errors="replace")
        return text or f"(no stack written within 2 s; the kernel's view: {self._kernel_state()})"

    def _kernel_state(self) -> str:
        """State (R, S, D, T...), wait channel and system call of the child, as Linux shows
        them: a child that cannot even run its signal handler is stopped or in the kernel."""
        found = []
        for name in ("status", "wchan", "syscall", "stack"):
            try:
                text = Path(f"/proc/{self.pid}/{name}").read_text()
            except OSError as exc:
                text = f"unreadable ({exc.strerror})"
            if name == "status":
                text = next((line for line in text.splitlines() if line.startswith("State")), "")
            found.append(f"{name}: {' '.join(text.split())[:400]}")
        return "; ".join(found)

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL, as a crash would, and reap it."""
        os.kill(self.pid, signal.SIGKILL)
        self.process.join()
        assert self.process.exitcode == -signal.SIGKILL

    def terminate(self) -> None:
        """SIGKILL (after SIGCONT, in case it is stopped) and reap."""
        if self.process.exitcode is None:
            try:
                os.kill(self.pid, signal.SIGCONT)
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.join()
        self.process.close()

    def _log_tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else "(no output)"

    def record(self) -> Record:
        ids: list[tuple[int, int]] = []
        errors: list[tuple[int, str, str]] = []
        text = self.out.read_text() if self.out.exists() else ""
        for line in text.split("\n")[:-1]:  # the last piece is "" or a line being written
            kind, rest = line.split(" ", 1)
            if kind == "I":
                value, wall = rest.split(" ")
                ids.append((int(value), int(wall)))
            elif kind == "E":
                wall, name, message = (rest.split(" ", 2) + [""])[:3]
                errors.append((int(wall), name, message))
        return Record(ids, errors)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """``spawn(name, mode, *options) -> Child``; every child is killed and reaped after."""
    children: list[Child] = []

    def start(name: str, mode: str, *options: str) -> Child:
        child = Child(tmp_path, name, mode, *options)
        children.append(child)
        return child

    yield start
    for child in children:
        child.terminate()


def wall_ms() -> int:
    return time.time_ns() // 1_000_000
