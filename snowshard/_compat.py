"""Every private or version-dependent SQLAlchemy and Alembic name snowshard uses, in one place.

Supported: SQLAlchemy 2.0.x from the floor in ``pyproject.toml`` through 2.1.x, and Alembic
from its floor on. Each helper below says which versions need it and why; a test
(``tests/test_compat.py``) fails if any other module reaches for a private name of either
package. When a floor is raised, the helpers whose comment names only older versions can
go.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import sqlalchemy
from sqlalchemy import LargeBinary, Select, Subquery
from sqlalchemy.engine import ChunkedIteratorResult, CursorResult, Result
from sqlalchemy.engine.cursor import FullyBufferedCursorFetchStrategy
from sqlalchemy.engine.default import DefaultDialect
from sqlalchemy.event import registry as event_registry
from sqlalchemy.orm import Mapper, Session
from sqlalchemy.sql.base import CompileState
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import (
    BindParameter,
    ColumnElement,
    _label_reference,
    _textual_label_reference,
)
from sqlalchemy.sql.selectable import FromClause, _OffsetLimitParam
from sqlalchemy.sql.visitors import InternalTraversal

__all__ = [
    "EXPLICIT_JOINS_TAKE_CRITERIA",
    "UPSERT_CLAUSES_RETARGETED",
    "KeyedSubquery",
    "LabelReference",
    "PaddedWeight",
    "ResultCloser",
    "RoutingSession",
    "SlotLimitParameter",
    "SlotParameter",
    "TextualLabelReference",
    "alembic_reverse",
    "await_only",
    "buffered_copy",
    "bundle_of",
    "cache_key_of",
    "chunked_result",
    "compound_keyword",
    "copy_schema_item",
    "deannotated",
    "default_column",
    "default_row",
    "distinct_of",
    "distinct_on_of",
    "explicit_correlation",
    "fetch_clause_of",
    "fetch_raw",
    "fire_twophase_event",
    "forget_clone_origin",
    "greenlet_spawn",
    "group_by_of",
    "hand_back_parameters",
    "has_having",
    "has_options",
    "having_of",
    "insert_select_of",
    "interim_rows",
    "invoke_statement",
    "is_type_bound",
    "joins_of",
    "keyed_subquery",
    "later_orm_hooks",
    "only_orm_hook",
    "limit_offset_of",
    "listed_rows",
    "listener_function",
    "listener_registrations",
    "listeners_of",
    "locks_rows",
    "merge_inserted",
    "options_of",
    "order_by_of",
    "orm_annotated",
    "orm_cursor_result",
    "orm_pre_execute",
    "plugin_subject_of",
    "prefixes_of",
    "raw_columns_of",
    "register_renderer",
    "set_alembic_reverse",
    "set_plugin_subject",
    "session_execution_options",
    "several_rows_per_object",
    "slot_parameter",
    "sql_of",
    "suffixes_of",
    "syntax_extensions_of",
    "untraversed_of",
    "upsert_clauses_of",
    "upsert_values_of",
    "values_cleared",
    "values_of",
    "variant_for",
    "without_having",
]


# --------------------------------------------------------------------------- SQLAlchemy
# Select's clauses are kept in private attributes on every 2.0.x and 2.1.x release, and
# there is no public reader for most of them (``Select.whereclause`` and
# ``selected_columns`` are the exceptions, and snowshard uses those directly).


LabelReference = _label_reference
"""What ORDER BY/GROUP BY wrap a label in (``order_by(label)``; private in all versions)."""

TextualLabelReference = _textual_label_reference
"""What ``order_by("name")`` makes: a reference to a selected column by its name (private
in all versions)."""


def limit_offset_of(statement: Any) -> tuple[int | None, int | None]:
    """A SELECT's LIMIT and OFFSET as ints (``_limit``/``_offset``, all versions).

    Raises :class:`sqlalchemy.exc.CompileError` when either is an expression.
    """
    return statement._limit, statement._offset


def raw_columns_of(statement: Any) -> Sequence[Any]:
    """A SELECT's columns clause as written (``_raw_columns``, all versions): unlike
    ``selected_columns``, it keeps ``text()`` entries, which name no column."""
    return tuple(statement._raw_columns)


def order_by_of(statement: Any) -> Sequence[Any]:
    """A SELECT's ORDER BY expressions (``_order_by_clauses``, all versions)."""
    return tuple(statement._order_by_clauses)


def group_by_of(statement: Any) -> Sequence[Any]:
    """A SELECT's GROUP BY expressions (``_group_by_clauses``, all versions)."""
    return tuple(statement._group_by_clauses)


def has_having(statement: Any) -> bool:
    """Whether a SELECT has a HAVING clause (``_having_criteria``, all versions)."""
    return bool(statement._having_criteria)


def having_of(statement: Any) -> Any:
    """A SELECT's HAVING criteria as one clause, or None (``_having_criteria``, all versions)."""
    from sqlalchemy import and_

    criteria = tuple(statement._having_criteria)
    if not criteria:
        return None
    return criteria[0] if len(criteria) == 1 else and_(*criteria)


def without_having(statement: Any) -> Any:
    """A copy of a SELECT without its HAVING clause (``_generate``/``_having_criteria``, all
    versions; ``Select.having()`` only adds criteria)."""
    copy = statement._generate()
    copy._having_criteria = ()
    return copy


def compound_keyword(statement: Any) -> str:
    """A compound SELECT's operator, ``"UNION"``, ``"UNION ALL"``, ``"EXCEPT"``, ...
    (``CompoundSelect.keyword``, an enum of a private class on every version)."""
    keyword = statement.keyword
    return str(getattr(keyword, "value", keyword))


def fetch_clause_of(statement: Any) -> Any:
    """A SELECT's FETCH FIRST clause or None (``_fetch_clause``, all versions)."""
    return statement._fetch_clause


def distinct_of(statement: Any) -> bool:
    """Whether a SELECT is DISTINCT or DISTINCT ON (``_distinct``/``_distinct_on``, all versions)."""
    return bool(statement._distinct or statement._distinct_on)


def listeners_of(dispatch: Any, name: str) -> tuple[Any, ...]:
    """The functions listening to event ``name`` on ``dispatch`` (a mapper's, a class
    manager's or an attribute's ``dispatch``), as SQLAlchemy holds them (``dispatch.<name>``
    iterated, all versions)."""
    found = getattr(dispatch, name)
    return tuple(found) if found else ()


def listener_registrations() -> int:
    """How many ``event.listen`` registrations the process holds (SQLAlchemy's
    ``event.registry._key_to_collection``, all versions): it changes when a listener is
    added or removed, so a check of listeners can be skipped while it does not."""
    return len(event_registry._key_to_collection)


def listener_function(listener: Any) -> Any:
    """The function given to ``event.listen`` behind SQLAlchemy's wrapper of it (the ``fn``
    its closure holds, all versions); ``listener`` itself when it is not wrapped."""
    code = getattr(listener, "__code__", None)
    closure = getattr(listener, "__closure__", None)
    if code is not None and closure and "fn" in code.co_freevars:
        return closure[code.co_freevars.index("fn")].cell_contents
    return listener


def locks_rows(statement: Any) -> bool:
    """Whether a SELECT locks the rows it reads: FOR UPDATE, FOR SHARE and their variants
    (``_for_update_arg``, all versions)."""
    return getattr(statement, "_for_update_arg", None) is not None


_EXTENSION_POINTS = (
    "_post_select_clause",
    "_pre_columns_clause",
    "_post_criteria_clause",
    "_post_body_clause",
)
"""Where SQLAlchemy 2.1 keeps a SELECT's syntax extensions (``Select.ext()``); absent in 2.0."""


def _extensions_of(statement: Any) -> list[Any]:
    found: list[Any] = []
    for point in _EXTENSION_POINTS:
        clause = getattr(statement, point, None)
        if clause is not None:
            found.extend(getattr(clause, "clauses", None) or (clause,))
    return found


def distinct_on_of(statement: Any) -> tuple[Any, ...]:
    """The expressions of a SELECT's DISTINCT ON, however written: ``select.distinct(*expr)``
    (``_distinct_on``, all versions) or ``select.ext(postgresql.distinct_on(*expr))`` (a
    syntax extension holding ``_distinct_on``, version 2.1)."""
    found = tuple(statement._distinct_on)
    for extension in _extensions_of(statement):
        found += tuple(getattr(extension, "_distinct_on", ()))
    return found


def syntax_extensions_of(statement: Any) -> list[Any]:
    """A SELECT's syntax extensions (``Select.ext()``, ``_post_select_clause`` and the other
    extension points: version 2.1; none in 2.0) other than DISTINCT ON: SQL that SQLAlchemy
    places where the extension says, with a meaning only it knows."""
    return [e for e in _extensions_of(statement) if not hasattr(e, "_distinct_on")]


def prefixes_of(statement: Any) -> list[tuple[str, str | None]]:
    """A SELECT's ``prefix_with()`` texts, each with the dialect it renders for (None or
    ``"*"``: every one) (``_prefixes``, all versions)."""
    return [(str(getattr(c, "text", c)), d) for c, d in statement._prefixes]


def suffixes_of(statement: Any) -> list[tuple[str, str | None]]:
    """A SELECT's ``suffix_with()`` texts, each with the dialect it renders for
    (``_suffixes``, all versions)."""
    return [(str(getattr(c, "text", c)), d) for c, d in statement._suffixes]


def insert_select_of(statement: Any) -> Any:
    """The SELECT of an ``insert().from_select()``, or None (``select``, all versions)."""
    return getattr(statement, "select", None)


def sql_of(value: Any) -> Any:
    """The SQL expression a value given for a column is or stands for: a ``ClauseElement``
    itself, an ORM attribute's column (``__clause_element__``, all versions); None for a
    plain value (which SQLAlchemy sends as a bound parameter)."""
    if hasattr(value, "__clause_element__"):
        value = value.__clause_element__()
    return value if isinstance(value, sqlalchemy.ClauseElement) else None


def upsert_values_of(statement: Any) -> list[Any]:
    """What an INSERT's ON CONFLICT DO UPDATE (PostgreSQL, SQLite) or ON DUPLICATE KEY
    UPDATE (MySQL) clause sets and tests, as given: its SET values (SQL expressions or
    plain values, which SQLAlchemy sends as bound parameters) and WHERE.

    ``_post_values_clause`` holds the clause in every version; SQLAlchemy 2.0's traversal
    (``get_children``, cloning) does not enter it (2.1's does).
    """
    clause = getattr(statement, "_post_values_clause", None)
    if clause is None:
        return []
    found: list[Any] = []
    for attribute in ("update_values_to_set", "update"):  # PG/SQLite; MySQL
        values = getattr(clause, attribute, None)
        if isinstance(values, dict):
            found.extend(values.values())
        elif isinstance(values, (list, tuple)):
            found.extend(value for _, value in values)
    where = getattr(clause, "update_whereclause", None)
    return found if where is None else [*found, where]


def upsert_clauses_of(statement: Any) -> list[Any]:
    """The SQL expressions among :func:`upsert_values_of`, an ORM attribute as its column
    (all versions): walks of the statement that must see every table it names add these,
    as SQLAlchemy 2.0's traversal skips them.
    """
    found = [sql_of(value) for value in upsert_values_of(statement)]
    return [value for value in found if value is not None]


def _version() -> tuple[int, ...]:
    """SQLAlchemy's version as numbers (2.0.5.post1: (2, 0, 5))."""
    return tuple(int(p) for p in sqlalchemy.__version__.split(".")[:3] if p.isdigit())


UPSERT_CLAUSES_RETARGETED = _version() >= (2, 1)
"""Whether cloning an INSERT copies its upsert clause (:func:`upsert_clauses_of`), so the
model's columns named there can be retargeted to a physical table (SQLAlchemy 2.1 on)."""


def has_options(statement: Any) -> bool:
    """Whether a statement carries ORM loader options (``_with_options``, all versions)."""
    return bool(statement._with_options)


def options_of(statement: Any) -> tuple[Any, ...]:
    """The options of a statement, loader options included: those given before
    ``with_only_columns()`` (``Query.with_entities()``) replaced the columns, which the
    SELECT keeps aside with its old columns and the ORM still applies, then its own
    (``_memoized_select_entities`` and ``_with_options``, all versions); () for a
    statement that takes none."""
    return (*_set_aside(statement, "_with_options"), *getattr(statement, "_with_options", ()))


def _set_aside(statement: Any, attribute: str) -> tuple[Any, ...]:
    """``attribute`` (``_with_options`` or ``_setup_joins``) of each set of columns a SELECT
    keeps aside after ``with_only_columns()`` replaced them (``_memoized_select_entities``,
    all versions), in order."""
    memoized = getattr(statement, "_memoized_select_entities", ())
    return tuple(item for entities in memoized for item in getattr(entities, attribute))


def criteria_condition(option: Any, entity: Any) -> Any:
    """The condition a ``with_loader_criteria()`` option gives for ``entity`` (a class or
    an aliased entity): its lambda called with it, as the ORM calls it, or its expression
    (``_where_crit_orig``, the callable or expression as given, all versions)."""
    if option.deferred_where_criteria:
        return option._where_crit_orig(entity)
    return option.where_criteria


EXPLICIT_JOINS_TAKE_CRITERIA = _version() >= (2, 0, 22)
"""Whether the ORM applies a ``with_loader_criteria()`` option to the target of an explicit
``join(Target, on)``: before 2.0.22 only to a join through a relationship attribute, so a
relationship join written out explicitly must carry the target's criteria in its ON."""

ALIASES_TAKE_CRITERIA = _version() >= (2, 0, 4)
"""Whether the ORM can apply loader criteria to an entity aliased with ``adapt_on_names``
(the UNION ALL of a model's tables): before version 2.0.4 its column adapter reads
``.name`` of every element of the condition and raises ``AttributeError``."""


def joins_of(statement: Any) -> tuple[Any, ...]:
    """The ``join()`` calls of a SELECT, each a tuple (target, ON clause, left side, flags),
    in the order the ORM applies them: first those made before ``with_only_columns()``
    (or ``Query.with_entities()``) replaced the columns, which the SELECT keeps aside with
    its old columns, then its own (``_memoized_select_entities`` and ``_setup_joins``, all
    versions); () for other statements."""
    return (*joins_set_aside(statement), *getattr(statement, "_setup_joins", ()))


def joins_set_aside(statement: Any) -> tuple[Any, ...]:
    """The ``join()`` calls a SELECT keeps aside with the columns ``with_only_columns()``
    replaced, as :func:`joins_of` gives them (``_memoized_select_entities``, all
    versions)."""
    return _set_aside(statement, "_setup_joins")


def with_joins(statement: Any, joins: Sequence[tuple[Any, ...]]) -> Any:
    """A copy of a SELECT whose ``join()`` calls are ``joins``, one for each of those
    :func:`joins_of` gives, in its order (``_generate``, ``_clone``, ``_setup_joins`` and
    ``_memoized_select_entities``, all versions)."""
    copied = statement._generate()
    start, kept = 0, []
    for entities in statement._memoized_select_entities:
        clone = entities._clone()
        end = start + len(entities._setup_joins)
        clone._setup_joins = tuple(joins[start:end])
        kept.append(clone)
        start = end
    copied._memoized_select_entities = tuple(kept)
    copied._setup_joins = tuple(joins[start:])
    return copied


def where_criteria_mappers(statement: Any) -> set[Any] | None:
    """The mappers whose loader criteria the ORM puts in the WHERE clause of an ORM SELECT,
    or None if the statement does not compile on its own.

    Read from the compile state as ``_adjust_for_extra_criteria`` (2.0.x) decides: the
    entity a FROM entry is annotated with (an entity given to ``select_from()``, a join
    through a relationship of one) and the entities among the columns
    (``extra_criteria_entities``), except those that are the right side of a join
    (``_join_entities``); called on versions before 2.0.22 only.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = statement.compile().compile_state
        found = [f._annotations.get("parententity") for f in state.from_clauses]
        found.extend(state.extra_criteria_entities)
        joined = set(state._join_entities)
    except Exception:  # noqa: BLE001 - a statement only its database compiles
        return None
    return {e.mapper for e in found if e is not None and e not in joined}


def explicit_join(from_: Any, target: Any, onclause: Any, flags: dict[str, Any]) -> tuple[Any, ...]:
    """The tuple :func:`joins_of` holds for ``join_from(from_, target, onclause, **flags)``:
    made by that public call, read back (``_setup_joins``, all versions)."""
    made = sqlalchemy.select().join_from(
        from_, target, onclause, isouter=bool(flags.get("isouter")), full=bool(flags.get("full"))
    )
    return tuple(made._setup_joins[0])


def relationship_join_extras(attribute: Any) -> tuple[tuple[Any, ...], Any]:
    """``(criteria, of_type)`` of a relationship attribute in a ``join()``: what
    ``.and_(...)`` added to its ON clause, and the entity ``.of_type()`` names, or None
    (``_extra_criteria``, ``_of_type``, all versions)."""
    return tuple(getattr(attribute, "_extra_criteria", ())), getattr(attribute, "_of_type", None)


def values_of(statement: Any) -> dict[Any, Any]:
    """Column (or key) -> value of an INSERT's or UPDATE's ``values()`` (``_values``, all
    versions); {} when it has none."""
    return dict(getattr(statement, "_values", None) or {})


def listed_rows(statement: Any) -> list[dict[str, Any]] | None:
    """The rows of an INSERT's ``values([...])`` (of every such call, in order), each as
    column key -> value as given (a Python value or a SQL expression); None if it has none.

    A positional row (a tuple) is keyed by the table's columns in order, as SQLAlchemy reads
    it (``_multi_values``: per call, a list of dicts keyed by column or name, or of tuples;
    all versions).
    """
    if not statement._multi_values:
        return None
    names = [column.key for column in statement.table.c]
    rows: list[dict[str, Any]] = []
    for listed in statement._multi_values:
        for row in listed:
            if isinstance(row, dict):
                rows.append({k if isinstance(k, str) else k.key: v for k, v in row.items()})
            else:
                rows.append(dict(zip(names, row)))
    return rows


def untraversed_of(statement: Any) -> list[Any]:
    """The expressions of a statement that SQLAlchemy's traversal (``get_children()``,
    cloning) does not enter in this version: an INSERT's upsert clause on 2.0
    (:func:`upsert_clauses_of`) and, in every version, the SQL expressions among the rows
    of its ``values([...])`` (:func:`listed_rows`). Empty for other statements."""
    if not getattr(statement, "is_insert", False) or not hasattr(statement, "_multi_values"):
        return []
    found = [] if UPSERT_CLAUSES_RETARGETED else upsert_clauses_of(statement)
    for row in listed_rows(statement) or ():
        found.extend(sql for sql in map(sql_of, row.values()) if sql is not None)
    return found


def merge_inserted(results: Sequence[Result[Any]]) -> Result[Any]:
    """The results of one INSERT's parts (its rows, one statement per table) as one, with a
    ``rowcount`` as one table's result has: the parts' sum, or -1 (unknown, as PEP 249 has
    it) if a part's is unknown.

    ``CursorResult.merge`` sums ``rowcount`` only where each part kept it (UPDATE, DELETE,
    ``preserve_rowcount=True``) and otherwise leaves the merged result without the
    attribute (all versions); SQLAlchemy sets it on the merged result the same way."""
    merged = results[0].merge(*results[1:])
    if isinstance(results[0], CursorResult) and "rowcount" not in vars(merged):
        counts = [part.rowcount for part in results]  # type: ignore[attr-defined]
        merged.rowcount = -1 if min(counts) < 0 else sum(counts)
    return merged


def default_column(context: Any) -> Any:
    """The column a Python column default computes a value for (``current_column``). For
    the rows after the first of an INSERT's ``values([...])`` SQLAlchemy passes a stand-in
    (``_multiparam_column``, unhashable) whose ``original`` is the column (all versions)."""
    column: Any = getattr(context, "current_column", None)
    if getattr(column, "_is_multiparam_column", False):
        return column.original
    return column


def default_row(context: Any) -> dict[str, Any]:
    """The values of the row a Python column default computes a value for, by column key,
    as ``context.get_current_parameters()`` gives them.

    For an INSERT's ``values([...])`` whose rows are keyed by columns (as an ORM insert keys
    them) SQLAlchemy's own reading fails: it formats the column object into the name of the
    row's parameter (``KeyError: 'orders.user_id_m0'``; ``_has_multi_parameters``,
    ``_dict_parameters``, the ``<key>_m<row>`` parameter names, all versions). Here each
    key's name is used; a value given as a SQL expression has no parameter and is absent.
    """
    compile_state: Any = getattr(context.compiled, "compile_state", None)
    if not (context.isinsert and getattr(compile_state, "_has_multi_parameters", False)):
        return dict(context.get_current_parameters())
    column = context.current_column
    index = column.index + 1 if getattr(column, "_is_multiparam_column", False) else 0
    parameters = context.current_parameters
    row: dict[str, Any] = {}
    for key in compile_state._dict_parameters:
        name = key if isinstance(key, str) else key.key
        if f"{name}_m{index}" in parameters:
            row[name] = parameters[f"{name}_m{index}"]
    return row


def values_cleared(statement: Any) -> Any:
    """A copy of an INSERT without its ``values()`` (one row or a list), all else kept (its
    RETURNING, upsert clause, prefixes, options): to give it other rows (``_generate``,
    ``_values``, ``_multi_values``, all versions)."""
    copy = statement._generate()
    copy._values = None
    copy._multi_values = ()
    return copy


def loader_strategies(statement: Any) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """``(path, strategy)`` of each loader option of an ORM statement: the path as
    ``(mapper, relationship, mapper, ...)``, ``()`` for a wildcard (``joinedload("*")``),
    the strategy as a dict (``{"lazy": "joined"}``). ``_with_options``, ``Load.context``,
    ``_LoadElement.path``/``strategy`` and ``_WildcardLoad.strategy``, all versions."""
    for option in getattr(statement, "_with_options", ()):
        elements = getattr(option, "context", None)
        if elements is None:  # a wildcard: one strategy for every relationship
            if getattr(option, "strategy", None):
                yield (), dict(option.strategy)
            continue
        for element in elements:
            if element.strategy:
                yield tuple(element.path.path), dict(element.strategy)


def replacement_blocked(element: Any) -> bool:
    """Whether SQLAlchemy's ``replacement_traverse`` leaves ``element`` and all it holds as
    they are: the ``no_replacement_traverse`` annotation that relationship comparisons
    (``.any()``, ``.has()``) put on their criteria (``_annotations``, all versions)."""
    return "no_replacement_traverse" in getattr(element, "_annotations", ())


def unblocked(element: Any) -> Any:
    """``element`` without the ``no_replacement_traverse`` mark of :func:`replacement_blocked`,
    its other annotations (the ORM entity it names) kept (``_deannotate``, all versions)."""
    if not replacement_blocked(element):
        return element
    return element._deannotate(values=("no_replacement_traverse",), clone=True)


def exists_select(element: Any) -> Any:
    """The SELECT inside an ``EXISTS`` (``Exists.element``, a ``ScalarSelect`` whose
    ``element`` is the SELECT, all versions), or None if it holds another shape."""
    inner = getattr(getattr(element, "element", None), "element", None)
    return inner if isinstance(inner, sqlalchemy.Select) else None


def froms_of(select: Any) -> tuple[Any, ...]:
    """The FROM entries a SELECT was given (``select_from()``: ``_from_obj``, all versions)."""
    return tuple(select._from_obj)


def _joined_tables(select: Any) -> set[Any]:
    """The FROM entries the ``join()`` calls of a SELECT bring in, as targets or explicit
    left sides (:func:`joins_of`); a relationship attribute counts for its mapper's table."""
    found: set[Any] = set()
    for target, _on, left, *_ in joins_of(select):
        for part in (target, left):
            mapper = getattr(getattr(part, "property", None), "mapper", None)
            if isinstance(mapper, Mapper):
                part = mapper.local_table
            if isinstance(part, FromClause):
                found.add(deannotated(part))
    return found


def with_only_columns_keeping_froms(select: Select[Any], *columns: Any) -> Select[Any]:
    """``select.with_only_columns(*columns, maintain_column_froms=True)``, except that a
    FROM entry the old columns implied is not given to ``select_from()`` when a ``join()``
    of the SELECT already brings it in: the ORM refuses an explicit left side
    (``join_from(Order, Status)``) found in two FROM entries, ``items JOIN orders`` and
    ``orders`` ("Can't identify which entity in which to assign the left side"), on all
    versions."""
    joined = _joined_tables(select)
    kept = [f for f in select.columns_clause_froms if deannotated(f) not in joined]
    made: Select[Any] = select.select_from(*kept).with_only_columns(*columns)
    return made


_FROMS_DIALECT = DefaultDialect()


def final_froms(select: Any) -> Sequence[Any]:
    """``select.get_final_froms()`` (the FROM entries the SELECT renders; [] for anything
    but a SELECT), without rendering the statement.

    SQLAlchemy 2.1 renders the whole statement with the default string compiler first, which
    cannot render some elements a dialect can (an array slice ``a[1:2]``, a construct a
    user ``@compiles`` for one dialect only): the plain statement runs, but asking for its
    FROM list raised. The FROM list is the statement's compile state's, as in every version
    (the floor builds it without a compiler); here it is built with a compiler that renders
    nothing.
    """
    if not hasattr(select, "get_final_froms"):
        return []
    compiler = _FROMS_DIALECT.statement_compiler(_FROMS_DIALECT, None)
    froms: Sequence[Any] = select._compile_state_factory(select, compiler)._get_display_froms()
    return froms


def correlation_exceptions_of(select: Any) -> tuple[Any, ...] | None:
    """What ``correlate_except()`` named (``_correlate_except``, all versions), or None."""
    found = select._correlate_except
    return None if found is None else tuple(found)


def blocked_froms(select: Any) -> list[Any]:
    """The FROM entries and correlation exceptions of a SELECT that ``replacement_traverse``
    leaves as they are (:func:`replacement_blocked`): relationship comparisons put their
    target's table there so marked (``_from_obj``, ``_correlate_except``, all versions;
    ``get_children`` hands out unannotated copies)."""
    parts = (*getattr(select, "_from_obj", ()), *(getattr(select, "_correlate_except", None) or ()))
    return [part for part in parts if replacement_blocked(part)]


def has_returning(statement: Any) -> bool:
    """Whether an INSERT/UPDATE/DELETE has RETURNING (``_returning``, all versions; the
    public ``returning_column_descriptions`` fails for an ORM entity in version 2.1)."""
    return bool(statement._returning)


def sorts_by_parameter_order(statement: Any) -> bool:
    """Whether an INSERT's RETURNING was asked to follow the parameter sets' order
    (``returning(..., sort_by_parameter_order=True)``, new in version 2.0.10:
    ``_sort_by_parameter_order``)."""
    return bool(getattr(statement, "_sort_by_parameter_order", False))


def variant_for(type_: Any, dialect: str) -> Any:
    """The type ``type_.with_variant(..., dialect)`` gave for ``dialect``, else ``type_``.

    A type keeps its variants in the private ``_variant_mapping`` (all versions); the
    public ``dialect_impl()`` needs a dialect object, which a merge plan, keyed by the
    dialect's name, does not hold.
    """
    mapping = getattr(type_, "_variant_mapping", None)
    return mapping.get(dialect, type_) if mapping else type_


def orm_annotated(element: Any) -> bool:
    """Whether a table or column is the ORM's annotated copy naming a mapped entity.

    The ORM marks those copies with a ``parententity`` annotation (``_annotations``, all
    versions).
    """
    return "parententity" in element._annotations


def parent_entity(element: Any) -> Any:
    """The mapped entity (mapper or aliased entity) an ORM-annotated table or column
    names, or None (the ``parententity`` annotation, ``_annotations``, all versions)."""
    return getattr(element, "_annotations", {}).get("parententity")


def refreshes_state(compiled: Any) -> bool:
    """Whether a compiled ORM statement loads the attributes of objects already loaded (a
    refresh, an expired attribute), to which the ORM applies no loader criteria (its
    compile state's ``compile_options._for_refresh_state``, all versions)."""
    state = getattr(compiled, "compile_state", None)
    return bool(getattr(getattr(state, "compile_options", None), "_for_refresh_state", False))


def deannotated(element: Any) -> Any:
    """The plain element behind an ORM-annotated copy (``_deannotate``, all versions)."""
    return element._deannotate() if element._annotations else element


def explicit_correlation(select: Any) -> bool:
    """Whether a SELECT's correlation was set by hand (``correlate()``,
    ``correlate_except()``, ``correlate(None)``) rather than left automatic.

    SQLAlchemy keeps these settings in the private ``_auto_correlate``, ``_correlate`` and
    ``_correlate_except`` attributes of ``Select`` (all versions) and has no public reader.
    """
    return (
        not getattr(select, "_auto_correlate", True)
        or bool(getattr(select, "_correlate", ()))
        or getattr(select, "_correlate_except", None) is not None
    )


def plugin_subject_of(statement: Any) -> Any:
    """The ORM entity a statement is "about" (``_propagate_attrs``, all versions)."""
    return statement._propagate_attrs.get("plugin_subject")


def set_plugin_subject(statement: Any, subject: Any) -> None:
    """Make the ORM treat ``statement`` (a fresh copy) as about ``subject``.

    The ORM reads a statement's bind mapper and DML target from its propagated attributes
    (``_set_propagate_attrs``, all versions); a copy made by a replacement traversal keeps
    the original's.
    """
    statement._set_propagate_attrs({"compile_state_plugin": "orm", "plugin_subject": subject})


def bundle_of(element: Any) -> Any:
    """The :class:`~sqlalchemy.orm.Bundle` whose SQL element ``element`` is, or None.

    ``Bundle.__clause_element__()`` is a ``ClauseList`` annotated ``{"bundle": bundle}``
    (``_annotations``, all versions); the ORM compiles a bundle from that bundle's
    ``exprs``, not from the list's children, so a rewrite must build a new Bundle. Needed on
    every version for a user's ``select(Bundle(...))``, and on SQLAlchemy 2.0.x for every
    ``selectinload()``, whose statement selects ``Bundle("pk", ...)`` (2.1 selects the key
    columns directly).
    """
    annotations = getattr(element, "_annotations", None)
    return annotations.get("bundle") if annotations else None


def forget_clone_origin(statement: Any) -> Any:
    """``statement`` (a fresh copy) no longer pointing at the element it was cloned from.

    Every clone keeps its original in ``_is_clone_of`` (all versions), so a memo holding a
    rewritten statement would keep the original, and every table it names, alive. Only the
    copy's own reference is dropped; it is returned for chaining.
    """
    statement.__dict__.pop("_is_clone_of", None)
    return statement


def copy_schema_item(item: Any, **kw: Any) -> Any:
    """A copy of a ``Column`` or ``Constraint`` (``_copy``, all versions; the public ``copy()``
    is deprecated since SQLAlchemy 1.4)."""
    return item._copy(**kw)


def is_type_bound(constraint: Any) -> bool:
    """Whether a constraint belongs to its column's type (the CHECK of a Boolean or Enum).

    The type re-makes such a constraint when its table is copied, so copying it too would
    create it twice. SQLAlchemy marks them with the private ``_type_bound`` flag in all
    versions (2.0.x, 2.1.x) and has no public reader.
    """
    return bool(getattr(constraint, "_type_bound", False))


class KeyedSubquery(Subquery):
    """A subquery whose statement-cache key is a given string, not a walk of its SELECT.

    A statement's cache key is computed on every execution by walking it; a subquery
    whose SQL is fully determined by a short key (e.g. "these 16 tables of this model")
    keeps statements over it as cheap to look up as over one table. Cache-key traversal
    is declared with the ``_cache_key_traversal`` hook in all versions (2.0.x, 2.1.x).
    """

    inherit_cache = True  # so that its annotated (ORM) copies use the key below too
    _cache_key_traversal = [  # noqa: RUF012 - SQLAlchemy's hook is a plain class list
        ("snowshard_key", InternalTraversal.dp_string),
        ("_annotations", InternalTraversal.dp_annotations_key),
    ]
    snowshard_key: str


class PaddedWeight(ColumnElement[bytes]):
    """``WEIGHT_STRING(element AS CHAR(length))`` (MariaDB, MySQL): bytes that sort and
    match as ``element`` does under its collation, trailing spaces included (the string is
    padded to ``length`` characters first, which PAD SPACE collations weigh as spaces).

    A construct of its own declares what its cache key is made of with the
    ``_traverse_internals`` hook (all versions); it is compiled with the public
    ``@compiles``.
    """

    __visit_name__ = "snowshard_padded_weight"
    inherit_cache = True
    _traverse_internals = [  # noqa: RUF012 - SQLAlchemy's hook is a plain class list
        ("element", InternalTraversal.dp_clauseelement),
        ("length", InternalTraversal.dp_plain_obj),
    ]
    type = LargeBinary()

    def __init__(self, element: Any, length: int) -> None:
        self.element = element
        self.length = int(length)


@compiles(PaddedWeight)
def _render_padded_weight(element: PaddedWeight, compiler: Any, **kw: Any) -> str:
    return f"WEIGHT_STRING({compiler.process(element.element, **kw)} AS CHAR({element.length}))"


def keyed_subquery(selectable: Any, *, name: str, key: str) -> KeyedSubquery:
    """``selectable`` as a :class:`KeyedSubquery` named ``name`` with cache key ``key``.

    Subqueries are built with the private ``_construct`` classmethod (all versions); the
    public ``.subquery()`` would always make a plain :class:`~sqlalchemy.Subquery`.
    """
    subquery: KeyedSubquery = KeyedSubquery._construct(selectable, name=name)
    subquery.snowshard_key = key
    return subquery


def cache_key_of(statement: Any) -> Any:
    """A statement's SQLAlchemy cache key (``key``, ``bindparams``), or None if uncacheable.

    ``_generate_cache_key`` is private in all versions (2.0.x, 2.1.x); the result is
    memoized on the statement, so the compiled cache reuses it when it is executed.
    """
    return statement._generate_cache_key()


class SlotParameter(BindParameter[Any]):
    """A bound parameter whose value is read, at execution, from a callable.

    Its class is part of its cache key (``inherit_cache``), so statements holding it are
    compiled apart from statements with ordinary parameters, and every compiled form of
    such a statement reads the callable. Needed on all versions (2.0.x, 2.1.x): there is no
    public way to give a cached statement new values without copying it.
    """

    inherit_cache = True


class SlotLimitParameter(_OffsetLimitParam, SlotParameter):
    """:class:`SlotParameter` in a LIMIT/OFFSET position (``_OffsetLimitParam`` is private in
    all versions; SELECT reads an integer limit from that class only)."""

    inherit_cache = True


def slot_parameter(bind: Any, read: Callable[[], Any]) -> SlotParameter:
    """A :class:`SlotParameter` standing for ``bind`` (same key, type and flags; a LIMIT or
    OFFSET stays a ``_OffsetLimitParam``, as all versions require)."""
    cls = SlotLimitParameter if isinstance(bind, _OffsetLimitParam) else SlotParameter
    return cls(
        bind.key,
        callable_=read,
        type_=bind.type,
        unique=bind.unique,
        required=bind.required,
        expanding=bind.expanding,
        literal_execute=bind.literal_execute,
    )


# --------------------------------------------------------------------------- ORM execution
# Running an ORM SELECT on a Connection the caller holds (another thread's, for concurrent
# fan-out) and turning its rows into ORM results in the Session's thread: Session.execute
# does exactly these two steps around ``Connection.execute`` (``orm_pre_session_exec``,
# ``orm_setup_cursor_result`` of the statement's compile-state plugin; public names on a
# class SQLAlchemy looks up with the private ``_get_plugin_class_for_plugin``, all
# versions). 2.0 returns (statement, options) from the first, 2.1 adds the parameters.


def _is_orm(statement: Any) -> bool:
    # what Session.execute asks (``_propagate_attrs``, all versions): a select() of Core
    # tables and columns only is executed as Core, without ORM loading
    return bool(statement._propagate_attrs.get("compile_state_plugin") == "orm")


def _orm_plugin(statement: Any) -> Any:
    return CompileState._get_plugin_class_for_plugin(statement, "orm")


def orm_pre_execute(
    session: Any,
    statement: Any,
    params: Any,
    options: Any,
    bind_arguments: dict[str, Any],
) -> tuple[Any, Any, Any]:
    """(statement, execution options, parameters) as ``Session.execute`` sends a statement
    to its connection: load options parsed, autoflush done (``_autoflush`` for a Core
    statement), ``bind_arguments`` given its ``clause``/``mapper`` (all versions; the
    return grew ``params`` in 2.1)."""
    if not _is_orm(statement):  # a Core statement: Session.execute's own steps for it
        bind_arguments.setdefault("clause", statement)
        session._autoflush()
        return statement, options, params
    done = _orm_plugin(statement).orm_pre_session_exec(
        session, statement, params, options, bind_arguments, False
    )
    if len(done) == 2:  # SQLAlchemy 2.0.x
        return done[0], done[1], params
    return done[0], done[1], done[2]


def orm_cursor_result(
    session: Any,
    statement: Any,
    params: Any,
    options: Any,
    bind_arguments: dict[str, Any],
    cursor_result: CursorResult[Any],
) -> Result[Any]:
    """The ORM result (objects built lazily, per chunk) of an ORM statement's rows
    (``orm_setup_cursor_result``, found as above, all versions); a Core statement's
    result is its cursor result."""
    if not _is_orm(statement):
        return cursor_result  # a Core statement's rows are its result
    found: Result[Any] = _orm_plugin(statement).orm_setup_cursor_result(
        session, statement, params, options, bind_arguments, cursor_result
    )
    return found


_READS_HOOK_PARAMETERS = _version() >= (2, 1)


def hand_back_parameters(state: Any, parameters: Any) -> bool:
    """Give the statement a ``do_orm_execute`` hook hands back (``state.statement``) these
    execution parameters; False if this version cannot, and the hook must run it itself.

    Version 2.1.x reads ``ORMExecuteState.parameters`` again after the hooks; 2.0.x
    executes the parameters given to ``Session.execute`` whatever a hook sets.
    """
    if not _READS_HOOK_PARAMETERS:
        return False
    state.parameters = parameters
    return True


def invoke_statement(
    state: Any, statement: Any, params: Any, bind_arguments: dict[str, Any]
) -> Result[Any]:
    """``state.invoke_statement`` with parameters merged over the execution's own.

    SQLAlchemy versions 2.0.x (to at least 2.0.44) merge them with
    ``dict(state.parameters)``, which fails for a statement executed without parameters
    (None); 2.1.x handles None.
    """
    if params and state.parameters is None:
        state.parameters = {}
    result: Result[Any] = state.invoke_statement(
        statement, params=params, bind_arguments=bind_arguments
    )
    return result


def later_orm_hooks(state: Any) -> bool:
    """Whether ``do_orm_execute`` listeners run after the one handling ``state``
    (``ORMExecuteState._remaining_events``, all versions): those must see sub-statements
    run through ``invoke_statement``."""
    return bool(state._remaining_events())


def session_execution_options(session: Any) -> Any:
    """The execution options every statement of ``session`` starts from:
    ``Session(execution_options=...)``, new in version 2.1.x (2.0.x has none)."""
    return getattr(session, "execution_options", _NO_OPTIONS)


_NO_OPTIONS: dict[str, Any] = {}


def only_orm_hook(session: Any) -> bool:
    """Whether ``session`` has exactly one ``do_orm_execute`` listener (its dispatch
    collection, all versions): no other hook expects to see its statements."""
    return len(session.dispatch.do_orm_execute) == 1


class _NoHooksLeft:
    """Stands in for the ``ORMExecuteState`` of a statement whose hooks have all run:
    ``Session._execute_internal`` (all versions) runs the hooks a parent state has left,
    here none."""

    __slots__ = ()

    def _remaining_events(self) -> tuple[()]:
        return ()


_NO_HOOKS_LEFT = _NoHooksLeft()


class RoutingSession(Session):
    """A Session that may replace a statement before SQLAlchemy's ``do_orm_execute`` hooks.

    Any ``do_orm_execute`` listener makes SQLAlchemy (all versions) pre-process each ORM
    statement twice and build an ``ORMExecuteState`` for it, about a third of a sharded
    keyed read's cost over a plain one. A statement that :meth:`route_first` resolves to
    one statement and bind runs as that, with no hook; every other runs through the hooks
    as usual. Statements that hooks re-invoke (``ORMExecuteState.invoke_statement``) and
    SQLAlchemy's own internal re-executions (``_add_event``) always go through them.

    ``Session._execute_internal`` is the one method ``execute``, ``scalars``, ``scalar``
    and ``invoke_statement`` all call (private, all versions).
    """

    def route_first(
        self,
        statement: Any,
        params: Any,
        execution_options: Any,
        bind_arguments: dict[str, Any] | None,
    ) -> tuple[Any, Any, dict[str, Any]] | None:
        """``(statement, params, bind_arguments)`` to run without hooks, or None."""
        return None

    def _execute_internal(
        self,
        statement: Any,
        params: Any = None,
        *,
        execution_options: Any = sqlalchemy.util.EMPTY_DICT,
        bind_arguments: dict[str, Any] | None = None,
        _parent_execute_state: Any = None,
        _add_event: Any = None,
        _scalar_result: bool = False,
        **kw: Any,  # whatever else a later version passes, handed on
    ) -> Any:
        if _parent_execute_state is None and _add_event is None and not kw:
            routed = self.route_first(statement, params, execution_options, bind_arguments)
            if routed is not None:
                statement, params, bind_arguments = routed
                _parent_execute_state = _NO_HOOKS_LEFT
        return super()._execute_internal(
            statement,
            params,
            execution_options=execution_options,
            bind_arguments=bind_arguments,
            _parent_execute_state=_parent_execute_state,
            _add_event=_add_event,
            _scalar_result=_scalar_result,
            **kw,
        )


def fetch_raw(cursor_result: CursorResult[Any], size: int | None) -> list[Any]:
    """Up to ``size`` (None: all) further rows as the driver returned them: no result
    processors run, no Row objects made (``_fetchmany_impl``/``_fetchall_impl``, all
    versions). An empty list once exhausted (the cursor is then released)."""
    rows = cursor_result._fetchall_impl() if size is None else cursor_result._fetchmany_impl(size)
    return list(rows)


def buffered_copy(cursor_result: CursorResult[Any], rows: Sequence[Any]) -> CursorResult[Any]:
    """A copy of ``cursor_result`` (same statement, same processors) holding ``rows``, raw
    rows fetched from it, instead of its cursor.

    This is what ``CursorResult.splice_vertically`` does (a fully buffered fetch strategy,
    all versions), on a shallow copy whose DBAPI cursor is marked released so that closing
    the copy never closes the original's cursor, which may still be streaming.
    """
    clone = copy.copy(cursor_result)
    clone.cursor_strategy = FullyBufferedCursorFetchStrategy(None, initial_buffer=rows)
    clone._soft_closed = True
    clone._reset_memoizations()
    return clone


def several_rows_per_object(cursor_result: CursorResult[Any]) -> bool:
    """Whether an ORM SELECT's rows repeat objects (``joinedload`` of a collection): the
    compile state's ``multi_row_eager_loaders`` (public name on a state reached through
    the execution context, all versions)."""
    compiled = cursor_result.context.compiled
    state = getattr(compiled, "compile_state", None)
    return bool(getattr(state, "multi_row_eager_loaders", False))


def interim_rows(result: Result[Any]) -> list[Any]:
    """Every row of a result as its source made them, before its metadata's processors
    (an ORM result's: the entity itself for a result of one entity, else a tuple; a cursor
    result's: the driver's rows; ``_fetchall_impl``, all versions)."""
    return list(result._fetchall_impl())


def as_single_entity(result: Result[Any]) -> Result[Any]:
    """``result`` flagged as a result of one ORM entity: the legacy ``Query`` then hands
    out its objects rather than one-element rows (``_attributes["is_single_entity"]``,
    set by ORM loading and read by ``Query``, all versions)."""
    result._attributes = result._attributes.union({"is_single_entity": True})
    return result


def returns_tuples(state: Any) -> bool:
    """Whether the legacy ``Query`` of an ``ORMExecuteState`` asked for rows even of one
    entity (``only_return_tuples(True)``, ``Query.tuples()``: the load option
    ``_only_return_tuples``, all versions)."""
    return bool(getattr(state.load_options, "_only_return_tuples", False))


class ResultCloser:
    """Closes the sources of a :func:`chunked_result` when it is closed or exhausted (the
    ``raw`` of an ``IteratorResult`` is closed through ``_soft_close``, all versions)."""

    def __init__(self, close: Callable[[], None]) -> None:
        self.close = close

    def _soft_close(self, hard: bool = False, **kw: Any) -> None:
        self.close()


def chunked_result(
    template: Result[Any],
    chunks: Callable[[int | None], Any],
    closer: ResultCloser,
) -> Result[Any]:
    """A lazy result shaped like the ORM result ``template`` (its columns, and whether rows
    are single entities), whose interim rows come from ``chunks(size)``; SQLAlchemy's
    ``ChunkedIteratorResult`` is public, the metadata and flags it takes are not
    (``_metadata``, ``_source_supports_scalars``, ``_attributes``; all versions)."""
    result: ChunkedIteratorResult[Any] = ChunkedIteratorResult(
        template._metadata,
        chunks,
        source_supports_scalars=template._source_supports_scalars,
        raw=closer,  # type: ignore[arg-type]
    )
    result._attributes = template._attributes
    return result


def fire_twophase_event(connection: Any, name: str, xid: str, *flags: bool) -> None:
    """Fire SQLAlchemy's two-phase ``ConnectionEvents`` (``begin_twophase``,
    ``prepare_twophase``, ``commit_twophase``, ``rollback_twophase``) for a two-phase
    transaction snowshard runs itself, so listeners see it as one of SQLAlchemy's own.
    Events are fired through ``Connection.dispatch``, SQLAlchemy's undocumented event
    dispatcher (the same on every 2.0.x and 2.1.x version)."""
    getattr(connection.dispatch, name)(connection, xid, *flags)


def greenlet_spawn(fn: Callable[..., Any], *args: Any) -> Any:
    """SQLAlchemy's greenlet bridge: a coroutine running sync ``fn`` that may await
    (``sqlalchemy.util.greenlet_spawn``, public in ``sqlalchemy.util``, all versions)."""
    from sqlalchemy.util import greenlet_spawn as spawn

    return spawn(fn, *args)


def await_only(awaitable: Any) -> Any:
    """Await ``awaitable`` from sync code running under :func:`greenlet_spawn`
    (``sqlalchemy.util.await_only``, all versions)."""
    from sqlalchemy.util import await_only as wait

    return wait(awaitable)


# --------------------------------------------------------------------------- Alembic


def alembic_reverse(op: Any) -> Any:
    """The operation an Alembic op was built to undo (its ``_reverse``), or None.

    All supported Alembic versions keep it in the private ``_reverse`` attribute of
    ``DropTableOp``, ``DropColumnOp``, ``DropIndexOp``, ``DropConstraintOp`` and
    ``AlterColumnOp``-free ops alike; there is no public reader.
    """
    return getattr(op, "_reverse", None)


def set_alembic_reverse(op: Any, reverse: Any) -> None:
    """Set what an Alembic op undoes (``_reverse``; the constructors take it as ``_reverse=``).

    Needed on every supported Alembic version: the attribute is private everywhere.
    """
    op._reverse = reverse


_RENDERED: set[type] = set()


def register_renderer(cls: type, render: Callable[..., str]) -> None:
    """Register ``render`` as Alembic's autogenerate renderer for operation ``cls``, once.

    Alembic 1.17 added ``replace=`` to ``renderers.dispatch_for``; before it a second
    registration of the same class fails an assertion. Registering each class once (this
    module remembers which) works on every version.
    """
    from alembic.autogenerate import renderers

    if cls in _RENDERED:
        return
    _RENDERED.add(cls)
    renderers.dispatch_for(cls)(render)
