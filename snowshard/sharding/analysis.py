"""Which parts of a statement give the same answer shard by shard as on one table.

A statement naming sharded models runs in one of three ways (:mod:`~.execute`):

* on **one shard** (its WHERE names one): the database sees every row the outer query can
  match, so the outer query is exact whatever it contains;
* as **one UNION ALL** of every table of one database (no key, one database): the database
  sees the whole logical table, so everything is exact;
* on **several sources** merged in Python (:mod:`~.merge`): across databases, or one
  statement per shard (``IN`` lists, binding joins, loader options).

This module reads the statement as an expression tree (never SQL text) and classifies
each construct as *pushed down exactly*, *merged* (:mod:`~.merge` rebuilds it from
per-source parts) or *refused*: a construct it does not know is refused, never guessed.
Refusals raise :class:`~snowshard.sharding.errors.UnsupportedShardQuery` before any SQL
runs, naming the construct and what to write instead.

Rules that hold in every way of running:

* a subquery (IN, EXISTS, scalar, derived table, CTE) naming a sharded model sees only the
  tables of the source it runs in. It is exact over the UNION ALL of all tables, or when
  it is correlated with the outer query on the shard key (``Item.user_id ==
  Order.user_id`` of models sharded alike), or when it is a derived table or CTE that is
  the whole FROM list of its query and row-wise (no LIMIT, GROUP BY or aggregate, window
  functions only partitioned by a shard key, DISTINCT only over columns that include a
  shard key: each source then holds
  its share of the rows, as of the model's, so ``select(func.count()).select_from(
  stmt.subquery())`` and ``Query.count()`` merge; so does a UNION ALL of such SELECTs,
  each column of one type in all of them); otherwise it is refused;
* two sharded models read together (joined, or one in a subquery correlated with the
  other) must be tied by an equality of their shard keys, in an ON clause or WHERE: they
  are read table by table;
* an alias of a sharded model (``aliased(Order)``) is refused: it names the logical table;
* ``*`` among the columns (``literal_column("*")``, ``text("*")``, ``"orders.*"``) is
  refused outside an EXISTS unless the statement reads one table: a UNION ALL of a
  database's tables has a column of its own, which ``*`` would return as well;
* unsharded tables live in one database: joined with or filtering a sharded model, they
  are exact only where that database is the one the sharded tables are read in;
* an outer join that keeps the rows of an unsharded or reference table whatever a sharded
  model holds (``statuses LEFT JOIN orders``, a FULL join) is exact on one source only:
  every source would return the table's unmatched rows again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Optional

from sqlalchemy import Column, Delete, Insert, Table, Update
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.exc import CompileError
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BooleanClauseList,
    ClauseElement,
    ColumnClause,
    FunctionFilter,
    Grouping,
    Label,
    Over,
    TextClause,
    UnaryExpression,
    WithinGroup,
)
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.selectable import (
    CTE,
    Alias,
    CompoundSelect,
    Exists,
    Join,
    Select,
    SelectBase,
    SelectStatementGrouping,
    Subquery,
)

from snowshard._compat import (
    blocked_froms,
    compound_keyword,
    deannotated,
    distinct_of,
    distinct_on_of,
    explicit_correlation,
    fetch_clause_of,
    final_froms,
    group_by_of,
    having_of,
    limit_offset_of,
    order_by_of,
    prefixes_of,
    raw_columns_of,
    replacement_blocked,
    suffixes_of,
    syntax_extensions_of,
    untraversed_of,
)
from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.model import ShardedModel, model_of_table

__all__ = [
    "AGGREGATES",
    "IN_OPERATORS",
    "ROW_FUNCTIONS",
    "check_aliases",
    "check_comparisons",
    "check_joined_on_keys",
    "check_nested",
    "check_outer_joins",
    "check_star_columns",
    "aggregate_function",
    "aggregate_named",
    "describe",
    "distinct_arguments",
    "exists_selects",
    "from_entries",
    "filtered_aggregate",
    "function_kind",
    "models_in_subqueries",
    "models_named",
    "mismatched_column",
    "nested_selects",
    "selected_entities",
    "unsharded_tables",
    "walk",
]

AGGREGATES = frozenset({"count", "sum", "min", "max", "avg"})
"""Aggregates merged across shards (also with FILTER, but then without DISTINCT)."""

IN_OPERATORS = (operators.in_op, operators.not_in_op)
"""The operators of ``IN`` and ``NOT IN``."""

ROW_FUNCTIONS = frozenset(
    {
        "abs", "ceil", "ceiling", "char_length", "coalesce", "concat", "date", "date_trunc",
        "datetime", "floor", "greatest", "id_time", "ifnull", "least", "length", "lower",
        "ltrim", "mod", "nullif", "replace", "round", "rtrim", "sign", "strftime", "substr",
        "substring", "trim", "trunc", "upper",
    }
)  # fmt: skip
"""Functions known to compute one value per row (never an aggregate)."""


def describe(element: Any) -> str:
    """A short text for ``element`` in a message (never fails on dialect-only constructs)."""
    try:
        text = str(element)
    except CompileError:  # rendered by a dialect only (an array slice): as PostgreSQL's
        try:
            text = str(element.compile(dialect=PGDialect()))  # type: ignore[no-untyped-call]
        except CompileError:
            text = f"{getattr(element, 'name', type(element).__name__)}(...)"
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(element: Any) -> Any:
    while isinstance(element, (Label, Grouping)):
        element = element.element
    return element


def function_kind(element: FunctionElement[Any]) -> str:
    """``"aggregate"``, ``"row"`` or ``"unknown"`` for a SQL function call."""
    name = str(getattr(element, "name", "")).lower()
    if name in AGGREGATES:
        return "aggregate"
    if name in ROW_FUNCTIONS:
        return "row"
    return "unknown"


def filtered_aggregate(element: Any) -> Optional[FunctionElement[Any]]:
    """The aggregate of ``element`` when it is one the merge combines with a FILTER
    (``func.count().filter(x > 1)``): count, sum, min, max or avg, without DISTINCT;
    None for anything else. Each source then aggregates only its rows that pass the
    filter, which combine as the rows of one table would."""
    if not isinstance(element, FunctionFilter):
        return None
    function = element.func
    if not isinstance(function, FunctionElement) or function_kind(function) != "aggregate":
        return None
    if distinct_arguments(function):
        return None
    return function


def distinct_arguments(function: Any) -> list[Any]:
    """The ``DISTINCT x`` arguments of ``function`` (``count(x.distinct())``), in order."""
    return [
        argument
        for argument in function.clauses
        if isinstance(argument, UnaryExpression) and argument.operator is operators.distinct_op
    ]


def aggregate_function(element: Any) -> Any:
    """The function an aggregate computes: ``element`` itself, or for a FILTER the merge
    combines, its aggregate (:func:`filtered_aggregate`); None for another FILTER."""
    return filtered_aggregate(element) if isinstance(element, FunctionFilter) else element


def aggregate_named(element: Any, names: tuple[str, ...]) -> bool:
    """Whether ``element`` is an aggregate of one of ``names`` (lower case), with a FILTER
    the merge combines or without (:func:`aggregate_function`)."""
    function = aggregate_function(element)
    return isinstance(function, FunctionElement) and str(function.name).lower() in names


def walk(element: Any, *, nested: bool = False) -> Iterator[Any]:
    """``element`` and its descendants; subqueries only when ``nested`` is true."""
    stack = [element]
    while stack:
        item = stack.pop()
        yield item
        if isinstance(item, SelectBase) and item is not element and not nested:
            continue
        if isinstance(item, Table):
            continue
        stack.extend(item.get_children())
        if isinstance(item, Insert):
            stack.extend(untraversed_of(item))


def nested_selects(statement: Any) -> Iterator[SelectBase]:
    """Every SELECT inside ``statement`` (not ``statement`` itself), outermost first."""
    for item in walk(statement, nested=True):
        if isinstance(item, SelectBase) and item is not statement:
            yield item


def _models_in(element: Any) -> list[ShardedModel]:
    found: list[ShardedModel] = []
    for item in walk(element, nested=True):
        if isinstance(item, Table):
            model = model_of_table(item)
            if model is not None and model not in found:
                found.append(model)
    return found


def models_named(element: Any, *, nested: bool = True) -> list[ShardedModel]:
    """The sharded models whose logical tables ``element`` names anywhere (or, with
    ``nested=False``, outside its subqueries): in a FROM list or through a column (a
    subquery whose FROM list SQLAlchemy derives from its columns)."""
    found: list[ShardedModel] = []
    for item in walk(element, nested=nested):
        table = item.table if isinstance(item, ColumnClause) else item
        model = model_of_table(table) if isinstance(table, Table) else None
        if model is not None and model not in found:
            found.append(model)
    return found


def models_in_subqueries(statement: Any) -> list[ShardedModel]:
    """The sharded models whose logical tables ``statement``'s subqueries name (an
    INSERT's ON CONFLICT / ON DUPLICATE KEY UPDATE clause included)."""
    found: list[ShardedModel] = []
    for select in nested_selects(statement):
        for model in models_named(select):
            if model not in found:
                found.append(model)
    return found


def _key_of(element: Any) -> Optional[tuple[ShardedModel, Any]]:
    element = _plain(element)
    if not isinstance(element, ColumnClause) or not isinstance(element.table, Table):
        return None
    model = model_of_table(element.table)
    if model is None or element.key not in model.keys:
        return None
    return model, deannotated(element.table)


def _grouping_key_of(element: Any) -> Optional[tuple[ShardedModel, Any]]:
    """:func:`_key_of`, for a shard key whose equal values all live in one table, NULL
    included: a key of a model without layout generations (whose tables of different
    periods hold one key value), and with no other key (a row without it cannot be
    stored) or declared NOT NULL. A key that can be NULL in a model routed by another key
    too (``("id", "user_id")`` with ``user_id`` nullable) has its NULL rows in the tables
    of their IDs, so a window partitioned by it, or a DISTINCT over it, would see one NULL
    partition or value per table instead of one."""
    found = _key_of(element)
    if found is None or found[0].timeline is not None:
        return None
    if len(found[0].keys) == 1 or _declared_not_null(element):
        return found
    return None


def _declared_not_null(element: Any) -> bool:
    """Whether ``element`` is a column declared NOT NULL (under labels and parentheses)."""
    column = _plain(element)
    return isinstance(column, Column) and column.nullable is False


def _key_pairs(clause: Any) -> Iterator[tuple[ShardedModel, ShardedModel]]:
    """The binding models two of whose shard keys a conjunct of ``clause`` equates (rows
    it matches then live in tables of the same index)."""
    stack = [clause] if clause is not None else []
    while stack:
        item = _plain(stack.pop())
        if isinstance(item, BooleanClauseList) and item.operator is operators.and_:
            stack.extend(item.clauses)
        elif isinstance(item, BinaryExpression) and item.operator is operators.eq:
            left, right = _key_of(item.left), _key_of(item.right)
            if left and right and left[1] is not right[1] and left[0].binds_with(right[0]):
                yield left[0], right[0]


def _correlated_on_key(select: SelectBase) -> bool:
    """Whether a conjunct of ``select``'s WHERE equates shard keys of two binding models."""
    return any(True for _ in _key_pairs(getattr(select, "whereclause", None)))


def _joins(select: Any) -> Iterator[Join]:
    """The joins in the FROM list of ``select`` (not those of its subqueries)."""
    stack = list(final_froms(select))
    while stack:
        item = stack.pop()
        if isinstance(item, Join):
            stack.extend((item.left, item.right))
            yield item


def _check_keys_joined(select: Any) -> None:
    models: list[ShardedModel] = []
    for table in _from_tables(select):
        model = model_of_table(table)
        if model is not None and model not in models:
            models.append(model)
    if len(models) < 2:
        return
    parent = {id(m): m for m in models}  # union-find over the models tied by key equalities

    def root(model: ShardedModel) -> ShardedModel:
        while parent[id(model)] is not model:
            model = parent[id(model)]
        return model

    joins = list(_joins(select))
    for clause in [getattr(select, "whereclause", None), *(j.onclause for j in joins)]:
        for left, right in _key_pairs(clause):
            if id(left) in parent and id(right) in parent:
                parent[id(root(left))] = root(right)
    if len({id(root(m)) for m in models}) == 1:
        return
    names = " and ".join(m.name for m in models)
    conditions = "; ".join(describe(j.onclause) for j in joins if j.onclause is not None)
    first, second = models[0], models[1]
    raise UnsupportedShardQuery(
        f"{names} are joined (or a subquery correlated) without an equality of their "
        "shard keys"
        + (f" (ON {conditions})" if conditions else "")
        + ": rows that match may live in tables of different shards, and this query joins "
        f"them table by table; add an equality of shard keys to the ON clause, e.g. "
        f"{second.name}.{second.keys[-1]} == {first.name}.{first.keys[-1]}, when matching "
        "rows share them, or query the models separately"
    )


def check_joined_on_keys(statement: Any) -> None:
    """Refuse a statement, or a subquery in it, that reads two sharded models without tying
    them by an equality of shard keys (in an ON clause or a conjunct of WHERE): it runs
    table by table (shard ``k`` of one model with shard ``k`` of the other), which finds
    only the matching rows that share a table index."""
    for select in [statement, *nested_selects(statement)]:
        _check_keys_joined(select)


def from_entries(select: Any) -> set[Any]:
    """The FROM entries of ``select`` as it stands alone, joins taken apart into what they
    join (tables unannotated; aliases and subqueries as they are); of an UPDATE or DELETE,
    its table (which its subqueries correlate with)."""
    if isinstance(select, (Update, Delete)):
        return {deannotated(select.table)}
    found: set[Any] = set()
    stack = list(final_froms(select))
    while stack:
        item = stack.pop()
        if isinstance(item, Join):
            stack.extend((item.left, item.right))
        else:
            found.add(deannotated(item) if isinstance(item, Table) else item)
    return found


def _from_tables(select: Any) -> set[Any]:
    """The plain tables among :func:`from_entries`."""
    return {item for item in from_entries(select) if isinstance(item, Table)}


def _own_models(select: SelectBase, enclosing: set[Any]) -> list[ShardedModel]:
    """The sharded models ``select`` reads itself: those of its FROM list, less the tables
    SQLAlchemy correlates with ``enclosing`` (the outer statement's FROM tables).

    SQLAlchemy's automatic correlation drops a FROM entry that an enclosing SELECT also
    names, unless that would leave none; with correlation set by hand, nothing is dropped
    here (a model then counts as read inside, which can only refuse more)."""
    if not hasattr(select, "get_final_froms") or explicit_correlation(select):
        return _models_in(select)
    froms = final_froms(select)
    own = [f for f in froms if not (isinstance(f, Table) and deannotated(f) in enclosing)]
    if len(froms) < 2 or not own:
        own = list(froms)
    found: list[ShardedModel] = []
    for item in own:
        for model in _models_in(item):
            if model not in found:
                found.append(model)
    return found


def _row_wise(select: Any, *, tested: bool = False) -> bool:
    """Whether each source's rows of ``select`` are its share of the rows one table would
    give: each row comes from one row of its FROM list alone (no LIMIT, OFFSET, GROUP BY,
    HAVING or aggregate, a window function only partitioned by a shard key, no SQL beside
    the clauses: a prefix, suffix or syntax extension), and DISTINCT only over a shard key
    (:func:`_distinct_by_key`).

    ``tested``: ``select`` is what an EXISTS tests, which asks only whether a row is
    there: a LIMIT or DISTINCT keeps one if any (an OFFSET does not)."""
    try:
        limit, offset = limit_offset_of(select)
    except CompileError:
        return False
    if offset or fetch_clause_of(select) is not None:
        return False
    if limit is not None and not tested:
        return False
    if distinct_of(select) and not (tested or _distinct_by_key(select)):
        return False
    if group_by_of(select) or having_of(select) is not None:
        return False
    if _sql_beside_clauses(select):
        return False
    extended = null_extended_tables(select)
    return all(_per_row(column, extended) for column in select.selected_columns)


def _per_row(column: Any, extended: AbstractSet[Any]) -> bool:
    """Whether ``column`` is computed from its row alone (known per-row functions), or by a
    window partitioned by a shard key (each partition's rows live in one table), whose
    arguments, PARTITION BY and ORDER BY are per row in turn."""
    stack = [column]
    while stack:
        item = stack.pop()
        if isinstance(item, SelectBase) and item is not column:
            continue  # a subquery in a column: check_nested
        if isinstance(item, Over):
            if not window_partitions_by_key(item, (), extended):
                return False
            stack.extend(c for c in item.get_children() if c is not item.element)
            stack.extend(item.element.get_children())  # the window function's arguments
            continue
        if isinstance(item, (FunctionFilter, WithinGroup)):
            return False
        if isinstance(item, FunctionElement) and function_kind(item) != "row":
            return False
        if not isinstance(item, Table):
            stack.extend(item.get_children())
    return True


def _sql_beside_clauses(select: Any) -> bool:
    """Whether ``select`` carries SQL the analysis cannot read: a prefix, a suffix or a
    syntax extension."""
    return bool(prefixes_of(select) or suffixes_of(select) or syntax_extensions_of(select))


def _outer_joined(select: Any) -> bool:
    """Whether the FROM list of ``select`` has an outer (or full) join."""
    return any(j.isouter or j.full for j in _joins(select))


def selected_entities(statement: Any) -> list[Any]:
    """The ORM entities ``statement`` selects whole (``select(Order)``), not their columns."""
    return [
        d["entity"]
        for d in getattr(statement, "column_descriptions", ())
        if d.get("entity") is not None and d.get("expr") is d.get("entity")
    ]


def _distinct_by_key(select: Any) -> bool:
    """Whether ``select`` is a plain DISTINCT (not DISTINCT ON) whose columns include a
    shard key, with no outer join (which could make the key NULL): rows equal in every
    column then share one key value, so they all come from one shard, and each source
    removes the duplicates of its own rows (``Query(Order).distinct().count()``)."""
    if distinct_on_of(select) or _outer_joined(select):
        return False
    return any(_grouping_key_of(column) is not None for column in select.selected_columns)


def exists_selects(statement: Any) -> list[Select[Any]]:
    """The SELECT inside each ``EXISTS`` that a SELECT without a FROM list selects
    (``select(exists().where(...))``): one row on each source, merged by
    :mod:`~snowshard.sharding.merge` as true where any source's is."""
    return [chain[-1] for chain in _exists_chains(statement)]


def _exists_chains(statement: Any) -> list[list[Any]]:
    """For a SELECT without a FROM list, the :func:`_exists_chain` of each EXISTS it
    selects; [] for any other statement."""
    if not isinstance(statement, Select) or final_froms(statement):
        return []
    chains = (_exists_chain(_plain(column)) for column in statement.selected_columns)
    return [chain for chain in chains if chain]


def _exists_chain(element: Any) -> list[Any]:
    """For an ``EXISTS``: the SELECTs from it to the SELECT it tests, that one last (2.0
    wraps it in a grouping, itself a SelectBase; 2.1 in a scalar SELECT); else []."""
    if not isinstance(element, Exists):
        return []
    chain = []
    for query in nested_selects(element):
        chain.append(query)
        if isinstance(query, Select):
            return chain
    return []


def _derived_tables(statement: Any) -> set[int]:
    """The SELECTs (by ``id``) that are the whole FROM list of ``statement``, or of one of
    them, as a derived table or a non-recursive CTE, and are row-wise (:func:`_row_wise`).

    Run on each source, such a SELECT gives the source's share of its rows, as a table of
    the model would: the query over it merges as one over the model. So does the row-wise
    SELECT an EXISTS tests where the statement selects it without a FROM list
    (:func:`exists_selects`), with the SELECTs wrapping it. Whole objects of an entity
    aliased to such a SELECT are not read this way (none is accepted then)."""
    found: set[int] = set()
    if selected_entities(statement):
        return found
    stack = [statement]
    for chain in _exists_chains(statement):
        if _row_wise(chain[-1], tested=True):  # whether a source holds a row: any() of them
            found.update(id(query) for query in chain)
            stack.append(chain[-1])
    while stack:
        select = stack.pop()
        froms = final_froms(select)
        if len(froms) != 1:
            continue
        derived = _unaliased(froms[0])
        inner = getattr(derived, "element", None)
        if not isinstance(derived, (Subquery, CTE)) or getattr(derived, "recursive", False):
            continue
        if isinstance(inner, Select) and _row_wise(inner):
            found.add(id(inner))
            stack.append(inner)
        parts = _row_wise_union_all(inner)
        if parts:
            found.add(id(inner))
            found.update(id(part) for part in parts)
            stack.extend(parts)
    return found


def _row_wise_union_all(compound: Any) -> list[Select[Any]]:
    """The SELECTs of ``compound`` when it is a UNION ALL whose rows each source holds its
    share of, as of a table (:func:`_derived_tables`); else []. That needs each SELECT
    row-wise and reading a sharded model outside its subqueries (a reference table's rows
    alone would come from every source), the compound without ORDER BY, LIMIT or OFFSET of
    its own, and each column of one type in all SELECTs (the type and collation of a
    compound's column are the first SELECT's in SQLAlchemy, which the merge compares by;
    a database may derive them otherwise)."""
    if not isinstance(compound, CompoundSelect) or compound_keyword(compound) != "UNION ALL":
        return []
    parts: list[Any] = list(compound.selects)
    if not all(isinstance(part, Select) and _row_wise(part) for part in parts):
        return []
    if not all(models_named(part, nested=False) for part in parts):
        return []  # a reference table's rows alone: every source would return them all
    try:
        limit, offset = limit_offset_of(compound)
    except CompileError:
        return []
    if limit is not None or offset or order_by_of(compound) or fetch_clause_of(compound):
        return []
    return [] if mismatched_column(parts) is not None else parts


def mismatched_column(parts: Sequence[Any]) -> Optional[int]:
    """The position of the first column whose type (class or collation) differs between
    the SELECTs ``parts`` of a compound; None when every column has one type."""
    columns = [[c.type for c in part.selected_columns] for part in parts]
    for position, first in enumerate(columns[0]):
        for other in columns[1:]:
            second = other[position]
            if type(first) is not type(second) or getattr(first, "collation", None) != getattr(
                second, "collation", None
            ):
                return position
    return None


def _keyed_in_selects(statement: Any) -> tuple[set[int], set[int]]:
    """(exact, not for NULL): the SELECTs (by ``id``) of ``key IN (SELECT other_key ...)`` in
    ``statement`` that read, for each key, all of its rows: ``key`` a shard key, the
    SELECT's one column a shard key of a model sharded alike (its rows of a key value live
    in that value's table, the one the outer row is read from), with no LIMIT, OFFSET, outer
    join or SQL beside the clauses, and grouped, if at all, by a shard key, of a model
    without layout generations (whose tables of different periods hold one key value).
    ``Order.user_id.in_(select(Item.user_id).where(...))`` is then what one table answers,
    row by row, as far as TRUE goes; where NULL and FALSE differ (a NULL key in one table's
    rows makes the IN of every other key NULL on one table, FALSE in the tables without one)
    it is exact only if neither key can be NULL (:func:`_two_valued`), or if the IN is a
    conjunct of a WHERE, which keeps neither. ``NOT IN`` needs the keys that cannot be NULL;
    the SELECTs that would be exact but for NULL are the second set (a SELECT used in two
    places, such as one ``scalar_subquery()`` in a WHERE and a column, is in it if either
    use is)."""
    found: set[int] = set()
    nullable: set[int] = set()
    for enclosing in walk(statement, nested=True):
        if not hasattr(enclosing, "whereclause"):
            continue  # SELECT, UPDATE and DELETE hold IN conditions
        filters = {id(c) for c in _conjuncts(enclosing.whereclause)}
        for item in walk(enclosing):
            if not isinstance(item, BinaryExpression) or item.operator not in IN_OPERATORS:
                continue
            outer, inner = _key_of(item.left), getattr(item.right, "element", None)
            if outer is None or not isinstance(inner, Select) or len(inner.selected_columns) != 1:
                continue
            selected = _key_of(inner.selected_columns[0])
            if selected is None or not selected[0].binds_with(outer[0]) or not _keeps_keys(inner):
                continue
            if outer[0].timeline is not None:
                continue  # a key value's rows span the tables of its generations
            filtering = item.operator is operators.in_op and id(item) in filters
            if filtering or _two_valued(enclosing, item.left, inner.selected_columns[0]):
                found.add(id(inner))
            else:
                nullable.add(id(inner))
    return found - nullable, nullable  # a SELECT used twice is exact if both uses are


def _conjuncts(clause: Any) -> Iterator[Any]:
    """The conditions ``clause`` ANDs together (itself, if it is no AND)."""
    stack = [clause] if clause is not None else []
    while stack:
        item = stack.pop()
        if isinstance(item, BooleanClauseList) and item.operator is operators.and_:
            stack.extend(item.clauses)
        else:
            yield item


def _two_valued(enclosing: Any, key: Any, selected: Any) -> bool:
    """Whether ``key IN (SELECT selected ...)`` in ``enclosing`` is never NULL: both are
    columns declared NOT NULL and ``enclosing`` outer-joins nothing (which could make
    ``key`` NULL); the subquery outer-joins nothing either (:func:`_keeps_keys`)."""
    return not _outer_joined(enclosing) and _declared_not_null(key) and _declared_not_null(selected)


def _keeps_keys(select: Any) -> bool:
    """Whether each shard key value ``select`` returns, it returns from that key's rows
    alone (:func:`_keyed_in_selects`)."""
    try:
        limit, offset = limit_offset_of(select)
    except CompileError:
        return False
    if limit is not None or offset or fetch_clause_of(select) is not None:
        return False
    if _sql_beside_clauses(select) or _outer_joined(select):
        return False
    groups = group_by_of(select)
    if groups:
        return any(_key_of(group) is not None for group in groups)
    return having_of(select) is None


def _unaliased(from_: Any) -> Any:
    """A derived table under the aliases wrapping it (``Query.count()`` selects from an
    anonymous alias of its query's subquery): one derived table in SQL."""
    while isinstance(from_, Alias) and isinstance(from_.element, (Alias, Subquery, CTE)):
        from_ = from_.element
    return from_


def check_nested(statement: Any, whole: bool) -> None:
    """Refuse a subquery on a sharded model that would see only part of its rows.

    ``whole``: the statement runs as one UNION ALL over every table of the model, so each
    subquery sees all rows.
    """
    if whole:
        return
    # the outer FROM tables: found only when a subquery needs them
    enclosing: set[Any] | None = None
    exact: set[int] = set()
    nullable: set[int] = set()
    for select in nested_selects(statement):
        if isinstance(select, SelectStatementGrouping):
            continue  # the parentheses of a SELECT (2.0's exists()): the SELECT is next
        if enclosing is None:
            enclosing = _from_tables(statement)
            keyed, nullable = _keyed_in_selects(statement)
            exact = _derived_tables(statement) | keyed
        models = _own_models(select, enclosing)
        if not models or _correlated_on_key(select) or id(select) in exact:
            continue
        if id(select) in nullable:
            raise UnsupportedShardQuery(
                f"key IN (SELECT key of {', '.join(m.name for m in models)} ...) where a "
                "key column can be NULL, used other than as a condition of a WHERE (NOT "
                "IN, under NOT, as a column, or beside an outer join): a NULL key in one "
                "table's rows makes the IN NULL for every other key on one table, but "
                "FALSE in the tables that hold no NULL. Declare both key columns NOT NULL "
                "(mapped_column(..., nullable=False)), or use the IN as a condition of "
                "the WHERE (with AND), or run the subquery first and pass its values"
            )
        names = ", ".join(m.name for m in models)
        if any(len(m.spec.databases) > 1 for m in models):
            names += " is sharded over several databases and"
        raise UnsupportedShardQuery(
            f"{names} appears inside a subquery (IN, EXISTS, scalar subquery or CTE) "
            f"without being correlated with the outer query on its shard key, and this "
            f"query runs shard by shard: the subquery would see only the rows of each "
            f"shard (e.g. an average of one shard). Correlate it on the shard key "
            f"(... WHERE inner.user_id == outer.user_id), run the subquery first and "
            f"pass its result as a value or a list (execution_options(subqueries_first="
            f"True) has the session do that), or (for a derived table or CTE that "
            f"is a query's whole FROM) leave LIMIT, GROUP BY and aggregates out of it, "
            f"partition its window functions by the shard key, and keep DISTINCT to "
            f"columns that include the shard key (of a model without layout generations, "
            f"declared NOT NULL when the model has another key: NULL keys make one "
            f"partition per table)"
        )


def _has_model(element: Any) -> bool:
    return bool(_models_in(element))


def _outer_joins(statement: Any) -> Iterator[Join]:
    for select in [statement, *nested_selects(statement)]:
        for join in _joins(select):
            if join.isouter or join.full:
                yield join


def check_outer_joins(statement: Any) -> None:
    """Refuse, for a statement merged from several sources, an outer join that keeps the
    rows of a table holding no sharded model whatever the sharded side holds: each source
    would return those rows (with NULLs for the sharded side) once more."""
    for join in _outer_joins(statement):
        kept = [join.left, join.right] if join.full else [join.left]
        for side in kept:
            if not _has_model(side):
                raise UnsupportedShardQuery(
                    f"outer join {describe(join)} keeps every row of "
                    f"{describe(side)} (unsharded or a reference table) and runs on several "
                    "shards here, so each shard would return its unmatched rows again; join "
                    "from the sharded model instead (select_from(Order).outerjoin(Status, ...)), "
                    "route the query to one shard, or query the table separately"
                )


def check_comparisons(statement: Any) -> None:
    """Refuse a relationship comparison (``Customer.orders.any(...)``, ``Order.user.has(
    ...)``) that reads a sharded model and is still marked by SQLAlchemy as not to be
    rewritten (:mod:`~snowshard.sharding.relationship_comparisons` rebuilds the others):
    it would keep naming the logical table, which no database holds."""
    for item in walk(statement, nested=True):
        blocked = [item] if replacement_blocked(item) else []
        if isinstance(item, Select):
            blocked.extend(blocked_froms(item))
        for part in blocked:
            models = models_named(part)
            if not models:
                continue
            raise UnsupportedShardQuery(
                f"a relationship comparison (.any(), .has()) reading "
                f"{', '.join(m.name for m in models)} inside another one's criteria, or in a "
                f"statement with with_loader_criteria(), is not supported: SQLAlchemy marks "
                f"its SQL ({describe(part)}) as not to be rewritten, so it would name the "
                f"logical table, which no database holds; write the EXISTS with explicit "
                f"conditions, e.g. exists().where(Order.user_id == User.id, ...)"
            )


def check_aliases(statement: Any) -> None:
    """Refuse ``aliased(Model)`` of a sharded model: the alias names the logical table."""
    for item in walk(statement, nested=True):
        if isinstance(item, Alias) and model_of_table(item.element) is not None:
            model = model_of_table(item.element)
            assert model is not None
            raise UnsupportedShardQuery(
                f"an alias of the sharded model {model.name} (aliased() or .alias()) is not "
                "supported: it names the logical table, which no database holds; write the "
                "query without the alias, or run two queries"
            )


def _is_star(column: Any) -> bool:
    """Whether a columns-clause entry is SQL's ``*`` or ``table.*``, as SQL text."""
    column = _plain(column)
    if isinstance(column, ColumnClause) and column.is_literal:
        return column.name.rstrip().endswith("*")
    return isinstance(column, TextClause) and column.text.rstrip().endswith("*")


def check_star_columns(statement: Any) -> None:
    """Refuse ``*`` among the columns of any SELECT of ``statement`` but those an EXISTS
    tests (their columns are never read). Called for statements that read more than one
    table: the columns ``*`` stands for depend on the FROM list each source runs, and a
    UNION ALL of one database's tables carries a column of its own."""
    tested = {id(q) for item in walk(statement, nested=True) if isinstance(item, Exists)
              for q in nested_selects(item)}  # fmt: skip
    for query in (statement, *nested_selects(statement)):
        if id(query) in tested or not isinstance(query, Select):
            continue
        for column in raw_columns_of(query):
            if _is_star(column):
                raise UnsupportedShardQuery(
                    f"SELECT {describe(column)} over several tables is not supported: the "
                    "columns it stands for depend on the tables each database reads (a UNION "
                    "ALL of a database's tables has a column of its own); name the columns "
                    "instead, e.g. select(Order) or select(Order.id, Order.amount)"
                )


def unsharded_tables(statement: Any) -> list[Table]:
    """Tables the statement reads that are neither a sharded model's nor a shard's."""
    found: list[Table] = []
    for item in walk(statement, nested=True):
        if isinstance(item, Table):
            table = deannotated(item)
            if model_of_table(table) is None and "snowshard" not in table.info:
                if table not in found:
                    found.append(table)
    return found


def window_partitions_by_key(
    over: Over[Any], models: Sequence[ShardedModel], extended: AbstractSet[Any] = frozenset()
) -> bool:
    """Whether ``over``'s PARTITION BY includes a shard key whose equal values live in one
    table (:func:`_grouping_key_of`), of a table an outer join does not NULL-extend
    (``extended``, :func:`null_extended_tables`: the NULL rows of every table would make
    one partition on one table, one per table across shards)."""
    partition = over.partition_by
    if partition is None:
        return False
    keys = (_grouping_key_of(part) for part in partition.clauses)
    return any(key is not None and key[1] not in extended for key in keys)


def null_extended_tables(select: Any) -> frozenset[Any]:
    """The tables of ``select``'s FROM list that an outer join may NULL-extend: the right
    side of a LEFT OUTER JOIN, both sides of a FULL one."""
    found: set[Any] = set()
    for join in _joins(select):
        sides = (join.left, join.right) if join.full else (join.right,) if join.isouter else ()
        for side in sides:
            found.update(deannotated(t) for t in walk(side) if isinstance(t, Table))
    return frozenset(found)


def window_refusal(over: Over[Any]) -> UnsupportedShardQuery:
    return UnsupportedShardQuery(
        f"window function {describe(over)} across shards: each shard would compute it over "
        "its own rows only; partition by the shard key (over(partition_by=Order.user_id)) "
        "of a model without layout generations (their tables split a key's rows by "
        "period), declared NOT NULL when the model has another key and not on the NULL "
        "side of an outer join (NULL keys make one partition per table), or compute it "
        "in Python"
    )


def check_row_expression(
    element: Any, models: Sequence[ShardedModel], extended: AbstractSet[Any] = frozenset()
) -> bool:
    """Check an expression evaluated per row on each source; True if it holds an aggregate.

    Window functions must partition by the shard key (of a table not in ``extended``:
    :func:`window_partitions_by_key`); functions not known to be per row (or one of the
    merged aggregates) are refused, as they could be aggregates.
    """
    aggregate = False
    stack = [element]
    while stack:
        item = stack.pop()
        if isinstance(item, SelectBase) and item is not element:
            continue  # subqueries: check_nested
        if not isinstance(item, Table):
            stack.extend(item.get_children())
        if isinstance(item, Over):
            if not window_partitions_by_key(item, models, extended):
                raise window_refusal(item)
            # the window function itself (row_number, rank, count...) runs per partition;
            # only its PARTITION BY and ORDER BY expressions are checked further
            stack = [c for c in stack if c is not item.element]
        elif isinstance(item, FunctionFilter) and filtered_aggregate(item) is not None:
            continue  # its aggregate (a child) and its condition, per row, are checked
        elif isinstance(item, (WithinGroup, FunctionFilter)):
            raise UnsupportedShardQuery(
                f"{describe(item)} across shards: ordered-set aggregates (WITHIN GROUP) and "
                "FILTER of other aggregates than count, sum, min, max and avg, or of DISTINCT "
                "values, are not merged; route the query to one shard or compute it in Python"
            )
        elif isinstance(item, FunctionElement):
            kind = function_kind(item)
            if kind == "unknown":
                raise UnsupportedShardQuery(
                    f"function {getattr(item, 'name', describe(item))}() is not known to be "
                    "computed per row, so its result across shards cannot be guaranteed "
                    "(it may be an aggregate); route the query to one shard, or compute it "
                    "in Python"
                )
            if kind == "aggregate":
                aggregate = True
        elif isinstance(item, UnaryExpression) and item.operator is operators.distinct_op:
            continue
    return aggregate


def is_clause(element: Any) -> bool:
    return isinstance(element, ClauseElement)
