"""Routing by WHERE clause: a shape's recipe routes every statement as the full walk does."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from sqlalchemy import and_, between, literal, or_, select

from snowshard._compat import cache_key_of
from snowshard.sharding import sharded_model
from snowshard.sharding.routing import route, route_recipe
from tests import test_sharding_generations as generations
from tests.worlds import declare_shop

SHOP = declare_shop(4)
SWITCH_ID = generations.LAYOUT.min_id(generations.SWITCH)
DAY_IDS = generations.LAYOUT.min_id(generations.SWITCH + timedelta(days=1)) - SWITCH_ID

MODELS = {
    "plain": (SHOP.Order, sharded_model(SHOP.Order)),
    "generations": (generations.Order, generations.MODEL),
}

# A statement's shape is its tree; its values are drawn apart, twice, so two statements of
# one shape with different values are routed: one by the recipe made from the other.
USER = st.integers(min_value=0, max_value=40)
ID = st.sampled_from([SWITCH_ID - DAY_IDS, SWITCH_ID - 1, SWITCH_ID, SWITCH_ID + DAY_IDS, 5])
LEAVES = [
    "user ==",
    "== user",
    "user in",
    "user in empty",
    "user !=",
    "amount >",
    "id ==",
    "id >=",
    "id <",
    "> id",
    "id between",
    "user == literal",
]


def _shape(depth: int = 3) -> st.SearchStrategy[Any]:
    leaf = st.sampled_from(LEAVES)
    if depth == 0:
        return leaf
    child = _shape(depth - 1)
    return st.one_of(
        leaf, st.tuples(st.sampled_from(["and", "or"]), st.lists(child, min_size=1, max_size=3))
    )


def _values(shape: Any) -> st.SearchStrategy[Any]:
    """One value draw per leaf of ``shape`` (lists for IN, pairs for BETWEEN)."""
    if isinstance(shape, tuple):
        return st.tuples(*(_values(part) for part in shape[1]))
    if shape == "user in":
        return st.lists(st.one_of(USER, st.none()), min_size=1, max_size=4)
    if shape.startswith("id") or shape == "> id":
        return st.tuples(ID, ID)
    if shape == "== user":  # a bound None: equal to no key
        return st.one_of(USER, st.none())
    return USER


def _clause(model: Any, shape: Any, values: Any) -> Any:
    if isinstance(shape, tuple):
        parts = [_clause(model, part, v) for part, v in zip(shape[1], values)]
        return and_(*parts) if shape[0] == "and" else or_(*parts)
    clauses = {
        "user ==": lambda: model.user_id == values,
        "== user": lambda: literal(values) == model.user_id,
        "user in": lambda: model.user_id.in_(values),
        "user in empty": lambda: model.user_id.in_([]),
        "user !=": lambda: model.user_id != values,
        "amount >": lambda: model.amount > values,
        "id ==": lambda: model.id == values[0],
        "id >=": lambda: model.id >= values[0],
        "id <": lambda: model.id < values[0],
        "> id": lambda: literal(values[0]) > model.id,
        "id between": lambda: between(model.id, values[0], values[1]),
        "user == literal": lambda: model.user_id == literal(values, literal_execute=True),
    }
    return clauses[shape]()


@pytest.mark.parametrize("kind", sorted(MODELS))
@given(data=st.data())
def test_a_recipe_routes_each_statement_of_its_shape_as_the_walk(kind: str, data: Any) -> None:
    """Shards from the recipe of one statement equal route()'s for another of its shape."""
    cls, model = MODELS[kind]
    shape = data.draw(_shape(), label="shape")
    first = select(cls).where(_clause(cls, shape, data.draw(_values(shape), label="values")))
    second = select(cls).where(_clause(cls, shape, data.draw(_values(shape), label="values")))
    made, used = cache_key_of(first), cache_key_of(second)
    assume(made.key == used.key)  # IN () and literal_execute values can change the shape
    recipe = route_recipe([model], first.whereclause, made.bindparams)
    expected = route([model], second.whereclause, {}).shards
    assert recipe is not None
    assert recipe(used.bindparams) == expected


def test_a_recipe_without_a_where_clause_reads_every_shard() -> None:
    """No WHERE clause: the recipe names no shard set (every shard)."""
    _, model = MODELS["plain"]
    recipe = route_recipe([model], None, [])
    assert recipe is not None and recipe([]) is None


def test_a_key_value_outside_the_bound_parameters_makes_no_recipe() -> None:
    """A key term whose value is not among the given parameters leaves routing to the walk."""
    cls, model = MODELS["plain"]
    statement = select(cls).where(cls.user_id == 5)
    assert route_recipe([model], statement.whereclause, []) is None
