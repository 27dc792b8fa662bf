"""Worker ID providers: where a generator's worker ID comes from.

==========================  ===========================================================
provider                    use when
==========================  ===========================================================
:class:`HostWorker`         the default: low bits of the IPv4 address and the pid.
                            Mostly unique, not guaranteed.
:func:`fixed_worker`        you assign IDs yourself (config files, deploy scripts).
:func:`worker_from_env`     the ID comes in ``$SNOWSHARD_WORKER_ID``.
:func:`worker_from_hostname`  Kubernetes StatefulSets: ``web-3`` → 3.
:func:`join_cluster`        a Redis ``INCR`` per process start; never reused, wraps
                            after ``max_worker + 1`` joins.
:class:`RedisLease`         many processes that come and go: a free ID leased with a TTL,
                            renewed in the background, reused after it expires.
:class:`DatabaseLease`      the same on a table in PostgreSQL, MariaDB or SQLite.
==========================  ===========================================================

A lease is anything that satisfies :class:`~snowshard.workers.base.WorkerLease`
(``attach``, ``claim``, ``detach``); :class:`Lease` is the base of the two shipped here.

The leases need ``redis`` (``snowshard[redis]``) or SQLAlchemy; they are imported on first
use, so ``import snowshard`` stays light::

    from snowshard import Layout, Snowflake
    from snowshard.workers import RedisLease

    layout = Layout()
    with RedisLease("redis://127.0.0.1:6379/0", layout, ttl=10) as lease:
        ids = Snowflake(layout, worker=lease)
        ids.next_id()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from snowshard.workers.base import WorkerClaim, WorkerLease
from snowshard.workers.errors import (
    LeaseBackendError,
    LeaseLost,
    WorkerConfigError,
    WorkerIdsExhausted,
)
from snowshard.workers.host import HostWorker, host_ipv4
from snowshard.workers.static import (
    DEFAULT_ENV_VAR,
    fixed_worker,
    worker_from_env,
    worker_from_hostname,
)

if TYPE_CHECKING:
    from snowshard.workers.db_lease import (
        DatabaseLease,
        create_table,
        lease_metadata,
        make_lease_table,
        worker_leases,
    )
    from snowshard.workers.lease import Lease
    from snowshard.workers.redis_lease import RedisLease, join_cluster

__all__ = [
    "DEFAULT_ENV_VAR",
    "DatabaseLease",
    "HostWorker",
    "Lease",
    "LeaseBackendError",
    "LeaseLost",
    "RedisLease",
    "WorkerClaim",
    "WorkerConfigError",
    "WorkerIdsExhausted",
    "WorkerLease",
    "create_table",
    "fixed_worker",
    "host_ipv4",
    "join_cluster",
    "lease_metadata",
    "make_lease_table",
    "worker_from_env",
    "worker_from_hostname",
    "worker_leases",
]

_LAZY = {
    "DatabaseLease": "snowshard.workers.db_lease",
    "create_table": "snowshard.workers.db_lease",
    "lease_metadata": "snowshard.workers.db_lease",
    "make_lease_table": "snowshard.workers.db_lease",
    "worker_leases": "snowshard.workers.db_lease",
    "Lease": "snowshard.workers.lease",
    "RedisLease": "snowshard.workers.redis_lease",
    "join_cluster": "snowshard.workers.redis_lease",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
