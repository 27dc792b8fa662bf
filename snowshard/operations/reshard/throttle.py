"""How fast the copy may go: a rows/s limit, and a replica-lag limit.

A copy writes as fast as the target databases accept; their replicas replay it later. A
replica that falls behind serves stale reads (and, promoted, would lose writes), so the
copy waits before each chunk while any watched replica is more than ``max_replica_lag``
seconds behind its primary.

Replica lag is read on the replica itself:

* PostgreSQL (a hot standby): 0 when it has replayed all the WAL it received, else the
  age of the last transaction it replayed;
* MariaDB/MySQL: ``Seconds_Behind_Master`` of ``SHOW SLAVE STATUS`` (whole seconds; it
  counts a ``MASTER_DELAY`` too). A replica whose SQL thread is stopped has no lag to
  read: the copy stops with :class:`~.errors.ReshardError` naming it (and its last error).

Other databases are refused up front: their lag is not measured here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from snowshard.operations.reshard.errors import ReshardError, ReshardPlanError
from snowshard.redaction import redact_sqlalchemy_url, scrub, url_secrets

__all__ = ["OnWait", "Throttle", "replica_lag"]

OnWait = Callable[[str, float], None]
"""Called while the copy waits: (replica URL without password, its lag in seconds)."""

_PG_LAG = text(
    "SELECT pg_is_in_recovery(), CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()"
    " THEN 0 ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0) END"
)


_MYSQL_LAG = text("SHOW SLAVE STATUS")


def replica_lag(engine: Engine) -> float:
    """Seconds ``engine`` (a PostgreSQL hot standby or a MariaDB/MySQL replica) is behind
    its primary."""
    name = engine.dialect.name
    if name not in ("postgresql", "mysql", "mariadb"):
        raise ReshardPlanError(
            f"replica lag is measured on PostgreSQL hot standbys and MariaDB/MySQL replicas "
            f"only, not on {name} ({redact_sqlalchemy_url(engine.url)}): throttle that copy "
            "with rows_per_second instead"
        )
    try:
        with engine.connect() as connection:
            if name == "postgresql":
                in_recovery, lag = connection.execute(_PG_LAG).one()
            else:
                status = connection.execute(_MYSQL_LAG).mappings().first()
                in_recovery = status is not None
                lag = _mysql_lag(engine, status) if status is not None else 0
    except DBAPIError as error:
        cause = scrub(f"{type(error.orig).__name__}: {error.orig}", url_secrets(engine.url))
        raise ReshardError(
            f"cannot read the lag of replica {redact_sqlalchemy_url(engine.url)} ({cause}); "
            "the copy stopped at its last checkpoint: run start again once the replica "
            "answers, or without max_replica_lag"
        ) from None
    if not in_recovery:
        test = "pg_is_in_recovery() is false" if name == "postgresql" else "SHOW SLAVE STATUS is empty"
        raise ReshardPlanError(
            f"{redact_sqlalchemy_url(engine.url)} is not a replica ({test}): "
            "pass the standbys of the target databases as replicas"
        )
    return float(lag)


def _mysql_lag(engine: Engine, status: Mapping[Any, object]) -> object:
    """``Seconds_Behind_Master``, or ReshardError when the replica does not apply changes."""
    lag = status.get("Seconds_Behind_Master")
    if lag is None or status.get("Slave_SQL_Running") != "Yes":
        last = status.get("Last_SQL_Error") or status.get("Last_IO_Error") or "no error reported"
        cause = scrub(str(last), url_secrets(engine.url))
        raise ReshardError(
            f"replica {redact_sqlalchemy_url(engine.url)} does not apply changes "
            f"(Slave_SQL_Running = {status.get('Slave_SQL_Running')}, Slave_IO_Running = "
            f"{status.get('Slave_IO_Running')}; {cause}), so its lag cannot be read; the copy "
            "stopped at its last checkpoint: run start again once replication runs, or "
            "without max_replica_lag"
        )
    return lag


@dataclass
class Throttle:
    """Paces a copy: at most ``rows_per_second``, and no chunk while a replica lags more
    than ``max_replica_lag`` seconds (checked every ``poll`` seconds while waiting)."""

    rows_per_second: float | None = None
    replicas: Sequence[Engine] = ()
    max_replica_lag: float | None = None
    poll: float = 0.2
    on_wait: OnWait | None = None
    _began: float = field(default_factory=time.monotonic, repr=False)
    _written: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        for name in ("rows_per_second", "max_replica_lag"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ReshardPlanError(f"{name} must be a number > 0 or None, got {value!r}")
        if self.max_replica_lag is not None and not self.replicas:
            raise ReshardPlanError(
                f"max_replica_lag={self.max_replica_lag!r} needs the replicas to watch: "
                "Reshard(..., replicas={database: [engine, ...]})"
            )
        for engine in self.replicas:
            replica_lag(engine)  # refuses what cannot be measured, before any row moves

    @classmethod
    def of(
        cls,
        rows_per_second: float | None,
        replicas: Mapping[str, Sequence[Engine]],
        max_replica_lag: float | None,
        on_wait: OnWait | None = None,
    ) -> Throttle:
        """The throttle of a job: every replica of every database, when a lag is set."""
        watched = [e for engines in replicas.values() for e in engines] if max_replica_lag is not None else []
        return cls(rows_per_second, watched, max_replica_lag, on_wait=on_wait)

    def before_chunk(self) -> None:
        """Wait until every watched replica is within the lag limit."""
        if self.max_replica_lag is None:
            return
        while True:
            behind = [(e, lag) for e in self.replicas if (lag := replica_lag(e)) > self.max_replica_lag]
            if not behind:
                return
            if self.on_wait is not None:
                engine, lag = max(behind, key=lambda found: found[1])
                self.on_wait(redact_sqlalchemy_url(engine.url), lag)
            time.sleep(self.poll)

    def after_rows(self, count: int) -> None:
        """``count`` rows were written: sleep as long as the rows/s limit asks."""
        self._written += count
        if self.rows_per_second:
            ahead = self._written / self.rows_per_second - (time.monotonic() - self._began)
            if ahead > 0:
                time.sleep(ahead)
