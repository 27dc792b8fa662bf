"""Python enums (``Enum(SomeEnum)``, stored as strings) in merged queries: ordered as one
table orders their strings, or refused by name where the merge would compare members."""

from __future__ import annotations

import enum
import random
from typing import Any

import pytest
from sqlalchemy import Enum, String, func, select
from sqlalchemy.orm import mapped_column

from snowshard.sharding import UnsupportedShardQuery
from tests.twin_world import TwinWorld, twin_world_fixture


class Size(enum.Enum):
    """Declared in another order than its names sort in."""

    small = "s"
    medium = "m"
    large = "l"
    huge = "h"


def _columns() -> dict[str, Any]:
    return {"size": mapped_column(Enum(Size, native_enum=False)), "tag": mapped_column(String(4))}


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1131)
    sizes = [*Size, None]
    return [
        {"user_id": rng.randrange(1, 40), "size": rng.choice(sizes), "tag": "xyz"[i % 3]}
        for i in range(40)
    ]


world = twin_world_fixture("sized", _columns, _rows)


def _answered_or_refused(world: TwinWorld, build: Any, sqlite_refusal: str) -> None:
    """The twin's rows on MariaDB (which orders the strings by a weight the merge reads);
    refused by name on SQLite (the merge would compare members) and on PostgreSQL (its
    default collation, which Python does not reproduce)."""
    if world.backend == "mysql":
        assert world.exact(build, ordered=True)
    elif world.backend == "sqlite":
        world.refused(build, sqlite_refusal)
    else:
        with world.session() as session, pytest.raises(UnsupportedShardQuery):
            session.execute(build(world.Model))


def test_min_max_of_an_enum(world: TwinWorld) -> None:
    """MIN/MAX of an enum per group: MariaDB's answer, or a named refusal (was TypeError)."""
    build = lambda m: (  # noqa: E731
        select(m.tag, func.min(m.size), func.max(m.size)).group_by(m.tag).order_by(m.tag)
    )
    _answered_or_refused(world, build, "MIN sized.size .* Python enum Size")


def test_grouped_order_by_an_enum(world: TwinWorld) -> None:
    """GROUP BY an enum ORDER BY it: MariaDB's answer, or a named refusal (was TypeError)."""
    build = lambda m: select(m.size, func.count()).group_by(m.size).order_by(m.size)  # noqa: E731
    _answered_or_refused(world, build, "ORDER BY sized.size .* Python enum Size")


def test_rows_ordered_by_an_enum(world: TwinWorld) -> None:
    """Rows ORDER BY an enum merge on the stored strings: the twin's order."""
    build = lambda m: select(m.id, m.size).order_by(m.size, m.id).limit(25)  # noqa: E731
    if world.backend == "postgresql":
        with world.session() as session, pytest.raises(UnsupportedShardQuery):
            session.execute(build(world.Model))
    else:
        assert len(world.exact(build, ordered=True)) == 25
