"""Whether a merge may compare strings in Python: the collation a database compares them by.

A merge across shards (:mod:`~snowshard.sharding.merge`) sorts rows by their ORDER BY
values, takes MIN/MAX of per-source values, groups rows by their GROUP BY keys, removes
DISTINCT duplicates and computes comparisons, all in Python. Python compares strings by
code point and calls two strings equal only when they are the same string. A database
compares them by a *collation*: MariaDB's default ``utf8mb4_general_ci`` orders ``alpha``
before ``Banana``, calls ``apple`` equal to ``APPLE`` and ``a`` equal to ``a `` (PAD
SPACE); PostgreSQL's ``en_US.UTF-8`` or ICU collations order by language rules. A merge
done in Python under such a collation returns a plausible, wrong order or grouping, so it
is refused (:class:`~snowshard.sharding.errors.UnsupportedShardQuery`, before any SQL runs)
unless the collation is known, from the statement alone, to agree with Python:

* its expression says ``.collate(name)``, else its columns' types say
  ``String(collation=name)`` (dialect variants and TypeDecorators read for the session's
  dialect), derived through functions, operators, CASE results, casts and subqueries as
  the database derives it (:func:`collation_of`), else the database's default applies,
  which snowshard cannot see without asking the server, except SQLite's (``BINARY``);
* ordering (ORDER BY, MIN/MAX, ``<``/``>`` in HAVING or CASE) agrees on SQLite's ``BINARY``,
  PostgreSQL's ``C``, ``POSIX``, ``pg_c_utf8`` and ``ucs_basic`` (in a UTF-8 database; the
  C library's ``C.UTF-8`` only on recent glibc, so it is ranked, below), and MariaDB and MySQL's ``binary`` and the Unicode or ASCII character sets'
  ``*_nopad_bin`` and MySQL 8's ``*_0900_bin`` (the other ``*_bin`` collations ignore
  trailing spaces; a single-byte set's byte order is not code-point order);
* equality (GROUP BY keys, DISTINCT, ``=``) agrees with those too, and on PostgreSQL also
  with the database default, ``default``, ``C.UTF-8`` and the predefined ICU collations
  (``*-x-icu``),
  which are deterministic (equal only when the bytes are); a collation the user created
  may not be, and is refused;
* a fixed-length ``CHAR`` compares ignoring trailing spaces on PostgreSQL and MariaDB, and
  an enum orders by its declared order there: neither is taken for Python's comparison;
* MariaDB's UUID type orders by its segments swapped: refused for ordering by
  :func:`check_uuid_order` on MariaDB/MySQL;
* a Python enum (``Enum(SomeEnum)``) stored as a string orders by that string, but a
  merge of read values (grouped ORDER BY, MIN/MAX, ``<``/``>``) would hold its members,
  which Python does not order: refused by :func:`check_read_order`, unless compared by
  weight (MariaDB);
* an expression whose type SQLAlchemy does not know (``text()``, ``literal_column()``, a
  function without ``type_=``) is taken for a string when it has a string argument; with
  no typed argument at all it is refused on PostgreSQL and MariaDB (give it ``type_=``);
* MariaDB and MySQL can say how a collation compares a string: ``WEIGHT_STRING(x AS
  CHAR(n))`` is bytes that sort and match as ``x`` does, trailing spaces included. There a
  merged ORDER BY of a ``String(n)`` under any other collation sorts by it, its GROUP BY
  keys group by it (:func:`weight_of`), so do the selected columns of a DISTINCT, and
  MIN/MAX pick the source whose value weighs least or most (:func:`extreme_weight`):
  exact, not refused (comparisons of such strings, and DISTINCT over whole entities or
  grouped rows, still are). Where the collation calls two spellings equal (``apple`` and
  ``APPLE``, ``b`` and ``b ``), which one a group or MIN/MAX shows is the database's own
  choice, in one table as across shards.
* PostgreSQL has no such function, but it can order strings it is given: there a merged
  ORDER BY of a ``String`` under any other collation (a language one, ICU's, the
  database's unknown default), and MIN/MAX of one, are ordered by *ranks* one database
  gives the sources' values under the same collation (:func:`server_order`;
  :mod:`~snowshard.sharding.ranking` asks). Ranks are dense, so strings a collation calls
  equal tie as they do in one table. The default collation is the same on every database
  a merge reads, or the merge is refused before its statement runs.

A string shard key is routed by its exact value, so ``key == 'ACME'`` reads the shard of
``'ACME'``; where the database calls ``'acme'`` equal to it, one table would return that row
too, join it by key or reject it as a duplicate. Every statement on a model whose string
key matches otherwise than exactly on the session's database is refused
(:func:`check_string_keys`): declare the key column with a code-point collation.

A statement that runs whole (one shard, or one ``UNION ALL`` in one database) is compared by
the database itself and never reaches these checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ARRAY, CHAR, JSON, NCHAR, Enum, Integer, String, Uuid
from sqlalchemy.dialects.mysql import SET
from sqlalchemy.dialects.postgresql import HSTORE
from sqlalchemy.dialects.postgresql.ranges import AbstractMultiRange
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BindParameter,
    Case,
    Cast,
    CollationClause,
    ColumnClause,
    FunctionFilter,
    Over,
    TypeCoerce,
    WithinGroup,
)
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.selectable import ScalarSelect, SelectBase
from sqlalchemy.types import NullType, TypeDecorator

from snowshard._compat import PaddedWeight, variant_for
from snowshard.sharding.analysis import aggregate_function, describe, walk
from snowshard.sharding.decorated import decorator_of, stored_value
from snowshard.sharding.dialect_types import sql_types, type_for
from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.evaluate import bare
from snowshard.sharding.instants import check_instant_compared, instant_extreme, instant_key
from snowshard.sharding.intervals import interval_key, is_interval
from snowshard.sharding.opaque import check_opaque
from snowshard.sharding.ranges import is_range
from snowshard.sharding.single_floats import check_float_compared, float_key

__all__ = [
    "EQUALITY",
    "ORDERING",
    "ServerOrder",
    "check_array_order",
    "check_read_order",
    "check_string_keys",
    "check_uuid_order",
    "check_strings",
    "collation_of",
    "compares_like_python",
    "extreme_order",
    "extreme_weight",
    "orders_by_code_point",
    "server_order",
    "sort_value",
    "weight_of",
]

ORDERING = "ordering"
"""What a merge does with ORDER BY values, MIN/MAX and ``<``, ``>``: order them."""

EQUALITY = "equality"
"""What a merge does with GROUP BY keys, DISTINCT rows and ``=``: match them."""

_POSTGRES_CODE_POINT = frozenset({"c", "posix", "pg_c_utf8", "ucs_basic"})
"""PostgreSQL collations that compare bytes (in a UTF-8 database: code points)."""
_POSTGRES_LIBC_C_UTF8 = frozenset({"c.utf-8", "c.utf8"})
"""The C library's C.UTF-8: deterministic, but code-point order only on glibc 2.35 and
later (older distributions patched it otherwise), so a merge never assumes its order."""
_UNICODE_SETS = frozenset({"utf8", "utf8mb3", "utf8mb4", "ucs2", "utf32", "ascii"})
"""MariaDB/MySQL character sets whose ``*_bin`` byte order is code-point order."""
_WEIGHTED = ("mysql", "mariadb")
"""Dialects with ``WEIGHT_STRING()``."""
_ADVICE = {
    "postgresql": 'add .collate("C") to the expression or declare (and migrate) the column '
    'String(..., collation="C")',
    "mysql": 'add .collate("utf8mb4_nopad_bin") to the expression or declare (and migrate) '
    'the column String(..., collation="utf8mb4_nopad_bin")',
    "sqlite": "compare with SQLite's default BINARY collation (drop the COLLATE)",
}
_ADVICE["mariadb"] = _ADVICE["mysql"]


@dataclass(frozen=True)
class ServerOrder:
    """Strings a merge orders by asking a PostgreSQL database to rank them under
    ``collation`` (None: the database's default), since Python cannot reproduce it."""

    collation: str | None

    def describe(self) -> str:
        """The collation, for messages and ``explain``."""
        return "the database's default collation" if self.collation is None else (
            f"the collation {self.collation!r}"
        )


_TYPED_MERGES = {
    "postgresql": "a typed string is then ordered by the ranks the database gives its values",
    "mysql": "a typed String(n) is then merged by WEIGHT_STRING",
    "mariadb": "a typed String(n) is then merged by WEIGHT_STRING",
}
"""Dialects whose merge handles a string of any collation once its type is known: how."""


def collation_of(element: Any, dialect: str) -> tuple[bool | None, str | None, Any]:
    """``(is_string, collation, type)`` of an expression on ``dialect``.

    ``is_string`` is None when the expression's type is unknown and none of its parts has
    a type; ``collation`` is the one its value has (:func:`_derived`: a ``.collate()``, the
    type's, its columns'), None for the database's default; ``type`` the expression's type for that dialect (``NullType`` for
    an untyped function taken for a string because of its string argument).
    """
    plain = bare(element)
    if isinstance(plain, TypeCoerce):  # compared as the expression it renders
        return collation_of(plain.clause, dialect)
    if isinstance(plain, BinaryExpression) and plain.operator is operators.collate:
        return True, _explicit(plain), type_for(plain.left.type, dialect)
    type_ = type_for(getattr(plain, "type", None), dialect)
    if isinstance(type_, String) or _folded(type_):
        return True, _derived(plain, dialect), type_
    if isinstance(type_, ARRAY):  # an array of strings compares them by their collation
        item = type_for(type_.item_type, dialect)
        if isinstance(item, String) or _folded(item):
            return True, item.collation, type_
    if type_ is not None and not isinstance(type_, NullType):
        return False, None, type_
    if isinstance(plain, FunctionElement) and str(plain.name).lower() in _LENGTHS:
        return False, None, Integer()
    parts = [collation_of(p, dialect) for p in walk(plain) if p is not plain]
    strings = [p for p in parts if p[0]]
    if strings:
        # an untyped function over strings compares by their collation (the first that
        # Python does not reproduce, when they differ)
        worst = next((p for p in strings if not _exact(p[1], p[2], dialect, ORDERING)), None)
        return True, (worst or strings[0])[1], NullType()
    if any(p[0] is False for p in parts):
        return False, None, NullType()
    return None, None, NullType()


_LENGTHS = frozenset({"length", "char_length"})
"""Functions of a string whose value is a number on every dialect, typed or not."""


MIXED = "(different implicit collations)"
"""What :func:`collation_of` gives an expression whose string parts come from columns of
different collations (PostgreSQL cannot order it; neither can a merge)."""


def _explicit(element: Any) -> str | None:
    """The name a ``COLLATE`` clause ``element`` gives."""
    right = bare(element.right)
    return right.collation if isinstance(right, CollationClause) else None


def _carriers(element: Any) -> Iterable[Any]:
    """The parts of ``element`` whose collation its value takes: a CASE's results (not its
    operand or conditions), a window function's function (not its PARTITION or ORDER BY),
    a scalar subquery's selected column, a function's arguments and an operator's operands
    (a ``type_coerce``'s, a CAST's expression)."""
    if isinstance(element, Case):
        return [*(result for _, result in element.whens), element.else_]
    if isinstance(element, (Over, WithinGroup)):
        return [element.element]
    if isinstance(element, FunctionFilter):  # its aggregate's value, not its condition's
        return [element.func]
    if isinstance(element, ScalarSelect):
        return list(element.element.selected_columns)[:1]
    if isinstance(element, SelectBase):
        return []
    return list(element.get_children())


def _inner(column: Any) -> Any:
    """The expression a subquery's or CTE's column stands for (None for a table's)."""
    source = getattr(getattr(column, "table", None), "element", None)
    selected = getattr(source, "selected_columns", None)
    return None if selected is None else selected.get(column.key, _UNKNOWN)


_UNKNOWN = object()
"""A subquery column whose expression cannot be found."""


def _gather(element: Any, dialect: str, implicit: set[str | None]) -> str | None:
    """The collation a ``COLLATE`` clause in ``element`` gives its value, if any; else adds
    to ``implicit`` the collation of each column its value comes from. Parts that are no
    strings (a number, a comparison) pass no collation on; an untyped part (a function
    without ``type_=``) holding a column or a ``COLLATE`` may or may not pass one on: it
    adds :data:`MIXED`."""
    plain = bare(element)
    if hasattr(plain, "__clause_element__"):  # an ORM attribute: its column
        plain = bare(plain.__clause_element__())
    if plain is None:
        return None
    if isinstance(plain, BinaryExpression) and plain.operator is operators.collate:
        return _explicit(plain)
    type_ = type_for(getattr(plain, "type", None), dialect)
    if type_ is not None and not isinstance(type_, (String, NullType)) and not _folded(type_):
        return None
    declared = getattr(type_, "collation", None)
    if isinstance(plain, ColumnClause):
        selected = _inner(plain)
        if selected is _UNKNOWN:
            implicit.add(MIXED)
        elif selected is not None:  # a subquery's column: the expression it selects
            return _gather(selected, dialect, implicit)
        elif plain.is_literal:  # literal_column(): SQL text, a literal if a plain String
            implicit.add(MIXED if declared or isinstance(type_, NullType) else None)
        else:  # a table's column: the collation it was created with
            implicit.add(declared)
        return None
    if isinstance(plain, BindParameter):
        if declared:  # a value typed like a column (x > 'o'): said or not, that collation
            implicit.add(str(declared))
        return None
    if isinstance(plain, Cast):
        if dialect in _WEIGHTED:  # MariaDB gives CAST(x AS CHAR) the connection's collation
            implicit.add(None)
            return None
        if declared:  # CAST(x AS VARCHAR COLLATE c)
            return str(declared)
    if isinstance(type_, NullType):
        inner: set[str | None] = set()
        named = [_gather(part, dialect, inner) for part in _carriers(plain)]
        if inner or any(n is not None for n in named):
            implicit.add(MIXED)
        return None
    for part in _carriers(plain):
        found = _gather(part, dialect, implicit)
        if found is not None:
            return found
    return None


def _derived(element: Any, dialect: str) -> str | None:
    """The collation a string expression's value has, as PostgreSQL and MariaDB derive it:
    a ``COLLATE`` inside it (``max(x COLLATE c)``, ``x COLLATE c || y``), else its columns'
    (``concat(x, '!')`` has ``x``'s; a subquery's column, the expression it selects; a
    CAST's on PostgreSQL, unknown on MariaDB), :data:`MIXED` where those differ or cannot be
    known (a collation a type declares but the SQL does not say: ``type_coerce``,
    ``type_=``, a bound value); None for the database's default."""
    implicit: set[str | None] = set()
    explicit = _gather(element, dialect, implicit)
    if explicit is not None:
        return explicit
    if len(implicit) > 1 or MIXED in implicit:
        return MIXED
    return next(iter(implicit), None)


def _folded(type_: Any) -> bool:
    """Whether ``type_`` is PostgreSQL's case-insensitive ``CITEXT``, which compares its
    strings lower-cased, whatever the collation (any version's class, or a user type)."""
    names = {type(type_).__name__, str(getattr(type_, "__visit_name__", ""))}
    return "CITEXT" in {name.upper() for name in names}


def _name(collation: str | None) -> str | None:
    """A collation's name as compared here: unquoted, lower case (None stays None)."""
    return None if collation is None else collation.strip('"`').lower()


def _postgres_deterministic(name: str) -> bool:
    """Whether a PostgreSQL collation is known to be deterministic: the C ones, ``default``
    and ICU's predefined ``*-x-icu`` (a collation created by the user may not be)."""
    return (
        name in _POSTGRES_CODE_POINT
        or name in _POSTGRES_LIBC_C_UTF8
        or name == "default"
        or name.endswith("-x-icu")
    )


def compares_like_python(collation: str | None, dialect: str, need: str) -> bool:
    """Whether ``dialect`` compares strings under ``collation`` (None: the database's
    default) as Python does, for ``need`` (:data:`ORDERING` or :data:`EQUALITY`)."""
    name = _name(collation)
    if dialect == "sqlite":
        return name is None or name == "binary"
    if dialect == "postgresql":
        if need == EQUALITY:
            return name is None or _postgres_deterministic(name)
        return name in _POSTGRES_CODE_POINT
    if dialect in _WEIGHTED:
        if name is None:
            return False
        if name == "binary":
            return True
        if not (name.endswith("_nopad_bin") or name.endswith("_0900_bin")):
            return False
        return need == EQUALITY or name.split("_")[0] in _UNICODE_SETS
    return False


def _native_enum(type_: Any, dialect: str) -> bool:
    """Whether the database orders ``type_``'s values by their declared members: a native
    enum (by its declared order), or MariaDB/MySQL's SET (by its members' bits; SQLAlchemy
    gives it the length of its longest member, too short for a weight of several)."""
    if isinstance(type_, SET):
        return dialect in _WEIGHTED
    return isinstance(type_, Enum) and type_.native_enum and dialect != "sqlite"


def _padded(type_: Any, dialect: str) -> bool:
    """Whether ``type_`` is a fixed-length CHAR, which PostgreSQL and MariaDB compare
    ignoring trailing spaces (SQLite stores it as TEXT)."""
    return isinstance(type_, (CHAR, NCHAR)) and dialect != "sqlite"


def _exact(collation: str | None, type_: Any, dialect: str, need: str) -> bool:
    return (
        compares_like_python(collation, dialect, need)
        and not _padded(type_, dialect)
        and not _folded(type_)
    )


def _comparison(collation: str | None, type_: Any, dialect: str, need: str) -> str:
    """How the database compares these strings, for a refusal's message."""
    if _padded(type_, dialect) and compares_like_python(collation, dialect, need):
        return "fixed-length CHAR rules (trailing spaces ignored; use String)"
    if _folded(type_):
        return "CITEXT rules (case ignored)"
    if collation is not None:
        return f"the collation {collation!r}"
    return "the database's default collation, which snowshard cannot see before the query runs"


def check_strings(element: Any, dialect: str, need: str, what: str) -> None:
    """Refuse merging ``element`` in Python when its strings compare otherwise there.

    ``what`` names the merge step for the message (``"ORDER BY"``, ``"GROUP BY"``...).
    """
    _check(element, collation_of(element, dialect), dialect, need, what)


_LISTS = (ARRAY, AbstractMultiRange)
"""Types whose values are read as lists, which Python can neither hash nor match as the
database does (a merge's GROUP BY, DISTINCT)."""


def _check(
    element: Any, found: tuple[bool | None, str | None, Any], dialect: str, need: str, what: str
) -> None:
    """:func:`check_strings` of ``element``, whose :func:`collation_of` is ``found``; also
    refuses the values a merge compares as read but the database otherwise (:mod:`.opaque`,
    MariaDB TIMESTAMPs: :func:`.instants.check_instant_compared`)."""
    check_opaque(what, element, dialect, ordered=need == ORDERING)
    check_instant_compared(what, element, dialect)
    check_float_compared(what, element, dialect)
    is_string, collation, type_ = found
    if isinstance(type_, (JSON, HSTORE)) or (need == EQUALITY and isinstance(type_, _LISTS)):
        kind = (
            "a JSON value" if isinstance(type_, JSON)
            else "an hstore (read as a dict)" if isinstance(type_, HSTORE)
            else "an array or multirange"
        )  # fmt: skip
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: the merge would compare {kind} in "
            f"Python, which neither orders nor matches it as {dialect} does; select or "
            "order by a scalar (an element, a key), or route the query to one shard (a "
            "shard key in WHERE)"
        )
    if is_string is None:
        if dialect == "sqlite":
            return  # SQLite compares any text by BINARY
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: SQLAlchemy knows no type for it "
            f"(text(), literal_column(), a function without type_=), so the merge cannot "
            f"tell whether {dialect} compares it as a string, by a collation Python does not "
            "reproduce; give it its type (literal_column('x', Integer), "
            "func.f(..., type_=String(20)))"
        )
    if not is_string:
        return
    if need == ORDERING and _native_enum(type_, dialect):
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: {dialect} orders this enum by its "
            "declared order (a SET by its members), which a merge cannot reproduce; order by "
            "a column or expression "
            "whose order Python can reproduce, or route the query to one shard (a shard key "
            "in WHERE)"
        )
    if _exact(collation, type_, dialect, need):
        return
    if isinstance(type_, NullType) and dialect in _TYPED_MERGES:
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: SQLAlchemy knows no type for this "
            f"expression over strings (a function without type_=), so the merge cannot tell "
            f"how {dialect} compares its values; give it its type, e.g. "
            "func.lower(Model.name, type_=String(50)): "
            f"{_TYPED_MERGES[dialect]}, or route the query to one shard (a shard key in WHERE)"
        )
    where = _comparison(collation, type_, dialect, need)
    verb = "orders" if need == ORDERING else "matches"
    weighable = (
        " (on MariaDB, ORDER BY, GROUP BY, MIN/MAX and DISTINCT of a String(n) merge by"
        " WEIGHT_STRING)"
    )
    raise UnsupportedShardQuery(
        f"{what} {describe(element)} across shards: the merge {verb} strings as Python "
        f"does (by code point, equal only when identical), but {dialect} compares them by "
        f"{where}, which may differ (case, accents, trailing spaces), so the merged answer "
        f"could differ from one table's; {_ADVICE.get(dialect, 'route it to one shard')}, "
        "or route the query to one shard (a shard key in WHERE)"
        + (weighable if dialect in _WEIGHTED else "")
    )


def weight_of(element: Any, dialect: str, need: str, what: str) -> Any:
    """None where Python compares the strings of ``element`` as the database does (or it is
    no string); on MariaDB and MySQL, for a ``String(n)`` under any other collation, its
    :class:`~snowshard._compat.PaddedWeight`: bytes that order as the collation orders the
    string, equal for strings it calls equal; otherwise refused as :func:`check_strings`
    refuses. A MariaDB TIMESTAMP's weight is its instant (:func:`.instants.instant_key`); a
    PostgreSQL interval's, the seconds it compares by (:func:`.intervals.interval_key`);
    a TypeDecorator's own values, the stored value (:func:`.decorated.stored_value`)."""
    plain = bare(element)
    stored = stored_value(plain, dialect)
    if stored is not None:
        weight = weight_of(stored, dialect, need, what)
        return stored if weight is None else weight
    instant = instant_key(plain, dialect)
    if instant is not None:
        return instant
    key = interval_key(plain, dialect)
    if key is None:
        key = float_key(plain, dialect)
    if key is not None:
        return key
    found = collation_of(plain, dialect)
    is_string, collation, type_ = found
    length = getattr(type_, "length", None)
    if (
        is_string
        and dialect in _WEIGHTED
        and isinstance(type_, String)  # a known type: an untyped function may be a number
        and length
        and not _native_enum(type_, dialect)
        and not _exact(collation, type_, dialect, need)
    ):
        return PaddedWeight(plain, length)
    _check(plain, found, dialect, need, what)
    return None


def extreme_weight(aggregate: Any, dialect: str) -> Any:
    """What each source sends beside ``MIN(x)``/``MAX(x)`` for a merge to pick the least or
    greatest of their values: None where Python orders ``x`` as the database does (or it
    is no string); on MariaDB and MySQL, for a ``String(n)`` under any other collation, the
    :class:`~snowshard._compat.PaddedWeight` of the aggregate's value; otherwise refused
    as :func:`check_strings` refuses. A MariaDB TIMESTAMP is picked by its instant
    (:func:`.instants.instant_extreme`), or refused in a form that cannot be; a
    TypeDecorator's own values by the stored value (:func:`.decorated.stored_value`)."""
    if decorator_of(bare(aggregate), dialect) is not None:  # the aggregate's stored value
        return weight_of(aggregate, dialect, ORDERING, "MIN/MAX")
    instant = instant_extreme(bare(aggregate), dialect)
    if instant is not None:
        return instant[1]
    if is_interval(bare(aggregate), dialect):  # each source's own MIN/MAX, weighed
        return interval_key(bare(aggregate), dialect)
    digits = float_key(bare(aggregate), dialect)  # so is a MariaDB FLOAT's, every digit
    if digits is not None:
        return digits
    function = aggregate_function(aggregate)
    what = str(function.name).upper()
    for argument in function.clauses:
        check_instant_compared(what, argument, dialect)
    weights = [weight_of(argument, dialect, ORDERING, what) for argument in function.clauses]
    found = next((w for w in weights if w is not None), None)
    return None if found is None else PaddedWeight(bare(aggregate), found.length)


_BYTE_ORDER = frozenset({"c", "posix"})
"""PostgreSQL collations that compare the bytes of the database's encoding (code-point
order in UTF-8 and LATIN1 only)."""


def orders_by_code_point(element: Any, dialect: str) -> bool:
    """Whether a merge ordering ``element`` in Python takes a PostgreSQL string under a
    collation named ``C`` or ``POSIX`` to order by code point, as it does in a UTF-8 or
    LATIN1 database (in others, such as LATIN9 or EUC_JP, byte order differs)."""
    if dialect != "postgresql":
        return False
    is_string, collation, _ = collation_of(element, dialect)
    return bool(is_string) and _name(collation) in _BYTE_ORDER


def server_order(element: Any, dialect: str) -> ServerOrder | None:
    """How a merge orders the strings of ``element`` on PostgreSQL when Python cannot
    reproduce their collation: by ranks the database gives them (None where Python can,
    for other dialects and for what ranks cannot stand for: a fixed-length ``CHAR``, a
    native enum, a TypeDecorator whose values are not the database's, an untyped
    expression)."""
    if dialect != "postgresql":
        return None
    plain = bare(element)
    is_string, collation, type_ = collation_of(plain, dialect)
    declared = variant_for(getattr(plain, "type", None), dialect)
    if (
        not is_string
        or not isinstance(type_, String)
        or isinstance(declared, TypeDecorator)
        or isinstance(type_, Enum)  # an ORM row holds a Python enum, not the string
        or _padded(type_, dialect)
        or _folded(type_)
        or collation == MIXED
        or _exact(collation, type_, dialect, ORDERING)
    ):
        return None
    if _name(collation) == "default":
        return ServerOrder(None)  # the database's default: checked to agree like None
    return ServerOrder(collation)


def extreme_order(aggregate: Any, dialect: str) -> ServerOrder | None:
    """:func:`server_order` of the argument of ``MIN(x)``/``MAX(x)``: how a merge picks the
    least or greatest of the sources' values where Python cannot compare them."""
    found = [server_order(argument, dialect) for argument in aggregate_function(aggregate).clauses]
    return next((order for order in found if order is not None), None)


def sort_value(element: Any, dialect: str) -> tuple[Any, ServerOrder | None]:
    """What each source sends for a merge to order rows by ``element`` (an ORDER BY item),
    and how the merge compares it: the value as Python compares it, the value ranked by
    the database (:func:`server_order`), or its weight (:func:`weight_of`)."""
    order = server_order(element, dialect)
    if order is not None:
        return element, order
    weight = weight_of(element, dialect, ORDERING, "ORDER BY")
    return (element if weight is None else weight), None


def check_string_keys(model: Any, dialect: str) -> None:
    """Refuse statements on ``model`` (a :class:`~snowshard.sharding.model.ShardedModel`)
    when one of its shard keys is a string that ``dialect`` matches otherwise than exactly.

    A row lives in the table its key's exact value names; where the database calls
    ``'ACME'`` and ``'acme'`` equal, one table would find, join or reject as a duplicate
    rows that live in other tables here. A key of a TypeDecorator is left alone: its values
    are the decorator's own spelling (a UUID's hex, say), the same for equal keys.
    """
    for key in model.keys:
        column = model.table.c[key]
        if isinstance(column.type, TypeDecorator):
            continue
        is_string, collation, type_ = collation_of(column, dialect)
        if not is_string or _exact(collation, type_, dialect, EQUALITY):
            continue
        where = _comparison(collation, type_, dialect, EQUALITY)
        raise UnsupportedShardQuery(
            f"{model.name}.{key} is a string shard key: a row lives in the table its exact "
            f"value names, but {dialect} matches strings by {where}, which may call "
            "different strings equal ('ACME' = 'acme', trailing spaces), so reads, joins "
            "and unique keys could differ from one table's; declare the key column with a "
            'collation that matches exactly (String(..., collation="utf8mb4_nopad_bin") on '
            'MariaDB and MySQL; the default or "C" on PostgreSQL)'
        )


def check_read_order(what: str, element: Any, dialect: str) -> None:
    """Refuse ordering, in a merge of read values (grouped ORDER BY, MIN/MAX not picked by
    weight or rank, ``<``/``>`` over aggregates), values Python orders otherwise than the
    database: Python enum members (SQLAlchemy's ``Enum(SomeEnum)``), which Python does not
    order at all, one table ordering the stored strings (natively, the declared order,
    refused by :func:`check_strings`); arrays (:func:`check_array_order`); MariaDB's
    UUIDs (:func:`check_uuid_order`) and TIMESTAMPs (:func:`.instants.check_instant_compared`);
    PostgreSQL money, inet and time with time zone (:func:`.opaque.check_opaque`)."""
    check_array_order(what, element, dialect)
    check_instant_compared(what, element, dialect)
    check_opaque(what, element, dialect, ordered=True)
    check_float_compared(what, element, dialect)
    if is_range(element, dialect):
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: the merge would compare ranges in "
            "Python after it, where they do not order as in PostgreSQL; compare lower() "
            "and upper() of it, or route the query to one shard (a shard key in WHERE)"
        )
    found = type_for(getattr(element, "type", None), dialect)
    if isinstance(found, Enum) and found.enum_class is not None:
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: its values are read as members of "
            f"the Python enum {found.enum_class.__name__}, which Python does not order (one "
            f"table orders the stored strings); order by cast({describe(element)}, String), "
            "or route the query to one shard (a shard key in WHERE)"
        )
    check_uuid_order(what, element, dialect)


def check_array_order(what: str, element: Any, dialect: str) -> None:
    """Refuse a merge ordering arrays (ORDER BY, MIN/MAX, ``<``/``>``): PostgreSQL orders
    them element by element with NULL elements last and NaN elements equal, then by their
    dimensions and bounds; the merge would compare Python lists, which cannot compare None
    with a number, order NaN, nor see the bounds."""
    if any(isinstance(t, ARRAY) for t in sql_types(element, dialect)):
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: the merge would order arrays as "
            f"Python lists, not as {dialect} does (NULL and NaN elements, dimensions, "
            f"bounds); order by an element ({describe(element)}[1]) or another scalar, or "
            "route the query to one shard (a shard key in WHERE)"
        )


def check_uuid_order(what: str, element: Any, dialect: str) -> None:
    """Refuse a merge ordering UUIDs on MariaDB/MySQL (ORDER BY, MIN/MAX, ``<``/``>``):
    SQLAlchemy's ``Uuid`` is MariaDB's native UUID type there, which MariaDB orders by
    its segments swapped (time-ordered UUIDs by their time), not as Python orders the
    text or ``uuid.UUID`` values the merge compares. (On MySQL, a CHAR(32), the order
    would agree, but the dialect cannot tell the servers apart before the statement runs.)"""
    if dialect not in ("mysql", "mariadb"):
        return
    if any(isinstance(t, Uuid) and t.native_uuid for t in sql_types(element, dialect)):
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: MariaDB orders its UUID type by "
            "segments swapped, which the merge does not reproduce; order by "
            f"cast({describe(element)}, String(36)), or route the query to one shard (a "
            "shard key in WHERE)"
        )
