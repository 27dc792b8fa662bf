"""Worker IDs from configuration: a fixed number, an environment variable, a pod's ordinal.

Each function returns a plain ``int`` checked against the layout, so a mistake fails when
the process starts, not when a duplicate ID is found. Being an ``int``, the result also keeps
the generator's fork guard: a child forked from the process refuses to issue IDs with it
(two processes must not share a worker ID) instead of silently duplicating the parent's.

>>> from snowshard import Layout
>>> worker_from_hostname(Layout(), hostname="orders-7.orders.prod.svc.cluster.local")
7
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from snowshard.layout import Layout, is_decimal, parse_decimal
from snowshard.workers.errors import WorkerConfigError

__all__ = ["DEFAULT_ENV_VAR", "fixed_worker", "worker_from_env", "worker_from_hostname"]

DEFAULT_ENV_VAR = "SNOWSHARD_WORKER_ID"
"""The environment variable :func:`worker_from_env` reads by default."""

def _check(value: int, layout: Layout, source: str) -> int:
    if not 0 <= value <= layout.max_worker:
        raise WorkerConfigError(
            f"worker {value} ({source}) must be in 0..{layout.max_worker} for this layout "
            f"({layout.worker_bits} worker bits); use a smaller worker ID or widen worker_bits"
        )
    return value


def fixed_worker(worker: int, layout: Layout | None = None) -> int:
    """``worker`` itself, after checking it is an ``int`` in the layout's range."""
    layout = layout if layout is not None else Layout()
    if isinstance(worker, bool) or not isinstance(worker, int):
        raise WorkerConfigError(
            f"worker must be an int in 0..{layout.max_worker}, "
            f"got {type(worker).__name__} {worker!r}"
        )
    return _check(worker, layout, "fixed")


def worker_from_env(
    layout: Layout | None = None,
    *,
    var: str = DEFAULT_ENV_VAR,
    environ: Mapping[str, str] | None = None,
) -> int:
    """The worker ID in environment variable ``var`` (default ``SNOWSHARD_WORKER_ID``).

    The value must be a decimal integer in the layout's worker range; ``environ`` replaces
    :data:`os.environ` (for tests).
    """
    layout = layout if layout is not None else Layout()
    env = os.environ if environ is None else environ
    raw = env.get(var)
    if raw is None:
        raise WorkerConfigError(
            f"environment variable {var} is not set; set it to a worker ID in "
            f"0..{layout.max_worker}, unique among the processes sharing this layout"
        )
    worker = parse_decimal(
        raw, what=f"worker ID in 0..{layout.max_worker} (${var})", error=WorkerConfigError
    )
    return _check(worker, layout, f"from ${var}")


def worker_from_hostname(
    layout: Layout | None = None,
    *,
    hostname: str | None = None,
    offset: int = 0,
) -> int:
    """A Kubernetes StatefulSet pod's ordinal (``web-3`` → 3), plus ``offset``.

    StatefulSet pods are named ``<set>-<ordinal>`` and the ordinal is unique within the set,
    so it is a worker ID no two live pods share. ``hostname`` defaults to
    :func:`socket.gethostname`; only its first DNS label is read. Give each StatefulSet that
    shares a layout its own ``offset`` (e.g. 0 and 100) so their ranges do not overlap.
    """
    layout = layout if layout is not None else Layout()
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise WorkerConfigError(f"offset must be an int >= 0, got {offset!r}")
    name = hostname if hostname is not None else socket.gethostname()
    label = name.split(".", 1)[0]
    _, dash, tail = label.rpartition("-")
    if not dash or not is_decimal(tail):
        raise WorkerConfigError(
            f"hostname {name!r} does not end in '-<ordinal>' as a StatefulSet pod's does "
            "(e.g. 'web-3'); run in a StatefulSet or choose another worker ID provider"
        )
    ordinal = parse_decimal(tail, what=f"pod ordinal of {name!r}", error=WorkerConfigError)
    return _check(ordinal + offset, layout, f"ordinal {ordinal} of {label!r} + offset {offset}")
