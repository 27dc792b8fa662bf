"""The flush's check of sharded rows: SQL expressions set on attributes, against the twin."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from snowshard.sharding import UnsupportedShardQuery
from tests.shop_setup import USERS, Setup


def _first_with_amount(session: Any, model: Any) -> Any:
    query = select(model).where(model.amount.is_not(None)).order_by(model.id).limit(1)
    return session.scalars(query).one()


def test_an_expression_of_the_rows_own_columns_is_computed_in_its_table(shop: Setup) -> None:
    """order.amount = Order.amount * 2 + 1 (the ORM's UPDATE ... SET amount = amount * 2 + 1)
    is pointed at the row's own table and gives what the twin gives; it once named the
    logical table beside the shard's (a cartesian UPDATE that the database refused)."""
    s = shop.schema
    found = []
    with shop.session() as session:
        for model in (s.OrderTwin, s.Order):
            row = _first_with_amount(session, model)
            before = row.amount
            row.amount = model.amount * 2 + 1
            shop.sent.clear()
            session.flush()
            assert len([sql for sql in shop.sent if sql.startswith("UPDATE")]) == 1
            found.append((before, row.amount))
        session.rollback()
    assert found[0] == found[1] and found[0][1] == found[0][0] * 2 + 1


_READING = {
    "a count of every order": lambda s: select(func.count()).select_from(s.Order).scalar_subquery(),
    "the largest qty of the user's items": lambda s: select(func.max(s.Item.qty))
    .where(s.Item.user_id == USERS[0])
    .scalar_subquery(),
    "a column of the items": lambda s: s.Item.qty + 1,
}


@pytest.mark.parametrize("name", list(_READING))
@pytest.mark.parametrize("what", ["changed", "new"])
def test_an_expression_reading_a_sharded_model_is_refused(shop: Setup, name: str, what: str) -> None:
    """A value that reads a sharded model (a subquery, another model's column) would read the
    row's table only (a count of 40 orders stored as 10): refused before any SQL of the
    flush, naming the row, the attribute and the model read."""
    s = shop.schema
    with shop.session() as session:
        if what == "new":
            row = s.Order(user_id=USERS[0])
            session.add(row)
        else:
            row = _first_with_amount(session, s.Order)
        row.amount = _READING[name](s)
        shop.sent.clear()
        with pytest.raises(UnsupportedShardQuery, match=rf"a {what} Order row in orders_0\d sets amount"):
            session.flush()
        assert shop.sent == []
        session.rollback()


@pytest.mark.parametrize("what", ["changed", "new"])
def test_an_unsharded_rows_expression_reading_a_sharded_model_is_refused(
    shop: Setup, what: str
) -> None:
    """note.label = (SELECT min(status) FROM orders) names a table no database holds: refused
    before any SQL of the flush, naming the row, the attribute and the model (it was stopped
    only by the runtime guard, as the statement was about to be sent)."""
    s = shop.schema
    with shop.session() as session:
        if what == "new":
            note = s.Note(id=901)
            session.add(note)
        else:
            note = session.scalars(select(s.Note).order_by(s.Note.id).limit(1)).one()
        note.label = select(func.min(s.Order.status)).scalar_subquery()
        shop.sent.clear()
        with pytest.raises(UnsupportedShardQuery, match=rf"a {what} Note row sets label .* Order"):
            session.flush()
        assert shop.sent == []
        session.rollback()
