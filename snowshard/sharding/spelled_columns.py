"""FROM entries selected whole, spelled out column by column before any rewrite.

``select(Order.__table__)``, ``Order.__table__.select()``, ``session.query(Order.__table__)``
and ``select(subquery)`` select a whole FROM entry: SQLAlchemy lists the entry's columns
only when the statement is compiled. Over several tables the logical table is rewritten
first, and the columns listed are then the rewritten entry's: a UNION ALL of a database's
tables carries a column of its own, and a subquery of a sharded ORM entity read through
that union lists the columns of every table, so the rows would be wider than one table's.
:func:`spelled_columns` writes such an entry's columns out before anything is rewritten,
``select(*Order.__table__.c)``: the same SELECT, returning what one table returns.

ORM entities (``select(Order)``) are left alone: the ORM lists their columns itself, from
the mapped attributes. So are entries that name no sharded model.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import FromClause

from snowshard._compat import orm_annotated, raw_columns_of, with_only_columns_keeping_froms
from snowshard.sharding.analysis import models_named

__all__ = ["spelled_columns"]


def _whole(entry: Any) -> bool:
    """Whether a columns-clause entry is a FROM entry naming a sharded model: not an ORM
    entity, nor a SQL function (``func.sum(...)`` is a FROM entry too, for table-valued use,
    and a column first)."""
    return (
        isinstance(entry, FromClause)
        and not isinstance(entry, ColumnElement)
        and not orm_annotated(entry)
        and bool(models_named(entry))
    )


def _spelled(select: Select[Any]) -> Select[Any]:
    columns: list[Any] = []
    for entry in raw_columns_of(select):
        columns.extend(entry.c if _whole(entry) else [entry])
    return with_only_columns_keeping_froms(select, *columns)


def spelled_columns(statement: Any) -> Any:
    """``statement`` with each whole FROM entry among its columns replaced by that entry's
    columns (module docstring); ``statement`` itself when it has none.

    Only the outermost SELECT is spelled out: it alone gives the rows their width. A
    SELECT nested in it is read through the columns the outer one names, which are found
    again in its rewritten copy by name (a subquery run first is a statement of its own,
    spelled out when it is planned).
    """
    if not isinstance(statement, Select) or not any(map(_whole, raw_columns_of(statement))):
        return statement
    return _spelled(statement)
