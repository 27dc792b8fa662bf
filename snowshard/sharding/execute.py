"""The ``do_orm_execute`` hook: running statements that name logical models on shards.

A statement naming a logical model is rewritten (:mod:`~snowshard.sharding.rewrite`) for
the shards its WHERE clause needs (:mod:`~snowshard.sharding.routing`) and run there:

* one shard: the statement runs on that physical table, as if written for it;
* no shard key (fan-out) on one database: one statement over a ``UNION ALL`` of the
  tables, so the database sorts, limits and aggregates (with ORM loader options such as
  ``selectinload()``, which name the logical class: one statement per table instead);
* no shard key across databases: one such statement per database, merged in Python
  (:mod:`~snowshard.sharding.merge`);
* a statement merged in Python runs on its databases concurrently and is merged as a
  stream of rows, ORM objects built only for the rows kept (:mod:`~.sources`); the
  sub-statements go through ``ORMExecuteState.invoke_statement`` instead, one by one,
  when other ``do_orm_execute`` hooks follow this one (they see them);
* keys naming several shards (``IN``), or joined binding models: one statement per shard,
  each with its share of the ``IN`` list, merged in Python;
* UPDATE/DELETE run on each shard needed; INSERT rows are grouped by shard
  (:mod:`~snowshard.sharding.bulk`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Integer, Select, literal
from sqlalchemy import __version__ as sqlalchemy_version
from sqlalchemy.engine import Result
from sqlalchemy.exc import CompileError, InvalidRequestError
from sqlalchemy.orm import Load, ORMExecuteState, RelationshipProperty
from sqlalchemy.sql.elements import BindParameter, ClauseElement

from snowshard._compat import (
    ALIASES_TAKE_CRITERIA,
    UPSERT_CLAUSES_RETARGETED,
    deannotated,
    forget_clone_origin,
    has_options,
    hand_back_parameters,
    invoke_statement,
    joins_of,
    later_orm_hooks,
    limit_offset_of,
    locks_rows,
    options_of,
    plugin_subject_of,
    returns_tuples,
    session_execution_options,
    upsert_clauses_of,
)
from snowshard.sharding.analysis import (
    check_aliases,
    check_star_columns,
    check_comparisons,
    check_joined_on_keys,
    check_nested,
    check_outer_joins,
    models_in_subqueries,
    models_named,
    unsharded_tables,
)
from snowshard.sharding.bulk import (
    BIND_KEY,
    assigned,
    check_rows,
    merge_results,
    run_bulk,
    writing_to,
)
from snowshard.sharding.collation import check_string_keys
from snowshard.sharding.compounds import derived_union
from snowshard.sharding.criteria import check_loader_criteria, covers
from snowshard.sharding.eager import check_eager_joins
from snowshard.sharding.errors import (
    FanOutForbidden,
    InvalidShardHint,
    ShardKeyChanged,
    UnknownDatabase,
    UnsupportedShardQuery,
)
from snowshard.sharding.hints import (
    Hint,
    apply_hint,
    hint_of,
    names_physical_tables,
    session_databases,
)
from snowshard.sharding.listeners import check_listeners
from snowshard.sharding.merge import MergePlan
from snowshard.sharding.model import ShardedModel, model_of_class, model_of_table
from snowshard.sharding.modifiers import check_dml_modifiers
from snowshard.sharding.plan_cache import cached_plan, is_column_load, shape_models
from snowshard.sharding.pulled import (
    SUBQUERIES_FIRST_OPTION,
    pulled_subqueries,
    substitute,
    value_of,
    wants_subqueries_first,
)
from snowshard.sharding.reference import (
    copies,
    is_reference,
    reference_target,
    write_copies,
)
from snowshard.sharding.relationship_comparisons import explicit_comparisons
from snowshard.sharding.relationship_joins import explicit_joins, explicit_nested_joins
from snowshard.sharding.rewrite import Target, narrow, retarget
from snowshard.sharding.routing import Route, find_models, route
from snowshard.sharding.sources import database_connections, merge_ranker, run_merged
from snowshard.sharding.spelled_columns import spelled_columns

__all__ = [
    "DIRECT_MAPPER",
    "Plan",
    "Step",
    "check_models",
    "check_rows_written",
    "plan_dml",
    "plan_select",
    "plan_statement",
    "route_execute",
    "route_first",
    "watch_plans",
]

DIRECT_MAPPER = "snowshard_direct_mapper"
"""Execution option set by ``ShardedSession.get`` on the load of one physical class: its
mapper, whose SELECT needs no routing."""


def _run(
    state: ORMExecuteState, statement: Any, database: str, params: Mapping[str, Any] | None = None
) -> Result[Any]:
    return invoke_statement(state, statement, params, {BIND_KEY: database})


def _targets(models: Sequence[ShardedModel], shards: tuple[int, ...]) -> dict[ShardedModel, Target]:
    return {model: Target(model, shards) for model in models}


def _narrowed(
    route_: Route, targets: Mapping[ShardedModel, Target], shard: int
) -> dict[int, ClauseElement]:
    # only a key term whose values span several shards needs its share per shard. One with
    # none in this shard (keys no shard satisfies: any one shard answers "none") stays as
    # written: its share would be an empty IN, which SQLAlchemy renders always false, where
    # MariaDB then sends no result set for DELETE ... RETURNING (the ORM's
    # synchronize_session="fetch"), which SQLAlchemy before 2.0.23 fails to read
    return {
        id(t.expr): narrow(t, targets[t.model], shard)
        for t in route_.terms
        if len(t.by_shard) > 1 and shard in t.by_shard
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
    except CompileError:  # an expression, or a merge source's LIMIT (MergePlan sets it)
        return statement
    if limit is not None:
        statement = statement.limit(literal(limit, Integer, literal_execute=True))
    if offset:
        statement = statement.offset(literal(offset, Integer, literal_execute=True))
    return statement


def _models(statement: Any) -> list[ShardedModel]:
    memo = _memo_of(statement)
    found: list[ShardedModel] | None = memo.get("models")
    if found is None:
        check_eager_joins(statement)  # once per shape, as the models are found
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


def _dialect(session: Any, model: ShardedModel) -> str:
    return session.get_bind(mapper=model.mappers[0]).dialect.name  # type: ignore[no-any-return]


def _check_unsharded(
    session: Any, statement: Any, models: Sequence[ShardedModel], databases: Any
) -> None:
    """Refuse unsharded tables in a statement read from a database that does not hold them.

    Reference tables (:mod:`~.reference`) have a copy in every database: never refused.
    """
    if not getattr(session, "databases", None):
        return  # one database holds everything
    tables = [t for t in unsharded_tables(statement) if not is_reference(t)]
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
                "supported across databases: declare it a reference table (a model "
                "deriving from snowshard.sharding.Reference is copied into every database), "
                "or query them separately and combine the results (a subquery of it in "
                "IN, EXISTS or a scalar: execution_options(subqueries_first=True) runs it "
                "first)"
            )


@dataclass
class Step:
    """One physical statement of a plan: where it runs and which table indices it reads."""

    database: str
    shards: tuple[int, ...]
    statement: Any


@dataclass
class Plan:
    """How a statement naming logical models runs: its steps and how results combine.

    ``how`` says which way it runs (one shard, one UNION ALL, per database or per shard);
    ``merge`` is the :class:`~.merge.MergePlan` of a SELECT read from several sources.
    """

    models: list[ShardedModel]
    how: str
    steps: list[Step] = field(default_factory=list)
    merge: MergePlan | None = None

    @property
    def tables(self) -> int:
        """Table indices read (per model): the fan-out over tables."""
        return len({s for step in self.steps for s in step.shards})

    @property
    def databases(self) -> int:
        """Databases the statement runs in: the fan-out over databases."""
        return len({step.database for step in self.steps})


def plan_select(
    session: Any, statement: Any, models: Sequence[ShardedModel], route_: Route
) -> Plan:
    """The plan of a SELECT (refusals raise :class:`UnsupportedShardQuery`, before SQL)."""
    lead = models[0]
    shards = _shards(models, route_, "query")
    if len(shards) == 1:
        database = lead.database_of(shards[0])
        check_nested(statement, whole=False)
        _check_unsharded(session, statement, models, {database})
        new = _rewrite(statement, models, (shards[0],), route_, shards[0])
        return Plan(list(models), "one shard", [Step(database, (shards[0],), new)])
    if not isinstance(statement, Select):
        raise UnsupportedShardQuery(
            f"{type(statement).__name__} statements across several shards are not supported; "
            "query each model with select()"
        )
    check_star_columns(statement)
    databases = {db: tuple(i) for db, i in lead.spec.databases.items() if i}
    # loader options name the logical class, which a union entity is not; physical classes
    # (one statement per shard) are its subclasses, so the options apply to them. A locking
    # read names each table in a statement of its own: PostgreSQL refuses FOR UPDATE over a
    # UNION, and MariaDB locks no row that a derived table reads
    given = options_of(statement)
    options = any(isinstance(o, Load) for o in given)
    # loader criteria reach a union entity only on SQLAlchemy versions that can adapt them
    criteria = not ALIASES_TAKE_CRITERIA and any(covers(o, m) for o in given for m in models)
    one_table_each = options or criteria or locks_rows(statement)
    if route_.shards is None and len(models) == 1 and not one_table_each:
        if len(databases) == 1:
            ((database, indices),) = databases.items()
            _check_unsharded(session, statement, models, {database})
            new = _rewrite(statement, models, indices, route_, 0)
            return Plan(list(models), "one UNION ALL", [Step(database, indices, new)])
        merge = _plan(session, statement, models)
        _check_unsharded(session, statement, models, set(databases))
        steps = [
            Step(database, indices, _rewrite(merge.source, models, indices, route_, 0))
            for database, indices in databases.items()
        ]
        return Plan(list(models), "one UNION ALL per database, merged", steps, merge)
    merge = _plan(session, statement, models)
    _check_unsharded(session, statement, models, {lead.database_of(s) for s in shards})
    steps = []
    for shard in shards:
        targets = _targets(models, (shard,))
        new = retarget(merge.source, targets, _narrowed(route_, targets, shard))
        steps.append(Step(lead.database_of(shard), (shard,), new))
    return Plan(list(models), "one statement per shard, merged", steps, merge)


def _analysis(statement: Any) -> dict[str, Any]:
    found: dict[str, Any] = _memo_of(statement).setdefault("analysis", {})
    return found


def _plan(session: Any, statement: Any, models: Sequence[ShardedModel]) -> MergePlan:
    """The merge of a statement run on several sources (checked once per statement)."""
    dialect = _dialect(session, models[0])
    memo = _analysis(statement)
    plan: MergePlan | None = memo.get(f"merge:{dialect}")
    if plan is None:
        plan = MergePlan(statement, dialect, models)
        check_nested(statement, whole=False)
        check_outer_joins(statement)
        memo[f"merge:{dialect}"] = plan
    return plan


def _check_assignments(statement: Any, model: ShardedModel, shards: Sequence[int]) -> None:
    for key, value in assigned(statement).items():
        if key not in model.keys:
            continue
        if (
            isinstance(value, BindParameter)
            and value.value is not None
            and set(shards) <= set(model.shards_of(key, value.value))
        ):
            continue
        raise ShardKeyChanged(
            f"this update sets {model.name}.{key}, a shard key, to a value that is not in "
            f"the shard(s) {list(shards)} of the rows it changes; rows cannot move between "
            "tables: insert a new row and delete the old one"
        )


def _written(statement: Any, models: Sequence[ShardedModel]) -> ShardedModel:
    """The model an UPDATE or DELETE writes, when the others it names are read in its
    subqueries only; refuses UPDATE ... FROM and DELETE ... USING another sharded model."""
    if len(models) == 1:
        return models[0]
    written = model_of_table(deannotated(statement.table))
    joined = [m for m in models_named(statement, nested=False) if m is not written]
    if written is None or joined:
        raise UnsupportedShardQuery(
            f"this {'UPDATE' if statement.is_update else 'DELETE'} names "
            f"{', '.join(m.name for m in joined or models)} outside a subquery (as in UPDATE "
            "... FROM or DELETE ... USING), which is not supported on sharded models; read "
            "the other model in a subquery correlated on the shard key (where(exists("
            "select(Item.id).where(Item.user_id == Order.user_id, ...)))) or through key IN "
            "(SELECT key ...)"
        )
    return written


def plan_dml(
    session: Any, statement: Any, models: Sequence[ShardedModel], route_: Route, dialect: str
) -> Plan:
    """The plan of an UPDATE or DELETE on ``dialect``: one statement per shard it needs.

    Other models that shard alike (``check_models``) may be read in its subqueries, each
    run on the same shard: correlated on the shard key or as ``key IN (SELECT key ...)``
    (``check_nested`` refuses the rest).
    """
    model = _written(statement, models)
    what = "update" if statement.is_update else "delete"
    shards = _shards(models, route_, what)
    check_nested(statement, whole=False)
    if len(shards) > 1:
        check_dml_modifiers(statement, dialect)
    if statement.is_update:
        _check_assignments(statement, model, shards)
    _check_unsharded(session, statement, models, {model.database_of(s) for s in shards})
    steps = [
        Step(model.database_of(shard), (shard,), _rewrite(statement, models, (shard,), route_, shard))
        for shard in shards
    ]
    return Plan(list(models), "one statement per shard", steps)


def _check_joins(statement: Any) -> None:
    for join in joins_of(statement):
        for part in join[:2]:
            prop = getattr(part, "property", None)
            if isinstance(prop, RelationshipProperty) and (
                model_of_class(prop.parent.class_) or model_of_class(prop.mapper.class_)
            ):
                raise UnsupportedShardQuery(
                    f"join({part}) follows a relationship of a sharded model that is read as "
                    "an explicit join only for a relationship of the logical class to another "
                    "class, without a secondary table or of_type(); join with an explicit ON "
                    "clause instead, e.g. .join(Order, Order.user_id == User.id)"
                )


def check_models(statement: Any, models: Sequence[ShardedModel]) -> None:
    """Refuse relationship joins, aliases, models sharded differently and models joined
    otherwise than on their shard keys."""
    _check_joins(statement)
    check_aliases(statement)
    check_comparisons(statement)
    lead = models[0]
    for other in models[1:]:
        if not lead.binds_with(other):
            raise UnsupportedShardQuery(
                f"{lead.name} and {other.name} are sharded differently ({lead.strategy!r} "
                f"over {lead.count} vs {other.strategy!r} over {other.count}), so they cannot "
                "be joined shard by shard; query them separately"
            )
    if len(models) > 1:
        check_joined_on_keys(statement)


def plan_statement(
    session: Any,
    statement: Any,
    params: Mapping[str, Any],
    hint: Hint | None = None,
    models: Sequence[ShardedModel] | None = None,
) -> Plan:
    """The plan of a SELECT, UPDATE or DELETE naming logical models (what :func:`route_execute`
    runs; :func:`~snowshard.sharding.explain.explain` shows it). Raises before any SQL."""
    statement = derived_union(statement)
    statement = spelled_columns(explicit_comparisons(explicit_nested_joins(statement)))
    found = list(models) if models is not None else _models(statement)
    check_models(statement, found)
    check_loader_criteria(options_of(statement), found, statement)
    where = getattr(statement, "whereclause", None)
    route_ = route(found, where, params)
    dialect = _dialect(session, found[0])
    for model in found:
        check_string_keys(model, dialect)
    if hint is not None:
        route_ = apply_hint(hint, found, route_)
    if statement.is_select:
        return plan_select(session, statement, found, route_)
    if statement.is_update or statement.is_delete:
        return plan_dml(session, statement, found, route_, dialect)
    raise UnsupportedShardQuery(f"cannot route {type(statement).__name__} statements")


_watchers: ContextVar[tuple[Callable[[Any, Plan], None], ...]] = ContextVar(
    "snowshard_plan_watchers", default=()
)


@contextmanager
def watch_plans(callback: Callable[[Any, Plan], None]) -> Iterator[None]:
    """Call ``callback(session, plan)`` for each plan :func:`route_execute` runs in the block
    (before its SQL is sent); :func:`snowshard.testing.max_fanout` uses it."""
    token = _watchers.set((*_watchers.get(), callback))
    try:
        yield
    finally:
        _watchers.reset(token)


def _unsharded(state: ORMExecuteState, hint: Hint | None) -> Result[Any] | None:
    """A statement naming no logical model: reference-table writes and database hints."""
    session: Any = state.session
    if BIND_KEY in state.bind_arguments:
        return None  # a statement this module already routed
    if hint is not None and names_physical_tables(state.statement):
        return None  # a physical table names its own database
    if hint is not None and hint.shards is not None:
        raise InvalidShardHint(
            f"shard={sorted(hint.shards)} names tables of a sharded model, but this statement "
            "names none; use database=... for unsharded and reference tables"
        )
    if hint is not None and hint.database is not None:
        known = session_databases(session)
        if hint.database not in known:
            raise UnknownDatabase(
                f"database={hint.database!r}: this session has engines for {known} only; "
                "name one of those"
            )
    target = reference_target(state.statement)
    if target is not None and getattr(session, "databases", None):
        keys = [hint.database] if hint is not None and hint.database else copies(session)
        return write_copies(state, keys)
    if hint is not None and hint.database is not None:
        with writing_to(session, hint.database):
            return state.invoke_statement(bind_arguments={BIND_KEY: hint.database})
    return None


def _direct_load(options: Mapping[str, Any], mapper: Any, statement: Any) -> bool | None:
    """Whether ``statement`` is ``ShardedSession.get``'s own SELECT of one physical class
    (its mapper is the one the option names, and no loader options): True, run it as it
    is; False, the option is set but the statement is another (a relationship's load);
    None, no such option."""
    direct = options.get(DIRECT_MAPPER)
    if direct is None:
        return None
    return mapper is direct and not has_options(statement)


def _with_values(values: Mapping[str, Any], params: Any) -> Any:
    """The execution parameters of a cached template: this statement's bound ``values``,
    under the caller's own ``params`` (which win, as they win over bound values)."""
    if not values:
        return params
    return {**values, **params} if params else values


def route_first(
    session: Any,
    statement: Any,
    params: Any,
    execution_options: Mapping[str, Any],
    bind_arguments: dict[str, Any] | None,
) -> tuple[Any, Any, dict[str, Any]] | None:
    """A SELECT resolved before any ``do_orm_execute`` hook: ``(statement, params,
    bind_arguments)`` to run as they are, or None for :func:`route_execute` to handle.

    The commonest reads, decided as the hook would decide them: a cached plan of one
    physical statement (a keyed read), ``ShardedSession.get``'s load of one physical
    class, and a SELECT naming no sharded model. Anything the hook would do more with
    (hints, replicas, a first statement of its shape, a merge, another hook) is left to
    it. The caller (:class:`~snowshard._compat.RoutingSession`) then runs the statement
    without hooks, sparing SQLAlchemy's second pass over it.
    """
    if not getattr(statement, "is_select", False) or isinstance(params, list):
        return None
    if session.replica_router is not None:
        return None
    own = statement.get_execution_options()
    defaults = session_execution_options(session)
    if own or defaults:
        options: Mapping[str, Any] = {**defaults, **own, **execution_options}
    else:
        options = execution_options
    subject = plugin_subject_of(statement)
    direct = _direct_load(options, getattr(subject, "mapper", None), statement)
    if direct is not None:
        return (statement, params, bind_arguments or {}) if direct else None
    statement = explicit_joins(statement)
    if hint_of(session, options) is not None:
        return None
    models, lookup = shape_models(statement, _models)
    if not models:
        return statement, params, bind_arguments or {}
    check_listeners(models)
    shape = lookup.shape
    if shape is None or shape.column_load is not False:
        return None  # first of its shape, or a refresh: the hook decides and remembers
    given = params or {}
    try:
        plan, values = cached_plan(
            session, statement, given, None, models,
            lambda: plan_statement(session, statement, given, None, models),
            lookup,
        )  # fmt: skip
    except UnsupportedShardQuery:
        if wants_subqueries_first(session, options):
            return None  # the hook runs its subqueries first
        raise
    if plan.merge is not None or len(plan.steps) != 1:
        return None
    for watcher in _watchers.get():
        watcher(session, plan)
    (step,) = plan.steps
    bind = {**(bind_arguments or {}), BIND_KEY: step.database}
    return step.statement, _with_values(values, params), bind


def check_rows_written(session: Any, statement: Any, models: Sequence[ShardedModel]) -> None:
    """Refuse, before any SQL, an INSERT (or bulk UPDATE by primary key) that cannot be
    written row by row: one whose values read a sharded model, that writes no sharded model
    or names two, reads an unsharded table across databases, or whose rows come from the
    database (``from_select()``, several rows in ``values([...])``).

    Each row is written to its own table, where a subquery in its values would read that
    table's rows only (a count of one shard), or a table of another database.
    """
    check_models(statement, models)
    verb = "INSERT INTO" if statement.is_insert else "UPDATE"
    table = deannotated(statement.table)
    written = model_of_table(table)
    check_rows(statement, written.name if written is not None else table.name)
    read = models_in_subqueries(statement)
    if read or written is None:
        raise UnsupportedShardQuery(
            f"{verb} {table.name} reads {', '.join(m.name for m in read or models)} in a "
            "subquery of its values: each row is written to one table, where the subquery "
            "would read only that table's rows (or none, in another database); run the "
            "SELECT first and pass its result as a value"
        )
    if len(models) != 1:
        raise UnsupportedShardQuery("an INSERT may name one sharded model only")
    model = models[0]
    upserts = upsert_clauses_of(statement)
    if not UPSERT_CLAUSES_RETARGETED and any(models_named(c) for c in upserts):
        raise UnsupportedShardQuery(
            f"the ON CONFLICT / ON DUPLICATE KEY UPDATE clause of this {verb} {table.name} "
            f"names {model.name}'s columns, which SQLAlchemy {sqlalchemy_version} cannot "
            "point at the row's table (2.1 can); refer to the row's new values through "
            "insert.excluded (MySQL: insert.inserted), or upgrade SQLAlchemy"
        )
    _check_unsharded(session, statement, models, {d for d, i in model.spec.databases.items() if i})


def check_runnable(session: Any, statement: Any, params: Mapping[str, Any]) -> None:
    """Raise what running ``statement`` with its subqueries run first would refuse
    (:mod:`~snowshard.sharding.pulled`), before any of it runs."""
    models = find_models(statement)
    if not models:
        return  # unsharded: runs in its database as it is
    try:
        plan_statement(session, statement, params, None, models)
    except UnsupportedShardQuery:
        pulled = pulled_subqueries(statement)
        if not pulled:
            raise
        check_runnable(session, substitute(statement, pulled), params)
        for one in pulled:
            check_runnable(session, one.run_form(), params)


def _subqueries_first(
    state: ORMExecuteState, params: Mapping[str, Any], refused: UnsupportedShardQuery
) -> Result[Any]:
    """Run ``state``'s statement, ``refused`` as it is, with its subqueries run first as
    queries of their own and their results in their place (``subqueries_first=True``);
    re-raise ``refused`` if it has none that can. Everything it would refuse is raised
    before any of it runs."""
    statement = state.statement
    pulled = pulled_subqueries(statement)
    if not pulled:
        raise refused
    session: Any = state.session
    check_runnable(session, substitute(statement, pulled), params)
    for one in pulled:
        check_runnable(session, one.run_form(), params)
    values = {}
    for one in pulled:
        rows = session.execute(
            one.run_form(), dict(params), execution_options={SUBQUERIES_FIRST_OPTION: True}
        ).all()
        values[id(one.element)] = value_of(one, rows)
    final = substitute(statement, pulled, values)
    found: Result[Any] = session.execute(
        final, dict(params), execution_options=state.local_execution_options
    )
    return found


def route_execute(state: ORMExecuteState) -> Result[Any] | None:
    """``do_orm_execute`` hook: run statements naming logical models on their shards."""
    options = state.execution_options  # a new merged dict each time it is read
    statement = state.statement
    if _direct_load(options, state.bind_mapper, statement):
        return None  # ShardedSession.get's own SELECT of one physical class
    statement = explicit_joins(statement)
    models, lookup = shape_models(statement, _models)
    if is_column_load(state, lookup):
        return None  # a refresh reads where its object lives, whatever the hints
    session: Any = state.session
    hint = hint_of(session, options)
    if not models:
        return _unsharded(state, hint)
    check_listeners(models)
    parameters = state.parameters
    many = isinstance(parameters, list)  # ORMExecuteState.is_executemany, read once
    if statement.is_insert or (many and statement.is_update):
        check_rows_written(session, statement, models)
        check_string_keys(models[0], _dialect(session, models[0]))
        allowed = None
        if hint is not None:
            allowed = apply_hint(hint, models, Route(None)).shards
        return run_bulk(state, models[0], allowed)
    params = {} if many else (parameters or {})
    plan: Plan
    try:
        plan, values = cached_plan(
            session, statement, params, hint, models,
            lambda: plan_statement(
                session, statement, params, hint, models  # type: ignore[arg-type]
            ),
            lookup,
        )  # fmt: skip
    except UnsupportedShardQuery as refused:
        if many or hint is not None or not wants_subqueries_first(session, options):
            raise
        return _subqueries_first(state, params, refused)  # type: ignore[arg-type]
    for watcher in _watchers.get():
        watcher(session, plan)
    if plan.merge is not None and not later_orm_hooks(state):
        return run_merged(state, plan.steps, plan.merge)
    # a cached template's statements take this statement's values as parameters (the
    # caller's own parameters win, as they win over bound values)
    given = _with_values(values, params) if values else None
    if plan.merge is None and len(plan.steps) == 1:
        # one physical statement: hand it back to the session in place of the logical one
        # (SQLAlchemy runs ORMExecuteState.statement after the hooks), which spares a
        # second pass through Session.execute for the commonest query: one key, one table
        (step,) = plan.steps
        if given is None or hand_back_parameters(state, given):
            state.statement = step.statement
            state.bind_arguments[BIND_KEY] = step.database
            return None
    rank = None
    if plan.merge is not None and (plan.merge.ranked or plan.merge.code_point):
        connections = database_connections(state, (step.database for step in plan.steps))
        rank = merge_ranker(plan.merge, connections, plan.steps[0].database)
    results = [_run(state, step.statement, step.database, given) for step in plan.steps]
    if plan.merge is not None:
        return plan.merge.flag_single_entity(plan.merge.merge(results, rank), returns_tuples(state))
    return merge_results(results)
