"""The ``do_orm_execute`` hook: running statements that name logical models on shards.

A statement naming a logical model is rewritten (:mod:`~snowshard.sharding.rewrite`) for
the shards its WHERE clause needs (:mod:`~snowshard.sharding.routing`) and run there:

* one shard: the statement runs on that physical table, as if written for it;
* no shard key (fan-out) on one database: one statement over a ``UNION ALL`` of the
  tables, so the database sorts, limits and aggregates (with ORM loader options such as
  ``selectinload()``, which name the logical class: one statement per table instead);
* no shard key across databases: one such statement per database, merged in Python
  (:mod:`~snowshard.sharding.merge`);
* keys naming several shards (``IN``), or joined binding models: one statement per shard,
  each with its share of the ``IN`` list, merged in Python;
* UPDATE/DELETE run on each shard needed; INSERT rows are grouped by shard
  (:mod:`~snowshard.sharding.bulk`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional
from weakref import WeakKeyDictionary

from sqlalchemy import Integer, Select, literal
from sqlalchemy.engine import Result
from sqlalchemy.exc import CompileError, InvalidRequestError
from sqlalchemy.orm import Load, ORMExecuteState, RelationshipProperty
from sqlalchemy.sql.elements import BindParameter, ClauseElement

from snowshard._compat import forget_clone_origin, has_options, limit_offset_of
from snowshard.sharding.analysis import check_aliases, check_nested, unsharded_tables
from snowshard.sharding.bulk import BIND_KEY, assigned, merge_results, run_bulk
from snowshard.sharding.errors import (
    FanOutForbidden,
    ShardKeyChanged,
    UnsupportedShardQuery,
)
from snowshard.sharding.merge import MergePlan
from snowshard.sharding.model import ShardedModel, model_of_class
from snowshard.sharding.rewrite import Target, narrow, retarget
from snowshard.sharding.routing import Route, find_models, route

__all__ = ["DIRECT_MAPPER", "route_execute"]

DIRECT_MAPPER = "snowshard_direct_mapper"
"""Execution option set by ``ShardedSession.get`` on the load of one physical class: its
mapper, whose SELECT needs no routing."""


def _run(state: ORMExecuteState, statement: Any, database: str) -> Result[Any]:
    return state.invoke_statement(statement, bind_arguments={BIND_KEY: database})


def _targets(models: Sequence[ShardedModel], shards: tuple[int, ...]) -> dict[ShardedModel, Target]:
    return {model: Target(model, shards) for model in models}


def _narrowed(
    route_: Route, targets: Mapping[ShardedModel, Target], shard: int
) -> dict[int, ClauseElement]:
    # only a key term whose values span several shards needs its share per shard
    return {
        id(t.expr): narrow(t, targets[t.model], shard) for t in route_.terms if len(t.by_shard) > 1
    }


_memo: WeakKeyDictionary[Any, dict[Any, Any]] = WeakKeyDictionary()
"""statement -> its models, analysis and the rewrites that depend on nothing else.

Statements are immutable; an application that runs the same statement object again (a
module-level query, a relationship loader's cached statement) reuses its rewrite, whose
SQLAlchemy cache key is then memoized too, as it is for unsharded statements. The memo
holds statements weakly: an entry goes when its statement is garbage collected, so a new
statement can never find one left by another that had the same ``id()``."""


def _memo_of(statement: Any) -> dict[Any, Any]:
    found = _memo.get(statement)
    if found is None:
        found = _memo[statement] = {}
    return found


def _rewrite(
    statement: Any,
    models: Sequence[ShardedModel],
    shards: tuple[int, ...],
    route_: Route,
    shard: int,
) -> Any:
    targets = _targets(models, shards)
    narrowed = _narrowed(route_, targets, shard) if route_.terms else {}
    if narrowed:
        return retarget(statement, targets, narrowed)
    memo = _memo_of(statement)
    found = memo.get(shards)
    if found is None:
        found = retarget(statement, targets)
        if len(shards) > 1:
            found = _inline_limits(found)
        memo[shards] = found = forget_clone_origin(found)
    return found


def _inline_limits(statement: Any) -> Any:
    """LIMIT/OFFSET of a UNION ALL read rendered as literals, not bound parameters.

    Then the statement has no parameters left when it has no WHERE values, and a
    PostgreSQL prepared statement (psycopg prepares repeated statements) keeps one
    generic plan instead of planning the 16-way Merge Append on every execution.
    """
    if not isinstance(statement, Select):
        return statement
    try:
        limit, offset = limit_offset_of(statement)
    except CompileError:
        return statement
    if limit is not None:
        statement = statement.limit(literal(limit, Integer, literal_execute=True))
    if offset:
        statement = statement.offset(literal(offset, Integer, literal_execute=True))
    return statement


def _models(statement: Any) -> list[ShardedModel]:
    memo = _memo_of(statement)
    found: Optional[list[ShardedModel]] = memo.get("models")
    if found is None:
        found = memo["models"] = find_models(statement)
    return found


def _shards(models: Sequence[ShardedModel], route_: Route, what: str) -> list[int]:
    if route_.shards is None:
        forbidding = [m.name for m in models if not m.fan_out]
        if forbidding:
            keys = " or ".join(k for m in models for k in m.keys)
            raise FanOutForbidden(
                f"this {what} has no shard key, so it would read every table of "
                f"{', '.join(forbidding)}, which declares fan_out=False; add a condition "
                f"on {keys} (== or IN)"
            )
        return list(range(models[0].count))
    return sorted(route_.shards) or [0]  # an empty IN list: any one shard answers "none"


def _dialect(state: ORMExecuteState, model: ShardedModel) -> str:
    return state.session.get_bind(mapper=model.mappers[0]).dialect.name


def _check_unsharded(
    state: ORMExecuteState, statement: Any, models: Sequence[ShardedModel], databases: Any
) -> None:
    """Refuse unsharded tables in a statement read from a database that does not hold them."""
    session: Any = state.session
    if not getattr(session, "databases", None):
        return  # one database holds everything
    tables = unsharded_tables(statement)
    if not tables:
        return
    names = ", ".join(t.name for t in tables)
    try:
        home = session.get_bind(clause=tables[0])
    except InvalidRequestError:
        home = None
    for database in databases:
        if home is None or session.engine_for(database) is not home:
            raise UnsupportedShardQuery(
                f"{names} is not sharded and lives in one database, but "
                f"{', '.join(m.name for m in models)} is read from database {database!r} "
                "here; joining or filtering a sharded model by an unsharded table is not "
                "supported across databases: query them separately and combine the results"
            )


def _select(state: ORMExecuteState, models: Sequence[ShardedModel], route_: Route) -> Result[Any]:
    statement = state.statement
    lead = models[0]
    shards = _shards(models, route_, "query")
    if len(shards) == 1:
        check_nested(statement, whole=False)
        _check_unsharded(state, statement, models, {lead.database_of(shards[0])})
        new = _rewrite(statement, models, (shards[0],), route_, shards[0])
        return _run(state, new, lead.database_of(shards[0]))
    if not isinstance(statement, Select):
        raise UnsupportedShardQuery(
            f"{type(statement).__name__} statements across several shards are not supported; "
            "query each model with select()"
        )
    databases = {db: tuple(i) for db, i in lead.spec.databases.items() if i}
    # loader options name the logical class, which a union entity is not; physical classes
    # (one statement per shard) are its subclasses, so the options apply to them
    options = any(isinstance(o, Load) for o in getattr(statement, "_with_options", ()))
    if route_.shards is None and len(models) == 1 and not options:
        if len(databases) == 1:
            ((database, indices),) = databases.items()
            _check_unsharded(state, statement, models, {database})
            return _run(state, _rewrite(statement, models, indices, route_, 0), database)
        plan = _plan(state, statement, models)
        _check_unsharded(state, statement, models, set(databases))
        results = [
            _run(state, _rewrite(plan.source, models, indices, route_, 0), database)
            for database, indices in databases.items()
        ]
        return plan.merge(results)
    plan = _plan(state, statement, models)
    _check_unsharded(state, statement, models, {lead.database_of(s) for s in shards})
    results = []
    for shard in shards:
        targets = _targets(models, (shard,))
        new = retarget(plan.source, targets, _narrowed(route_, targets, shard))
        results.append(_run(state, new, lead.database_of(shard)))
    return plan.merge(results)


def _analysis(statement: Any) -> dict[str, Any]:
    found: dict[str, Any] = _memo_of(statement).setdefault("analysis", {})
    return found


def _plan(state: ORMExecuteState, statement: Any, models: Sequence[ShardedModel]) -> MergePlan:
    """The merge of a statement run on several sources (checked once per statement)."""
    dialect = _dialect(state, models[0])
    memo = _analysis(statement)
    plan: Optional[MergePlan] = memo.get(f"merge:{dialect}")
    if plan is None:
        plan = MergePlan(statement, dialect, models)
        check_nested(statement, whole=False)
        memo[f"merge:{dialect}"] = plan
    return plan


def _check_assignments(statement: Any, model: ShardedModel, shards: Sequence[int]) -> None:
    for key, value in assigned(statement).items():
        if key not in model.keys:
            continue
        if isinstance(value, BindParameter) and value.value is not None:
            if {model.shard_of(key, value.value)} == set(shards):
                continue
        raise ShardKeyChanged(
            f"this update sets {model.name}.{key}, a shard key, to a value that is not in "
            f"the shard(s) {list(shards)} of the rows it changes; rows cannot move between "
            "tables: insert a new row and delete the old one"
        )


def _dml(state: ORMExecuteState, models: Sequence[ShardedModel], route_: Route) -> Result[Any]:
    if len(models) != 1:
        raise UnsupportedShardQuery(
            "an UPDATE or DELETE may name one sharded model only "
            f"(this one names {', '.join(m.name for m in models)})"
        )
    model = models[0]
    what = "update" if state.is_update else "delete"
    shards = _shards(models, route_, what)
    check_nested(state.statement, whole=False)
    if state.is_update:
        _check_assignments(state.statement, model, shards)
    results = []
    for shard in shards:
        new = _rewrite(state.statement, models, (shard,), route_, shard)
        results.append(_run(state, new, model.database_of(shard)))
    return merge_results(results)


def _check_joins(statement: Any) -> None:
    for join in getattr(statement, "_setup_joins", ()):
        for part in join[:2]:
            prop = getattr(part, "property", None)
            if isinstance(prop, RelationshipProperty) and (
                model_of_class(prop.parent.class_) or model_of_class(prop.mapper.class_)
            ):
                raise UnsupportedShardQuery(
                    f"join({part}) follows a relationship of a sharded model, whose ON clause "
                    "names the logical table; join with an explicit ON clause instead, e.g. "
                    ".join(Order, Order.user_id == User.id)"
                )


def route_execute(state: ORMExecuteState) -> Optional[Result[Any]]:
    """``do_orm_execute`` hook: run statements naming logical models on their shards."""
    direct = state.execution_options.get(DIRECT_MAPPER)
    if direct is not None and state.bind_mapper is direct and not has_options(state.statement):
        return None  # ShardedSession.get's own SELECT of one physical class
    if state.is_column_load:
        return None
    models = _models(state.statement)
    if not models:
        return None
    _check_joins(state.statement)
    check_aliases(state.statement)
    lead = models[0]
    for other in models[1:]:
        if not lead.binds_with(other):
            raise UnsupportedShardQuery(
                f"{lead.name} and {other.name} are sharded differently ({lead.strategy!r} "
                f"over {lead.count} vs {other.strategy!r} over {other.count}), so they cannot "
                "be joined shard by shard; query them separately"
            )
    if state.is_insert or (state.is_executemany and state.is_update):
        if len(models) != 1:
            raise UnsupportedShardQuery("an INSERT may name one sharded model only")
        return run_bulk(state, lead)
    where = getattr(state.statement, "whereclause", None)
    params = {} if state.is_executemany else (state.parameters or {})
    route_ = route(models, where, params)  # type: ignore[arg-type]
    if state.is_select:
        return _select(state, models, route_)
    if state.is_update or state.is_delete:
        return _dml(state, models, route_)
    raise UnsupportedShardQuery(f"cannot route {type(state.statement).__name__} statements")
