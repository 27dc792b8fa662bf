"""UUIDs in merged queries: ordered as one table orders them, or refused by name on
MariaDB, whose native UUID type orders by its segments swapped."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from sqlalchemy import String, Uuid, case, cast, func, select, type_coerce
from sqlalchemy.orm import mapped_column

from tests.twin_world import TwinWorld, twin_world_fixture


def _columns() -> dict[str, Any]:
    return {"u": mapped_column(Uuid), "tag": mapped_column(String(4))}


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1133)
    return [
        {
            "user_id": rng.randrange(1, 40),
            "u": uuid.UUID(int=rng.getrandbits(128), version=4) if i % 5 else None,
            "tag": "xyz"[i % 3],
        }
        for i in range(40)
    ]


world = twin_world_fixture("keyed", _columns, _rows)


def test_rows_ordered_by_a_uuid(world: TwinWorld) -> None:
    """ORDER BY a UUID: the twin's order on SQLite and PostgreSQL, refused on MariaDB
    (the merge sorted by the text, MariaDB by segments swapped: another order)."""

    def build(m: Any) -> Any:
        return select(m.id, m.u).order_by(m.u, m.id).limit(20)

    if world.backend == "mysql":
        world.refused(build, "MariaDB orders its UUID type by segments swapped")
    else:
        assert len(world.exact(build, ordered=True)) == 20


def test_grouped_uuids_ordered(world: TwinWorld) -> None:
    """GROUP BY a UUID ORDER BY it: the twin's groups in order, or refused on MariaDB."""

    def build(m: Any) -> Any:
        return select(m.u, func.count()).group_by(m.u).order_by(m.u.desc()).limit(8)

    if world.backend == "mysql":
        world.refused(build, "ORDER BY keyed.u .* segments swapped")
    else:
        assert len(world.exact(build, ordered=True)) == 8


def test_min_of_a_uuid_on_mariadb_is_refused(world: TwinWorld) -> None:
    """MIN of a UUID is refused on MariaDB; PostgreSQL has no min(uuid) (an error on the
    twin too); SQLite's CHAR(32) text gives the twin's answer."""

    def build(m: Any) -> Any:
        return select(m.tag, func.min(m.u)).group_by(m.tag)

    if world.backend == "mysql":
        world.refused(build, "MIN keyed.u")
    elif world.backend == "sqlite":
        assert len(world.exact(build)) == 3
    else:
        with world.session() as session, pytest.raises(Exception, match="min\\(uuid\\)"):
            session.execute(build(world.Twin))


def test_ordering_the_uuids_text_is_exact(world: TwinWorld) -> None:
    """ORDER BY cast(u, String(36)), the refusal's way out, is the twin's order."""

    def build(m: Any) -> Any:
        return select(m.id, m.u).order_by(cast(m.u, String(36)), m.id).limit(20)

    assert len(world.exact(build, ordered=True)) == 20


DISGUISES: dict[str, Any] = {
    "greatest": lambda m: func.greatest(m.u, m.u),
    "type_coerce": lambda m: type_coerce(m.u, String),
    "case": lambda m: case((m.tag == "x", m.u), else_=m.u),
}


@pytest.mark.parametrize("form", list(DISGUISES))
def test_disguised_uuids_ordered(world: TwinWorld, form: str) -> None:
    """A UUID behind an untyped GREATEST(), a type_coerce() or a CASE: refused on MariaDB
    (the merge ordered GREATEST's text), the twin's order on PostgreSQL (UUID objects) and
    SQLite (text; it has no GREATEST)."""

    def build(m: Any) -> Any:
        return select(m.id).order_by(DISGUISES[form](m), m.id).limit(20)

    if world.backend == "mysql":
        world.refused(build, "segments swapped")
    elif world.backend == "postgresql" or form != "greatest":
        assert len(world.exact(build, ordered=True)) == 20
