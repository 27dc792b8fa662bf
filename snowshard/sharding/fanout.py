"""Running one statement's round trips to several databases at once.

A statement that reads several databases (:mod:`~snowshard.sharding.execute`) sends each
database its statement concurrently, ``limit`` databases at a time:

* sync sessions: a shared thread pool (:data:`POOL_THREADS` threads at most, started on
  first use, and anew in a forked child), plus the calling thread, which takes work too,
  so a fan-out always progresses even when every pool thread is busy with other
  sessions' work;
* asyncio sessions: ``asyncio.gather`` over SQLAlchemy's greenlet bridge.

Each task is given the one connection its database has in the session's transaction,
checked out beforehand in the calling thread: threads never touch the ``Session`` (which
is not thread-safe), only their own ``Connection``. Tasks of one database run one after
another on its connection.

When a task fails, tasks not yet started are skipped, running ones are waited for, every
result already produced is passed to ``discard`` (to close its cursor), and the first
error (in task order) is raised: a driver error is already a named
:class:`~snowshard.sharding.driver_errors.ShardOperationError`.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from snowshard._compat import await_only, greenlet_spawn
from snowshard.spec import ShardConfigError

__all__ = [
    "MAX_CONCURRENCY_OPTION",
    "POOL_THREADS",
    "concurrency_of",
    "run_concurrently",
    "run_gathered",
]

MAX_CONCURRENCY_OPTION = "max_concurrency"
"""Execution option: the most databases this statement queries at once (1: one by one)."""

POOL_THREADS = 64
"""Threads of the shared fan-out pool (idle threads cost nothing; they block on I/O)."""

DEFAULT_CONCURRENCY = 8
"""What a session without ``max_concurrency`` gets."""

_T = TypeVar("_T")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool_after_fork() -> None:
    """In a forked child: the parent's pool threads do not exist here; start a pool anew.

    The child inherits the pool's bookkeeping but none of its threads: idle threads it
    believes it has would never take work, so every fan-out would run in the calling thread
    alone, one database after another, and a lock a parent thread held in ``submit`` at the
    fork would never be released.
    """
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="snowshard-fanout")
    return _pool


def concurrency_of(session: Any, options: Mapping[str, Any]) -> int:
    """The limit for one statement: its ``max_concurrency`` option, else the session's."""
    value = options.get(MAX_CONCURRENCY_OPTION)
    if value is None:
        found: int = getattr(session, "max_concurrency", DEFAULT_CONCURRENCY)
        return found
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ShardConfigError(
            f"execution option max_concurrency={value!r}: must be an int >= 1 (the most "
            "databases this statement queries at once; 1 queries them one by one); pass "
            "e.g. execution_options(max_concurrency=4)"
        )
    return value


def _raise_first(
    outcomes: Sequence[Any], errors: Sequence[BaseException | None], discard: Callable[[Any], None]
) -> None:
    failed = next((e for e in errors if e is not None), None)
    if failed is None:
        return
    for outcome in outcomes:
        if outcome is not None:
            discard(outcome)
    raise failed


def run_concurrently(
    tasks: Sequence[Callable[[], _T]], limit: int, discard: Callable[[_T], None]
) -> list[_T]:
    """Each task's return value, in order; at most ``limit`` run at once (module docstring).

    The calling thread runs tasks too; ``limit`` 1 (or one task) runs them all in it.
    """
    count = len(tasks)
    outcomes: list[Any] = [None] * count
    errors: list[BaseException | None] = [None] * count
    lock = threading.Lock()
    state = {"next": 0, "stop": False}

    def work() -> None:
        while True:
            with lock:
                index = state["next"]
                if state["stop"] or index >= count:
                    return
                state["next"] = index + 1
            try:
                outcomes[index] = tasks[index]()
            except BaseException as error:  # noqa: BLE001 - re-raised by the caller
                errors[index] = error
                with lock:
                    state["stop"] = True

    helpers: list[Future[None]] = []
    if limit > 1 and count > 1:
        pool = _shared_pool()
        # each helper runs in a copy of the caller's context, so context variables (the
        # plan cache's bound values, an application's own) read as in the calling thread
        helpers = [
            pool.submit(contextvars.copy_context().run, work)
            for _ in range(min(limit, count) - 1)
        ]
    try:
        work()
    finally:
        for helper in helpers:
            if not helper.cancel():  # started: let it finish its task
                helper.result()
    _raise_first(outcomes, errors, discard)
    return outcomes


def run_gathered(
    tasks: Sequence[Callable[[], _T]], limit: int, discard: Callable[[_T], None]
) -> list[_T]:
    """:func:`run_concurrently` for sync code running under SQLAlchemy's asyncio bridge.

    Each task runs in its own greenlet (so its driver calls await), ``asyncio.gather``
    awaits them, ``limit`` at a time.
    """
    outcomes: list[Any] = [None] * len(tasks)
    errors: list[BaseException | None] = [None] * len(tasks)

    async def gather() -> None:
        gate = asyncio.Semaphore(limit)
        failed = asyncio.Event()

        async def one(index: int) -> None:
            async with gate:
                if failed.is_set():
                    return
                try:
                    outcomes[index] = await greenlet_spawn(tasks[index])
                except BaseException as error:  # noqa: BLE001 - re-raised below
                    errors[index] = error
                    failed.set()

        await asyncio.gather(*(one(i) for i in range(len(tasks))))

    await_only(gather())
    _raise_first(outcomes, errors, discard)
    return outcomes
