"""UNION and UNION ALL of SELECTs on sharded models, read as a query over a derived table.

``union_all(select(Order.id).where(...), select(Order.id).where(...))`` cannot be sent as it
is to several sources and the results put together: a UNION would keep a row that two
sources both return twice, and the compound's ORDER BY and LIMIT would apply per source.
:func:`derived_union` writes the compound as the query one table answers the same way::

    SELECT u.id FROM (SELECT ... UNION ALL SELECT ...) AS u [ORDER BY ...] [LIMIT ...]

with DISTINCT for a UNION. The UNION ALL inside is a derived table whose rows each source
holds its share of, as of a model's table, when every SELECT in it is row-wise
(:mod:`~snowshard.sharding.analysis`); the outer query then merges as any (DISTINCT,
ORDER BY, LIMIT and OFFSET in the merge, strings compared as the database compares them).
The compound's ORDER BY names its columns (by name, or by a column of its first SELECT,
which SQL reads by name); anything else there, EXCEPT and INTERSECT (a row's match may be
in another source), compounds nested in compounds, a column of different types in two
SELECTs and a SELECT that reads no sharded model outside its subqueries (every source would
return its rows: a reference table's, say) are refused before any SQL runs.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select, union_all
from sqlalchemy.exc import CompileError
from sqlalchemy.sql.elements import ColumnClause, Label, UnaryExpression
from sqlalchemy.sql.selectable import CompoundSelect
from sqlalchemy.sql.visitors import replacement_traverse

from snowshard._compat import (
    TextualLabelReference,
    compound_keyword,
    fetch_clause_of,
    limit_offset_of,
    options_of,
    order_by_of,
)
from snowshard.sharding.analysis import mismatched_column, models_named
from snowshard.sharding.errors import UnsupportedShardQuery

__all__ = ["derived_union"]

_MERGED = ("UNION", "UNION ALL")
"""Compound operators whose result is a row-wise query over all the SELECTs' rows."""


def _column_name(element: Any) -> str | None:
    """The result column an item of a compound's ORDER BY names, under its modifiers."""
    while isinstance(element, UnaryExpression) and element.modifier is not None:
        element = element.element
    if isinstance(element, TextualLabelReference):
        return str(element.element)
    if isinstance(element, (ColumnClause, Label)):
        return str(element.name)
    return None


def _ordered_by(item: Any, compound: CompoundSelect[Any], columns: Any) -> Any:
    """``item`` of the compound's ORDER BY, naming the derived table's column instead."""
    name = _column_name(item)
    if name is None or name not in columns:
        raise UnsupportedShardQuery(
            f"ORDER BY {item} of a {compound_keyword(compound)} across shards names no column "
            f"of its result ({', '.join(columns.keys())}); order by one of those columns"
        )
    target = columns[name]

    def swap(element: Any) -> Any:
        return target if _column_name(element) == name and not isinstance(
            element, UnaryExpression
        ) else None

    return replacement_traverse(item, {}, swap)  # type: ignore[call-overload]


def derived_union(statement: Any) -> Any:
    """``statement`` as a query over its UNION ALL as a derived table (module docstring)
    when it is a compound SELECT; ``statement`` itself otherwise."""
    if not isinstance(statement, CompoundSelect):
        return statement
    keyword = compound_keyword(statement)
    if keyword not in _MERGED:
        raise UnsupportedShardQuery(
            f"{keyword} of SELECTs on a sharded model across shards: a row's match may be "
            "in another shard; run each SELECT and combine their rows in Python, or route "
            "the statement to one shard"
        )
    parts = list(statement.selects)
    if not all(isinstance(part, Select) for part in parts):
        raise UnsupportedShardQuery(
            f"a {keyword} across shards must join plain SELECTs, not compounds or SELECTs "
            "with their own ORDER BY or LIMIT; write the compound flat: union_all(a, b, c)"
        )
    for part in parts:
        if not models_named(part, nested=False):
            raise UnsupportedShardQuery(
                f"a SELECT in a {keyword} across shards reads no sharded model outside its "
                "subqueries: each database would return its rows (a reference table's, say) "
                "again; run that SELECT on its own and combine the rows in Python"
            )
    position = mismatched_column(parts)
    if position is not None:
        types = ", ".join(repr(list(p.selected_columns)[position].type) for p in parts)
        raise UnsupportedShardQuery(
            f"column {position + 1} of a {keyword} across shards has different types in its "
            f"SELECTs ({types}): the merge compares it as the first SELECT's type, where a "
            "database may derive another; cast the columns to one type (cast(Order.user_id, "
            "Integer))"
        )
    if fetch_clause_of(statement) is not None:
        raise UnsupportedShardQuery(f"FETCH FIRST of a {keyword} across shards: use limit()")
    try:
        limit, offset = limit_offset_of(statement)
    except CompileError as exc:
        raise UnsupportedShardQuery(
            f"LIMIT/OFFSET of a {keyword} across shards must be plain integers"
        ) from exc
    derived = union_all(*parts).subquery()
    found: Select[Any] = select(*derived.c)
    if keyword == "UNION":
        found = found.distinct()
    order = [_ordered_by(item, statement, derived.c) for item in order_by_of(statement)]
    found = found.order_by(*order).limit(limit).offset(offset)
    options = options_of(statement)  # loader criteria, which reach every SELECT inside
    if options:
        found = found.options(*options)
    return found.execution_options(**statement.get_execution_options())
