"""PostgreSQL arrays and JSON in merged queries: compared as one table compares them, or
refused by name before any SQL (the merge's Python lists order neither NULL nor NaN
elements as PostgreSQL does)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sqlalchemy import ARRAY, Double, Integer, String, func, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import mapped_column
from sqlalchemy.sql.expression import ColumnElement

from tests.twin_world import TwinWorld, twin_world_fixture


def _columns() -> dict[str, Any]:
    return {
        "a": mapped_column(ARRAY(Integer)),
        "f": mapped_column(ARRAY(Double)),
        "j": mapped_column(JSONB),
        "tag": mapped_column(String(4)),
    }


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(2211)

    def ints() -> list[int | None] | None:
        if rng.random() < 0.1:
            return None
        return [rng.choice([None, 1, 2, 3]) for _ in range(rng.randrange(0, 4))]

    def floats() -> list[float | None]:
        return [rng.choice([0.0, -0.0, 1.5, float("nan"), None]) for _ in range(rng.randrange(3))]

    documents = [None, {"k": 1}, {"k": "1"}, {"k": 2}, [1, 2], "s", {}, {"k": None}]
    return [
        {"user_id": rng.randrange(1, 40), "a": ints(), "f": floats(),
         "j": rng.choice(documents), "tag": "xyz"[i % 3]}
        for i in range(60)
    ]  # fmt: skip


world = twin_world_fixture(
    "arrays", _columns, _rows, [pytest.param("postgresql", marks=pytest.mark.postgres)]
)
"""Arrays with NULL and NaN elements, and JSON documents, over two PostgreSQL databases."""


@pytest.mark.parametrize("descending", [False, True])
def test_rows_ordered_by_an_array_are_refused(world: TwinWorld, descending: bool) -> None:
    """ORDER BY an array is refused (the merge raised a TypeError on a NULL element)."""

    def build(m: Any) -> Any:
        return select(m.id, m.a).order_by(m.a.desc() if descending else m.a, m.id).limit(30)

    world.refused(build, r"ORDER BY arrays.a .* order by an element \(arrays.a\[1\]\)")


def test_rows_ordered_by_an_array_of_floats_are_refused(world: TwinWorld) -> None:
    """ORDER BY an array of floats with NaN elements is refused (the merge's order was not
    the table's)."""
    world.refused(lambda m: select(m.id, m.f).order_by(m.f, m.id).limit(30), "NaN elements")


@pytest.mark.parametrize("name", ["min", "max"])
def test_extremes_of_arrays_are_refused(world: TwinWorld, name: str) -> None:
    """MIN/MAX of an array per group is refused by name."""

    def build(m: Any) -> Any:
        return select(m.tag, getattr(func, name)(m.a)).group_by(m.tag)

    world.refused(build, f"{name.upper()} arrays.a across shards")


def test_arrays_compared_after_the_merge_are_refused(world: TwinWorld) -> None:
    """HAVING max(a) > an array is refused (the merge raised a TypeError)."""

    def build(m: Any) -> Any:
        return select(m.tag, func.count()).group_by(m.tag).having(func.max(m.a) > [2])

    world.refused(build, r"comparison max\(arrays.a\)")


def test_rows_ordered_by_an_element_match_the_twin(world: TwinWorld) -> None:
    """ORDER BY a[1], the refusal's way out, is the twin's order."""

    def build(m: Any) -> Any:
        return select(m.id, m.a[1]).order_by(m.a[1].desc().nulls_last(), m.id).limit(30)

    assert len(world.exact(build, ordered=True)) == 30


def test_a_slice_is_selected_and_refused_as_an_order(world: TwinWorld) -> None:
    """A statement selecting a slice a[1:2] (which only a dialect renders) runs as the
    twin's; ordering by the slice is refused (it is an array)."""

    def selected(m: Any) -> Any:
        return select(m.id, m.a[1:2]).order_by(m.id).limit(30)

    assert len(world.exact(selected, ordered=True)) == 30
    world.refused(lambda m: select(m.id).order_by(m.a[1:2]), r"ORDER BY arrays.a\[")


class _Doubled(ColumnElement[Any]):
    """An expression a user renders for PostgreSQL only."""

    inherit_cache = True
    type = Integer()

    def __init__(self, column: Any) -> None:
        self.column = column


@compiles(_Doubled, "postgresql")
def _doubled(element: _Doubled, compiler: Any, **kw: Any) -> str:
    return f"(2 * {compiler.process(element.column, **kw)})"


def test_an_element_compiled_for_postgresql_only_runs(world: TwinWorld) -> None:
    """A statement holding a construct ``@compiles`` renders for PostgreSQL only runs as
    the twin's (working out its FROM list once rendered it with the default compiler)."""

    def build(m: Any) -> Any:
        return select(m.id, _Doubled(m.user_id)).order_by(m.id).limit(10)

    assert len(world.exact(build, ordered=True)) == 10


def test_json_documents_are_refused_and_their_typed_values_match(world: TwinWorld) -> None:
    """ORDER BY a JSON document is refused; by a value read as an integer, the twin's."""
    world.refused(lambda m: select(m.id).order_by(m.j["k"]), "a JSON value")

    def build(m: Any) -> Any:
        number = m.j["k"].as_integer()
        where = m.j["k"].astext.in_(["1", "2"])
        return select(m.id, number).where(where).order_by(number.desc(), m.id)

    assert len(world.exact(build, ordered=True)) > 5
