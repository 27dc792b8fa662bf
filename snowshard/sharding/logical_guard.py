"""The last check before SQL leaves a sharded session: it names no logical table.

A sharded model's logical table (``orders``) is held by no database: the session rewrites
every statement to the physical tables (``orders_00`` ..). A statement that still names
the logical table is a shape the rewrite missed or SQL written by hand on the session's
connection (``session.connection().execute(select(Order.__table__))``). Sent, it fails in
most databases, but where a table of that name exists (the unsharded table an application
is moving off, kept until the move is done) it would read or write that table instead,
silently. :func:`guard` makes such a statement raise :class:`LogicalTableSent` before it
is sent. It also stops loader criteria that a ``do_orm_execute`` hook added to a routed
statement in a form that reaches none of its tables (:mod:`~snowshard.sharding.criteria`).

:func:`guard` listens on an engine's ``before_cursor_execute`` and checks the compiled
statements (SQL text is sent as written) of connections a sharded session began (those
carrying the database mark of :mod:`~snowshard.sharding.driver_errors`); a plain
``Session`` or ``Connection`` on the same engine may still read a table of that name.
Other listeners of the engine added before it see the statement first. The tables a
compiled statement names are found once per compiled statement (the ORM's statement with
its eager-load joins and column expressions, a DDL statement's table) and remembered while
SQLAlchemy caches it, so a cached statement pays a dictionary lookup.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Table, event
from sqlalchemy.engine import Engine
from sqlalchemy.sql.compiler import Compiled
from sqlalchemy.sql.elements import ColumnClause
from sqlalchemy.sql.visitors import iterate

from snowshard._compat import parent_entity, refreshes_state, untraversed_of
from snowshard.sharding.criteria import criteria_of, unapplied
from snowshard.sharding.driver_errors import DATABASE_OPTION
from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.model import MODEL_INFO

__all__ = ["LogicalTableSent", "guard", "logical_tables_of", "unapplied_criteria"]


class LogicalTableSent(UnsupportedShardQuery):
    """A sharded session was about to send SQL naming a logical table (module docstring);
    ``tables`` are their names, ``database`` the database key it was sent to."""

    def __init__(self, message: str, *, tables: tuple[str, ...], database: str) -> None:
        super().__init__(message)
        self.tables = tables
        self.database = database


def logical_tables_of(compiled: Compiled) -> tuple[str, ...]:
    """The logical tables of sharded models that a compiled statement names, sorted: in its
    FROM lists, through its columns, or as the table a DDL statement acts on."""
    state = getattr(compiled, "compile_state", None)
    statement = state.statement if state is not None else compiled.statement
    if statement is None:
        return ()
    target = getattr(statement, "element", None)  # DDL: a table, or an index of one
    named: set[str] = set()
    hidden = [e for clause in untraversed_of(statement) for e in iterate(clause)]
    for element in [getattr(target, "table", target), *iterate(statement), *hidden]:
        table = element.table if isinstance(element, ColumnClause) else element
        if isinstance(table, Table) and MODEL_INFO in table.info:
            named.add(table.name)
    return tuple(sorted(named))


def unapplied_criteria(compiled: Compiled) -> str | None:
    """A loader criteria option of a compiled ORM statement that reaches none of the
    tables it reads of a sharded model (added by a ``do_orm_execute`` hook after the
    session routed the statement: :func:`~snowshard.sharding.criteria.unapplied`), or None."""
    statement = compiled.statement  # as given to the compiler: the ORM statement
    criteria = criteria_of(statement) if statement is not None else []
    if not criteria or refreshes_state(compiled):
        return None  # (the ORM applies no criteria to a refresh, whatever its options)
    entities = {parent_entity(e) for e in iterate(statement)}
    return unapplied(criteria, entities)


_verdicts: weakref.WeakKeyDictionary[Compiled, tuple[tuple[str, ...], str | None]] = (
    weakref.WeakKeyDictionary()
)
"""Compiled statement -> the logical tables it names and the loader criteria it leaves
out (weak: kept while SQLAlchemy keeps the compiled statement, in its cache or in use)."""

_guarded: weakref.WeakSet[Engine] = weakref.WeakSet()


def _check(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> None:
    compiled = getattr(context, "compiled", None)
    if compiled is None:
        return  # plain SQL text (exec_driver_sql): nothing compiled names a table
    database = context.execution_options.get(DATABASE_OPTION)
    if database is None:
        return  # not a sharded session's connection
    verdict = _verdicts.get(compiled)
    if verdict is None:
        verdict = _verdicts[compiled] = (logical_tables_of(compiled), unapplied_criteria(compiled))
    tables, criteria = verdict
    if tables:
        names = ", ".join(tables)
        verb = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "SQL"
        article = "an" if verb[:1] in "AEIOU" else "a"
        raise LogicalTableSent(
            f"{article} {verb} statement for database {database!r} names the logical table "
            f"{names} of a sharded model, which no database holds (where a table of that name "
            "exists, such as the unsharded table being moved off, it would be used "
            "instead): stopped before it was sent. Run sharded models through the "
            "session's ORM or Core statements on the model (select(Order), "
            "insert(Order), ...), which go to the physical tables; a shape they send "
            "this way is one snowshard does not route: please report it",
            tables=tables,
            database=str(database),
        )
    if criteria is not None:
        raise UnsupportedShardQuery(
            f"{criteria} was added to a statement the session had already routed to the "
            f"physical tables (by a do_orm_execute hook, which sees those) for database "
            f"{database!r}, and would not reach them: stopped before it was sent. Give it "
            "as a lambda with include_aliases=True (SQLAlchemy applies those to the "
            "physical classes), or add it to the statement before it is executed"
        )


def guard(engines: Iterable[Engine]) -> None:
    """Check what the sharded sessions' connections of ``engines`` send (idempotent)."""
    for engine in engines:
        if engine not in _guarded:
            event.listen(engine, "before_cursor_execute", _check, insert=True)
            _guarded.add(engine)
