"""How the rows of a bulk load are checked and completed before anything is written.

A :class:`RowPlan` serves every row with the same set of keys: it reads the given values
in the table's column order, and completes each row with its missing columns'
Python-side defaults (:class:`Fill`: a scalar, a new snowflake ID with its parent's gene,
or a callable that may read the row's own values through a :class:`RowContext`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from sqlalchemy import Column

from snowshard.errors import SnowshardError
from snowshard.orm.defaults import SnowflakeDefault
from snowshard.sharding.bulk_errors import BulkMissingShardKey, BulkRowError, row_failed
from snowshard.sharding.model import ShardedModel

__all__ = [
    "CallableFill",
    "Fill",
    "Processors",
    "RowContext",
    "RowPlan",
    "ScalarFill",
    "SnowflakeFill",
]


class Fill:
    """Computes one missing column of a row (its Python-side default)."""

    def __init__(self, column: Column[Any], position: int) -> None:
        self.column = column
        self.position = position
        self.append = True
        """False when the column is given but may be None (the snowflake ID only)."""

    def value(self, values: list[Any], index: int, shard: int) -> Any:
        raise NotImplementedError


class ScalarFill(Fill):
    def __init__(self, column: Column[Any], position: int, value: Any) -> None:
        super().__init__(column, position)
        self.constant = value

    def value(self, values: list[Any], index: int, shard: int) -> Any:
        return self.constant


class SnowflakeFill(Fill):
    """A new ID from the column's snowflake default, with the gene of its parent column."""

    def __init__(
        self,
        model: ShardedModel,
        column: Column[Any],
        position: int,
        default: SnowflakeDefault,
        gene_position: int | None,
    ) -> None:
        super().__init__(column, position)
        self.model = model
        self.next_id = default.generator.next_id
        self.gene_from = default.gene_from
        self.gene_position = gene_position
        self.as_string = bool(getattr(column.type, "as_string", False))

    def value(self, values: list[Any], index: int, shard: int) -> Any:
        model = self.model
        if self.gene_from is None:
            new = self.next_id()
        else:
            gene = None if self.gene_position is None else values[self.gene_position]
            if gene is None:
                text = (
                    f"{self.column.key} takes its gene from {self.gene_from!r}, which is not "
                    f"set; set {self.gene_from}"
                )
                if shard < 0:  # nothing to route by either
                    text = f"no shard key ({' or '.join(model.keys)}), and {text}"
                    row_failed(model, index, text, BulkMissingShardKey)
                row_failed(model, index, text, BulkRowError)
            if type(gene) is not int:
                gene = model.normalize(self.gene_from, gene)
            try:
                new = self.next_id(gene)
            except SnowshardError as exc:
                row_failed(
                    model,
                    index,
                    f"{self.column.key} takes its gene from {self.gene_from}={gene!r}, "
                    f"which is not a usable key: {exc}",
                    BulkRowError,
                    exc,
                )
        return str(new) if self.as_string else new


class CallableFill(Fill):
    """A callable default, given a context that holds the row's values only."""

    def __init__(self, model: ShardedModel, column: Column[Any], position: int, fn: Any) -> None:
        super().__init__(column, position)
        self.model = model
        self.fn = fn
        self.keys: tuple[str, ...] = ()
        """Keys of the values before this one (given, then filled), set by the plan."""

    def value(self, values: list[Any], index: int, shard: int) -> Any:
        context = RowContext(self, dict(zip(self.keys, values)), index)
        try:
            return self.fn(context)
        except BulkRowError:
            raise
        except Exception as exc:  # noqa: BLE001 - any error of a user's default is the row's
            row_failed(
                self.model,
                index,
                f"the default of {self.model.name}.{self.column.key} raised "
                f"{type(exc).__name__}: {exc}",
                BulkRowError,
                exc,
            )


class RowContext:
    """What a context-sensitive default may read in a bulk load: the row's own values.

    ``get_current_parameters()`` / ``current_parameters`` and ``current_column`` work as in
    an INSERT; anything else (``connection``, ``execute``...) needs a statement and raises
    :class:`BulkRowError`.
    """

    __slots__ = ("_fill", "_index", "current_column", "current_parameters")

    def __init__(self, fill: CallableFill, parameters: dict[str, Any], index: int) -> None:
        self._fill = fill
        self._index = index
        self.current_column = fill.column
        self.current_parameters = parameters

    def get_current_parameters(self, isolate_multiinsert_groups: bool = True) -> dict[str, Any]:
        return self.current_parameters

    def __getattr__(self, name: str) -> NoReturn:
        fill = self._fill
        row_failed(
            fill.model,
            self._index,
            f"the default of {fill.model.name}.{fill.column.key} reads context.{name}, which "
            "only a statement has; a bulk load gives defaults the row's values only "
            "(context.get_current_parameters(), context.current_column). Give "
            f"{fill.column.key} in every row, or use a server_default",
            BulkRowError,
        )


Processors = tuple[
    tuple[tuple[int, Callable[[Any], Any]], ...], tuple[tuple[int, Callable[[Any], Any]], ...]
]
"""(ID checks, other bind processors): (position, processor) pairs, see ``_Load.processors``."""


class RowPlan:
    """How rows with one set of keys are checked, completed and grouped."""

    def __init__(self, model: ShardedModel, keys: tuple[str, ...], index: int) -> None:
        table = model.table
        unknown = [k for k in keys if not isinstance(k, str) or k not in table.c]
        if unknown:
            row_failed(
                model,
                index,
                f"unknown column(s) {', '.join(map(repr, unknown))}; the columns of "
                f"{model.name} are {', '.join(table.c.keys())}",
                BulkRowError,
            )
        given = [c.key for c in table.c if c.key in keys]  # table order, whatever the row's
        self.single = len(given) == 1
        self.get: Callable[[Mapping[str, Any]], Any] = (
            operator.itemgetter(*given) if given else _nothing
        )
        """The given values (a tuple, or the value itself when ``single``)."""
        position = {k: i for i, k in enumerate(given)}
        self.routing = tuple((k, position[k]) for k in model.keys if k in position)
        fills: list[Fill] = []
        for column in table.c:
            fill = self._fill(model, column, position, index)
            if fill is not None:
                fills.append(fill)
                if fill.append:
                    position[column.key] = len(position)
        for fill in fills:
            if isinstance(fill, CallableFill):
                fill.keys = tuple(k for k, p in sorted(position.items(), key=lambda kv: kv[1]))
        self.fills = tuple(fills)
        order = sorted(position, key=position.__getitem__)
        self.columns: tuple[Column[Any], ...] = tuple(table.c[k] for k in order)
        self.id_position = position.get(model.id_key) if model.id_key is not None else None
        pk = [position.get(c.key) for c in table.primary_key.columns]
        self.primary_key = _key_reader(pk)
        self.processors: list[Processors | None] = [None] * model.count
        self.buckets: list[list[Sequence[Any]]] = [[] for _ in range(model.count)]

    @staticmethod
    def _fill(
        model: ShardedModel, column: Column[Any], position: dict[str, int], index: int
    ) -> Fill | None:
        default = column.default
        key = column.key
        if default is None:
            return None
        arg = getattr(default, "arg", None)
        if isinstance(arg, SnowflakeDefault):
            gene_at = position.get(arg.gene_from) if arg.gene_from is not None else None
            if key in position:
                if key != model.id_key:
                    return None
                fill = SnowflakeFill(model, column, position[key], arg, gene_at)
                fill.append = False  # the ID given as None: issue one
                return fill
            return SnowflakeFill(model, column, len(position), arg, gene_at)
        if key in position:
            return None
        if default.is_scalar:
            return ScalarFill(column, len(position), arg)
        if default.is_callable:
            return CallableFill(model, column, len(position), arg)
        what = "a sequence" if default.is_sequence else "a SQL expression"
        row_failed(
            model,
            index,
            f"{key} is not given and its default is {what} ({default!r}), which only the "
            f"database computes; give {key} in every row, or use a server_default",
            BulkRowError,
        )


def _nothing(row: Mapping[str, Any]) -> tuple[()]:
    return ()


def _key_reader(positions: Sequence[int | None]) -> Callable[[list[Any]], Any]:
    if len(positions) == 1:
        at = positions[0]
        if at is None:
            return lambda values: None
        return operator.itemgetter(at)
    return lambda values: tuple(None if p is None else values[p] for p in positions)
