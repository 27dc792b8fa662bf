"""Worker IDs leased from a SQL table: :class:`DatabaseLease` (PostgreSQL, MariaDB/MySQL, SQLite).

The same contract as :class:`~snowshard.workers.RedisLease` on the database the application
already has, so Redis stays optional. One row per (namespace, worker ID)::

    snowshard_worker_leases
      namespace      VARCHAR(64)   PK  -- generators sharing worker IDs share a namespace
      worker_id      INTEGER       PK
      holder         VARCHAR(255)      -- host:pid:random of the live holder; NULL = free
      expires_at_ms  BIGINT            -- database clock, Unix ms
      high_water_ms  BIGINT            -- last time its holders issued at (Unix ms)
      ttl_ms         BIGINT            -- the TTL of the last holder
      released       BOOLEAN           -- the last holder released it (vs. it expired)
      last_holder    VARCHAR(255)
      version        BIGINT            -- bumped on every change (optimistic locking)

Expiry is judged by the database's clock alone, never by the clients', so hosts whose
clocks disagree cannot both hold a worker ID. Taking a free row is a conditional ``UPDATE``
on its ``version``; adding a row is an ``INSERT`` that the primary key makes exclusive;
renewing is an ``UPDATE`` on the holder's token, which fails when the row is missing or
names another holder. Every statement runs in its own short transaction.

A table gives no proof that it was not restored from an older copy, or emptied, while
holders ran (a restored "released" row looks like a current one), so every new claim is
fenced: its first ID comes ``ttl + clock_skew`` after the claim (time to first ID; choose a
short ``ttl``, 2-5 s, where start-up time matters). The same goes for a renewal sent after
the claim's deadline had passed. See :mod:`snowshard.workers.lease` for the argument.

A holder frozen *inside* one of those transactions (``SIGSTOP``, a VM pause: the window is
a round trip every ``renew_every``) keeps its row locked, or the whole file with SQLite, and
nobody can take that worker ID over until it resumes or its connection is dropped. On
PostgreSQL set ``idle_in_transaction_session_timeout``; SQLite leases suit processes on
one host.

Create the table with :func:`create_table`, or with Alembic from :data:`lease_metadata`
(the table is :data:`worker_leases`); :func:`make_lease_table` builds one with another
name or schema.
"""

from __future__ import annotations

import random
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError

from snowshard.layout import Layout
from snowshard.redaction import redact_sqlalchemy_url, scrub, url_secrets
from snowshard.workers.errors import LeaseBackendError, WorkerConfigError, WorkerIdsExhausted
from snowshard.workers.lease import Grant, Lease

__all__ = [
    "LEASE_TABLE_NAME",
    "DatabaseLease",
    "create_table",
    "lease_metadata",
    "make_lease_table",
    "worker_leases",
]

LEASE_TABLE_NAME = "snowshard_worker_leases"

_NOW_MS = {
    "postgresql": "CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)",
    "mysql": (
        "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 "
        "AS SIGNED)"
    ),
    "sqlite": "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
}
_NOW_MS["mariadb"] = _NOW_MS["mysql"]


def make_lease_table(
    metadata: sa.MetaData, name: str = LEASE_TABLE_NAME, *, schema: str | None = None
) -> sa.Table:
    """The lease table's definition on ``metadata`` (for another name or schema)."""
    if not isinstance(metadata, sa.MetaData):
        raise WorkerConfigError(
            f"make_lease_table() needs a sqlalchemy MetaData, got {type(metadata).__name__} "
            f"{metadata!r}"
        )
    if not isinstance(name, str) or not name:
        raise WorkerConfigError(f"the lease table's name must be a non-empty str, got {name!r}")
    return sa.Table(
        name,
        metadata,
        sa.Column("namespace", sa.String(64), primary_key=True),
        sa.Column("worker_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("holder", sa.String(255), nullable=True),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False, default=0),
        sa.Column("high_water_ms", sa.BigInteger, nullable=False, default=0),
        sa.Column("ttl_ms", sa.BigInteger, nullable=False, default=0),
        sa.Column("released", sa.Boolean, nullable=False, default=False),
        sa.Column("last_holder", sa.String(255), nullable=True),
        sa.Column("version", sa.BigInteger, nullable=False, default=0),
        schema=schema,
        comment="snowshard worker ID leases (snowshard.workers.DatabaseLease)",
    )


lease_metadata = sa.MetaData()
"""The :class:`~sqlalchemy.MetaData` holding :data:`worker_leases` (for Alembic)."""

worker_leases = make_lease_table(lease_metadata)
"""The default lease table, ``snowshard_worker_leases``."""


def create_table(engine: Engine, table: sa.Table = worker_leases) -> None:
    """Create the lease table in ``engine``'s database if it is not there yet."""
    if not isinstance(engine, (sa.Engine, sa.Connection)):
        raise WorkerConfigError(
            f"create_table() needs a sqlalchemy Engine, got {type(engine).__name__} {engine!r}; "
            "use create_engine(url)"
        )
    table.create(engine, checkfirst=True)


def _create_engine(url: URL | str) -> Engine:
    """An engine for ``url``; a URL SQLAlchemy refuses raises WorkerConfigError without secrets."""
    try:
        return sa.create_engine(url, pool_pre_ping=True)
    except (ArgumentError, ImportError, ValueError, TypeError) as exc:
        # SQLAlchemy's or a driver's text may quote the URL (SQLAlchemy < 2.1 does)
        problem = f"{type(exc).__name__}: {scrub(str(exc), url_secrets(url))}"
    # raised here, outside the except block, so no driver exception is chained to it
    raise WorkerConfigError(
        f"DatabaseLease cannot use the database URL {redact_sqlalchemy_url(url)} ({problem}); "
        "expected dialect[+driver]://user:password@host[:port]/database"
    )


class DatabaseLease(Lease):
    """A worker ID leased from a row of the lease table, renewed in the background.

    :param engine: an :class:`~sqlalchemy.engine.Engine` (kept open by :meth:`close`) or a
        URL, as a string or a :class:`~sqlalchemy.engine.URL` (the lease creates an engine
        and disposes of it on close). Messages show the URL with its password masked, also
        one given as a query parameter (``?password=...``).
    :param layout: the generator's layout: IDs 0..``layout.max_worker`` are leased.
    :param namespace: generators that must not share worker IDs use the same namespace
        (one per datacenter ID, for instance); at most 64 characters.
    :param table: the lease table (default :data:`worker_leases`); it must exist.

    See :class:`~snowshard.workers.lease.Lease` for ``ttl``, ``clock_skew``, renewal,
    deadlines, fences and fork. Time to first ID: ``ttl + clock_skew`` (every new claim is
    fenced; see the module docstring).
    """

    def __init__(
        self,
        engine: Engine | URL | str,
        layout: Layout | None = None,
        *,
        namespace: str = "default",
        table: sa.Table = worker_leases,
        ttl: float = 10.0,
        renew_every: float | None = None,
        margin: float | None = None,
        clock_skew: float = 1.0,
    ) -> None:
        if not isinstance(engine, (sa.Engine, URL, str)):
            raise WorkerConfigError(
                f"DatabaseLease needs an Engine, a URL or a URL string, got "
                f"{type(engine).__name__} {engine!r}"
            )
        super().__init__(
            layout, ttl=ttl, renew_every=renew_every, margin=margin, clock_skew=clock_skew
        )
        if not isinstance(namespace, str) or not 0 < len(namespace) <= 64:
            raise WorkerConfigError(
                f"namespace must be a str of 1..64 characters, got {namespace!r}"
            )
        self.namespace = namespace
        self.table = table
        if isinstance(engine, (str, URL)):
            self._engine = _create_engine(engine)
            self._owns_engine = True
            self._secrets = url_secrets(engine) | url_secrets(self._engine.url)
        else:
            self._engine = engine
            self._owns_engine = False
            self._secrets = url_secrets(engine.url)
        dialect = self._engine.dialect.name
        if dialect not in _NOW_MS:
            if self._owns_engine:
                self._engine.dispose()
            raise WorkerConfigError(
                f"DatabaseLease supports PostgreSQL, MySQL/MariaDB and SQLite; got a "
                f"{dialect!r} engine. Use RedisLease or another worker ID provider"
            )
        self._now: Any = sa.literal_column(_NOW_MS[dialect], sa.BigInteger)
        url = redact_sqlalchemy_url(self._engine.url)
        self._where = f"table {table.fullname!r} in {url}, namespace {namespace!r}"

    def _describe(self) -> str:
        return self._where

    def _mine(self, worker: int) -> Any:
        t = self.table.c
        return sa.and_(
            t.namespace == self.namespace, t.worker_id == worker, t.holder == self._token
        )

    def _acquire(self, prefer: int | None, high_water_ms: int) -> Grant:
        t = self.table.c
        in_namespace = sa.and_(t.namespace == self.namespace, t.worker_id < self._count)
        free = sa.or_(t.holder.is_(None), t.expires_at_ms <= self._now)
        order: list[Any] = [t.worker_id]
        if prefer is not None:
            order.insert(0, sa.case((t.worker_id == prefer, 0), else_=1))
        candidates = (
            sa.select(
                t.worker_id,
                t.high_water_ms,
                t.ttl_ms,
                t.released,
                t.last_holder,
                t.expires_at_ms,
                t.version,
            )
            .where(in_namespace, free)
            .order_by(*order)
            .limit(8)
        )
        taken = {
            "holder": self._token,
            "last_holder": self._token,
            "expires_at_ms": self._now + self._ttl_ms,
            "ttl_ms": self._ttl_ms,
            "released": False,
        }
        for attempt in range(20):
            try:
                grant = self._try_acquire(candidates, taken, in_namespace, high_water_ms)
            except OperationalError:
                # deadlock, lock wait timeout, "database is locked": back off, try again
                if attempt == 19:
                    raise
                time.sleep(random.uniform(0.005, 0.05))
                continue
            if grant is not None:
                return grant
        raise LeaseBackendError(
            f"could not take a worker ID from {self._where} in 20 attempts: other processes "
            "kept taking the free ones first; retry"
        )

    def _try_acquire(
        self, candidates: Any, taken: dict[str, Any], in_namespace: Any, high_water_ms: int
    ) -> Grant | None:
        """One pass: take a free row, or insert a missing one; None if others were faster."""
        t = self.table.c
        with self._engine.connect() as conn:
            rows = conn.execute(candidates).all()
        for row in rows:
            take = (
                sa.update(self.table)
                .where(
                    t.namespace == self.namespace,
                    t.worker_id == row.worker_id,
                    t.version == row.version,
                )
                .values(
                    version=t.version + 1,
                    high_water_ms=self._high_water_value(high_water_ms),
                    **taken,
                )
            )
            with self._engine.begin() as conn:
                sent = time.monotonic_ns()
                if conn.execute(take).rowcount == 1:
                    floor = int(row.high_water_ms)
                    if not row.released and row.last_holder != self._token:
                        # It died or lapsed holding the ID: it may have issued up to its
                        # deadline, ttl past its last report, never after its expiry.
                        floor = max(floor + int(row.ttl_ms), int(row.expires_at_ms))
                    return Grant(int(row.worker_id), floor, sent, self._fence_ms)
        if rows:
            return None  # others took them first: look again
        with self._engine.connect() as conn:
            existing = set(conn.execute(sa.select(t.worker_id).where(in_namespace)).scalars())
        missing = next((w for w in range(self._count) if w not in existing), None)
        if missing is None:
            raise self._exhausted()
        insert = sa.insert(self.table).values(
            namespace=self.namespace,
            worker_id=missing,
            high_water_ms=high_water_ms,
            version=0,
            **taken,
        )
        try:
            with self._engine.begin() as conn:
                sent = time.monotonic_ns()
                conn.execute(insert)
        except IntegrityError:
            return None  # another process inserted it first
        return Grant(missing, 0, sent, self._fence_ms)

    def _exhausted(self) -> WorkerIdsExhausted:
        t = self.table.c
        query = (
            sa.select(t.worker_id, t.holder, (t.expires_at_ms - self._now).label("left_ms"))
            .where(t.namespace == self.namespace, t.worker_id < self._count)
            .order_by(t.worker_id)
            .limit(5)
        )
        with self._engine.connect() as conn:
            rows = conn.execute(query).all()
        holders = "; ".join(
            f"{row.worker_id} by {row.holder} (expires in {row.left_ms} ms)" for row in rows
        )
        more = f", and {self._count - len(rows)} more" if self._count > len(rows) else ""
        return WorkerIdsExhausted(
            f"all {self._count} worker IDs (0..{self._count - 1}) in {self._where} are "
            f"leased: {holders}{more}. Wait up to {self.ttl:g} s for a dead holder's lease to "
            "expire, close unused leases, or widen worker_bits"
        )

    def _high_water_value(self, high_water_ms: int) -> Any:
        t = self.table.c
        return sa.case((t.high_water_ms < high_water_ms, high_water_ms), else_=t.high_water_ms)

    def _renew(self, worker: int, high_water_ms: int) -> int | None:
        t = self.table.c
        renew = (
            sa.update(self.table)
            .where(self._mine(worker))
            .values(
                expires_at_ms=self._now + self._ttl_ms,
                high_water_ms=self._high_water_value(high_water_ms),
                version=t.version + 1,
            )
        )
        with self._engine.begin() as conn:
            return 0 if conn.execute(renew).rowcount == 1 else None

    def _release(self, worker: int, high_water_ms: int) -> None:
        t = self.table.c
        release = (
            sa.update(self.table)
            .where(self._mine(worker))
            .values(
                holder=None,
                expires_at_ms=0,
                released=True,
                high_water_ms=self._high_water_value(high_water_ms),
                version=t.version + 1,
            )
        )
        with self._engine.begin() as conn:
            conn.execute(release)

    def _reset_store_after_fork(self) -> None:
        self._engine.dispose(close=False)  # the parent's pooled connections stay the parent's

    def _close_store(self) -> None:
        if self._owns_engine:
            self._engine.dispose()
