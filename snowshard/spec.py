"""Where the physical tables of one logical sharded table live.

This is the contract shared by the ORM layer (which maps each physical table) and the
migrations (which change every physical table together). Each physical ``Table`` the ORM
layer creates carries ``table.info["snowshard"] = ShardInfo(spec, shard)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from string import Formatter
from typing import NamedTuple

from snowshard.errors import ShardConfigError

__all__ = ["DEFAULT_DATABASE", "ShardConfigError", "ShardInfo", "ShardSpec"]

DEFAULT_DATABASE = "default"


@dataclass(frozen=True)
class ShardSpec:
    """``count`` physical tables named by ``pattern`` and spread over named databases.

    ``pattern`` is a :meth:`str.format` template with ``name`` and ``index``, e.g. the
    default ``"{name}_{index:02d}"`` gives ``orders_00`` .. ``orders_15``. ``databases``
    maps a database (bind) key to the table indices it holds; every index must be in
    exactly one database. Without it, all tables are in :data:`DEFAULT_DATABASE`.
    """

    name: str
    count: int
    pattern: str = "{name}_{index:02d}"
    databases: Mapping[str, Sequence[int]] = field(default_factory=dict)
    _database_of: Mapping[int, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ShardConfigError(
                f"a sharded table's name must be a non-empty str, got "
                f"{type(self.name).__name__} {self.name!r}; pass the logical table name"
            )
        _check_pattern(self.name, self.pattern)
        if not isinstance(self.databases, Mapping):
            raise ShardConfigError(
                f"{self.name}: databases must be a mapping of database key to table indices "
                f"(e.g. {{'a': range(8), 'b': range(8, 16)}}), got "
                f"{type(self.databases).__name__} {self.databases!r}"
            )
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ShardConfigError(f"{self.name}: table count must be an int >= 1, got {self.count!r}")
        try:
            names = [self.table_name(i) for i in range(self.count)]
        except (KeyError, IndexError, ValueError) as exc:
            raise ShardConfigError(
                f"{self.name}: table name pattern {self.pattern!r} is not a format string "
                f"with {{name}} and {{index}}: {exc}"
            ) from None
        if len(set(names)) != self.count:
            raise ShardConfigError(
                f"{self.name}: pattern {self.pattern!r} gives duplicate table names; "
                "include {index} in it"
            )
        for key, indices in self.databases.items():
            if isinstance(indices, (str, bytes)) or not isinstance(indices, Iterable):
                raise ShardConfigError(
                    f"{self.name}: database {key!r} must list table indices (a range or a "
                    f"list of ints), got {type(indices).__name__} {indices!r}"
                )
        frozen = {key: tuple(indices) for key, indices in self.databases.items()}
        object.__setattr__(self, "databases", frozen or {DEFAULT_DATABASE: tuple(range(self.count))})
        seen: dict[int, str] = {}
        for key, indices in self.databases.items():
            if not isinstance(key, str) or not key:
                raise ShardConfigError(
                    f"{self.name}: database keys must be non-empty str, got {key!r}"
                )
            for i in indices:
                if isinstance(i, bool) or not (isinstance(i, int) and 0 <= i < self.count):
                    raise ShardConfigError(
                        f"{self.name}: database {key!r} lists table index {i!r}, outside "
                        f"0..{self.count - 1}"
                    )
                if i in seen:
                    raise ShardConfigError(
                        f"{self.name}: table {i} is in both {seen[i]!r} and {key!r}; "
                        "give each table one database"
                    )
                seen[i] = key
        missing = sorted(set(range(self.count)) - set(seen))
        if missing:
            raise ShardConfigError(
                f"{self.name}: tables {missing} are in no database; list them in databases="
            )
        object.__setattr__(self, "_database_of", seen)

    def table_name(self, index: int) -> str:
        return self.pattern.format(name=self.name, index=index)

    @property
    def table_names(self) -> list[str]:
        return [self.table_name(i) for i in range(self.count)]

    def database_of(self, index: int) -> str:
        return self._database_of[index]

    def tables_in(self, database: str) -> list[int]:
        """Indices of the tables held by ``database`` (empty if it holds none)."""
        return list(self.databases.get(database, ()))

    def __hash__(self) -> int:
        return hash((self.name, self.count, self.pattern, tuple(sorted(self.databases.items()))))


_PATTERN_FIELDS = ("name", "index")


def _check_pattern(name: str, pattern: object) -> None:
    """Refuse a table name pattern with anything but ``{name}`` and ``{index[:spec]}``."""
    if not isinstance(pattern, str) or not pattern:
        raise ShardConfigError(
            f"{name}: table name pattern must be a non-empty str such as "
            f"'{{name}}_{{index:02d}}', got {type(pattern).__name__} {pattern!r}"
        )
    try:
        fields = [
            (field_name, conversion)
            for _, field_name, _, conversion in Formatter().parse(pattern)
            if field_name is not None
        ]
    except ValueError as exc:
        raise ShardConfigError(
            f"{name}: table name pattern {pattern!r} is not a format string with {{name}} and "
            f"{{index}}: {exc}"
        ) from None
    for field_name, conversion in fields:
        if field_name not in _PATTERN_FIELDS or conversion is not None:
            shown = field_name + (f"!{conversion}" if conversion else "")
            raise ShardConfigError(
                f"{name}: table name pattern {pattern!r} uses {{{shown}}}; only {{name}} and "
                "{index} (with a format spec such as {index:02d}) are allowed"
            )


class ShardInfo(NamedTuple):
    """What ``Table.info["snowshard"]`` holds on each physical table."""

    spec: ShardSpec
    shard: int
