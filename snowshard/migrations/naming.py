"""How the names in a sharded operation map to the names of one physical table, both ways.

A sharded operation is a plain Alembic operation on :data:`SENTINEL_TABLE` whose index and
constraint names, foreign key targets and referent tables are :meth:`str.format` templates
with ``{table}`` (the physical table name), ``{name}`` (the spec's name) and ``{index}``
(the shard number). A *namer* says what each kind of name becomes:

* :class:`Shard` fills the templates in for one physical table (upgrade, offline SQL);
* :class:`Templater` turns the names of one physical table back into templates
  (autogenerate, which compares physical tables);
* :data:`AS_GIVEN` keeps the templates and only moves the operation onto the sentinel
  table (a sharded operation's private copy of what it was given).

:mod:`snowshard.migrations.physical` applies a namer to every field of an operation.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa

from snowshard.spec import ShardConfigError, ShardInfo, ShardSpec

__all__ = [
    "AS_GIVEN",
    "SENTINEL_TABLE",
    "Namer",
    "Shard",
    "Templater",
    "escape",
    "pattern_template",
]

SENTINEL_TABLE = "__snowshard_table__"
"""The table name of the plain Alembic operation a sharded operation wraps."""


class Namer(Protocol):
    """What the physical names of one operation become (see the module docstring)."""

    @property
    def table(self) -> str:
        """The table the operation changes."""
        ...

    def name(self, name: object, what: str) -> str | None:
        """An index or constraint name (``what`` says which, for error messages)."""
        ...

    def referent(self, table: str) -> str:
        """A table the operation refers to (a foreign key's referent)."""
        ...

    def target(self, fullname: str) -> str:
        """A foreign key target, ``[schema.]table.column``."""
        ...

    def expression(self, expression: Any) -> Any:
        """An indexed expression of the changed table (a column becomes its name)."""
        ...


def escape(text: str) -> str:
    """``text`` as a template that formats back to itself."""
    return text.replace("{", "{{").replace("}", "}}")


def _column_name(expression: Any) -> Any:
    return expression.name if isinstance(expression, sa.Column) else expression


@dataclass(frozen=True)
class Shard:
    """One physical table of a spec: fills in the name templates of a sharded operation."""

    spec: ShardSpec
    index: int

    @property
    def table(self) -> str:
        return self.spec.table_name(self.index)

    def format(self, template: str, what: str = "name") -> str:
        """``template`` filled in for this table; ShardConfigError if it does not format."""
        try:
            return template.format(table=self.table, name=self.spec.name, index=self.index)
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            raise ShardConfigError(
                f"{self.spec.name}: {what} {template!r} is not a name template: use the "
                f"placeholders {{table}}, {{name}} and {{index}} and write braces as "
                f"{{{{ }}}} ({type(exc).__name__}: {exc})"
            ) from None

    def name(self, name: object, what: str) -> str | None:
        """A name template filled in; None (or SQLAlchemy's "no name") stays None."""
        return self.format(name, what) if isinstance(name, str) else None

    def referent(self, table: str) -> str:
        return self.format(table, "referent table")

    def target(self, fullname: str) -> str:
        return self.format(fullname, "foreign key target")

    def expression(self, expression: Any) -> Any:
        return _column_name(expression)


class _AsGiven:
    """The operation's own templates, on the sentinel table."""

    @property
    def table(self) -> str:
        return SENTINEL_TABLE

    def name(self, name: object, what: str) -> str | None:
        return name if isinstance(name, str) else None

    def referent(self, table: str) -> str:
        return table

    def target(self, fullname: str) -> str:
        return fullname

    def expression(self, expression: Any) -> Any:
        return _column_name(expression)


AS_GIVEN: Namer = _AsGiven()
"""The namer that keeps every template: how a sharded operation copies what it is given."""


def pattern_template(spec: ShardSpec) -> str | None:
    """``spec.pattern`` with ``{name}`` filled in and ``{index...}`` kept: orders_{index:02d}.

    None when the pattern uses anything else (then its tables cannot be told apart by a
    template of the index alone).
    """
    out: list[str] = []
    for literal, field, format_spec, conversion in string.Formatter().parse(spec.pattern):
        out.append(escape(literal))
        if field is None:
            continue
        if conversion or field not in ("name", "index"):
            return None
        if field == "name":
            out.append(escape(format(spec.name, format_spec or "")))
        else:
            out.append("{index" + (f":{format_spec}" if format_spec else "") + "}")
    template = "".join(out)
    for index in range(spec.count):
        if template.format(index=index) != spec.table_name(index):
            return None
    return template


class Templater:
    """Turns the names of one physical table's operations into the templates of its spec.

    ``shard_of`` finds the spec and shard of another physical table (a foreign key's
    referent), so that a co-sharded referent with the same shard number becomes a pattern
    such as ``orders_{index:02d}``.
    """

    def __init__(self, shard: Shard, shard_of: Callable[[str], ShardInfo | None]) -> None:
        self.shard = shard
        self.shard_of = shard_of

    @property
    def table(self) -> str:
        return SENTINEL_TABLE

    def name(self, name: object, what: str) -> str | None:
        if not isinstance(name, str):
            return None
        return escape(name).replace(escape(self.shard.table), "{table}")

    def referent(self, table: str) -> str:
        """{table} for itself, a pattern for a co-sharded table, else the name as it is."""
        if table == self.shard.table:
            return "{table}"
        info = self.shard_of(table)
        if info is not None and info.shard == self.shard.index:
            pattern = pattern_template(info.spec)
            if pattern is not None:
                return pattern
        return escape(table)

    def target(self, fullname: str) -> str:
        *schema, table, column = fullname.split(".")
        return ".".join([*map(escape, schema), self.referent(table), escape(column)])

    def expression(self, expression: Any) -> Any:
        """A column's name or SQL text; an expression over the physical table cannot be
        written for every table (ShardConfigError)."""
        if isinstance(expression, (sa.Column, str, sa.TextClause)):
            return _column_name(expression)
        raise ShardConfigError(
            f"{self.shard.spec.name}: the indexed expression {expression} is bound to "
            f"{self.shard.table}; write it as sa.text(...) to index every table"
        )
