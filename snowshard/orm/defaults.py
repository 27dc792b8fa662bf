"""Primary keys assigned client-side by an ID issuer (a :class:`~snowshard.Snowflake`, ...).

::

    ids = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=7)

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int]

    session.add(Order(user_id=1820))
    session.flush()             # the INSERT carries the new ID; Order.id is set
    assert order.id % 16 == 1820 % 16

The default is a SQLAlchemy *context-sensitive* column default: SQLAlchemy calls it in
Python, once per row, while it prepares the INSERT (also for ``executemany`` and the
"insertmanyvalues" batches of ``session.add_all`` / ``session.execute(insert(Model), rows)``),
and puts the value into the statement's parameters. So the ID needs no RETURNING or
``lastrowid``, is known to the ORM after flush, and the rows of a bulk insert each get their
own ID and their own gene.

Any :class:`~snowshard.issuer.IdIssuer` can issue the IDs: a :class:`~snowshard.Snowflake`,
a :class:`~snowshard.redis_issuer.RedisIssuer`, or an object of your own with a ``layout``
and ``next_id(gene=None)``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column
from sqlalchemy.orm import MappedColumn, mapped_column
from sqlalchemy.types import Integer, TypeDecorator, TypeEngine

from snowshard._compat import default_column, default_row
from snowshard.errors import IdTypeError, LayoutError, SnowshardError
from snowshard.issuer import IdIssuer, check_issuer
from snowshard.orm.errors import GeneParentError, MissingGeneParent
from snowshard.orm.types import SnowflakeType, to_id

__all__ = ["SnowflakeDefault", "snowflake_default", "snowflake_pk"]

_RESERVED = ("primary_key", "default", "autoincrement")


def _is_integer(type_: TypeEngine[Any]) -> bool:
    if isinstance(type_, TypeDecorator):
        return _is_integer(type_.impl_instance)
    return isinstance(type_, Integer)


class SnowflakeDefault:
    """A column default issuing ``generator.next_id()``, with the gene of ``gene_from``.

    ``generator`` is any :class:`~snowshard.issuer.IdIssuer`; anything else raises
    :class:`~snowshard.issuer.IssuerTypeError` (a ``TypeError``) at once. Use :func:`snowflake_default` or :func:`snowflake_pk` to make one. ``gene_from`` is the
    key of a column of the same table (for declarative models, the attribute name). A
    decimal ``str`` in an integer gene column counts as its number, as it is stored.
    The value is a ``str`` when the ID column is ``SnowflakeType(as_string=True)``, so the
    ORM's identity map holds the same value it later loads.
    """

    __slots__ = ("_columns", "gene_from", "generator")

    def __init__(self, generator: IdIssuer, *, gene_from: str | None = None) -> None:
        generator = check_issuer(generator, "generator")
        if gene_from is not None:
            if not isinstance(gene_from, str) or not gene_from:
                raise IdTypeError(
                    f"gene_from must be the key of a column of the same row (a non-empty str, "
                    f"e.g. 'user_id'), got {type(gene_from).__name__} {gene_from!r}"
                )
            if generator.layout.gene_bits == 0:
                raise LayoutError(
                    f"gene_from={gene_from!r} given, but the generator's layout has "
                    "gene_bits=0; build its Layout with gene_bits=n to carry the parent's gene"
                )
        self.generator = generator
        self.gene_from = gene_from
        # per ID column: (as_string, gene column is an integer type)
        self._columns: dict[Column[Any], tuple[bool, bool]] = {}

    def _column_info(self, column: Column[Any] | None) -> tuple[bool, bool]:
        if column is None:
            return False, False
        info = self._columns.get(column)
        if info is None:
            as_string = isinstance(column.type, SnowflakeType) and column.type.as_string
            gene_integer = False
            table = getattr(column, "table", None)
            if self.gene_from is not None and table is not None:
                gene_column = table.c.get(self.gene_from)
                gene_integer = gene_column is not None and _is_integer(gene_column.type)
            info = self._columns[column] = (as_string, gene_integer)
        return info

    def _where(self, column: Column[Any] | None) -> str:
        if column is None:
            return "the snowflake default"
        return f"{column.table.name}.{column.name}" if hasattr(column, "table") else column.name

    def __call__(self, context: Any) -> int | str:
        """Issue the ID of the row being inserted (called by SQLAlchemy)."""
        column: Column[Any] | None = default_column(context)
        as_string, gene_integer = self._column_info(column)
        if self.gene_from is None:
            value = self.generator.next_id()
        else:
            params = default_row(context)
            gene = params.get(self.gene_from)
            if gene is None:
                state = "is NULL" if self.gene_from in params else (
                    "is missing (or a SQL expression, not known before the row is written)"
                )
                raise MissingGeneParent(
                    f"{self._where(column)} takes its gene from {self.gene_from!r}, which "
                    f"{state} in the row being inserted; set {self.gene_from} before the "
                    "flush (the new ID carries its low bits)"
                )
            try:
                if gene_integer and isinstance(gene, str):
                    gene = to_id(gene)
                value = self.generator.next_id(gene)
            except SnowshardError as exc:  # InvalidId from the column type too
                raise GeneParentError(
                    f"{self._where(column)} takes its gene from {self.gene_from!r}, whose "
                    f"value {gene!r} is not a usable key: {exc}"
                ) from exc
        return str(value) if as_string else value

    def __repr__(self) -> str:
        gene = f", gene_from={self.gene_from!r}" if self.gene_from is not None else ""
        return f"snowflake_default({self.generator!r}{gene})"


def snowflake_default(generator: IdIssuer, *, gene_from: str | None = None) -> SnowflakeDefault:
    """A client-side column default issuing IDs from ``generator`` (any ID issuer).

    For ``mapped_column(SnowflakeType(), primary_key=True, default=...)`` or
    ``Column(..., default=...)``. With ``gene_from``, each ID carries the gene of that
    column of the same row; a row whose ``gene_from`` is NULL or absent raises
    :class:`~snowshard.orm.errors.MissingGeneParent` before any SQL is sent. Raises
    :class:`~snowshard.LayoutError` at once if ``gene_from`` is given but the layout has
    no gene bits.
    """
    return SnowflakeDefault(generator, gene_from=gene_from)


def snowflake_pk(
    generator: IdIssuer,
    *,
    gene_from: str | None = None,
    as_string: bool = False,
    **kw: Any,
) -> MappedColumn[Any]:
    """A ``mapped_column`` primary key of :class:`SnowflakeType` with a snowflake default.

    ``**kw`` goes to :func:`~sqlalchemy.orm.mapped_column` (``name``, ``comment``,
    ``sort_order``, ...); ``primary_key``, ``default`` and ``autoincrement`` are set here.
    """
    clash = [name for name in _RESERVED if name in kw]
    if clash:
        raise TypeError(f"snowflake_pk sets {', '.join(clash)} itself; do not pass it")
    return mapped_column(
        SnowflakeType(as_string=as_string),
        primary_key=True,
        autoincrement=False,
        default=SnowflakeDefault(generator, gene_from=gene_from),
        **kw,
    )
