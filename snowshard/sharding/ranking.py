"""Ordering strings as a PostgreSQL collation does, by asking the database to rank them.

PostgreSQL has no function that turns a string into bytes that sort as its collation sorts
it (MariaDB's ``WEIGHT_STRING``), and Python cannot reproduce a language or ICU collation.
But the database orders the strings it is sent. A merge that orders strings under such a
collation (:func:`~snowshard.sharding.collation.server_order`: ORDER BY of a string, MIN/MAX
of one, across shards) sends one of the databases it read the distinct values it has to
compare, in one statement::

    SELECT v, dense_rank() OVER (ORDER BY v COLLATE "en-x-icu") FROM unnest(:strings) AS v

and compares ranks instead of strings (one statement per collation the merge ranks by,
whatever the number of expressions). Dense ranks tie where the collation calls strings
equal, as one table's ORDER BY does. A merge of rows reads every source's first batch
(up to 1,000 rows, or ``yield_per``) and ranks their strings at once: a top-20 over 4
databases costs one more statement, of at most 80 strings. Each later batch that brings
strings not yet ranked is ranked again with the strings the other sources' batches still
hold (:class:`HeldRanks`), so memory stays O(sources x batch). A grouped merge ranks the
GROUP BY keys and MIN/MAX values of all its partial rows at once.

Ranks from one database stand for every database's order only if they all order alike.
The statement names the collation, so a named one is the one of that name on each
database (snowshard assumes the servers build it alike, as for any query). The *default*
collation is each database's own: :func:`check_defaults` reads how each database defines
it (provider, locale, version; once per engine) when the merge runs, before its statement
is sent, and refuses a merge across databases that define it differently. Where that
default orders by code point (``C``, ``POSIX``, the builtin provider's), its strings are
ranked in Python, with no statement. A collation *named* ``C`` or ``POSIX`` is ordered in
Python by code point, as it orders in a UTF-8 or LATIN1 database: :func:`check_code_point`
refuses such a merge over a database encoded otherwise.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import ARRAY, Text, bindparam, column, func, select, text
from sqlalchemy.engine import Connection, Engine

from snowshard.sharding.collation import ServerOrder
from snowshard.sharding.errors import UnsupportedShardQuery

__all__ = [
    "Collated",
    "HeldRanks",
    "Ranker",
    "check_code_point",
    "check_defaults",
    "code_point_ranks",
    "database_ranker",
    "rank_columns",
    "rank_statement",
    "required",
]

Ranker = Callable[[ServerOrder, Collection[str]], dict[str, int]]
"""Dense ranks of distinct strings under a collation (equal strings share a rank)."""

_STRINGS = "snowshard_strings"
_SETTINGS = {
    "c": ("encoding", "datcollate", "datcollversion"),
    "i": ("encoding", "daticulocale", "datlocale", "daticurules", "datcollversion"),
    "b": ("encoding", "datlocale", "datcollversion"),
}
"""Per provider of the default collation (``datlocprovider``: libc, ICU, builtin), the
``pg_database`` columns that decide how it orders strings (columns differ between
PostgreSQL versions; those present are read). The version changes when the library
that sorts (glibc, ICU) does."""
_DEFAULTS: weakref.WeakKeyDictionary[Engine, tuple[tuple[str, str], ...]] = (
    weakref.WeakKeyDictionary()
)
_CODE_POINT_ENCODINGS = frozenset({"UTF8", "LATIN1"})
"""Encodings whose byte order is code-point order."""


@cache
def rank_statement(collation: str | None) -> Any:
    """``SELECT v, dense_rank() OVER (ORDER BY v [COLLATE c]) FROM unnest(:strings)``."""
    values = (
        func.unnest(bindparam(_STRINGS, type_=ARRAY(Text)))
        .table_valued(column("v", Text))
        .render_derived()
    )
    value = values.c.v
    ordered = value if collation is None else value.collate(collation)
    return select(value, func.dense_rank().over(order_by=ordered))


def required(rank: Ranker | None) -> Ranker:
    """``rank``, which a merge of ranked strings cannot do without."""
    if rank is None:
        raise TypeError("this merge orders strings by a database's ranks: pass rank=")
    return rank


def rank_columns(
    rank: Ranker, columns: Mapping[int, tuple[ServerOrder, Iterable[Any]]]
) -> dict[int, dict[str, int]]:
    """Ranks of the strings of each column (``helper -> (order, values)``; NULLs left
    out), one statement per collation: columns ranked alike share one table."""
    by_order: dict[ServerOrder, set[str]] = {}
    for order, values in columns.values():
        by_order.setdefault(order, set()).update(v for v in values if v is not None)
    tables = {order: rank(order, strings) for order, strings in by_order.items()}
    return {helper: tables[order] for helper, (order, _) in columns.items()}


def code_point_ranks(strings: Collection[str]) -> dict[str, int]:
    """Dense ranks of ``strings`` in code-point order (Python's), each string its own."""
    return {value: position for position, value in enumerate(sorted(strings))}


_UTF8 = "UTF8"
"""PostgreSQL's name of UTF-8 (``pg_encoding_to_char``)."""


def _by_code_point(default: tuple[tuple[str, str], ...]) -> bool:
    """Whether a database whose default collation is ``default`` (:func:`_default_of`)
    orders strings by code point: a UTF-8 database under libc's ``C`` or ``POSIX`` (bytes
    compared) or the builtin provider's ``C`` or ``C.UTF-8``. Not libc's ``C.UTF-8``:
    code-point order only on glibc 2.35 and later, and PostgreSQL records no version."""
    settings = dict(default)
    if settings.get("encoding") != _UTF8:
        return False
    if settings["datlocprovider"] == "c":
        return settings.get("datcollate") in ("C", "POSIX")
    return settings["datlocprovider"] == "b" and settings.get("datlocale") in ("C", "C.UTF-8")


def database_ranker(connection: Connection) -> Ranker:
    """A :data:`Ranker` that asks ``connection``'s database (one of those the merge read,
    in the session's transaction); strings under the default collation of a database that
    orders by code point (:func:`_by_code_point`) are ranked here, with no statement."""

    def rank(order: ServerOrder, strings: Collection[str]) -> dict[str, int]:
        if not strings:
            return {}
        if order.collation is None and _by_code_point(_default_of(connection)):
            return code_point_ranks(strings)
        rows = connection.execute(
            rank_statement(order.collation), {_STRINGS: list(strings)}
        )
        return {value: int(position) for value, position in rows}

    return rank


def _default_of(connection: Connection) -> tuple[tuple[str, str], ...]:
    """How ``connection``'s database orders strings by default, its encoding by name
    (read once per engine)."""
    engine = connection.engine
    found = _DEFAULTS.get(engine)
    if found is None:
        row = connection.execute(
            text(
                "SELECT to_jsonb(d) || jsonb_build_object('encoding', "
                "pg_encoding_to_char(d.encoding)) "
                "FROM pg_database d WHERE datname = current_database()"
            )
        ).scalar_one()
        provider = str(row.get("datlocprovider", "c"))
        keys = _SETTINGS.get(provider, tuple(sorted(row)))
        found = (("datlocprovider", provider),) + tuple(
            (k, str(row[k])) for k in keys if row.get(k) is not None
        )
        _DEFAULTS[engine] = found
    return found


def check_defaults(
    ranked: Mapping[int, ServerOrder], connections: Mapping[str, Connection]
) -> None:
    """Refuse ranking strings under the default collation across ``connections`` (database
    name -> connection) whose databases' defaults differ (:class:`UnsupportedShardQuery`)."""
    if len(connections) < 2 or all(o.collation is not None for o in ranked.values()):
        return
    defaults = {name: _default_of(c) for name, c in connections.items()}
    if len(set(defaults.values())) == 1:
        return
    listed = "; ".join(
        f"{name!r}: " + ", ".join(f"{k}={v}" for k, v in found)
        for name, found in defaults.items()
    )
    raise UnsupportedShardQuery(
        "ORDER BY or MIN/MAX of strings under the default collation across databases whose "
        f"default collations differ ({listed}): one table would order them one way, these "
        "databases order them differently; name the collation in the query "
        '(.collate("en-x-icu")) or declare the column String(..., collation=...)'
    )


def check_code_point(connections: Mapping[str, Connection]) -> None:
    """Refuse a merge that orders strings of a collation named ``C`` or ``POSIX`` by code
    point (:attr:`~snowshard.sharding.merge.MergePlan.code_point`) when one of the
    databases it reads is encoded otherwise than UTF-8 or LATIN1: there ``C`` compares
    bytes that do not sort as code points do (LATIN9 puts ``€``, 0xA4, before ``ä``)."""
    for name, connection in connections.items():
        encoding = dict(_default_of(connection)).get("encoding")
        if encoding not in _CODE_POINT_ENCODINGS:
            raise UnsupportedShardQuery(
                f'a merge across shards orders strings of the collation "C" (or "POSIX") by '
                f"code point, but database {name!r} is encoded {encoding}, where that "
                "collation orders the encoding's bytes, which sort otherwise (one table's "
                "answer could differ); route the query to one shard (a shard key in WHERE), "
                "or order by a collation the databases define alike (e.g. "
                '.collate("und-x-icu"), whose order the merge asks of a database)'
            )


class Collated:
    """A string in a merge of rows, compared by the rank :class:`HeldRanks` holds for it
    at the time of the comparison (ranks are renumbered as batches come and go, but two
    held strings always compare as the collation orders them)."""

    __slots__ = ("ranks", "value")

    def __init__(self, value: str, ranks: list[dict[str, int]]) -> None:
        self.value = value
        self.ranks = ranks
        """A one-item list holding the current table of ranks (replaced as batches go)."""

    def _rank(self) -> int:
        return self.ranks[0][self.value]

    def __lt__(self, other: Collated) -> bool:
        return self._rank() < other._rank()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Collated) and self._rank() == other._rank()

    __hash__ = None  # type: ignore[assignment]


class HeldRanks:
    """Ranks of the strings a merge of rows holds: the current batch of each source.

    ``helpers`` maps each ranked helper column to its position in a raw row and its
    :class:`~snowshard.sharding.collation.ServerOrder`. Each :meth:`hold` of a new batch
    ranks that batch's strings together with those of the other sources' batches still held
    (one statement, only when some string is new); strings of batches already merged are
    forgotten.
    """

    def __init__(
        self, rank: Ranker, helpers: Mapping[int, tuple[int, ServerOrder]], sources: int
    ) -> None:
        self._rank = rank
        self._helpers = dict(helpers)
        self._held: dict[int, list[set[str]]] = {
            h: [set() for _ in range(sources)] for h in helpers
        }
        self._tables: dict[int, list[dict[str, int]]] = {h: [{}] for h in helpers}

    def hold(self, batches: Mapping[int, Sequence[Any]]) -> None:
        """The batches just read (source number -> raw rows) replace those sources' last;
        their strings are ranked, with all others held, if some are new."""
        fresh = False
        for helper, (position, _) in self._helpers.items():
            held = self._held[helper]
            for source, rows in batches.items():
                strings = {row[position] for row in rows}
                strings.discard(None)
                held[source] = strings
                fresh = fresh or not strings <= self._tables[helper][0].keys()
        if not fresh:
            return
        columns = {
            helper: (order, set().union(*self._held[helper]))
            for helper, (_, order) in self._helpers.items()
        }
        for helper, table in rank_columns(self._rank, columns).items():
            # the one table Collated keys read, replaced in the list they share
            self._tables[helper][0] = table

    def reader(self, helper: int) -> Callable[[Any], Any]:
        """The sort value of a raw row's ranked helper: None or a :class:`Collated`."""
        position = self._helpers[helper][0]
        tables = self._tables[helper]

        def read(row: Any) -> Any:
            value = row[position]
            return None if value is None else Collated(value, tables)

        return read
