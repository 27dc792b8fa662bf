"""Where the physical tables of one logical sharded table live.

This is the contract shared by the ORM layer (which maps each physical table) and the
migrations (which change every physical table together). Each physical ``Table`` the ORM
layer creates carries ``table.info["snowshard"] = ShardInfo(spec, shard)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
        frozen = {key: tuple(indices) for key, indices in self.databases.items()}
        object.__setattr__(self, "databases", frozen or {DEFAULT_DATABASE: tuple(range(self.count))})
        seen: dict[int, str] = {}
        for key, indices in self.databases.items():
            for i in indices:
                if not (isinstance(i, int) and 0 <= i < self.count):
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


class ShardInfo(NamedTuple):
    """What ``Table.info["snowshard"]`` holds on each physical table."""

    spec: ShardSpec
    shard: int
