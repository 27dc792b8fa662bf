"""Loading many rows into a sharded model at ``COPY`` speed: :func:`bulk_insert`.

::

    from snowshard.sharding import bulk_insert

    report = bulk_insert(session, Order, rows)       # rows: mappings of column key -> value
    session.commit()
    report.total, report.tables, report.ids          # rows, rows per table, IDs in input order

``session.execute(insert(Order), rows)`` goes through the ORM's bulk INSERT, which pays
SQLAlchemy's per-row parameter handling; this path does only what a load needs, in two
steps:

1. **Every row is checked and routed before anything is written.** A row must be a mapping
   of column keys of the model; its shard comes from its shard keys as for ``Order(...)``
   (keys that disagree, a value of the wrong type, a row without any key all raise); a
   missing ID is issued by the model's snowflake default, with the gene of its parent
   column; other Python-side column defaults are applied (scalars, callables, and
   context-sensitive callables that read only ``context.get_current_parameters()`` /
   ``current_column``; SQL-expression and sequence defaults need a statement and raise);
   every value goes through its column type's bind processor for the dialect of its
   database (TypeDecorators such as :class:`~snowshard.orm.SnowflakeType` and
   :class:`~snowshard.orm.UtcDateTime` included), so a value its type rejects raises here
   too. Each failure is a :class:`BulkRowError` naming the row's index, and derives from
   the error a single row would raise (:class:`~.errors.MissingShardKey`, ...).
2. **Rows are written grouped by physical table, inside the session's transaction**, on
   the connection the session holds for each database (``session.connection()``, so
   ``twophase=True`` sessions prepare and commit them like any other write; a rollback
   discards them): ``COPY`` on PostgreSQL with psycopg 3, multi-row ``INSERT`` statements
   elsewhere (:mod:`~.bulk_writers`).

Pending ORM changes are flushed first when the session autoflushes. Loaded rows do not
enter the identity map (as with SQLAlchemy's bulk INSERT). Values that no type checks in
Python (an ``int`` column given text, a string too long) are checked by the database
while writing; that error leaves the transaction to be rolled back, like any failed
statement. ``progress(done, total)`` is called once the rows are checked (``done`` = 0)
and after each batch; :func:`progress_bar` makes one that draws a rich progress bar.

With asyncio, run it in the session's sync context:
``await session.run_sync(bulk_insert, Order, rows)`` (no ``COPY`` there: the async
drivers get multi-row INSERTs).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice, repeat
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from snowshard.errors import MissingExtra
from snowshard.orm.types import MAX_ID, SnowflakeType
from snowshard.sharding.bulk import BIND_KEY
from snowshard.sharding.bulk_errors import (
    KEY_ERRORS,
    ROW_ERRORS,
    BulkMissingShardKey,
    BulkRowError,
    BulkRowTypeError,
    InvalidBulkArgument,
    row_failed,
    where,
)
from snowshard.sharding.bulk_plan import Processors, RowPlan
from snowshard.sharding.bulk_writers import write_rows
from snowshard.sharding.collation import check_string_keys
from snowshard.sharding.errors import ShardKeyConflict
from snowshard.sharding.model import ShardedModel, model_of_class
from snowshard.strategies import Gene, Mod

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "BulkReport",
    "Progress",
    "bulk_insert",
    "progress_bar",
]

CHUNK = 5_000
"""Rows checked together by :meth:`_Load.by_column` (fewer when ``batch_size`` is smaller)."""

DEFAULT_BATCH_SIZE = 5_000
"""Rows per ``COPY`` or ``INSERT`` statement (and per progress call), unless given."""

Progress = Callable[[int, int], object]
"""``progress(done, total)``: rows written so far, rows in the load."""

# --------------------------------------------------------------------------- report


@dataclass
class BulkReport:
    """What :func:`bulk_insert` wrote."""

    total: int = 0
    """Rows written."""
    tables: dict[str, int] = field(default_factory=dict)
    """Physical table name -> rows written into it."""
    ids: list[Any] = field(default_factory=list)
    """The primary key of each row, in input order: its value for a one-column key (as given,
    or as issued), a tuple for a composite one; None where the database assigns it."""


# --------------------------------------------------------------------------- the load


class _Load:
    """One call of :func:`bulk_insert`: the plans, the connections, the report."""

    def __init__(self, session: Session, model: ShardedModel) -> None:
        self.session = session
        self.model = model
        self.plans: dict[tuple[str, ...], RowPlan] = {}
        self.connections: dict[str, Connection] = {}
        self.report = BulkReport()
        self.modulus = model.count if type(model.strategy) in (Gene, Mod) else 0
        """``key % modulus`` is the shard of a non-negative int key (0: no such shortcut)."""

    def connection(self, shard: int) -> Connection:
        """The session's connection to the database of ``shard`` (begun, nothing written)."""
        database = self.model.database_of(shard)
        found = self.connections.get(database)
        if found is None:
            arguments = {BIND_KEY: database, "mapper": self.model.mappers[shard]}
            found = self.connections[database] = self.session.connection(
                bind_arguments=arguments
            )
        return found

    def processors(self, plan: RowPlan, shard: int) -> Processors:
        """(ID checks, other processors) of ``plan``'s columns for ``shard``'s dialect.

        A :class:`~snowshard.orm.SnowflakeType` column whose plain integer type needs no
        processing on this dialect is an *ID check*: a value that is an ``int`` in
        ``0..2**63-1`` passes as it is (what its bind processor would return); any other
        value goes through the processor.
        """
        dialect = self.connection(shard).dialect
        checks: list[tuple[int, Callable[[Any], Any]]] = []
        others: list[tuple[int, Callable[[Any], Any]]] = []
        for at, column in enumerate(plan.columns):
            type_ = column.type
            process = type_.dialect_impl(dialect).bind_processor(dialect)
            if process is None:
                continue
            plain = isinstance(type_, SnowflakeType) and (
                type_.impl_instance.dialect_impl(dialect).bind_processor(dialect) is None
            )
            (checks if plain else others).append((at, process))
        found = plan.processors[shard] = (tuple(checks), tuple(others))
        return found

    def prepare(self, rows: Iterable[Any], size: int = CHUNK) -> None:
        """Check, complete and group every row, ``size`` rows at a time (step 1 of the
        module docstring)."""
        chunks: Iterable[Sequence[Any]]
        if isinstance(rows, (list, tuple)):
            chunks = (rows[at : at + size] for at in range(0, len(rows), size))
        else:
            source = iter(rows)
            chunks = iter(lambda: list(islice(source, size)), [])
        offset = 0
        for chunk in chunks:
            if not self.by_column(chunk, offset):
                self.by_row(chunk, offset)
            offset += len(chunk)
        self.report.total = offset

    def by_column(self, rows: Sequence[Any], offset: int) -> bool:
        """Check and group ``rows`` a column at a time, if that is exact; else False.

        The common case of a load: dicts with the same keys, every column given (no
        default to fill, no ID to issue), integer shard keys routed by ``Gene``/``Mod``
        (the shard is ``key % count``), IDs in range and no other value to process. Each check is a
        builtin running over a whole column (``set(map(type, ...))``, ``min``, ``max``),
        which is what makes it fast. Any row outside that case sends the chunk to
        :meth:`by_row`, which finds the row and raises its error, so both paths accept
        and reject exactly the same rows. Nothing is kept unless every row passes.
        """
        modulus = self.modulus
        if not modulus or set(map(type, rows)) != {dict}:
            return False
        keys = tuple(rows[0])
        plan = self.plans.get(keys)
        if plan is None:
            plan = self.plans[keys] = RowPlan(self.model, keys, offset)
        if plan.single or not plan.routing or any(fill.append for fill in plan.fills):
            return False
        if set(map(len, rows)) != {len(keys)}:
            return False
        try:
            values = list(map(plan.get, rows))  # every key present; with len: no other
        except KeyError:
            return False
        columns: dict[int, list[Any]] = {}
        shards: list[int] = []
        for _key, at in plan.routing:
            column = columns[at] = list(map(operator.itemgetter(at), values))
            if set(map(type, column)) != {int} or min(column) < 0:
                return False
            found = list(map(operator.mod, column, repeat(modulus)))
            if shards and found != shards:
                return False
            shards = found
        for fill in plan.fills:  # a given ID that may be None: none may be
            at = fill.position
            if None in (columns.get(at) or map(operator.itemgetter(at), values)):
                return False
        checked: set[int] = set()
        for shard in set(shards):
            checks, others = plan.processors[shard] or self.processors(plan, shard)
            if others:
                return False
            checked.update(at for at, _process in checks)
        for at in checked:
            known = columns.get(at)  # a shard key: known to hold ints >= 0
            ids = known or list(map(operator.itemgetter(at), values))
            if known is None and (set(map(type, ids)) != {int} or min(ids) < 0):
                return False
            if max(ids) > MAX_ID:
                return False
        buckets = plan.buckets
        for row_values, shard in zip(values, shards):
            buckets[shard].append(row_values)
        self.report.ids.extend(map(plan.primary_key, values))
        return True

    def by_row(self, rows: Sequence[Any], offset: int) -> None:
        """Check, complete and group ``rows`` one by one (the general path)."""
        model = self.model
        shard_of = model.shard_of
        # with layout generations a parent key names one table per generation: the ID
        # (issued below if missing) decides, and the parent key must be among its tables
        generational = model.timeline is not None
        ids = self.report.ids.append
        plans = self.plans
        last: tuple[str, ...] | None = None
        plan: RowPlan | None = None
        for index, row in enumerate(rows, offset):
            if type(row) is not dict and not isinstance(row, Mapping):
                row_failed(
                    model,
                    index,
                    f"a row must be a mapping of column keys to values, got "
                    f"{type(row).__name__} {row!r}"[:300],
                    BulkRowTypeError,
                )
            keys = tuple(row)
            if keys != last or plan is None:
                plan = plans.get(keys)
                if plan is None:
                    plan = plans[keys] = RowPlan(model, keys, index)
                last = keys
                get, single, routing, fills = plan.get, plan.single, plan.routing, plan.fills
                primary_key, prepared, buckets = plan.primary_key, plan.processors, plan.buckets
            values = [get(row)] if single else list(get(row))
            shard = -1
            parents: list[tuple[str, Any]] = []
            try:
                for key, at in routing:
                    value = values[at]
                    if value is None:
                        continue
                    if generational and key != model.id_key:
                        parents.append((key, value))
                        continue
                    found = shard_of(key, value)
                    if shard < 0:
                        shard, first = found, (key, value)
                    elif found != shard:
                        raise ShardKeyConflict(
                            f"{first[0]}={first[1]!r} is in shard {shard} but {key}={value!r} "
                            f"is in shard {found}; the keys must agree (does the ID carry the "
                            "parent's gene?)"
                        )
                for fill in fills:
                    if fill.append:
                        values.append(fill.value(values, index, shard))
                    elif values[fill.position] is None:
                        values[fill.position] = fill.value(values, index, shard)
                if shard < 0:
                    shard = self._route_new(plan, values, index)
                for key, value in parents:
                    if shard not in model.shards_of(key, value):
                        raise ShardKeyConflict(
                            f"{key}={value!r} is not in table {shard}, where the row's ID "
                            "puts it; the keys must agree (does the ID carry the parent's "
                            "gene?)"
                        )
            except KEY_ERRORS as exc:
                if isinstance(exc, BulkRowError):
                    raise
                kind = ROW_ERRORS[next(k for k in ROW_ERRORS if isinstance(exc, k))]
                raise kind(
                    f"{where(model, index)}: {exc}; no row of this load was written",
                    index=index,
                ) from exc
            ids(primary_key(values))
            processors = prepared[shard] or self.processors(plan, shard)
            at = -1
            try:
                for at, process in processors[0]:
                    value = values[at]
                    if type(value) is not int or not 0 <= value <= MAX_ID:
                        values[at] = process(value)
                for at, process in processors[1]:
                    values[at] = process(values[at])
            except Exception as exc:
                column = plan.columns[at]
                kind = BulkRowTypeError if isinstance(exc, TypeError) else BulkRowError
                raise kind(
                    f"{where(model, index)}: {column.key} = {values[at]!r} is refused by its "
                    f"type {column.type!r}: {exc}; no row of this load was written",
                    index=index,
                ) from exc
            buckets[shard].append(values)

    def _route_new(self, plan: RowPlan, values: list[Any], index: int) -> int:
        """The shard of a row that gave no key: by its ID, issued just now."""
        model = self.model
        at = plan.id_position
        if at is None or model.id_key not in model.keys or values[at] is None:
            row_failed(
                model,
                index,
                f"no shard key; give {' or '.join(model.keys)} in every row",
                BulkMissingShardKey,
            )
        assert model.id_key is not None
        return model.shard_of(model.id_key, values[at])

    def write(self, batch_size: int, progress: Progress | None) -> None:
        """Write every group into its table (step 2 of the module docstring)."""
        model = self.model
        total = self.report.total
        done = 0

        def advance(count: int) -> None:
            nonlocal done
            done += count
            if progress is not None:
                progress(done, total)

        if progress is not None:
            progress(0, total)
        groups = [
            (model.database_of(shard), shard, plan)
            for plan in self.plans.values()
            for shard in range(model.count)
            if plan.buckets[shard]
        ]
        groups.sort(key=lambda group: group[:2])
        tables = self.report.tables
        for database, shard, plan in groups:
            rows = plan.buckets[shard]
            table = model.tables[shard]
            write_rows(
                self.connection(shard),
                table,
                plan.columns,
                rows,
                batch_size=batch_size,
                database=database,
                on_batch=advance,
            )
            tables[table.name] = tables.get(table.name, 0) + len(rows)
            plan.buckets[shard] = []  # let the written rows go


def bulk_insert(
    session: Session,
    model: type,
    rows: Iterable[Mapping[str, Any]],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
) -> BulkReport:
    """Insert ``rows`` into the sharded ``model`` inside ``session``'s transaction.

    :param session: a :class:`~snowshard.sharding.ShardedSession` (its transaction is
        used; commit or roll back as for any write).
    :param model: the logical sharded class (``Order``).
    :param rows: mappings of column key -> value; any iterable, read once.
    :param batch_size: rows per ``COPY`` / ``INSERT`` statement and per progress call
        (an int >= 1).
    :param progress: ``progress(done, total)``, called with 0 once every row is checked,
        then after each batch; see :func:`progress_bar`.
    :returns: a :class:`BulkReport`: rows per table, total, primary keys in input order.
    :raises BulkRowError: (or a subclass) for a bad row, before anything is written; the
        message and ``index`` name the row.
    :raises UnsupportedShardQuery: for a string shard key that a database matches otherwise
        than exactly (:func:`~snowshard.sharding.collation.check_string_keys`).

    See the module docstring for what is checked and how rows are written.
    """
    sharded = _check_arguments(session, model, rows, batch_size, progress)
    dialects = {session.get_bind(mapper=m).dialect.name for m in sharded.mappers}
    for dialect in dialects:  # string keys only where the databases match them exactly
        check_string_keys(sharded, dialect)
    if session.autoflush:
        session.flush()
    load = _Load(session, sharded)
    load.prepare(rows, min(batch_size, CHUNK))
    load.write(batch_size, progress)
    return load.report


def _check_arguments(
    session: object, model: object, rows: object, batch_size: object, progress: object
) -> ShardedModel:
    if not isinstance(session, Session):
        raise InvalidBulkArgument(
            f"bulk_insert needs a ShardedSession (a sqlalchemy Session), got "
            f"{type(session).__name__}; for asyncio use "
            "await session.run_sync(bulk_insert, Model, rows)"
        )
    entry = model_of_class(model)
    if entry is None:
        raise InvalidBulkArgument(
            f"bulk_insert loads a sharded model (a class deriving from Sharded), got {model!r}"
        )
    if entry[1] is not None:
        raise InvalidBulkArgument(
            f"{model!r} is the physical class of table {entry[0].tables[entry[1]].name}; pass "
            f"the logical model {entry[0].name}, which routes each row to its table"
        )
    if isinstance(rows, (Mapping, str, bytes)) or not isinstance(rows, Iterable):
        raise InvalidBulkArgument(
            f"rows must be an iterable of mappings (a list of dicts), got "
            f"{type(rows).__name__}; wrap a single row in a list"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidBulkArgument(
            f"batch_size must be an int >= 1 (rows per statement), got {batch_size!r}; "
            f"the default is {DEFAULT_BATCH_SIZE}"
        )
    if progress is not None and not callable(progress):
        raise InvalidBulkArgument(
            f"progress must be a callable progress(done, total) or None, got {progress!r}"
        )
    return entry[0]


# --------------------------------------------------------------------------- progress bar


@contextmanager
def progress_bar(description: str = "Loading rows", *, console: Any = None) -> Iterator[Progress]:
    """A rich progress bar for the block, as a ``progress(done, total)`` callback.

    ::

        with progress_bar("orders") as progress:
            bulk_insert(session, Order, rows, progress=progress)

    ``console`` is a ``rich.console.Console`` (default: rich's own, on standard output).
    Needs rich, from the ``[cli]`` extra; without it raises
    :class:`~snowshard.errors.MissingExtra`.
    """
    try:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TaskProgressColumn,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress
    except ImportError as exc:
        raise MissingExtra(
            "progress_bar draws with rich, part of the [cli] extra: "
            "pip install 'snowshard[cli]' (or pass your own progress(done, total) callback)"
        ) from exc
    with RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        console=console,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
