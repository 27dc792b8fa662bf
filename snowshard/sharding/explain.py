"""``explain(session, statement)``: what a statement would run, where, and what is merged.

::

    plan = explain(session, select(Order).order_by(Order.id.desc()).limit(20))
    print(plan)            # text: per database, the SQL of each physical statement
    plan.tables, plan.databases, plan.refused, plan.statements, plan.merged

Nothing is executed: the statement goes through the same routing, analysis and rewriting
as :meth:`Session.execute` (:func:`~snowshard.sharding.execute.plan_statement`), and the
physical statements are compiled for each database's dialect. A statement the analysis
refuses is explained with the refusal (``refused``) instead of raising.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Optional

from sqlalchemy import Executable, Insert
from sqlalchemy.orm import Session
from sqlalchemy.exc import CompileError, InvalidRequestError, SAWarning

from snowshard.sharding.bulk import given_rows
from snowshard._compat import session_execution_options
from snowshard.sharding.errors import ShardingError, UnsupportedShardQuery
from snowshard.sharding.evaluate import BY_VALUE
from snowshard.sharding.execute import Plan, Step, check_rows_written, plan_statement
from snowshard.sharding.hints import Hint, hint_of
from snowshard.sharding.merge import MergePlan
from snowshard.sharding.model import ShardedModel
from snowshard.sharding.pulled import (
    SUBQUERIES_FIRST_OPTION,
    pulled_subqueries,
    substitute,
    wants_subqueries_first,
)
from snowshard.sharding.reference import copies, reference_target
from snowshard.sharding.relationship_joins import explicit_joins
from snowshard.sharding.routing import find_models
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError

__all__ = ["Explanation", "PhysicalStatement", "explain"]


@dataclass(frozen=True)
class PhysicalStatement:
    """One statement as a database would receive it."""

    database: str
    tables: tuple[str, ...]
    sql: str


@dataclass(frozen=True)
class Explanation:
    """The plan of one statement (see the module docstring); ``str()`` renders it as text."""

    kind: str
    """``select``, ``insert``, ``update`` or ``delete``."""
    models: tuple[str, ...]
    how: str
    statements: tuple[PhysicalStatement, ...] = ()
    pushed_down: tuple[str, ...] = ()
    merged: tuple[str, ...] = ()
    refused: Optional[str] = None
    hint: Optional[str] = None
    tables: int = 0
    """Estimated fan-out: physical tables read or written per model."""
    databases: int = 0
    """Estimated fan-out: databases the statement runs in."""
    first: tuple[Explanation, ...] = ()
    """Subqueries run first as queries of their own (``subqueries_first=True``); the
    statements above then take their results in their place."""

    def by_database(self) -> dict[str, list[PhysicalStatement]]:
        """The physical statements grouped by database, in plan order."""
        grouped: dict[str, list[PhysicalStatement]] = {}
        for statement in self.statements:
            grouped.setdefault(statement.database, []).append(statement)
        return grouped

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "kind": self.kind,
            "models": list(self.models),
            "how": self.how,
            "hint": self.hint,
            "refused": self.refused,
            "fan_out": {"tables": self.tables, "databases": self.databases},
            "pushed_down": list(self.pushed_down),
            "merged": list(self.merged),
            "statements": [
                {"database": s.database, "tables": list(s.tables), "sql": s.sql}
                for s in self.statements
            ],
            "first": [f.as_dict() for f in self.first],
        }

    def __str__(self) -> str:
        lines = [f"{self.kind.upper()} on {', '.join(self.models) or 'unsharded tables'}"]
        if self.hint:
            lines.append(f"hint: {self.hint}")
        if self.refused is not None:
            lines.append(f"REFUSED: {self.refused}")
            return "\n".join(lines)
        for number, first in enumerate(self.first, 1):
            lines.append(f"first, subquery {number} as a query of its own:")
            lines.extend(f"  {line}" for line in str(first).splitlines())
        lines.append(f"runs as: {self.how}")
        lines.append(f"fan-out: {self.tables} table(s), {self.databases} database(s)")
        for title, items in (("pushed down", self.pushed_down), ("merged", self.merged)):
            if items:
                lines.append(f"{title}:")
                lines.extend(f"  - {item}" for item in items)
        for database, statements in self.by_database().items():
            lines.append(f"database {database!r}: {len(statements)} statement(s)")
            for statement in statements:
                lines.append(f"  -- {', '.join(statement.tables)}")
                lines.extend(f"  {line}" for line in statement.sql.splitlines())
        return "\n".join(lines)


def _kind(statement: Any) -> str:
    for kind in ("select", "insert", "update", "delete"):
        if getattr(statement, f"is_{kind}", False):
            return kind
    return type(statement).__name__.lower()


def _sql(session: Any, database: str, statement: Any) -> str:
    """The SQL of ``statement`` in ``database``'s dialect, values inline where possible."""
    dialect = session.engine_for(database).dialect
    try:
        with warnings.catch_warnings():
            # a parameter with no value yet (a subquery's result) would render as NULL
            warnings.simplefilter("error", SAWarning)
            return str(statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
    except (CompileError, InvalidRequestError, NotImplementedError, SAWarning):
        pass  # a value without a literal form: show the placeholders
    try:
        return str(statement.compile(dialect=dialect))
    except (CompileError, InvalidRequestError) as exc:
        return f"(cannot be compiled: {exc})"


def _merged(merge: MergePlan) -> tuple[list[str], list[str]]:
    """(pushed down, merged) constructs of a SELECT read from several sources."""
    pushed = ["WHERE and JOIN, on each source"]
    merged: list[str] = []
    if merge.grouped:
        pushed.append("GROUP BY with partial aggregates, on each source")
        kinds = sorted({k for k in merge.atoms.kinds if k})
        merged.append(f"groups merged by key in Python ({', '.join(kinds) or 'keys only'})")
        if "count_partitioned" in kinds:
            merged.append(
                "count(DISTINCT shard key): each source's count, summed (equal keys live in "
                "one table)"
            )
        if any(k in BY_VALUE for k in kinds):
            pushed.append("aggregates of DISTINCT x: each source also groups by x")
            merged.append(
                "aggregates of DISTINCT x: the distinct values of x the sources send, "
                "counted, summed or averaged"
            )
        if merge.extremes:
            merged.append(
                "MIN/MAX of strings: each source's value with the least/greatest "
                "WEIGHT_STRING() (the database's collation)"
            )
        if merge.having is not None:
            merged.append("HAVING, evaluated over the merged groups")
        if merge.order:
            merged.append("ORDER BY, sorted over the merged groups")
    elif merge.order:
        pushed.append("ORDER BY, on each source")
        merged.append("ORDER BY: sorted sources merged with a heap")
    if merge.ranked:
        collations = ", ".join(sorted({order.describe() for order in merge.ranked.values()}))
        merged.append(
            "strings ordered (ORDER BY, MIN/MAX) by the ranks one database gives them under "
            f"{collations} (one more statement per collation; a merge of rows, one more per "
            "later batch that brings new strings; a default collation must be the same on "
            "every database read, checked when it runs)"
        )
    if merge.distinct_on:
        merged.append(
            "DISTINCT ON over the merged rows: the first row of each DISTINCT ON value, in "
            "ORDER BY order (each source keeps its own first rows)"
        )
    elif merge.distinct:
        merged.append(
            "DISTINCT over the merged rows"
            + (
                ", strings matched by WEIGHT_STRING() (the database's collation)"
                if merge.distinct_by_weight
                else ""
            )
        )
    if merge.limit is not None:
        if not merge.grouped:
            pushed.append(f"LIMIT {merge.offset + merge.limit} (offset + limit), on each source")
        merged.append(f"OFFSET {merge.offset} / LIMIT {merge.limit} over the merged rows")
    elif merge.offset:
        merged.append(f"OFFSET {merge.offset} over the merged rows")
    return pushed, merged


def _tables(models: list[ShardedModel], step: Step) -> tuple[str, ...]:
    return tuple(model.tables[s].name for model in models for s in step.shards)


def _from_plan(session: Any, kind: str, plan: Plan, hint: Optional[Hint]) -> Explanation:
    statements = tuple(
        PhysicalStatement(step.database, _tables(plan.models, step), _sql(session, step.database, step.statement))
        for step in plan.steps
    )
    if plan.merge is not None:
        pushed, merged = _merged(plan.merge)
    else:
        where = "on each shard" if len(plan.steps) > 1 else "where it runs"
        pushed, merged = [f"the whole statement, {where} (nothing to merge)"], []
    return Explanation(
        kind,
        tuple(m.name for m in plan.models),
        plan.how,
        statements,
        tuple(pushed),
        tuple(merged),
        hint=str(hint) if hint else None,
        tables=plan.tables,
        databases=plan.databases,
    )


def _insert(
    statement: Any, params: Mapping[str, Any], model: ShardedModel, hint: Optional[Hint]
) -> Explanation:
    rows = given_rows(statement, params, model)
    shards = {model.shard_of_values(row, f"row {n}") for n, row in enumerate(rows)}
    shard = shards.pop() if len(shards) == 1 else None
    if shard is None:
        return Explanation(
            "insert",
            (model.name,),
            "each row goes to the table its shard key names, decided when it runs",
            pushed_down=("each row, to its own table",),
            hint=str(hint) if hint else None,
        )
    database = model.database_of(shard)
    physical = PhysicalStatement(
        database, (model.tables[shard].name,), f"INSERT INTO {model.tables[shard].name} ..."
    )
    return Explanation(
        "insert",
        (model.name,),
        "one shard",
        (physical,),
        ("the whole statement, where it runs (nothing to merge)",),
        hint=str(hint) if hint else None,
        tables=1,
        databases=1,
    )


def _unsharded(session: Any, statement: Any, kind: str, hint: Optional[Hint]) -> Explanation:
    target = reference_target(statement)
    if hint is not None and hint.database is not None:
        keys = [hint.database]
    elif target is not None:
        keys = copies(session)
    else:
        keys = [DEFAULT_DATABASE]
    how = "every copy of the reference table" if target is not None and len(keys) > 1 else (
        "one database, unchanged"
    )
    statements = tuple(
        PhysicalStatement(key, (), _sql(session, key, statement)) for key in keys
    )
    return Explanation(
        kind,
        (),
        how,
        statements,
        ("the whole statement (no sharded model)",),
        hint=str(hint) if hint else None,
        tables=0,
        databases=len(keys),
    )


def explain(
    session: Any, statement: Any, params: Optional[Mapping[str, Any]] = None
) -> Explanation:
    """How ``session`` would run ``statement`` (module docstring); never sends SQL.

    ``params``: execution parameters supplying bound values (as for ``session.execute``).
    """
    if not isinstance(session, Session):
        raise ShardConfigError(
            f"explain() needs the ShardedSession that would run the statement, got "
            f"{type(session).__name__} {session!r}"
        )
    if not isinstance(statement, Executable):
        raise ShardConfigError(
            f"explain() takes a statement such as select(Model), got "
            f"{type(statement).__name__} {statement!r}"
        )
    kind = _kind(statement)
    statement = explicit_joins(statement)
    models = find_models(statement)
    hint = None
    try:
        hint = hint_of(session, statement.get_execution_options())
        if not models:
            return _unsharded(session, statement, kind, hint)
        if isinstance(statement, Insert):
            check_rows_written(session, statement, models)
            return _insert(statement, params or {}, models[0], hint)
        plan = plan_statement(session, statement, params or {}, hint, models)
    except ShardingError as exc:
        refused = Explanation(kind, tuple(m.name for m in models), "refused", refused=str(exc))
        if isinstance(exc, UnsupportedShardQuery) and hint is None:
            return _subqueries_first(session, statement, params, refused)
        return refused
    return _from_plan(session, kind, plan, hint)


def _subqueries_first(
    session: Any, statement: Any, params: Optional[Mapping[str, Any]], refused: Explanation
) -> Explanation:
    """The explanation of a refused statement that runs with its subqueries first
    (``subqueries_first=True``, :mod:`~snowshard.sharding.pulled`), else ``refused``.
    The statement is shown with a placeholder for each subquery's result."""
    options = {**session_execution_options(session), **statement.get_execution_options()}
    pulled = pulled_subqueries(statement) if wants_subqueries_first(session, options) else []
    if not pulled:
        return refused
    first = tuple(
        explain(session, p.run_form().execution_options(**{SUBQUERIES_FIRST_OPTION: True}), params)
        for p in pulled
    )
    outer = explain(session, substitute(statement, pulled), params)
    failed = next((e for e in (outer, *first) if e.refused is not None), None)
    if failed is not None:
        return replace(refused, refused=failed.refused)
    return replace(outer, first=first + outer.first)
