"""A reshard job, step by step: ``start``, ``status``, ``verify``, ``cutover``, ``rollback``, ``cleanup``.

Phases (kept in ``snowshard_reshard_jobs`` of the control database)::

    copying --start--> copied --cutover--> switched --cleanup--> done
       \\__________________\\___rollback___/--> rolled_back --cleanup--> done

* ``start``: creates the target tables (with snowshard's migration operations,
  :mod:`.targets`) and the state tables, installs change capture on
  every source table, copies (:mod:`.copy`), then applies the changes made meanwhile
  (:mod:`.catchup`). Run it again after a crash: it resumes from the checkpoints.
* ``cutover``: catches up until few changes are left, installs capture on the target
  tables (for rollback), **fences** the source tables (a write to them fails in the
  database with :class:`~snowshard.sharding.shard_map.StaleShardMap`), applies the last
  changes, compares the rows they touched, and flips the shard map to the target layout
  in one statement. Writers wait from the fence to the flip: that is the write pause, reported.
  A cutover that crashed half-way leaves the fence up: run ``cutover`` (or ``rollback``)
  again.
* ``rollback`` after a cutover fences the targets, applies what was written to them
  since back into the source tables, lifts the source fence and flips the map back.
* ``cleanup`` drops what the finished direction no longer needs: after a cutover the
  source tables, triggers and logs; after a rollback the target tables.

Every step but ``status`` holds the job's lock (:mod:`.lock`): a second process running
the same job is refused with ``ReshardJobBusy`` before it writes anything.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy import Engine, Table, func, insert, select, update
from sqlalchemy.exc import DBAPIError

from snowshard.operations.reshard import logical, triggers
from snowshard.operations.reshard.catchup import drain, lag
from snowshard.operations.reshard.copy import copy_source_table
from snowshard.operations.reshard.errors import ReshardPhaseError, ReshardPlanError, VerifyFailed
from snowshard.operations.reshard.lock import JobLock
from snowshard.operations.reshard.plan import Placement, ReshardPlan
from snowshard.operations.reshard.state import COPIED, JOBS, LOG, METADATA, SHARD_MAP
from snowshard.operations.reshard.targets import create_targets
from snowshard.operations.reshard.throttle import Throttle
from snowshard.operations.reshard.verify import VerifyReport, compare_keys, verify
from snowshard.redaction import redact_sqlalchemy_url
from snowshard.sharding.shard_map import now_ms

__all__ = ["CutoverReport", "Progress", "Reshard", "ReshardStatus"]

P = ParamSpec("P")
R = TypeVar("R")

Progress = Callable[[str, int, "int | None"], None]
"""``progress(step, rows_done, rows_total)``: called as work advances (total may be None)."""


@dataclass(frozen=True)
class ReshardStatus:
    """Where a job is: its phase, rows copied out of the source's rows, changes not applied."""

    job: str
    phase: str
    copied: int
    source_rows: int
    lag: int

    def __str__(self) -> str:
        return (
            f"job {self.job!r}: {self.phase}; copied {self.copied} of {self.source_rows} "
            f"source rows; {self.lag} captured changes not yet applied"
        )


@dataclass(frozen=True)
class CutoverReport:
    """What cutover did: the write pause (fence to flip), changes applied during it."""

    pause_ms: float
    applied_during_pause: int
    map_version: int
    checks: dict[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        return (
            f"switched to map version {self.map_version}: writes paused {self.pause_ms:.0f} ms, "
            f"{self.applied_during_pause} changes applied and compared during the pause"
        )


def _locked(step: Callable[Concatenate[Reshard, P], R]) -> Callable[Concatenate[Reshard, P], R]:
    """Run ``step`` holding the job's lock: a second process running the same job gets
    :class:`~snowshard.operations.reshard.lock.ReshardJobBusy` before anything is written."""

    @functools.wraps(step)
    def run(self: Reshard, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._exclusive():
            return step(self, *args, **kwargs)

    return run


class Reshard:
    """Runs ``plan`` on ``engines`` (database key -> engine, every database of the plan).

    ``replicas`` (database key -> its replicas' engines) are the standbys ``start`` watches
    when given ``max_replica_lag``. ``lock_wait``: seconds a step waits for the job's lock
    (:mod:`.lock`) before :class:`~.errors.ReshardJobBusy`; the default covers a holder
    killed a moment ago, whose server has not yet noticed."""

    def __init__(
        self,
        plan: ReshardPlan,
        engines: Mapping[str, Engine],
        *,
        progress: Progress | None = None,
        replicas: Mapping[str, Sequence[Engine]] | None = None,
        lock_wait: float = 5.0,
    ) -> None:
        missing = [key for key in plan.databases if key not in engines]
        if missing:
            raise ReshardPlanError(
                f"the plan uses databases {plan.databases}; no engine given for {missing}"
            )
        unknown = sorted(set(replicas or {}) - set(plan.databases))
        if unknown:
            raise ReshardPlanError(
                f"replicas given for databases {unknown} the plan does not use {plan.databases}"
            )
        self.plan = plan
        self.engines = dict(engines)
        self.progress = progress
        self.replicas = {key: list(copies) for key, copies in (replicas or {}).items()}
        if isinstance(lock_wait, bool) or not isinstance(lock_wait, (int, float)) or not 0 <= lock_wait <= 3600:
            raise ReshardPlanError(f"lock_wait must be seconds in 0..3600, got {lock_wait!r}")
        self._lock = JobLock(self.control, plan.job)
        self._lock_wait = float(lock_wait)
        self._lock_depth = 0

    def __repr__(self) -> str:
        urls = {k: redact_sqlalchemy_url(e.url) for k, e in sorted(self.engines.items())}
        return f"Reshard(job={self.plan.job!r}, engines={urls})"

    # ------------------------------------------------------------------ state

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the job's lock (:mod:`.lock`) for a step; steps called by steps reuse it."""
        if self._lock_depth == 0:
            self._lock.acquire(self._lock_wait)
            try:
                self._same_capture()
            except BaseException:
                self._lock.release()
                raise
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0:
                self._lock.release()

    @property
    def control(self) -> Engine:
        return self.engines[self.plan.control]

    def phase(self) -> str | None:
        """The job's phase, or None before ``start``."""
        with self.control.connect() as connection:
            if not self.control.dialect.has_table(connection, JOBS.name):
                return None
            return connection.execute(
                select(JOBS.c.phase).where(JOBS.c.job == self.plan.job)
            ).scalar()

    def _set_phase(self, phase: str, *, expect: tuple[str | None, ...] | None = None) -> None:
        with self.control.begin() as connection:
            current = connection.execute(
                select(JOBS.c.phase).where(JOBS.c.job == self.plan.job).with_for_update()
            ).scalar()
            if expect is not None and current not in expect:
                raise ReshardPhaseError(
                    f"job {self.plan.job!r} is {current or 'not started'}; this step needs it "
                    f"to be {' or '.join(str(e) for e in expect)}"
                )
            if current is None:
                connection.execute(insert(JOBS).values(
                    job=self.plan.job, phase=phase, plan=self.plan.to_json(), updated_ms=now_ms()
                ))
            else:
                connection.execute(update(JOBS).where(JOBS.c.job == self.plan.job).values(
                    phase=phase, updated_ms=now_ms()
                ))

    def _require(self, *phases: str | None) -> str | None:
        phase = self.phase()
        if phase not in phases:
            raise ReshardPhaseError(
                f"job {self.plan.job!r} is {phase or 'not started'}; this step needs it to be "
                f"{' or '.join(str(p) for p in phases)}"
            )
        return phase

    def _tell(self, step: str, done: int, total: int | None) -> None:
        if self.progress is not None:
            self.progress(step, done, total)

    def _count(self, placement: Placement) -> int:
        """Rows in ``placement``'s tables (those that exist)."""
        total = 0
        for database, index, table in self._physical(placement):
            with self.engines[database].connect() as connection:
                if connection.dialect.has_table(connection, table.name):
                    total += connection.execute(select(func.count()).select_from(table)).scalar_one()
        return total

    def _physical(self, placement: Placement) -> list[tuple[str, int, Table]]:
        tables = self.plan.tables(placement)
        return [(placement.spec.database_of(i), i, t) for i, t in sorted(tables.items())]

    def _copied(self) -> int:
        """Rows copied so far, by the checkpoints of every target database."""
        copied = 0
        for database, _ in self.plan.by_database(self.plan.target):
            with self.engines[database].connect() as connection:
                copied += connection.execute(
                    select(func.coalesce(func.sum(COPIED.c.rows), 0)).where(COPIED.c.job == self.plan.job)
                ).scalar_one()
        return int(copied)

    def status(self) -> ReshardStatus:
        """The job's phase and progress (rows copied, changes waiting)."""
        phase = self.phase() or "not started"
        copied = self._copied() if phase != "not started" else 0
        waiting = lag(self.plan, self.engines) if phase in ("copying", "copied", "cutting") else 0
        return ReshardStatus(self.plan.job, phase, int(copied), self._count(self.plan.source), waiting)

    # ------------------------------------------------------------------ start

    @_locked
    def start(
        self, *, rows_per_second: float | None = None, max_replica_lag: float | None = None
    ) -> ReshardStatus:
        """Create targets, capture changes, copy, and catch up (resumable).

        The copy goes at most ``rows_per_second``, and waits before each chunk while a
        replica of :attr:`replicas` is more than ``max_replica_lag`` seconds behind (its
        lag is reported to ``progress`` as the step ``"replica lag (ms)"``)."""
        throttle = Throttle.of(
            rows_per_second, self.replicas, max_replica_lag,
            on_wait=lambda _url, behind: self._tell("replica lag (ms)", round(behind * 1000), None),
        )
        phase = self._require(None, "copying", "copied")
        if self.plan.capture == "logical":
            for database, _ in self.plan.by_database(self.plan.source):
                logical.check_logical(self.engines[database])
        for engine in self.engines.values():
            METADATA.create_all(engine, checkfirst=True)
        if phase is None:
            self._refuse_a_second_job()
            self._set_phase("copying", expect=(None,))
        create_targets(self.plan, self.engines)  # as a revision's create_sharded_table would
        targets = self.plan.tables(self.plan.target)
        self._capture(self.plan)
        total = self._count(self.plan.source)
        done = self._copied()
        self._tell("copy", done, total)
        sources = self._physical(self.plan.source)
        for database, index, table in sources:
            self._lock.check()

            def advance(n: int) -> None:
                nonlocal done
                done += n
                self._tell("copy", done, total)

            copy_source_table(
                self.plan, self.engines, database, table, targets, fed=self.plan.fed_by(index),
                throttle=throttle, on_rows=advance,
            )
        self.catch_up(until=self.plan.chunk_rows)  # writers keep writing: do not chase zero
        if self.phase() == "copying":
            self._set_phase("copied", expect=("copying",))
        return self.status()

    def _refuse_a_second_job(self) -> None:
        """Two jobs moving one table would each capture, fence and flip its map: refuse a
        new job while another job of the same table is not cleaned up."""
        with self.control.connect() as connection:
            rows = connection.execute(
                select(JOBS.c.job, JOBS.c.phase, JOBS.c.plan)
                .where(JOBS.c.job != self.plan.job, JOBS.c.phase != "done")
            ).all()
        for job, phase, plan in rows:
            if json.loads(plan).get("table") == self.plan.logical.name:
                raise ReshardPhaseError(
                    f"table {self.plan.logical.name!r} is being moved by job {job!r} ({phase}); "
                    f"one job per table at a time: finish it (cutover, cleanup) or roll it back "
                    f"and clean up before starting {self.plan.job!r}"
                )

    def _same_capture(self) -> None:
        """A job resumed with another capture would miss what the first one captures."""
        with self.control.connect() as connection:
            if not self.control.dialect.has_table(connection, JOBS.name):
                return
            stored = connection.execute(select(JOBS.c.plan).where(JOBS.c.job == self.plan.job)).scalar()
        if stored is None:
            return
        began = json.loads(stored).get("capture", "triggers")
        if began != self.plan.capture:
            raise ReshardPlanError(
                f"job {self.plan.job!r} started with capture={began!r}; resume it with the "
                f"same capture, not {self.plan.capture!r}"
            )

    def _capture(self, plan: ReshardPlan) -> None:
        """Capture changes of ``plan``'s source tables, one transaction per database."""
        for database, indices in plan.by_database(plan.source):
            tables = plan.tables(plan.source)
            if plan.capture == "logical":
                logical.install_logical(self.engines[database], plan.job, [tables[i] for i in indices])
                continue
            with self.engines[database].begin() as connection:
                for index in indices:
                    triggers.install_capture(
                        connection, tables[index], job=plan.log_job, pk=plan.pk, key=plan.target.key
                    )

    @_locked
    def catch_up(self, *, until: int = 0) -> int:
        """Apply captured changes until at most ``until`` are left; the changes applied."""
        sources = {t.name: t for _, _, t in self._physical(self.plan.source)}
        applied = 0

        def advance(n: int) -> None:
            nonlocal applied
            applied += n
            self._tell("catch up", applied, None)

        drain(self.plan, self.engines, sources, self.plan.tables(self.plan.target), until=until, on_rows=advance)
        return applied

    # ------------------------------------------------------------------ verify

    @_locked
    def verify(self, *, repair: bool = False) -> VerifyReport:
        """Compare source and target range by range (after catching up)."""
        self._require("copied", "cutting")
        self.catch_up(until=self.plan.chunk_rows)  # verify tells lag from mismatch
        return verify(self.plan, self.engines, repair=repair)

    # ------------------------------------------------------------------ cutover

    @_locked
    def cutover(self, *, max_lag: int = 500) -> CutoverReport:
        """Fence the sources, apply the last changes, compare them, flip the map."""
        self._require("copied", "cutting")
        self.catch_up(until=max_lag)
        # before the pause: capture the targets for rollback (only this job writes them
        # until the flip, and what it logs then is harmless to apply back)
        self._capture(self.plan.reversed())
        self.catch_up(until=max_lag)
        began = time.monotonic()
        self._set_phase("cutting", expect=("copied", "cutting"))
        self._fence(self.plan.source)
        fenced = time.monotonic()
        self._tell("cutover", 1, 4)  # sources fenced
        sources = {t.name: t for _, _, t in self._physical(self.plan.source)}
        applied = drain(self.plan, self.engines, sources, self.plan.tables(self.plan.target))
        drained = time.monotonic()
        self._tell("cutover", 2, 4)  # last changes applied
        wrong = compare_keys(self.plan, self.engines, (pk for _, pk in applied))
        if wrong:
            raise VerifyFailed(
                f"after the final catch-up, {len(wrong)} rows differ between source and target "
                f"(first keys {wrong[:5]}); the sources stay fenced: run `verify --repair` then "
                "cutover again, or rollback",
                tuple((k, k + 1) for k in wrong),
            )
        self._tell("cutover", 3, 4)  # compared (the targets were captured before the fence)
        self._lock.check()
        version = self._flip(self.plan.target)
        ended = time.monotonic()
        self._tell("cutover", 4, 4)  # map flipped
        try:
            self._drop_slots(restore=False)  # the fenced sources change no more
        except DBAPIError:
            pass  # the move is done; cleanup drops what is left (and says why if it cannot)
        return CutoverReport(
            (ended - began) * 1000, len(applied), version,
            {"fence_ms": (fenced - began) * 1000, "drain_ms": (drained - fenced) * 1000,
             "flip_ms": (ended - drained) * 1000},
        )

    def _flip(self, placement: Placement) -> int:
        """Point the map at ``placement`` and move the phase, in one transaction."""
        from snowshard.sharding.shard_map import placement_fingerprint

        layout = placement_fingerprint(placement.spec, placement.strategy, placement.key)
        to_phase = "switched" if placement is self.plan.target else "rolled_back"
        with self.control.begin() as connection:
            row = connection.execute(
                select(SHARD_MAP.c.version).where(SHARD_MAP.c.name == self.plan.logical.name)
                .with_for_update()
            ).scalar()
            version = (row or 0) + 1
            if row is None:
                connection.execute(insert(SHARD_MAP).values(
                    name=self.plan.logical.name, version=version, layout=layout, changed_ms=now_ms()
                ))
            else:
                connection.execute(update(SHARD_MAP).where(SHARD_MAP.c.name == self.plan.logical.name)
                                   .values(version=version, layout=layout, changed_ms=now_ms()))
            connection.execute(update(JOBS).where(JOBS.c.job == self.plan.job)
                               .values(phase=to_phase, updated_ms=now_ms()))
        return version

    # ------------------------------------------------------------------ rollback

    @_locked
    def rollback(self) -> str:
        """Undo the move (until cleanup); returns what was done."""
        phase = self._require("copying", "copied", "cutting", "switched", "rolling_back")
        if phase in ("switched", "rolling_back"):
            back = self.plan.reversed()
            self._set_phase("rolling_back", expect=("switched", "rolling_back"))
            self._fence(self.plan.target)
            self._tell("rollback", 1, 3)  # targets fenced
            sources = {t.name: t for _, _, t in self._physical(back.source)}
            applied = drain(back, self.engines, sources, back.tables(back.target), fenced=True)
            self._tell("rollback", 2, 3)  # changes copied back
            self._lock.check()
            self._unfence(self.plan.source)
            self._drop_slots(restore=True)
            self._flip(self.plan.source)
            self._tell("rollback", 3, 3)  # map flipped back
            return f"rolled back: {len(applied)} changes made after the cutover copied back"
        self._unfence(self.plan.source)
        self._drop_slots(restore=True)
        self._set_phase("rolled_back")
        return "rolled back before cutover: the source tables were never fenced for long"

    def _fence(self, placement: Placement) -> None:
        """Fence every table of ``placement``, one transaction per database (on
        PostgreSQL all of a database's tables at once; MariaDB commits each trigger)."""
        for database, indices in self.plan.by_database(placement):
            tables = self.plan.tables(placement)
            with self.engines[database].begin() as connection:
                for index in indices:
                    triggers.install_fence(connection, tables[index], job=self.plan.job)

    def _drop_slots(self, *, restore: bool) -> None:
        """Logical capture: drop each source database's slot and publication (WAL is held
        for a slot until it goes); ``restore``: the source tables stay, so their replica
        identity goes back to the default."""
        if self.plan.capture != "logical":
            return
        for database, indices in self.plan.by_database(self.plan.source):
            tables = self.plan.tables(self.plan.source)
            logical.drop_logical(self.engines[database], self.plan.job,
                                 [tables[i] for i in indices] if restore else ())

    def _unfence(self, placement: Placement) -> None:
        for database, index, table in self._physical(placement):
            with self.engines[database].begin() as connection:
                triggers.drop_fence(connection, table, job=self.plan.job)

    # ------------------------------------------------------------------ cleanup

    @_locked
    def cleanup(self, *, drop_tables: bool = True) -> str:
        """Drop what the finished direction left behind (old tables, triggers, logs)."""
        phase = self._require("switched", "rolled_back", "done")
        if phase == "done":
            return "nothing to do: already cleaned up"
        keep, old = (
            (self.plan.target, self.plan.source) if phase == "switched"
            else (self.plan.source, self.plan.target)
        )
        for placement in (self.plan.source, self.plan.target):
            for database, index, table in self._physical(placement):
                with self.engines[database].begin() as connection:
                    if not connection.dialect.has_table(connection, table.name):
                        continue  # dropped by a cleanup that crashed later
                    triggers.drop_capture(connection, table, job=self.plan.job)
                    triggers.drop_capture(connection, table, job=self.plan.reversed().log_job)
                    if placement is keep:
                        triggers.drop_fence(connection, table, job=self.plan.job)
        self._drop_slots(restore=phase == "rolled_back")
        dropped = 0
        if drop_tables:
            for database, index, table in self._physical(old):
                with self.engines[database].begin() as connection:
                    table.drop(connection, checkfirst=True)
                    dropped += 1
                self._tell("cleanup", dropped, len(self._physical(old)))
        for engine in self.engines.values():
            with engine.begin() as connection:
                for job in (self.plan.job, self.plan.reversed().log_job):
                    connection.execute(LOG.delete().where(LOG.c.job == job))
                    connection.execute(COPIED.delete().where(COPIED.c.job == job))
        self._set_phase("done")
        return f"cleaned up: dropped {dropped} tables of the layout no longer used"
