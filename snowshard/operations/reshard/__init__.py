"""Online resharding: move a sharded table's rows to a new layout while writes go on.

::

    plan = ReshardPlan.for_model(sharded_model(Order), Shards(64, key="user_id",
                                 pattern="{name}_v2_{index:02d}"))
    job = Reshard(plan, {"default": engine})
    job.start()        # create targets, capture changes, copy, catch up (resumable);
                       # rows_per_second=, max_replica_lag= (with Reshard(replicas=...))
    job.verify()       # count and hash per primary-key range
    job.cutover()      # fence, final catch-up, compare, flip the shard map
    job.cleanup()      # drop the old tables (or job.rollback() first)

The same steps run from the command line: ``snowshard reshard plan|start|status|verify|
cutover|rollback|cleanup``. How applications follow the move: :mod:`snowshard.sharding.shard_map`.
"""

from __future__ import annotations

from snowshard.operations.reshard.errors import (
    ReshardError,
    ReshardJobBusy,
    ReshardPhaseError,
    ReshardPlanError,
    VerifyFailed,
)
from snowshard.operations.reshard.job import CutoverReport, Progress, Reshard, ReshardStatus
from snowshard.operations.reshard.plan import Placement, ReshardPlan
from snowshard.operations.reshard.throttle import Throttle, replica_lag
from snowshard.operations.reshard.verify import RangeCheck, VerifyReport

__all__ = [
    "CutoverReport",
    "Placement",
    "Progress",
    "RangeCheck",
    "Reshard",
    "ReshardError",
    "ReshardJobBusy",
    "ReshardPhaseError",
    "ReshardPlan",
    "ReshardPlanError",
    "ReshardStatus",
    "Throttle",
    "VerifyFailed",
    "VerifyReport",
    "replica_lag",
]
