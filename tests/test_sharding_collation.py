"""Merges compare strings as the database would, or refuse: ORDER BY, MIN/MAX, GROUP BY,
DISTINCT and comparisons of strings across shards, against an unsharded twin whose strings
differ in case and accents (``apple``, ``APPLE``, ``Banana``, ``éclair``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from sqlalchemy import (
    ARRAY,
    CHAR,
    JSON,
    BigInteger,
    Enum,
    Integer,
    String,
    Text,
    column,
    distinct,
    event,
    func,
    case,
    cast,
    literal,
    literal_column,
    select,
    type_coerce,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects.postgresql import HSTORE
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    AsyncShardedSession,
    Sharded,
    Shards,
    UnsupportedShardQuery,
    sharded_model,
)
from snowshard.sharding.collation import (
    EQUALITY,
    MIXED,
    ORDERING,
    ServerOrder,
    check_strings,
    collation_of,
    compares_like_python,
    server_order,
    weight_of,
)
from tests.backends import DatabaseFactory, async_url, icu_locale, libc_locale
from tests.twin_world import TwinWorld, twin_world_fixture
from tests.worlds import IDS, World, binary_string, open_world

WORDS = [
    "apple", "Banana", "cherry", "Date", "éclair", "fig", "Zeta", "alpha", "b ", "APPLE", "b",
    "b\t",
]  # fmt: skip
"""Strings whose code-point order, case-insensitive order and language order all differ,
and that differ in trailing spaces (MariaDB's PAD SPACE calls ``b`` and ``b `` equal and
sorts ``b\t`` before them); word ``i`` belongs to user ``i + 1``, so ``apple`` and ``APPLE``,
``b`` and ``b `` live in different databases."""

ICU = "en-x-icu"
"""A PostgreSQL collation (predefined with ICU) that orders by language rules."""

DEFAULT_LOCALE = "en"
"""The ICU locale of the PostgreSQL test databases' default collation here: ``plain``
(no collation declared) orders by language rules too, as in most real databases."""

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mariadb", marks=pytest.mark.mysql),
]


# --------------------------------------------------------------------------- the rules


@pytest.mark.parametrize(
    ("collation", "dialect", "need", "agrees"),
    [
        (None, "sqlite", ORDERING, True),
        ("BINARY", "sqlite", ORDERING, True),
        ("NOCASE", "sqlite", EQUALITY, False),
        (None, "postgresql", ORDERING, False),
        ("C", "postgresql", ORDERING, True),
        ('"C"', "postgresql", ORDERING, True),
        ("ucs_basic", "postgresql", ORDERING, True),
        ("C.UTF-8", "postgresql", ORDERING, False),  # code points on glibc >= 2.35 only
        ("C.UTF-8", "postgresql", EQUALITY, True),
        (ICU, "postgresql", ORDERING, False),
        (None, "postgresql", EQUALITY, True),
        (ICU, "postgresql", EQUALITY, True),
        ("my_case_insensitive", "postgresql", EQUALITY, False),
        (None, "mysql", ORDERING, False),
        (None, "mariadb", EQUALITY, False),
        ("utf8mb4_general_ci", "mysql", EQUALITY, False),
        ("utf8mb4_bin", "mysql", ORDERING, False),
        ("utf8mb4_nopad_bin", "mysql", ORDERING, True),
        ("binary", "mariadb", EQUALITY, True),
        (None, "oracle", ORDERING, False),
    ],
)
def test_which_collations_compare_like_python(
    collation: str | None, dialect: str, need: str, agrees: bool
) -> None:
    """Only code-point collations order like Python; PostgreSQL's built-in ones also match."""
    assert compares_like_python(collation, dialect, need) is agrees


class _Model(DeclarativeBase):
    pass


class _Row(_Model):
    __tablename__ = "collation_rules"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plain: Mapped[str] = mapped_column(String(8))
    declared: Mapped[str] = mapped_column(String(8, collation="NOCASE"))
    variant: Mapped[str] = mapped_column(binary_string(8))
    number: Mapped[int] = mapped_column(Integer)


class _Trimmed(TypeDecorator[str]):
    impl = String(8, collation="C")
    cache_ok = True


def test_collate_in_the_expression_wins_over_the_column_type() -> None:
    """``.collate()`` names the collation, whatever the column declares."""
    assert collation_of(_Row.declared.collate("BINARY"), "sqlite")[:2] == (True, "BINARY")


def test_a_type_variant_gives_each_dialect_its_collation() -> None:
    """``with_variant`` types are read for the dialect the merge runs on."""
    assert collation_of(_Row.variant, "postgresql")[1] == "C"
    assert collation_of(_Row.variant, "mysql")[1] == "utf8mb4_nopad_bin"
    assert collation_of(_Row.variant, "sqlite")[1] is None


def test_a_type_decorator_is_read_through_its_impl() -> None:
    """A TypeDecorator over String has its impl's collation."""
    assert collation_of(func.max(_Row.plain).cast(_Trimmed()), "postgresql")[:2] == (True, "C")


def test_an_unknown_function_over_a_string_is_taken_for_a_string() -> None:
    """lower(x) has no type in SQLAlchemy: it compares by x's collation."""
    assert collation_of(func.lower(_Row.declared), "sqlite")[:2] == (True, "NOCASE")


def test_a_collate_inside_a_function_decides_its_result() -> None:
    """max(x COLLATE c) compares by c, whatever x's column type says (so a comparison of it
    in HAVING is not taken for a code-point one)."""
    x = column("x", String(20, collation="C"))
    assert collation_of(func.max(x.collate(ICU)), "postgresql")[1] == ICU
    assert collation_of(func.max(x), "postgresql")[1] == "C"


def test_a_collate_inside_a_comparison_does_not_reach_the_result() -> None:
    """CASE WHEN x COLLATE c > 'a' THEN y END takes y's collation: a comparison's operands
    pass none on."""
    x = column("x", String(20, collation="C"))
    y = column("y", String(20, collation="C"))
    assert collation_of(case((x.collate(ICU) > "a", y), else_=y), "postgresql")[1] == "C"


_SWEDISH = column("sv", String(20, collation="sv-x-icu"))
_CODE_POINT = column("c", String(20, collation="C"))
_DEFAULT = column("d", String(20))


def test_a_function_takes_its_columns_collation() -> None:
    """concat(x, '!') and substr(x, ...) (typed or not) have x's declared collation, not
    the database's default."""
    assert collation_of(func.concat(_SWEDISH, "!"), "postgresql")[1] == "sv-x-icu"
    typed = func.substr(_SWEDISH, 1, 3, type_=String(20))
    assert server_order(typed, "postgresql") == ServerOrder("sv-x-icu")
    assert server_order(func.concat(_CODE_POINT, "!"), "postgresql") is None  # exact


def test_a_case_operand_and_a_window_order_pass_no_collation() -> None:
    """A simple CASE's operand and a window's ORDER BY do not decide the value's
    collation: its results and its function do."""
    operand = case({"a": _SWEDISH}, value=_CODE_POINT.collate("C"), else_=_SWEDISH)
    assert collation_of(operand, "postgresql")[1] == "sv-x-icu"
    window = func.max(_SWEDISH).over(order_by=_CODE_POINT.collate("C"))
    assert collation_of(window, "postgresql")[1] == "sv-x-icu"


def test_a_number_inside_passes_no_collation_and_an_untyped_part_may() -> None:
    """char_length(x COLLATE "C") is a number: substr(sv, 1, it) stays Swedish; an untyped
    function in its place may pass "C" on or not, so the value's collation is unknown."""
    known = func.substr(_SWEDISH, 1, func.char_length(_CODE_POINT.collate("C")), type_=String)
    assert collation_of(known, "postgresql")[1] == "sv-x-icu"
    untyped = func.substr(_SWEDISH, 1, func.length(_CODE_POINT.collate("C")), type_=String)
    assert collation_of(untyped, "postgresql")[1] == MIXED
    assert server_order(untyped, "postgresql") is None


def test_columns_of_different_collations_are_refused() -> None:
    """concat of a "C" and a default column has no one collation: refused, not ranked."""
    mixed = func.concat(_CODE_POINT, _DEFAULT)
    assert server_order(mixed, "postgresql") is None
    with pytest.raises(UnsupportedShardQuery, match="ORDER BY"):
        check_strings(mixed, "postgresql", ORDERING, "ORDER BY")


def test_a_cast_keeps_its_string_collation_on_postgresql_not_on_mariadb() -> None:
    """CAST(x AS VARCHAR) keeps x's collation on PostgreSQL; MariaDB gives it the
    connection's (unknown: weighed or refused); a number cast to a string has none."""
    assert collation_of(cast(_CODE_POINT, String), "postgresql")[1] == "C"
    binary = column("b", String(20, collation="utf8mb4_nopad_bin"))
    assert collation_of(cast(binary, String), "mysql")[1] is None
    assert collation_of(cast(column("n", Integer), String), "postgresql")[1] is None


def test_a_subquery_passes_on_the_collation_it_selects() -> None:
    """A scalar subquery and a subquery's column have the collation of what they select."""
    concat = func.concat(_CODE_POINT, "")
    assert collation_of(select(concat).scalar_subquery(), "postgresql")[1] == "C"
    assert collation_of(select(concat.label("y")).subquery().c.y, "postgresql")[1] == "C"


def test_a_collation_the_sql_does_not_say_is_not_trusted() -> None:
    """type_coerce() and type_= declare a collation SQLAlchemy never writes into the SQL:
    the value keeps its columns'; a bound value typed with another collation mixes."""
    swedish = String(20, collation="C")
    assert collation_of(type_coerce(_SWEDISH, swedish), "postgresql")[1] == "sv-x-icu"
    assert collation_of(func.lower(_SWEDISH, type_=swedish), "postgresql")[1] == "sv-x-icu"
    odd = case((column("n", Integer) > 1, _SWEDISH), else_=literal("zz", swedish))
    assert collation_of(odd, "postgresql")[1] == MIXED


def test_arrays_order_by_their_strings_collation_and_json_is_never_compared() -> None:
    """An array of strings orders as its elements' collation does (code point: merged;
    otherwise refused); arrays are never matched (GROUP BY, DISTINCT) in Python, JSON
    never ordered nor matched."""
    check_strings(column("a", ARRAY(String(20, collation="C"))), "postgresql", ORDERING, "x")
    for element, need in [
        (column("a", ARRAY(String(20))), ORDERING),
        (column("a", ARRAY(Integer)), EQUALITY),
        (column("j", JSON), ORDERING),
        (column("j", JSON), EQUALITY),
    ]:
        with pytest.raises(UnsupportedShardQuery, match="across shards"):
            check_strings(element, "postgresql", need, "ORDER BY")


def test_the_collation_named_default_is_the_databases_default() -> None:
    """.collate("default") is ranked as the default is, so differing defaults are refused."""
    assert server_order(_DEFAULT.collate("default"), "postgresql") == ServerOrder(None)


class CITEXT(Text):
    """PostgreSQL's citext as a user declares it where SQLAlchemy has none (the floor,
    2.0.2, has no ``postgresql.CITEXT``): snowshard knows it by name, whichever class."""

    __visit_name__ = "CITEXT"
    cache_ok = True


def test_citext_is_never_compared_in_python_nor_ranked() -> None:
    """CITEXT compares lower-cased: no merge orders or matches it, whatever the collation."""
    citext = column("t", CITEXT())
    assert server_order(citext, "postgresql") is None
    for need in (ORDERING, EQUALITY):
        with pytest.raises(UnsupportedShardQuery, match="CITEXT"):
            check_strings(citext, "postgresql", need, "ORDER BY")


def test_hstore_is_never_compared_in_python() -> None:
    """An hstore reads as a dict, which no merge can order, group or match."""
    values = column("h", HSTORE())
    for need in (ORDERING, EQUALITY):
        with pytest.raises(UnsupportedShardQuery, match="GROUP BY h .*an hstore"):
            check_strings(values, "postgresql", need, "GROUP BY")


hstores = twin_world_fixture(
    "hstores",
    lambda: {"h": mapped_column(HSTORE), "tag": mapped_column(String(4))},
    lambda: [
        {"user_id": user, "tag": "xy"[user % 2], "h": {"k": str(user % 3)}}
        for user in range(1, 25)
    ],
    [pytest.param("postgresql", marks=pytest.mark.postgres)],
    prepare="CREATE EXTENSION IF NOT EXISTS hstore",
)


def test_postgresql_groups_and_orders_hstores(hstores: TwinWorld) -> None:
    """Premise: one table groups and orders hstore values (three distinct ones here)."""
    with hstores.session() as session:
        twin = session.execute(
            select(hstores.Twin.h, func.count()).group_by(hstores.Twin.h).order_by(
                hstores.Twin.h
            )
        ).all()
    assert [count for _, count in twin] == [8, 8, 8]


@pytest.mark.parametrize(
    "build",
    [
        lambda M: select(M.h, func.count()).group_by(M.h),
        lambda M: select(M.h).distinct(),
        lambda M: select(M.id).order_by(M.h, M.id).limit(5),
        lambda M: select(func.count(M.h.distinct())),
    ],
    ids=["group-by", "distinct", "order-by", "count-distinct"],
)
def test_hstores_merged_are_refused(hstores: TwinWorld, build: Any) -> None:
    """GROUP BY, DISTINCT, ORDER BY and count(DISTINCT) of an hstore are refused by name."""
    hstores.refused(build, "an hstore")


def test_an_enum_is_not_ranked() -> None:
    """A non-native Enum reads back as Python enum members in ORM rows: never ranked."""
    status = column("s", Enum("new", "paid", native_enum=False, length=10))
    assert server_order(status, "postgresql") is None


def test_a_typed_function_is_not_a_string() -> None:
    """func.length(x, type_=Integer) is a number, which every collation orders alike."""
    assert collation_of(func.length(_Row.plain, type_=Integer), "mysql")[0] is False
    check_strings(func.length(_Row.plain, type_=Integer), "mysql", ORDERING, "ORDER BY")


def test_an_untyped_length_is_a_number() -> None:
    """func.length(x) without type_= is a number too: its order needs no collation."""
    for name in ("length", "char_length"):
        assert collation_of(getattr(func, name)(_Row.plain), "mysql")[0] is False


lengths = twin_world_fixture(
    "lengths",
    lambda: {"word": mapped_column(String(8))},
    lambda: [
        {"user_id": user, "word": ["a", "bb", "ä", "Ab", "ccc", "", None][user % 7]}
        for user in range(1, 30)
    ],
)


@pytest.mark.parametrize(
    "build",
    [
        lambda m: select(m.id, func.length(m.word)).order_by(
            func.length(m.word).desc(), m.id
        ).limit(12),
        lambda m: select(func.char_length(m.word), func.count()).group_by(
            func.char_length(m.word)
        ).order_by(func.char_length(m.word)),
        lambda m: select(func.max(func.length(m.word)), func.min(func.char_length(m.word))),
    ],
    ids=["order-by", "grouped-order", "min-max"],
)
def test_lengths_of_strings_order_as_one_table(lengths: TwinWorld, build: Any) -> None:
    """ORDER BY and MIN/MAX of an untyped length() of strings are merged as one table."""
    lengths.exact(build, ordered=True)


def test_a_refusal_names_the_expression_the_collation_and_the_rewrite() -> None:
    """The message says what is compared, by which collation, and what to write instead."""
    with pytest.raises(UnsupportedShardQuery) as caught:
        check_strings(_Row.__table__.c.plain, "mysql", ORDERING, "ORDER BY")
    message = str(caught.value)
    assert "ORDER BY collation_rules.plain" in message
    assert "default collation" in message
    assert 'collate("utf8mb4_nopad_bin")' in message


def test_a_native_enum_is_not_ordered_in_a_merge() -> None:
    """PostgreSQL and MariaDB order an enum by its declared order: refused for ORDER BY."""
    kind = Enum("zeta", "alpha", name="kind")
    column = select(func.max(_Row.plain).cast(kind)).selected_columns[0]
    with pytest.raises(UnsupportedShardQuery, match="declared order"):
        check_strings(column, "postgresql", ORDERING, "ORDER BY")
    check_strings(column, "postgresql", EQUALITY, "GROUP BY")


def _set_columns() -> dict[str, Any]:
    return {"flags": mapped_column(mysql.SET("b", "a", "c"))}


def _set_rows() -> list[dict[str, Any]]:
    sets = [set(), {"a"}, {"b"}, {"a", "c"}, {"b", "c"}]
    return [{"user_id": 1 + i % 37, "flags": sets[i % len(sets)]} for i in range(40)]


flagged = twin_world_fixture(
    "flagged", _set_columns, _set_rows, [pytest.param("mysql", marks=pytest.mark.mysql)]
)


@pytest.mark.parametrize(
    "build",
    [
        lambda m: select(m.flags, func.count()).group_by(m.flags),
        lambda m: select(m.flags).distinct(),
        lambda m: select(m.id).order_by(m.flags, m.id),
    ],
    ids=["GROUP BY", "DISTINCT", "ORDER BY"],
)
def test_a_mariadb_set_is_not_matched_or_ordered_in_a_merge(
    flagged: TwinWorld, build: Any
) -> None:
    """MariaDB orders a SET by its members' bits, and SQLAlchemy gives it the length of its
    longest member (a weight of 'a,c' cut to 'a'): refused (the merge grouped 5 sets as 3)."""
    with flagged.session() as session:
        assert len(session.execute(select(flagged.Twin.flags).distinct()).all()) == 5
    flagged.refused(build, "declared order|default collation")


# --------------------------------------------------------------------------- on databases


@dataclass
class Words:
    """A sharded model and its unsharded twin holding :data:`WORDS`, on two databases (on
    PostgreSQL, databases whose default collation is ICU's :data:`DEFAULT_LOCALE`)."""

    world: World
    sharded: Any
    twin: Any
    backend: str


def _declare(backend: str) -> tuple[type[DeclarativeBase], Any, Any]:
    icu = String(20, collation=ICU) if backend == "postgresql" else String(20)

    class Base(DeclarativeBase):
        pass

    class Word(Sharded, Base):
        __tablename__ = "words"
        __shards__ = Shards(4, key=("id", "user_id"), databases={"a": [0, 1], "b": [2, 3]})
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        plain: Mapped[str] = mapped_column(String(20))
        binary: Mapped[str] = mapped_column(binary_string(20))
        language: Mapped[str] = mapped_column(icu)

    class WordTwin(Base):
        __tablename__ = "words_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger)
        plain: Mapped[str] = mapped_column(String(20))
        binary: Mapped[str] = mapped_column(binary_string(20))
        language: Mapped[str] = mapped_column(icu)

    return Base, Word, WordTwin


def _fill(session: Any, word: Any, twin: Any) -> None:
    """Word ``i`` of :data:`WORDS` for user ``i + 1``, in the sharded model and the twin
    (same ID), flushed."""
    for user, text in enumerate(WORDS, start=1):
        row = word(user_id=user, plain=text, binary=text, language=text)
        session.add(row)
        session.flush()
        session.add(twin(id=row.id, user_id=user, plain=text, binary=text, language=text))
    session.flush()


@pytest.fixture(scope="module", params=BACKENDS)
def words(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Words]:
    """:data:`WORDS` in a sharded model over two databases and in its twin (read only)."""
    backend = request.param
    factory = DatabaseFactory.for_request(request, tmp_path_factory.mktemp("collation"))
    try:
        base, word, twin = _declare(backend)
        spec = sharded_model(word)
        homes = {w: spec.database_of(spec.shard_of("user_id", u)) for u, w in enumerate(WORDS, 1)}
        assert homes["apple"] != homes["APPLE"] and homes["b"] != homes["b "]
        locale = icu_locale(DEFAULT_LOCALE) if backend == "postgresql" else None
        world = open_world(factory, base, backend, pg_locale=locale)
        with world.session() as session:
            _fill(session, word, twin)
            session.commit()
        world.log.clear()
        yield Words(world, word, twin, backend)
        world.log.close()
    finally:
        factory.cleanup()


Build = Callable[[Any], Any]


def _same_as_twin(words: Words, build: Build) -> list[Any]:
    with words.world.session() as session:
        got = session.execute(build(words.sharded)).all()
        twin = session.execute(build(words.twin)).all()
    assert got == twin
    return got


def _refused(words: Words, build: Build, match: str) -> None:
    words.world.log.clear()
    with words.world.session() as session, pytest.raises(UnsupportedShardQuery, match=match):
        session.execute(build(words.sharded))
    assert len(words.world.log) == 0, "SQL ran before the refusal"


def test_the_words_sort_otherwise_in_the_database_than_in_python(words: Words) -> None:
    """The test vector matters: a language or case-insensitive collation orders
    :data:`WORDS` otherwise than code points do (so a merge in Python would be wrong)."""
    if words.backend == "sqlite":
        column = "plain"
        expected = sorted(WORDS)
    else:
        column = "language" if words.backend == "postgresql" else "plain"
        expected = None
    with words.world.session() as session:
        attribute = getattr(words.twin, column)
        found = [r[0] for r in session.execute(select(attribute).order_by(attribute))]
    if expected is not None:
        assert found == expected
    else:
        assert sorted(found) == sorted(WORDS) and found != sorted(WORDS)


def test_order_by_a_binary_collation_is_merged_exactly(words: Words) -> None:
    """ORDER BY a column declared with a code-point collation equals one table's order."""
    got = _same_as_twin(words, lambda m: select(m.binary).order_by(m.binary, m.id))
    assert [r[0] for r in got] == sorted(WORDS)


def test_order_by_collate_in_the_query_is_merged_exactly(words: Words) -> None:
    """Naming a code-point collation in the query makes a merged ORDER BY exact."""
    binary = {"sqlite": "BINARY", "postgresql": "C", "mysql": "utf8mb4_nopad_bin"}[words.backend]
    got = _same_as_twin(
        words, lambda m: select(m.plain).order_by(m.plain.collate(binary).desc(), m.id)
    )
    assert [r[0] for r in got] == sorted(WORDS, reverse=True)


def test_order_by_the_default_collation_merges_exactly(words: Words) -> None:
    """ORDER BY a string under the database's default collation equals one table's order:
    SQLite's BINARY in Python, MariaDB's by WEIGHT_STRING(), PostgreSQL's (a language
    order here, not code points) by the database's ranks."""
    build: Build = lambda m: select(m.plain).order_by(m.plain, m.id).limit(7)  # noqa: E731
    got = [r[0] for r in _same_as_twin(words, build)]
    if words.backend == "sqlite":
        assert got == sorted(WORDS)[:7]
    else:
        assert got != sorted(WORDS)[:7]


def test_order_by_a_typed_function_of_strings_merges_and_an_untyped_one_is_refused(
    words: Words,
) -> None:
    """ORDER BY lower(x, type_=String(20)) equals one table's order (ranked on PostgreSQL,
    weighed on MariaDB); without type_= it is refused, naming type_= (fine on SQLite)."""
    typed: Build = lambda m: (  # noqa: E731
        select(func.lower(m.plain, type_=String(20)), m.id)
        .order_by(func.lower(m.plain, type_=String(20)), m.id)
        .limit(9)
    )
    got = [r[0] for r in _same_as_twin(words, typed)]
    if words.backend == "sqlite":
        assert got == sorted(w.lower() for w in WORDS)[:9]
    untyped: Build = lambda m: select(m.id).order_by(func.lower(m.plain))  # noqa: E731
    if words.backend == "sqlite":
        _same_as_twin(words, lambda m: untyped(m).order_by(m.id))
    else:
        _refused(words, untyped, r"no type.*type_=String")


@pytest.mark.parametrize("words", [BACKENDS[0]], indirect=True)
def test_order_by_a_case_insensitive_collation_is_refused_on_sqlite(words: Words) -> None:
    """SQLite's NOCASE cannot be reproduced in Python, nor asked of the database: refused."""
    _refused(words, lambda m: select(m.plain).order_by(m.plain.collate("NOCASE")), "ORDER BY")


_POSTGRES_COLLATIONS = [None, ICU, "sv-x-icu", "und-x-icu"]
"""The default (ICU ``en`` here), English, Swedish and root-locale ICU collations."""


def _ordered(m: Any, collation: str | None, descending: bool, how: str) -> Any:
    text = m.plain if collation is None else m.plain.collate(collation)
    statement = select(m.plain, m.id).order_by(text.desc() if descending else text, m.id)
    if how == "limit":
        return statement.limit(5)
    if how == "yield_per":  # two rows a batch: the ranks are renewed as batches arrive
        return statement.execution_options(yield_per=2)
    return statement


@pytest.mark.parametrize("how", ["buffered", "limit", "yield_per"])
@pytest.mark.parametrize("collation", _POSTGRES_COLLATIONS)
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("words", [BACKENDS[1]], indirect=True)
def test_order_by_any_collation_merges_by_rank_on_postgresql(
    words: Words, collation: str | None, descending: bool, how: str
) -> None:
    """On PostgreSQL one database ranks the strings a merge orders, under their collation:
    buffered, with a LIMIT, and streamed two rows at a time, the merge equals one table."""
    got = _same_as_twin(words, lambda m: _ordered(m, collation, descending, how))
    assert len(got) == (5 if how == "limit" else len(WORDS))


@pytest.mark.parametrize("words", [BACKENDS[1]], indirect=True)
def test_derived_collations_order_as_one_table_on_postgresql(words: Words) -> None:
    """concat() of a "C" column merges by code point; a CASE whose operand says COLLATE "C"
    but whose results are default strings is ranked; two ORDER BY strings under two
    collations are ranked each by its own: all equal one table."""
    concat = _same_as_twin(
        words, lambda m: select(m.binary, m.id).order_by(func.concat(m.binary, ""), m.id)
    )
    assert [r[0] for r in concat] == sorted(WORDS)
    by_case = _same_as_twin(
        words,
        lambda m: select(m.plain, m.id).order_by(
            case({"zz": m.plain}, value=m.binary.collate("C"), else_=m.plain), m.id
        ),
    )
    assert [r[0] for r in by_case] != sorted(WORDS)
    _same_as_twin(
        words,
        lambda m: select(m.plain, m.id).order_by(
            m.plain.desc(), m.language.collate("sv-x-icu"), m.id
        ).limit(9),
    )


@pytest.mark.parametrize("words", [BACKENDS[1]], indirect=True)
def test_a_session_with_its_own_orm_hook_ranks_strings_too(words: Words) -> None:
    """With a do_orm_execute listener of the user's, the sources run through the session
    one by one (so the listener sees each); their strings are still ranked."""
    m, twin = words.sharded, words.twin
    seen: list[Any] = []
    with words.world.session() as session:
        event.listen(session, "do_orm_execute", lambda state: seen.append(state.statement))
        got = session.execute(select(m.plain, m.id).order_by(m.plain.desc(), m.id)).all()
        expected = session.execute(
            select(twin.plain, twin.id).order_by(twin.plain.desc(), twin.id)
        ).all()
    assert got == expected
    assert [r[0] for r in got] != sorted(WORDS, reverse=True)
    assert len(seen) > 2, "the sources did not run through the session"


@pytest.mark.parametrize("words", [BACKENDS[1]], indirect=True)
def test_an_async_session_ranks_strings_too(words: Words) -> None:
    """Under AsyncShardedSession (psycopg async) the strings are ranked in the session's
    own greenlet: the merged order equals one table's."""
    m, twin = words.sharded, words.twin

    async def read() -> list[Any]:
        engines = {
            key: create_async_engine(async_url(engine.url.render_as_string(hide_password=False)))
            for key, engine in words.world.engines.items()
        }
        try:
            async with AsyncShardedSession(databases=engines) as session:
                found = await session.execute(
                    select(m.plain, m.id).order_by(m.plain.desc(), m.id).limit(6)
                )
                return list(found.all())
        finally:
            for engine in engines.values():
                await engine.dispose()

    got = asyncio.run(read())
    with words.world.session() as session:
        expected = session.execute(
            select(twin.plain, twin.id).order_by(twin.plain.desc(), twin.id).limit(6)
        ).all()
    assert got == expected and len(got) == 6
    assert [r[0] for r in got] != sorted(WORDS, reverse=True)[:6]  # not code-point order


@pytest.mark.parametrize("words", [BACKENDS[1]], indirect=True)
def test_a_ranked_merge_asks_one_database_once(words: Words) -> None:
    """A buffered ORDER BY of strings over two databases sends one ranking statement beside
    its two reads (and, once per engine, a read of each database's default collation)."""
    words.world.log.clear()
    with words.world.session() as session:
        session.execute(select(words.sharded.plain).order_by(words.sharded.plain)).all()
    ranking = [s for s in words.world.log if "dense_rank" in s.statement]
    reads = [s for s in words.world.log if s.shards]
    assert len(ranking) == 1 and len(reads) == 2


@pytest.mark.parametrize(
    "collation", [None, "utf8mb4_general_ci", "utf8mb4_unicode_ci", "utf8mb4_bin"]
)
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("words", [BACKENDS[2]], indirect=True)
def test_order_by_any_collation_merges_exactly_on_mariadb(
    words: Words, collation: str | None, descending: bool
) -> None:
    """On MariaDB the sources send WEIGHT_STRING() of a string ORDER BY, which sorts as its
    collation does (case-insensitive, accents, trailing spaces): the merge equals one table."""

    def build(m: Any) -> Any:
        text = m.plain if collation is None else m.plain.collate(collation)
        return select(m.plain, m.id).order_by(text.desc() if descending else text, m.id)

    got = _same_as_twin(words, build)
    assert len(got) == len(WORDS)


def test_min_and_max_of_strings_follow_the_same_rule(words: Words) -> None:
    """MIN/MAX of a code-point column merge exactly; of MariaDB's default collation, picked
    by weight, of PostgreSQL's by rank (the database's answer, not Python's: ``alpha`` and
    ``Zeta``, where code points say ``APPLE`` and ``éclair``)."""
    got = _same_as_twin(words, lambda m: select(func.min(m.binary), func.max(m.binary)))
    assert got == [(min(WORDS), max(WORDS))]
    build: Build = lambda m: select(func.min(m.plain), func.max(m.plain))  # noqa: E731
    if words.backend != "sqlite":
        assert _same_as_twin(words, build) == [("alpha", "Zeta")]
    else:
        assert _same_as_twin(words, build) == [(min(WORDS), max(WORDS))]


def _spelled(
    rows: Sequence[Any], fold: Callable[[str], str] | None = None
) -> list[tuple[Any, ...]]:
    """Rows with each string in one spelling of its equivalence class under MariaDB's
    default collation (which spelling of ``apple``/``APPLE`` or ``b``/``b `` the database
    shows is its own choice), or under ``fold``."""
    one = fold or (lambda v: v.lower().rstrip(" "))
    return [tuple(one(v) if isinstance(v, str) else v for v in r) for r in rows]


def _extremes_per_group(collation: str | None) -> Build:
    """MIN/MAX of ``plain`` (under ``collation``) per bucket of users, ordered by them."""

    def build(m: Any) -> Any:
        text = m.plain if collation is None else m.plain.collate(collation)
        bucket = (m.user_id % 3).label("bucket")
        return (
            select(bucket, func.min(text), func.max(text), func.count())
            .group_by(bucket)
            .order_by(func.max(text).desc(), func.min(text))
        )

    return build


@pytest.mark.parametrize(
    "collation", [None, "utf8mb4_general_ci", "utf8mb4_unicode_ci", "utf8mb4_bin"]
)
@pytest.mark.parametrize("words", [BACKENDS[2]], indirect=True)
def test_min_and_max_per_group_pick_by_weight_on_mariadb(
    words: Words, collation: str | None
) -> None:
    """Per group, MIN/MAX of a string under any MariaDB collation equal one table's, and
    ORDER BY them sorts by weight, the sources' values from both databases compared."""

    build = _extremes_per_group(collation)
    with words.world.session() as session:
        got = session.execute(build(words.sharded)).all()
        twin = session.execute(build(words.twin)).all()
    assert _spelled(got) == _spelled(twin)
    assert [r[0] for r in got] == [r[0] for r in twin] and len(got) == 3


@pytest.mark.parametrize("collation", _POSTGRES_COLLATIONS)
@pytest.mark.parametrize("words", [BACKENDS[1]], indirect=True)
def test_min_and_max_per_group_pick_by_rank_on_postgresql(
    words: Words, collation: str | None
) -> None:
    """Per group, MIN/MAX of a PostgreSQL string under any collation equal one table's, and
    ORDER BY them and by a string key sorts by the database's ranks."""

    assert len(_same_as_twin(words, _extremes_per_group(collation))) == 3
    keys = _same_as_twin(
        words,
        lambda m: select(m.plain, func.count()).group_by(m.plain).order_by(m.plain.desc()),
    )
    assert [r[0] for r in keys] != sorted(WORDS, reverse=True)


@pytest.mark.parametrize("backend", [BACKENDS[1]])
def test_a_code_point_default_is_ranked_without_a_statement(
    backend: str, database_factory: DatabaseFactory
) -> None:
    """UTF-8 databases whose default collation is libc's C compare strings' bytes: the
    merge ranks them in Python and sends no ranking statement; the order equals one
    table's."""
    base, word, twin = _declare(backend)
    world = open_world(database_factory, base, backend, pg_locale=libc_locale("C"))
    with world.session() as session:
        _fill(session, word, twin)
        world.log.clear()
        got = session.execute(select(word.plain, word.id).order_by(word.plain, word.id)).all()
        expected = session.execute(select(twin.plain, twin.id).order_by(twin.plain, twin.id))
        assert got == expected.all() and [r[0] for r in got] == sorted(WORDS)
        assert not any("dense_rank" in sql for sql in world.log.statements())
    world.log.close()


@pytest.mark.parametrize("backend", [BACKENDS[1]])
def test_ranking_by_default_collations_that_differ_is_refused(
    backend: str, database_factory: DatabaseFactory
) -> None:
    """Databases whose default collations differ (ICU en, sv) rank no strings for a merge:
    refused before the statement runs; a collation named in the query still merges."""
    base, word, _ = _declare(backend)
    world = open_world(
        database_factory, base, backend, pg_locale=[icu_locale("en"), icu_locale("sv")]
    )
    with world.session() as session:
        with pytest.raises(UnsupportedShardQuery, match="default collations differ"):
            session.execute(select(word.plain).order_by(word.plain))
        assert not any(sent.shards for sent in world.log)
        named = select(word.plain).order_by(word.plain.collate(ICU))
        assert session.execute(named).all() == []
    world.log.close()


@pytest.mark.parametrize("backend", [BACKENDS[1]])
def test_c_strings_in_a_database_not_encoded_utf8_are_refused(
    backend: str, database_factory: DatabaseFactory
) -> None:
    """In LATIN9 databases "C" orders bytes, which sort otherwise than code points (the
    euro sign is 0xA4): a merge ordering such strings is refused before it reads a shard
    table; grouping them (equality) still merges."""
    texts = ["a\u20ac", "a\u00e9", "a\u0153", "a\u00ff", "b", "a"]
    base, word, twin = _declare(backend)
    world = open_world(database_factory, base, backend, pg_locale="ENCODING 'LATIN9' LOCALE 'C'")
    with world.session() as session:
        for user, text in enumerate(texts, start=1):
            row = word(user_id=user, plain=text, binary=text, language="x")
            session.add(row)
            session.flush()
            session.add(twin(id=row.id, user_id=user, plain=text, binary=text, language="x"))
        session.flush()
        one_table = session.scalars(select(twin.binary).order_by(twin.binary)).all()
        assert sorted(one_table) == sorted(texts) and one_table != sorted(texts)
        world.log.clear()
        for ordering in (
            select(word.binary).order_by(word.binary),
            select(word.user_id % 2, func.max(word.binary)).group_by(word.user_id % 2),
        ):
            with pytest.raises(UnsupportedShardQuery, match="encoded LATIN9"):
                session.execute(ordering)
        assert not any(sent.shards for sent in world.log)
        grouped = select(word.binary, func.count()).group_by(word.binary)
        assert sorted(session.execute(grouped).all()) == sorted((t, 1) for t in texts)
    world.log.close()


def test_group_by_strings_matches_as_the_database_does(words: Words) -> None:
    """GROUP BY merges by equality: exact on code-point collations and on PostgreSQL's
    deterministic default; on MariaDB's default the groups merge by WEIGHT_STRING(), so
    ``apple`` and ``APPLE`` from different databases are one group, as in one table."""
    build: Build = lambda m: select(m.binary, func.count()).group_by(m.binary)  # noqa: E731
    assert sorted(_same_as_twin_unordered(words, build)) == sorted((w, 1) for w in WORDS)
    if words.backend != "mysql":
        _same_as_twin_unordered(
            words, lambda m: select(m.plain, func.count()).group_by(m.plain)
        )
        return
    grouped: Build = lambda m: (  # noqa: E731
        select(m.plain, func.count()).group_by(m.plain).order_by(m.plain.desc())
    )
    with words.world.session() as session:
        got = session.execute(grouped(words.sharded)).all()
        twin = session.execute(grouped(words.twin)).all()
    # which spelling of a group ("apple" or "APPLE", "b" or "b ") the database shows is its
    # own choice
    spelled = [(v.lower().rstrip(" "), n) for v, n in got]
    assert spelled == [(v.lower().rstrip(" "), n) for v, n in twin]
    assert ("apple", 2) in spelled and ("b", 2) in spelled and ("b\t", 1) in spelled
    assert len(got) == len(WORDS) - 2


def _same_as_twin_unordered(words: Words, build: Build) -> list[Any]:
    with words.world.session() as session:
        got = sorted(session.execute(build(words.sharded)).all())
        twin = sorted(session.execute(build(words.twin)).all())
    assert got == twin
    return got


def test_distinct_strings_match_as_the_database_does(words: Words) -> None:
    """DISTINCT of strings equals one table's: on MariaDB's default collation by weight, so
    ``apple`` and ``APPLE`` (and ``b``, ``b ``), which live in different databases, are one
    row each; where the default is unknown (PostgreSQL), its equality is exact anyway."""
    build: Build = lambda m: select(m.plain).distinct()  # noqa: E731
    if words.backend != "mysql":
        _same_as_twin_unordered(words, build)
        return
    with words.world.session() as session:
        got = session.execute(build(words.sharded)).all()
        twin = session.execute(build(words.twin)).all()
    assert sorted(_spelled(got)) == sorted(_spelled(twin))
    assert len(got) == len(WORDS) - 2


def test_count_distinct_strings_matches_as_the_database_does(words: Words) -> None:
    """count(DISTINCT x) of strings equals one table's: MariaDB's default collation counts
    ``apple`` and ``APPLE`` (in different databases) once, matched by weight."""
    got = _same_as_twin(
        words,
        lambda m: select(func.count(distinct(m.plain)), func.count(distinct(m.binary))),
    )
    fewer = 2 if words.backend == "mysql" else 0
    assert got == [(len(WORDS) - fewer, len(WORDS))]


@pytest.mark.parametrize("limit", [None, 3], ids=["all", "limit"])
@pytest.mark.parametrize("words", [BACKENDS[2]], indirect=True)
def test_distinct_ordered_strings_match_by_weight_on_mariadb(
    words: Words, limit: int | None
) -> None:
    """DISTINCT with ORDER BY (and LIMIT) under a case-insensitive collation: the merged
    rows equal one table's, up to which spelling of equal strings shows."""

    def build(m: Any) -> Any:
        text = m.plain.collate("utf8mb4_unicode_ci")
        return select(text.label("word"), func.length(m.plain) > 3).distinct().order_by(
            text.desc()
        ).limit(limit)

    with words.world.session() as session:
        got = session.execute(build(words.sharded)).all()
        streamed = session.execute(
            build(words.sharded), execution_options={"yield_per": 2}
        ).all()
        twin = session.execute(build(words.twin)).all()
    assert _spelled(got) == _spelled(streamed) == _spelled(twin)
    assert len(got) == (limit or len(WORDS) - 2)


_COLLATIONS = {
    "mysql": [None, "utf8mb4_general_ci", "utf8mb4_unicode_ci", "utf8mb4_bin"],
    "postgresql": [*_POSTGRES_COLLATIONS, "C"],
}
_SHAPES = [
    "min_max", "min_max_grouped", "distinct", "distinct_ordered", "grouped_ordered",
    "ordered_rows", "ordered_stream", "count_distinct", "min_max_distinct",
]  # fmt: skip


@st.composite
def _weighed_statements(
    draw: st.DrawFn, collations: Sequence[str | None]
) -> tuple[str, str | None, Build]:
    """A statement whose merge orders, groups, matches or picks strings by weight (MariaDB)
    or by rank (PostgreSQL): (shape, collation, build)."""
    shape = draw(st.sampled_from(_SHAPES))
    collation = draw(st.sampled_from(collations))
    users = draw(st.none() | st.sets(st.integers(1, len(WORDS)), min_size=1))
    descending = draw(st.booleans())
    limit = draw(st.none() | st.integers(1, len(WORDS)))

    def build(m: Any) -> Any:
        text = m.plain if collation is None else m.plain.collate(collation)
        where = [] if users is None else [m.user_id.in_(sorted(users))]
        direction = text.desc() if descending else text
        bucket = (m.user_id % 3).label("bucket")
        if shape == "min_max":
            return select(func.min(text), func.max(text), func.count()).where(*where)
        if shape == "min_max_grouped":
            grouped = select(bucket, func.min(text), func.max(text)).where(*where)
            return grouped.group_by(bucket).order_by(bucket)
        if shape == "distinct":
            return select(text.label("word")).where(*where).distinct()
        if shape == "min_max_distinct":
            least, most = func.min(distinct(text)), func.max(distinct(text))
            picked = select(bucket, least, most).where(*where).group_by(bucket)
            return picked.order_by(most.desc() if descending else most, bucket)
        if shape == "count_distinct":
            counted = select(bucket, func.count(distinct(text)), func.max(text)).where(*where)
            return counted.group_by(bucket).order_by(bucket)
        if shape == "distinct_ordered":
            unique = select(text.label("word")).where(*where).distinct()
            return unique.order_by(direction).limit(limit)
        if shape == "grouped_ordered":
            grouped = select(text.label("word"), func.count()).where(*where).group_by(text)
            return grouped.order_by(direction).limit(limit)
        rows = select(m.plain, m.id).where(*where).order_by(direction, m.id).limit(limit)
        if shape == "ordered_stream":  # three rows a batch from each source
            return rows.execution_options(yield_per=3)
        return rows

    return shape, collation, build


@pytest.mark.parametrize("words", [BACKENDS[1], BACKENDS[2]], indirect=True)
@given(data=st.data())
def test_merges_by_weight_or_rank_equal_one_table(words: Words, data: st.DataObject) -> None:
    """Random MIN/MAX (of DISTINCT values too), DISTINCT, count(DISTINCT), GROUP BY and ORDER BY (with LIMIT, buffered
    or streamed) of a string under MariaDB and PostgreSQL collations equal the twin's rows, up to which
    spelling of strings a MariaDB collation calls equal shows (rows ordered by ID as well,
    and PostgreSQL's deterministic collations, compare exactly)."""
    shape, collation, build = data.draw(_weighed_statements(_COLLATIONS[words.backend]))
    note(f"{shape}, collation {collation}: {build(words.sharded)}")
    with words.world.session() as session:
        got = session.execute(build(words.sharded)).all()
        twin = session.execute(build(words.twin)).all()
    if shape in ("ordered_rows", "ordered_stream") or (
        words.backend == "postgresql" and shape != "distinct"
    ):
        assert got == twin
        return
    fold = (lambda v: v.rstrip(" ")) if collation == "utf8mb4_bin" else None
    spelled = [_spelled(rows, fold) for rows in (got, twin)]
    if shape == "distinct":
        spelled = [sorted(rows) for rows in spelled]
    assert spelled[0] == spelled[1]


@pytest.mark.parametrize("words", [BACKENDS[2]], indirect=True)
def test_explain_says_which_strings_merge_by_weight(words: Words) -> None:
    """explain() names the MIN/MAX and DISTINCT steps that compare by WEIGHT_STRING()."""
    from snowshard.sharding import explain

    m = words.sharded
    with words.world.session() as session:
        extremes = explain(session, select(func.max(m.plain))).merged
        distinct = explain(session, select(m.plain).distinct()).merged
        exact = explain(session, select(m.binary).distinct()).merged
    assert any("MIN/MAX" in line and "WEIGHT_STRING" in line for line in extremes)
    assert any("DISTINCT" in line and "WEIGHT_STRING" in line for line in distinct)
    assert any("DISTINCT" in line for line in exact)
    assert not any("WEIGHT_STRING" in line for line in exact)


@pytest.mark.parametrize("words", [BACKENDS[1]], indirect=True)
def test_explain_says_which_strings_merge_by_rank(words: Words) -> None:
    """explain() names the collation whose ranks order PostgreSQL strings in a merge."""
    from snowshard.sharding import explain

    m = words.sharded
    with words.world.session() as session:
        default = explain(session, select(m.plain).order_by(m.plain)).merged
        named = explain(session, select(func.max(m.language))).merged
        exact = explain(session, select(m.binary).order_by(m.binary)).merged
    assert any("ranks" in line and "default collation" in line for line in default)
    assert any("ranks" in line and ICU in line for line in named)
    assert not any("ranks" in line for line in exact)


def test_distinct_with_the_primary_key_is_not_refused(words: Words) -> None:
    """Rows that include their ID are all distinct whatever the collation: merged."""
    _same_as_twin_unordered(words, lambda m: select(m.id, m.plain).distinct())


def test_a_string_comparison_in_having_is_refused_under_an_unknown_collation(
    words: Words,
) -> None:
    """HAVING max(x) > 'b' is computed in Python: refused unless x compares by code point."""
    having: Build = lambda m: (  # noqa: E731
        select(m.user_id, func.max(m.binary))
        .group_by(m.user_id)
        .having(func.max(m.binary) > "b")
    )
    _same_as_twin_unordered(words, having)
    if words.backend != "sqlite":
        _refused(
            words,
            lambda m: select(func.count()).select_from(m).having(func.max(m.plain) > "b"),
            "MAX|comparison",
        )
        language = "utf8mb4_general_ci" if words.backend == "mysql" else ICU
        _refused(  # a code-point column, compared under the collation its COLLATE names
            words,
            lambda m: select(func.count())
            .select_from(m)
            .having(func.max(m.binary.collate(language)) > "b"),
            "comparison",
        )


def _one_database() -> tuple[type[DeclarativeBase], Any, Any]:
    class Base(DeclarativeBase):
        pass

    class OneWord(Sharded, Base):
        __tablename__ = "one_words"
        __shards__ = Shards(4, key=("id", "user_id"))
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        plain: Mapped[str] = mapped_column(String(20))

    class OneWordTwin(Base):
        __tablename__ = "one_words_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger)
        plain: Mapped[str] = mapped_column(String(20))

    return Base, OneWord, OneWordTwin


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_database_orders_whole_reads_itself_and_merges_split_ones(
    backend: str, database_factory: DatabaseFactory
) -> None:
    """In one database a keyless ORDER BY runs as one UNION ALL the database sorts (exact
    whatever the collation); keys naming several shards split it into a merge, exact too:
    in Python on SQLite, by weight on MariaDB, by the database's ranks on PostgreSQL."""
    base, word, twin = _one_database()
    locale = icu_locale(DEFAULT_LOCALE) if backend == "postgresql" else None
    world = open_world(database_factory, base, backend, pg_locale=locale)
    with world.session() as session:
        for user, text in enumerate(WORDS, start=1):
            row = word(user_id=user, plain=text)
            session.add(row)
            session.flush()
            session.add(twin(id=row.id, user_id=user, plain=text))
        session.commit()
        whole = [select(m.plain).order_by(m.plain, m.id) for m in (word, twin)]
        assert session.execute(whole[0]).all() == session.execute(whole[1]).all()
        users = [1, 2, 3, 4]
        split = [
            select(m.plain).where(m.user_id.in_(users)).order_by(m.plain, m.id)
            for m in (word, twin)
        ]
        world.log.clear()
        assert session.execute(split[0]).all() == session.execute(split[1]).all()
        if backend == "postgresql":  # merged: the strings were ranked
            assert any("dense_rank" in sql for sql in world.log.statements())
    world.log.close()


# --------------------------------------------------------------------------- string keys


def _slugs(backend: str, exact: bool) -> tuple[type[DeclarativeBase], Any, Any]:
    """A model sharded by a string key ``slug`` over two databases, and its twin; ``exact``
    declares the key with each backend's code-point collation."""
    kind = binary_string(20) if exact else String(20)

    class Base(DeclarativeBase):
        pass

    class Tenant(Sharded, Base):
        __tablename__ = "tenants"
        __shards__ = Shards(4, key="slug", databases={"a": [0, 1], "b": [2, 3]})
        slug: Mapped[str] = mapped_column(kind, primary_key=True)
        seats: Mapped[int] = mapped_column(Integer)

    class TenantTwin(Base):
        __tablename__ = "tenants_twin"
        slug: Mapped[str] = mapped_column(kind, primary_key=True)
        seats: Mapped[int] = mapped_column(Integer)

    return Base, Tenant, TenantTwin


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exact", [False, True], ids=["default", "code-point"])
def test_a_string_shard_key_is_used_only_where_equality_is_exact(
    backend: str, exact: bool, database_factory: DatabaseFactory
) -> None:
    """A row lives in the table its string key's exact value names. Where the database
    matches strings exactly (SQLite, PostgreSQL, a code-point collation) reads by key equal
    the twin; under MariaDB's default collation, where 'ACME' = 'acme', writes and reads
    of the model are refused before any SQL (one table would return the 'acme' row for
    'ACME', or reject 'ACME' as a duplicate)."""
    base, tenant, twin = _slugs(backend, exact)
    world = open_world(database_factory, base, backend)
    slugs = ["acme", "globex", "initech", "umbrella"]
    with world.session() as session:
        session.add_all([twin(slug=slug, seats=i) for i, slug in enumerate(slugs)])
        session.commit()
        reads = [
            [select(m.seats).where(m.slug == "ACME") for m in (tenant, twin)],
            [select(m.seats).where(m.slug.in_(["globex", "Initech "])) for m in (tenant, twin)],
            [select(m.slug).where(m.seats > 0) for m in (tenant, twin)],
        ]
        if backend == "mysql" and not exact:
            world.log.clear()
            session.add_all([tenant(slug=slug, seats=i) for i, slug in enumerate(slugs)])
            with pytest.raises(UnsupportedShardQuery, match="slug is a string shard key"):
                session.flush()
            session.rollback()
            for sharded, plain in reads:
                with pytest.raises(UnsupportedShardQuery, match="slug is a string shard key"):
                    session.execute(sharded)
            assert len(world.log) == 0, "SQL ran before the refusal"
            assert session.execute(reads[0][1]).all()  # one table matches 'acme' for 'ACME'
        else:
            session.add_all([tenant(slug=slug, seats=i) for i, slug in enumerate(slugs)])
            session.commit()
            for sharded, plain in reads:
                assert sorted(session.execute(sharded).all()) == sorted(
                    session.execute(plain).all()
                )
    world.log.close()


def test_a_fixed_length_char_is_not_compared_in_python() -> None:
    """CHAR(n) compares ignoring trailing spaces on PostgreSQL, even under "C": refused."""
    code = column("code", CHAR(4, collation="C"))
    with pytest.raises(UnsupportedShardQuery, match="fixed-length CHAR"):
        check_strings(code, "postgresql", EQUALITY, "GROUP BY")
    check_strings(column("code", CHAR(4)), "sqlite", ORDERING, "ORDER BY")


def test_an_untyped_expression_is_refused_where_strings_may_compare_otherwise() -> None:
    """literal_column() has no type: refused on PostgreSQL and MariaDB, fine on SQLite."""
    with pytest.raises(UnsupportedShardQuery, match="knows no type"):
        check_strings(literal_column("name"), "postgresql", ORDERING, "ORDER BY")
    check_strings(literal_column("name"), "sqlite", ORDERING, "ORDER BY")
    check_strings(literal_column("name", Integer), "mysql", ORDERING, "ORDER BY")


def test_a_string_of_known_length_is_weighed_on_mariadb() -> None:
    """MariaDB orders and groups a String(n) by WEIGHT_STRING(x AS CHAR(n)); an untyped
    function over it (which may return a number) and a Text (no length) are refused."""
    weight = weight_of(_Row.__table__.c.plain, "mysql", ORDERING, "ORDER BY")
    assert str(weight.compile(dialect=mysql.dialect())) == (
        "WEIGHT_STRING(collation_rules.plain AS CHAR(8))"
    )
    assert weight_of(_Row.__table__.c.variant, "mysql", ORDERING, "ORDER BY") is None
    with pytest.raises(UnsupportedShardQuery):
        weight_of(func.substr(_Row.__table__.c.plain, 2), "mysql", ORDERING, "ORDER BY")
    with pytest.raises(UnsupportedShardQuery):
        weight_of(column("t", String()), "mysql", EQUALITY, "GROUP BY")
