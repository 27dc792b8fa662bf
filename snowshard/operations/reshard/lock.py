"""One process at a time per reshard job: a lock held for the length of a step.

Two ``start`` runs of the same job (a retry launched while the first still copies, a
second operator, a cron job) would copy and apply changes side by side, and a ``cutover``
racing a ``start`` could flip the map while rows are still arriving. Every step that
writes therefore holds the job's lock on the control database, and a second process gets
:class:`ReshardJobBusy` before it touches anything.

The lock dies with its holder, so a step killed with SIGKILL can be resumed at once:

* PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) on a connection
  kept for the step; the server releases it when the connection goes. Advisory locks
  belong to one database, so jobs of one name in two databases of a server never meet.
* MariaDB/MySQL: a named lock (``GET_LOCK``) on a connection kept for the step, likewise.
  Named locks belong to the whole server: the name is made from the control database's
  name and the job's (:func:`lock_name`), so two applications on one server may each run
  a job called ``orders``.
* SQLite: an exclusive ``flock`` on a file next to the database
  (``<database>-reshard-<job>.lock``), released by the kernel when the process exits; an
  in-memory database (one process) uses a lock of the process.

A process that is stopped, not dead (SIGSTOP, a debugger) keeps its lock: the message of
:class:`ReshardJobBusy` names the holder (server connection or process id) to look at.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from typing import IO

from sqlalchemy import Connection, Engine, text

from snowshard.operations.reshard.errors import ReshardJobBusy, ReshardPlanError

__all__ = ["JobLock", "lock_name"]

_RETRY_SECONDS = 0.05

_PROCESS_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _key(job: str) -> int:
    """A stable, non-negative 63-bit key for ``job`` (PostgreSQL advisory locks take a bigint)."""
    return int.from_bytes(hashlib.blake2b(job.encode(), digest_size=8).digest(), "big") >> 1


_PG_HELD = (
    "l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.classid::bigint = :hi AND l.objid::bigint = :lo "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
"""``pg_locks l`` rows of a granted advisory lock on one bigint key (:func:`_pg_lock_parts`)
in the current database (another database's lock of the same key is not this job's)."""


def _pg_lock_parts(job: str) -> dict[str, int]:
    """The key of ``job``'s advisory lock as ``pg_locks`` shows it: high and low 32 bits."""
    key = _key(job)
    return {"hi": key >> 32, "lo": key & 0xFFFFFFFF}


def lock_name(job: str, database: str) -> str:
    """The lock name on MariaDB of ``job`` kept in the control database ``database``.

    Named locks are server-wide, so the name is made from both names (a job of the same
    name in another database of the server is another job; a MariaDB database name holds
    no ``/``, so ``database/job`` names one pair); at most 64 characters.
    """
    return f"snowshard_reshard_{_key(f'{database}/{job}'):016x}"


class JobLock:
    """The lock of ``job`` on the control database ``engine``; ``acquire`` never waits."""

    def __init__(self, engine: Engine, job: str) -> None:
        self.engine = engine
        self.job = job
        self._connection: Connection | None = None
        self._name: str | None = None
        """The MariaDB lock's name, once the control database's name is read."""
        self._file: IO[str] | None = None
        self._process_lock: threading.Lock | None = None

    def __repr__(self) -> str:
        return f"JobLock(job={self.job!r}, dialect={self.engine.dialect.name!r}, held={self.held})"

    @property
    def held(self) -> bool:
        return self._connection is not None or self._file is not None or self._process_lock is not None

    # ------------------------------------------------------------------ acquire

    def acquire(self, wait: float = 0.0) -> None:
        """Take the lock, trying for up to ``wait`` seconds, or raise
        :class:`ReshardJobBusy` naming who holds it.

        A short wait covers a holder killed just now: its server notices the closed
        connection (and frees the lock) a moment after the process is gone."""
        if self.held:
            raise RuntimeError(f"{self!r} is already held by this object")
        name = self.engine.dialect.name
        deadline = time.monotonic() + wait
        if name == "postgresql":
            self._acquire_on_server("SELECT pg_try_advisory_lock(:key)", deadline)
        elif name in ("mysql", "mariadb"):
            self._acquire_on_server("SELECT GET_LOCK(:name, 0)", deadline)
        elif name == "sqlite":
            while True:
                try:
                    self._acquire_sqlite()
                    return
                except ReshardJobBusy:
                    if time.monotonic() >= deadline:
                        raise
                time.sleep(_RETRY_SECONDS)
        else:
            raise ReshardPlanError(
                f"no job lock on a {name} database; the control database of a reshard must be "
                "SQLite, PostgreSQL or MariaDB/MySQL"
            )

    def _acquire_on_server(self, statement: str, deadline: float) -> None:
        connection = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            params = self._lock_parameters(connection)
            while connection.execute(text(statement), params).scalar() not in (True, 1):
                if time.monotonic() >= deadline:
                    holder = self._server_holder(connection)
                    raise ReshardJobBusy(
                        f"reshard job {self.job!r} is running in another process ({holder}); "
                        "wait for it to finish or stop it, then run this step again"
                    )
                time.sleep(_RETRY_SECONDS)
        except BaseException:
            connection.close()
            raise
        self._connection = connection

    def _lock_parameters(self, connection: Connection) -> dict[str, object]:
        """The lock's key (PostgreSQL) or name (MariaDB, from the control database's name)."""
        if self.engine.dialect.name == "postgresql":
            return {"key": _key(self.job)}
        if self._name is None:
            database = connection.execute(text("SELECT DATABASE()")).scalar()
            self._name = lock_name(self.job, str(database or ""))
        return {"name": self._name}

    def _server_holder(self, connection: Connection) -> str:
        """Who holds the lock, as far as the server tells (best effort)."""
        try:
            if self.engine.dialect.name == "postgresql":
                row = connection.execute(text(
                    "SELECT a.pid, a.client_addr, a.application_name, a.backend_start "
                    f"FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE {_PG_HELD}"
                ), _pg_lock_parts(self.job)).first()
                if row is not None:
                    return (f"lock held by server process {row.pid} from {row.client_addr or 'local'}"
                            f" ({row.application_name or 'no application name'}), connected since "
                            f"{row.backend_start:%Y-%m-%d %H:%M:%S}")
            else:
                row = connection.execute(text(
                    "SELECT p.ID, p.HOST FROM information_schema.PROCESSLIST p "
                    "WHERE p.ID = IS_USED_LOCK(:name)"
                ), {"name": self._name}).first()
                if row is not None:
                    return f"lock {self._name!r} held by server connection {row[0]} from {row[1]}"
        except Exception:  # noqa: BLE001 - the holder is a courtesy; the refusal stands
            pass
        return "its holder could not be read"

    def _acquire_sqlite(self) -> None:
        database = self.engine.url.database
        if not database or database == ":memory:" or database.startswith("file::memory:"):
            key = (str(self.engine.url), self.job)
            with _PROCESS_LOCKS_GUARD:
                lock = _PROCESS_LOCKS.setdefault(key, threading.Lock())
            if not lock.acquire(blocking=False):
                raise ReshardJobBusy(
                    f"reshard job {self.job!r} is running in another thread of this process "
                    "(in-memory SQLite database); wait for that step to finish"
                )
            self._process_lock = lock
            return
        path = f"{database}-reshard-{_key(self.job):016x}.lock"
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release
        try:
            if not _try_flock(handle):
                handle.seek(0)
                holder = handle.read().strip() or "a process that has not said who it is"
                raise ReshardJobBusy(
                    f"reshard job {self.job!r} is running in another process ({holder}; lock "
                    f"file {path}); wait for it to finish or stop it, then run this step again"
                )
            handle.seek(0)
            handle.truncate()
            handle.write(f"process {os.getpid()} on {socket.gethostname()} since "
                         f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC\n")
            handle.flush()
        except BaseException:
            handle.close()
            raise
        self._file = handle

    # ------------------------------------------------------------------ check, release

    def check(self) -> None:
        """Raise :class:`ReshardJobBusy` if the lock was lost (the server dropped the
        connection that held it): the step stops before it writes again."""
        if self._connection is None:
            return
        try:
            if self.engine.dialect.name == "postgresql":
                mine = self._connection.execute(text(
                    f"SELECT count(*) FROM pg_locks l WHERE {_PG_HELD} AND l.pid = pg_backend_pid()"
                ), _pg_lock_parts(self.job)).scalar()
            else:
                mine = self._connection.execute(
                    text("SELECT IS_USED_LOCK(:name) = CONNECTION_ID()"), {"name": self._name}
                ).scalar()
        except Exception as error:
            raise ReshardJobBusy(
                f"reshard job {self.job!r} lost its lock ({type(error).__name__}: the connection "
                "holding it failed); the step stopped; run it again to resume"
            ) from error
        if not mine:
            raise ReshardJobBusy(
                f"reshard job {self.job!r} lost its lock (the server no longer holds it for this "
                "process); the step stopped; run it again to resume"
            )

    def release(self) -> None:
        """Give the lock back (idempotent)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                unlock = (
                    "SELECT pg_advisory_unlock(:key)"
                    if self.engine.dialect.name == "postgresql"
                    else "SELECT RELEASE_LOCK(:name)"
                )
                connection.execute(text(unlock), self._lock_parameters(connection))
            except Exception:  # noqa: BLE001 - a dead connection has released it already
                connection.invalidate()
            finally:
                connection.close()
        handle, self._file = self._file, None
        if handle is not None:
            handle.close()  # closing the file drops the flock
        lock, self._process_lock = self._process_lock, None
        if lock is not None:
            lock.release()


def _try_flock(handle: IO[str]) -> bool:
    """An exclusive, non-blocking lock on ``handle``'s file; False if another holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
