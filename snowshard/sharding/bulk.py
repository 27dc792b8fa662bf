"""INSERT and bulk UPDATE by primary key on a sharded model: rows grouped by shard.

Each row is routed by its shard key; a row without one gets its ID issued here when the
model is keyed by its snowflake ID. Each group runs as the same statement on its physical
class, in the database of its table.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any, Optional

from sqlalchemy import Insert
from sqlalchemy.engine import Result
from sqlalchemy.orm import ORMExecuteState
from sqlalchemy.sql import visitors
from sqlalchemy.sql.elements import BindParameter, ClauseElement

from snowshard._compat import (
    has_returning,
    insert_select_of,
    listed_rows,
    merge_inserted,
    sorts_by_parameter_order,
    sql_of,
    upsert_values_of,
    values_cleared,
    values_of,
)
from snowshard.sharding.errors import MissingShardKey, ShardHintConflict, UnsupportedShardQuery
from snowshard.sharding.model import ShardedModel
from snowshard.sharding.rewrite import Target, retarget

__all__ = [
    "BIND_KEY",
    "HINT_OPTIONS",
    "assigned",
    "bulk_database",
    "check_rows",
    "given_rows",
    "merge_results",
    "run_bulk",
    "writing_to",
]

BIND_KEY = "snowshard_database"
"""``bind_arguments`` key (and execution option) naming the database a rewritten statement
runs on."""

HINT_OPTIONS = ("shard", "database")
"""Execution options that force a statement to tables or databases (:mod:`~.hints`)."""

_bulk_target: ContextVar[Optional[tuple[Any, str]]] = ContextVar(
    "snowshard_bulk_target", default=None
)
"""(session, database) while :func:`run_bulk` runs one group of rows.

SQLAlchemy's ORM bulk INSERT/UPDATE takes its connection with
``session_transaction.connection(base_mapper)``, passing neither the statement's bind
arguments nor its execution options; for a physical class the base mapper is the logical
one, so this context-local value (never an attribute of the session) tells the session's
``get_bind`` which database the group belongs to, for the duration of that one call."""


def bulk_database(session: Any) -> Optional[str]:
    """The database :func:`run_bulk` is writing a group of rows to in ``session``, if any."""
    target = _bulk_target.get()
    return target[1] if target is not None and target[0] is session else None


@contextmanager
def writing_to(session: Any, database: str) -> Iterator[None]:
    """While the block runs, ORM bulk writes of ``session`` take ``database``'s connection."""
    token = _bulk_target.set((session, database))
    try:
        yield
    finally:
        _bulk_target.reset(token)


def assigned(statement: Any) -> dict[str, Any]:
    """Column key -> value of an INSERT/UPDATE's ``values()``."""
    pairs = values_of(statement).items()
    return {key if isinstance(key, str) else key.key: value for key, value in pairs}


def merge_results(results: Sequence[Result[Any]]) -> Result[Any]:
    return results[0] if len(results) == 1 else results[0].merge(*results[1:])


def _rows_by_shard(
    model: ShardedModel, rows: Sequence[Mapping[str, Any]], issue: bool, every: bool = False
) -> dict[int, list[tuple[int, dict[str, Any]]]]:
    """Each shard's rows, each with its position among ``rows``. ``issue``: a row without a
    shard key gets its ID here; ``every``: so does every row without an ID whose gene
    parent is known (a statement's own rows, whose values SQLAlchemy's column default may
    not see under their column names: ``values(user_id=bindparam("u"))``)."""
    grouped: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    key = model.id_key
    gene_from = model.gene_parent[1] if model.gene_parent else None
    every = every and model.id_default is not None and key is not None and key in model.keys
    for number, source in enumerate(rows):
        row = dict(source)
        what = f"row {number}"
        if every and key not in row and (gene_from is None or row.get(gene_from) is not None):
            row[key] = model.issue_id(row, what)  # type: ignore[index]
        shard = model.shard_of_values(row, what)
        if shard is None:
            if not issue:
                raise MissingShardKey(
                    f"{what} of this bulk statement on {model.name} has no shard key; "
                    f"give {' or '.join(model.keys)} in every row"
                )
            assert key is not None  # issue_id raises without one
            row[key] = model.issue_id(row, what)
            shard = model.shard_of(key, row[key])
        grouped.setdefault(shard, []).append((number, row))
    return grouped


def check_rows(statement: Any, written: str) -> None:
    """Refuse an INSERT whose rows snowshard cannot see before it runs: ``from_select()``;
    ``written`` names the model (or table) written."""
    if isinstance(statement, Insert) and insert_select_of(statement) is not None:
        raise UnsupportedShardQuery(
            f"insert({written}).from_select(...) is not routed: each row's ID and table "
            "come from its values, which the database would compute; select the rows, then "
            "pass them as session.execute(insert(Model), [row, ...])"
        )


_UNKNOWN = object()
"""What :func:`_known` returns for a value the database computes (a SQL expression)."""


def _known(value: Any, parameters: Mapping[str, Any]) -> Any:
    """The value a column of a row will have, as known before the statement runs: a Python
    value, a bound one (its execution parameter if given one), else :data:`_UNKNOWN`."""
    if isinstance(value, BindParameter):
        return parameters[value.key] if value.key in parameters else value.effective_value
    if sql_of(value) is not None:
        return _UNKNOWN
    return value


def _routing_values(
    model: ShardedModel, row: Mapping[str, Any], parameters: Mapping[str, Any], what: str
) -> dict[str, Any]:
    """The values of ``row`` known before it is written; refuses a SQL expression as a
    shard key (or the column an ID takes its gene from): the row's table depends on it."""
    routing = set(model.keys) | ({model.gene_parent[1]} if model.gene_parent else set())
    known: dict[str, Any] = {}
    for key, value in row.items():
        found = _known(value, parameters)
        if found is not _UNKNOWN:
            known[key] = found
        elif key in routing:
            raise UnsupportedShardQuery(
                f"{what} of this INSERT INTO {model.name} sets {key} to the SQL expression "
                f"{str(value)[:80]!r}, which the database would compute; a row is written to "
                f"the table its {key} names, so snowshard needs the value before the "
                f"statement runs: give {key} as a value (or a bound parameter)"
            )
    return known


def given_rows(
    statement: Any,
    parameters: Mapping[str, Any],
    model: ShardedModel,
    listed: Optional[list[dict[str, Any]]] = None,
) -> list[dict[str, Any]]:
    """The rows of an INSERT of ``model`` run with ``parameters`` (one execution, not
    executemany), each as the values known before it runs: those of ``values([...])``, or
    the one row of ``values(...)`` updated by ``parameters``. Refuses a shard key given
    as a SQL expression, and rows of ``values([...])`` naming different columns.
    ``listed``: the statement's :func:`~snowshard._compat.listed_rows`, if already read."""
    if listed is None:
        listed = listed_rows(statement)
    if listed is None:
        return [{**_routing_values(model, assigned(statement), parameters, "row 0"), **parameters}]
    first = set(listed[0]) - {model.id_key}
    for number, row in enumerate(listed[1:], 1):
        if set(row) - {model.id_key} != first:
            raise UnsupportedShardQuery(
                f"row {number} of insert({model.name}).values([...]) names the columns "
                f"{sorted(set(row) - {model.id_key})}, but row 0 names {sorted(first)}; "
                "SQLAlchemy writes the first row's columns in every row, so give every row "
                "the same columns (the ID may be left out of any)"
            )
    return [_routing_values(model, row, parameters, f"row {n}") for n, row in enumerate(listed)]


def run_bulk(
    state: ORMExecuteState, model: ShardedModel, allowed: Optional[frozenset[int]] = None
) -> Result[Any]:
    """INSERT (one row, a list of rows in ``values([...])``, or many as executemany) and
    bulk UPDATE by primary key: rows grouped by shard (the statement checked by
    ``execute.check_rows_written``, which calls :func:`check_rows`).

    ``allowed``: the shards a hint permits; a row routed elsewhere raises
    :class:`~snowshard.sharding.errors.ShardHintConflict` before any SQL runs.
    """
    statement = state.statement
    parameters: Any = state.parameters
    is_insert = isinstance(statement, Insert)
    listed = listed_rows(statement) if is_insert else None
    if listed is not None and state.is_executemany:
        raise UnsupportedShardQuery(
            f"insert({model.name}).values([...]) run with a list of parameter sets: give "
            "the rows either way, not both"
        )
    rows: Sequence[Mapping[str, Any]] = parameters if state.is_executemany else [parameters or {}]
    if is_insert and not state.is_executemany:
        rows = given_rows(statement, parameters or {}, model, listed)
    # an update row whose keys disagree (it would move) raises ShardKeyConflict here
    grouped = _rows_by_shard(model, rows, is_insert, every=is_insert and not state.is_executemany)
    if allowed is not None and not set(grouped) <= allowed:
        raise ShardHintConflict(
            f"rows of this statement on {model.name} belong to shard(s) "
            f"{sorted(set(grouped) - allowed)}, but the shard hint allows only "
            f"{sorted(allowed)}; drop the hint or route the rows by their key"
        )
    results = []
    session = state.session
    split = state.is_executemany and is_insert and _sends_upsert_parameters(statement)
    for shard, numbered in grouped.items():
        group = [row for _, row in numbered]
        source = statement
        given = parameters or {}
        params: Any = group if state.is_executemany else _new_only(group[0], given, statement)
        if listed is not None:
            source, params = values_cleared(statement), parameters or None
        elif isinstance(statement, Insert) and not state.is_executemany and not state.parameters:
            # insert(...).values(...) alone: what was issued here (the ID) joins values(),
            # as SQLAlchemy < 2.0.11 refuses values() plus a separate parameter dict
            source, params = statement.values(**params), None
        targets = {model: Target(model, (shard,))}
        new: Any = retarget(source, targets)
        if listed is not None:
            # the group's rows as given, each with its ID; named by column key, so they name
            # the physical table's columns. SQLAlchemy's traversal does not enter them: their
            # SQL expressions are retargeted here, as the statement's own values() are
            rows_given = [_with_issued(listed[number], row) for number, row in numbered]
            new = new.values([_retargeted(row, targets) for row in rows_given])
        database = model.database_of(shard)
        options = {
            **{k: v for k, v in state.local_execution_options.items() if k not in HINT_OPTIONS},
            BIND_KEY: database,
        }
        bind = {BIND_KEY: database}
        run = partial(session.execute, new, execution_options=options, bind_arguments=bind)
        with writing_to(session, database):
            if split and _row_by_row(session, model, shard, group):
                results.append(merge_inserted([run([row]) for row in group]))
            else:
                results.append(run(params))
    if len(results) > 1 and has_returning(statement):
        numbers = [[number for number, _ in numbered] for numbered in grouped.values()]
        return _in_parameter_order(statement, results, numbers)
    if len(results) > 1 and is_insert:
        return merge_inserted(results)
    return merge_results(results)


_EXECUTEMANY_BY_TEXT = ("mysql", "mariadb")
"""Dialects whose drivers (PyMySQL, mysqlclient, aiomysql, asyncmy) run ``executemany`` of
an INSERT by rewriting its text into one multi-row INSERT, which fails (``TypeError:
format requires a mapping``) when ON DUPLICATE KEY UPDATE holds a bound parameter."""


def _sends_upsert_parameters(statement: Any) -> bool:
    """Whether an INSERT's ON CONFLICT / ON DUPLICATE KEY UPDATE sends bound parameters: a
    plain value, or SQL holding one."""
    for value in upsert_values_of(statement):
        sql = sql_of(value)
        if sql is None or _binds(sql):
            return True
    return False


def _row_by_row(session: Any, model: ShardedModel, shard: int, rows: Sequence[Any]) -> bool:
    """Whether one table's rows of an executemany upsert that sends bound parameters
    (:func:`_sends_upsert_parameters`) are sent one statement each: on a MySQL-family
    database, with two rows or more.

    On one table SQLAlchemy sends each run of rows with the same columns as one
    executemany; grouped by table, rows with the same columns meet where on one table
    they may not have, and the driver would fail where one table's INSERT succeeds.
    Row by row writes what the multi-row INSERT writes, in the same order (RETURNING
    rows and ``rowcount`` combine as the tables' do)."""
    if len(rows) < 2:
        return False
    return session.get_bind(mapper=model.mappers[shard]).dialect.name in _EXECUTEMANY_BY_TEXT


def _binds(expression: ClauseElement) -> bool:
    """Whether ``expression`` holds a bound parameter."""
    return any(isinstance(e, BindParameter) for e in visitors.iterate(expression))


def _in_parameter_order(
    statement: Any, results: Sequence[Result[Any]], numbers: Sequence[Sequence[int]]
) -> Result[Any]:
    """The RETURNING rows of the groups' ``results`` in the order of the rows given, as one
    table returns them (each group's are in its rows' order: ``numbers``, their
    positions). A group that returned fewer rows than it wrote (``ON CONFLICT DO
    NOTHING``) cannot be matched to them: its rows follow group by group, unless the
    statement asked for parameter order, which raises."""
    frozen = [result.freeze() for result in results]
    parts = [list(f().all()) for f in frozen]
    if any(len(part) != len(group) for part, group in zip(parts, numbers)):
        if sorts_by_parameter_order(statement):
            raise UnsupportedShardQuery(
                "RETURNING with sort_by_parameter_order=True across shards: some rows "
                "returned nothing (ON CONFLICT DO NOTHING?), so the rows returned cannot be "
                "matched to the rows given; the rows were written in this transaction (roll "
                "back to undo them); insert the rows of one shard at a time, or return the "
                "keys and match rows by them"
            )
        return frozen[0].with_new_rows([row for part in parts for row in part])()
    placed: list[Any] = [None] * sum(len(group) for group in numbers)
    for part, group in zip(parts, numbers):
        for row, number in zip(part, group):
            placed[number] = row
    return frozen[0].with_new_rows(placed)()


def _with_issued(given: Mapping[str, Any], routed: Mapping[str, Any]) -> dict[str, Any]:
    """A row of ``values([...])`` as given, with what routing it issued (its ID)."""
    return {**given, **{key: value for key, value in routed.items() if key not in given}}


def _retargeted(row: Mapping[str, Any], targets: Mapping[ShardedModel, Target]) -> dict[str, Any]:
    """A listed row whose SQL expressions name the target tables (an ORM attribute too)."""
    sql = {key: sql_of(value) for key, value in row.items()}
    return {
        key: value if sql[key] is None else retarget(sql[key], targets)
        for key, value in row.items()
    }


def _new_only(row: Mapping[str, Any], given: Mapping[str, Any], statement: Any) -> dict[str, Any]:
    # a single-row insert keeps its values(); only an ID issued here joins the parameters
    inline = assigned(statement)
    return {k: v for k, v in row.items() if k in given or k not in inline}
