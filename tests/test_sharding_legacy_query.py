"""The legacy ``Session.query()`` API over a sharded model, against its unsharded twin:
objects rather than rows, ``count()``, ``first()`` and slices merged across databases."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, func
from sqlalchemy.engine import Row

from snowshard.sharding import ShardedSession, UnsupportedShardQuery
from tests.shop_setup import Setup


def _both(shop: Setup, ask: Any, session: ShardedSession | None = None) -> tuple[Any, Any]:
    """``ask(query, model)`` on the sharded model and on its twin."""
    s = shop.schema
    with session or shop.session() as ses:
        return ask(ses.query, s.Order), ask(ses.query, s.OrderTwin)


def _ids(objects: Any) -> list[int]:
    return [o.id for o in objects]


def test_ordered_query_hands_out_objects(shop: Setup) -> None:
    """An ordered, limited Query of the model gives its objects (not one-element rows), in
    the twin's order."""
    got, twin = _both(shop, lambda q, m: q(m).order_by(m.amount, m.id.desc()).limit(7).all())
    assert all(type(o).__name__.startswith("Order_") for o in got)
    assert _ids(got) == _ids(twin) and len(twin) == 7


def test_unordered_query_hands_out_objects(shop: Setup) -> None:
    """A Query without ORDER BY over every database gives the twin's objects."""
    got, twin = _both(shop, lambda q, m: q(m).filter(m.amount > 5).all())
    assert sorted(_ids(got)) == sorted(_ids(twin)) and twin


def test_first_is_the_twins_first_object(shop: Setup) -> None:
    """Query.first() of an ordered fan-out is one object, the twin's first."""
    got, twin = _both(shop, lambda q, m: q(m).order_by(m.id.desc()).first())
    assert got.id == twin.id


def test_slices_are_the_twins_slices(shop: Setup) -> None:
    """query[3:8] (OFFSET 3 LIMIT 5) gives the objects the twin gives."""
    got, twin = _both(shop, lambda q, m: q(m).order_by(m.amount, m.id)[3:8])
    assert _ids(got) == _ids(twin) and len(twin) == 5


def test_tuples_keep_rows(shop: Setup) -> None:
    """only_return_tuples(True) asks for rows even of one entity; the merge keeps them rows."""
    got, twin = _both(shop, lambda q, m: q(m).order_by(m.id).limit(3).only_return_tuples(True).all())
    assert all(isinstance(r, Row) for r in got) and all(isinstance(r, Row) for r in twin)
    assert [r[0].id for r in got] == [r[0].id for r in twin]


def test_objects_are_handed_out_beside_another_hook(shop: Setup) -> None:
    """With another do_orm_execute listener (the merge then runs through the session), an
    ordered Query still gives objects."""
    session = shop.session()
    event.listen(session, "do_orm_execute", lambda state: None)
    got, twin = _both(shop, lambda q, m: q(m).order_by(m.id.desc()).limit(4).all(), session)
    assert _ids(got) == _ids(twin) and len(twin) == 4


_COUNTS = {
    "filtered": lambda q, m: q(m).filter(m.amount > 5).count(),
    "distinct objects": lambda q, m: q(m).filter(m.amount > 5).distinct().count(),
    "distinct shard keys": lambda q, m: q(m.user_id).distinct().count(),
    "a column aggregate": lambda q, m: q(func.count(m.id)).filter(m.amount < 4).scalar(),
}


@pytest.mark.parametrize("name", list(_COUNTS))
def test_count_is_the_twins(shop: Setup, name: str) -> None:
    """Query.count() (a count of the query as a subquery) equals the twin's, DISTINCT over a
    shard key included."""
    got, twin = _both(shop, _COUNTS[name])
    assert got == twin and twin


def test_count_of_distinct_non_key_values_is_refused(shop: Setup) -> None:
    """Query(status).distinct().count() would count each source's distinct statuses:
    refused before any SQL."""
    shop.sent.clear()
    with shop.session() as ses, pytest.raises(UnsupportedShardQuery, match="DISTINCT"):
        ses.query(shop.schema.Order.status).distinct().count()
    assert shop.sent == []
