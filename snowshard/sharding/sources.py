"""Running the steps of a merged SELECT concurrently, as raw sources of the merge.

:func:`run_merged` is what :func:`~snowshard.sharding.execute.route_execute` does with a
plan whose steps are merged in Python (a keyless read over several databases, an ``IN``
over several shards). In the calling thread, with the Session:

1. each step's statement is prepared as ``Session.execute`` prepares an ORM statement
   (execution options merged as ``ORMExecuteState.invoke_statement`` merges them, load
   options parsed, autoflush), so uncommitted flushed rows are read too;
2. each database's connection in the session's transaction is checked out (which begins
   it and fires ``after_begin``, as a sequential read would);

then :mod:`~snowshard.sharding.fanout` sends each database its statements, concurrently
(threads, or ``asyncio.gather`` under an ``AsyncSession``), each on its own connection
only; and :mod:`~snowshard.sharding.stream` merges the raw rows, building ORM objects in
the calling thread for the rows kept. Under an ``AsyncSession`` the merged result is
buffered before it is returned (``AsyncSession.execute`` returns buffered results; the
rows' I/O must happen inside its greenlet), so there the merge saves objects and time,
not memory.

The option ``max_concurrency=N`` (per statement, else ``ShardedSession(max_concurrency=)``)
bounds how many databases are queried at once; 1 queries them one by one, as do SQLite
databases (local files, with nothing to overlap, whose connections may be bound to the
thread that opened them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from sqlalchemy.engine import Connection, CursorResult, Result
from sqlalchemy.orm import ORMExecuteState
from sqlalchemy.util import immutabledict

from snowshard._compat import (
    orm_cursor_result,
    orm_pre_execute,
    returns_tuples,
    session_execution_options,
)
from snowshard.sharding.bulk import BIND_KEY
from snowshard.sharding.fanout import concurrency_of, run_concurrently, run_gathered
from snowshard.sharding.merge import MergePlan
from snowshard.sharding.ranking import Ranker, check_code_point, check_defaults, database_ranker
from snowshard.sharding.stream import STREAM_BATCH, Source, merge_sources

__all__ = ["database_connections", "merge_ranker", "run_merged", "statement_options"]


def statement_options(state: ORMExecuteState) -> Any:
    """The execution options a sub-statement gets, as ``invoke_statement`` gives them: the
    statement's own, over the session's (``Session.execute`` merges them this way)."""
    options: Any = state.local_execution_options
    session_options = session_execution_options(state.session)
    if session_options:
        own = state.statement.get_execution_options()
        base = {k: v for k, v in session_options.items() if k not in own}
        options = immutabledict(base).union(options)
    return options


_ONE_OPEN_CURSOR = ("mysql", "mariadb")
"""Dialects whose connection reads one unbuffered (streamed) result at a time."""


def _buffered(options: Any) -> Any:
    """Connection options without server-side streaming: several statements of one
    database then share its connection on MySQL/MariaDB (their rows are read whole; the
    ORM's own ``yield_per`` load options are kept)."""
    return immutabledict(options).union({"yield_per": None, "stream_results": False})


def _batch(options: Any) -> int | None:
    """Rows per read and per ORM load: ``yield_per``, or a default under ``stream_results``."""
    size = options.get("yield_per")
    if size:
        return int(size)
    return STREAM_BATCH if options.get("stream_results") else None


@dataclass
class _Prepared:
    """One step as ``Session.execute`` would send it to its connection."""

    database: str
    statement: Any
    options: Any
    params: Any
    arguments: dict[str, Any]

    def run(self, connection: Connection) -> CursorResult[Any]:
        return connection.execute(self.statement, self.params, execution_options=self.options)


def _prepare(state: ORMExecuteState, step: Any, options: Any, params: Any) -> _Prepared:
    arguments = {**state.bind_arguments, BIND_KEY: step.database}
    statement, step_options, step_params = orm_pre_execute(
        state.session, step.statement, params, options, arguments
    )
    return _Prepared(step.database, statement, step_options, step_params, arguments)


def database_connections(
    state: ORMExecuteState, databases: Iterable[str]
) -> dict[str, Connection]:
    """Each of ``databases``' connection in the session's transaction, checked out in this
    thread (which begins its transaction if needed, firing ``after_begin``)."""
    session: Any = state.session
    return {
        database: session.connection(bind_arguments={**state.bind_arguments, BIND_KEY: database})
        for database in dict.fromkeys(databases)
    }


def merge_ranker(
    plan: MergePlan, connections: Mapping[str, Connection], first: str
) -> Ranker | None:
    """How the merge ranks strings (:attr:`MergePlan.ranked`): by database ``first``, on its
    connection in the session's transaction; None if it ranks none. Refuses, before the
    statement runs, ranking by a default collation that the databases of ``connections``
    (all the merge reads) do not share (:func:`~snowshard.sharding.ranking.check_defaults`),
    and ordering ``C`` strings by code point where one's encoding sorts otherwise
    (:func:`~snowshard.sharding.ranking.check_code_point`)."""
    if plan.code_point:
        check_code_point(connections)
    if not plan.ranked:
        return None
    check_defaults(plan.ranked, connections)
    return database_ranker(connections[first])


def run_merged(state: ORMExecuteState, steps: list[Any], plan: MergePlan) -> Result[Any]:
    """Run ``steps`` (:class:`~snowshard.sharding.execute.Step`) and merge them by ``plan``."""
    session: Any = state.session
    options = statement_options(state)
    limit = concurrency_of(session, state.execution_options)
    params = dict(state.parameters or {})  # type: ignore[arg-type]
    prepared = [_prepare(state, step, options, params) for step in steps]
    connections = database_connections(state, (one.database for one in prepared))
    rank = merge_ranker(plan, connections, prepared[0].database)
    tasks: list[Callable[[], list[tuple[int, CursorResult[Any]]]]] = []
    for database, connection in connections.items():
        mine = [(i, p) for i, p in enumerate(prepared) if p.database == database]
        if len(mine) > 1 and connection.dialect.name in _ONE_OPEN_CURSOR:
            mine = [(i, replace(p, options=_buffered(p.options))) for i, p in mine]
        tasks.append(partial(_run_database, connection, mine))
    dialects = {c.dialect.name for c in connections.values()}
    if "sqlite" in dialects:
        limit = 1  # local files: nothing to overlap, and sqlite3 objects may be thread-bound
    is_async = any(c.dialect.is_async for c in connections.values())
    done = (run_gathered if is_async else run_concurrently)(tasks, limit, _close_all)
    raws: dict[int, CursorResult[Any]] = {i: raw for part in done for i, raw in part}
    sources = [
        Source(
            raws[i],
            partial(orm_cursor_result, session, p.statement, p.params, p.options, p.arguments),
        )
        for i, p in enumerate(prepared)
    ]
    try:
        batch = _batch({**state.execution_options, **prepared[0].options})
        merged = merge_sources(plan, sources, batch, rank)
        merged = plan.flag_single_entity(merged, returns_tuples(state))
        if is_async:
            # an AsyncSession hands the result out of the greenlet: no I/O may be left
            # (ORM post-loads, cursor reads), as for its own buffered results
            merged = merged.freeze()()
        return merged
    except BaseException:
        for source in sources:
            source.close()
        raise


def _run_database(
    connection: Connection, steps: list[tuple[int, _Prepared]]
) -> list[tuple[int, CursorResult[Any]]]:
    """One database's statements, in order, on its connection (in any thread)."""
    done: list[tuple[int, CursorResult[Any]]] = []
    try:
        for index, step in steps:
            done.append((index, step.run(connection)))
    except BaseException:
        _close_all(done)
        raise
    return done


def _close_all(done: list[tuple[int, CursorResult[Any]]]) -> None:
    for _, raw in done:
        raw.close()
