"""PostgreSQL money, inet and time with time zone in merged queries: refused where the
merge would compare or add their Python forms otherwise than PostgreSQL, exact where it
matches them."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Numeric, String, Time, cast, distinct, func, select, type_coerce
from sqlalchemy.dialects.postgresql import INET, MONEY, TIME
from sqlalchemy.orm import mapped_column

from tests.twin_world import TwinWorld, twin_world_fixture

_ZONES = [dt.timezone.utc, dt.timezone(dt.timedelta(hours=1)), dt.timezone(dt.timedelta(hours=-3))]


def _columns() -> dict[str, Any]:
    return {
        "price": mapped_column(MONEY),
        "ip": mapped_column(INET),
        "opens": mapped_column(TIME(timezone=True)),
        "tag": mapped_column(String(4)),
    }


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(4417)
    prices = [Decimal("9.00"), Decimal("10.50"), Decimal("1234.00"), Decimal("-5.00"), None]
    addresses = ["10.0.0.1", "9.0.0.1", "10.0.0.0/8", "::1", "192.168.1.1", None]
    # 12:00+01, 11:00+00 and 08:00-03 are one UTC time, three values to PostgreSQL
    times = [dt.time(12, tzinfo=_ZONES[1]), dt.time(11, tzinfo=_ZONES[0]),
             dt.time(8, tzinfo=_ZONES[2]), dt.time(10, 30, tzinfo=_ZONES[0]), None]  # fmt: skip
    return [
        {"user_id": rng.randrange(1, 40), "price": rng.choice(prices),
         "ip": rng.choice(addresses), "opens": rng.choice(times), "tag": "xyz"[i % 3]}
        for i in range(60)
    ]  # fmt: skip


world = twin_world_fixture(
    "shops", _columns, _rows, [pytest.param("postgresql", marks=pytest.mark.postgres)]
)
"""Money, addresses of both families and zoned times over two PostgreSQL databases."""


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda m: select(m.id).order_by(m.price, m.id).limit(20), "ORDER BY shops.price .* text"),
        (lambda m: select(m.tag, func.sum(m.price)).group_by(m.tag), r"sum\(shops.price\)"),
        (lambda m: select(m.tag, func.max(m.price)).group_by(m.tag), "MAX shops.price"),
    ],
    ids=["order", "sum", "max"],
)
def test_money_ordered_or_added_is_refused(world: TwinWorld, build: Any, match: str) -> None:
    """Money ordered, summed or picked by MAX is refused (the merge sorted and summed the
    locale text: SUM joined the sources' sums)."""
    world.refused(build, match)


def test_money_grouped_and_cast_sums_match_the_twin(world: TwinWorld) -> None:
    """GROUP BY money (one text per value) and SUM of money cast to Numeric: the twin's."""
    world.exact(lambda m: select(m.price, func.count()).group_by(m.price))

    def build(m: Any) -> Any:
        return select(m.tag, func.sum(cast(m.price, Numeric(12, 2)))).group_by(m.tag)

    assert len(world.exact(build)) == 3


def test_addresses_ordered_are_refused_and_grouped_match(world: TwinWorld) -> None:
    """ORDER BY inet is refused (the merge raised a TypeError on IPv4 against IPv6);
    GROUP BY inet is the twin's."""
    world.refused(lambda m: select(m.id).order_by(m.ip, m.id).limit(20), "not IPv4 against IPv6")
    world.exact(lambda m: select(m.ip, func.count()).group_by(m.ip))


@pytest.mark.parametrize(
    "build",
    [
        lambda m: select(m.opens, func.count()).group_by(m.opens),
        lambda m: select(m.opens).distinct(),
        lambda m: select(func.count(distinct(m.opens))),
        lambda m: select(m.id, m.opens).order_by(m.opens, m.id).limit(30),
    ],
    ids=["group", "distinct", "count-distinct", "order"],
)
def test_zoned_times_compared_are_refused(world: TwinWorld, build: Any) -> None:
    """time with time zone grouped, made distinct, counted distinct or ordered is refused
    (the merge took 12:00+01 and 11:00+00 for one value, the twin keeps three)."""
    world.refused(build, "12:00\\+01 from 11:00\\+00")


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda m: select(m.id).order_by(type_coerce(m.ip, String), m.id), "IPv4 against IPv6"),
        (lambda m: select(m.id).order_by(func.greatest(m.ip, m.ip), m.id), "IPv4 against IPv6"),
        (lambda m: select(m.tag, func.max(type_coerce(m.ip, String))).group_by(m.tag), "IPv4"),
        (lambda m: select(m.id).order_by(type_coerce(m.price, String), m.id), "money as locale"),
        (
            lambda m: select(m.tag, func.max(func.greatest(m.price, m.price))).group_by(m.tag),
            "money as locale",
        ),
        (
            lambda m: select(type_coerce(m.opens, Time), func.count()).group_by(
                type_coerce(m.opens, Time)
            ),
            "12:00",
        ),
        (lambda m: select(func.greatest(m.opens, m.opens)).distinct(), "12:00"),
    ],
    ids=["inet-coerced", "inet-greatest", "inet-max-coerced", "money-coerced",
         "money-max-greatest", "timetz-coerced", "timetz-greatest"],  # fmt: skip
)
def test_disguised_values_are_refused(world: TwinWorld, build: Any, match: str) -> None:
    """These types behind type_coerce() or an untyped GREATEST() are refused too (the merge
    raised a KeyError or TypeError, or ordered money's text and merged zoned times)."""
    world.refused(build, match)
