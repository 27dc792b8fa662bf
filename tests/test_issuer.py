"""The IdIssuer protocol: Snowflake and RedisIssuer both fill snowflake primary keys."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from snowshard import Layout, ManualClock, Snowflake, SnowshardError, gene_of
from snowshard.issuer import IdIssuer, IssuerTypeError, check_issuer
from snowshard.orm import snowflake_default, snowflake_pk
from snowshard.redis_issuer import RedisIssuer
from tests.backends import RedisNamespace

LAYOUT = Layout(worker_bits=6, gene_bits=4)
GENES = 1 << LAYOUT.gene_bits


@pytest.fixture
def redis_ids(redis_db: RedisNamespace) -> Iterator[RedisIssuer]:
    with RedisIssuer(redis_db.url, LAYOUT, worker=5, key_prefix=redis_db.key("seq")) as ids:
        yield ids


@pytest.fixture
def engine(sqlite_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(sqlite_url)
    yield engine
    engine.dispose()


def models(issuer: IdIssuer) -> tuple[type[DeclarativeBase], Any, Any]:
    """A plain model and a child model whose IDs carry the gene of ``user_id``."""

    class Base(DeclarativeBase):
        pass

    class Event(Base):
        __tablename__ = "events"
        id: Mapped[int] = snowflake_pk(issuer)
        name: Mapped[str] = mapped_column(sa.String(20))

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = snowflake_pk(issuer, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(sa.BigInteger)

    return Base, Event, Order


def test_snowflake_is_an_id_issuer() -> None:
    """A Snowflake satisfies IdIssuer and passes check_issuer unchanged."""
    generator = Snowflake(LAYOUT, worker=1, clock=ManualClock(1_700_000_000_000))
    assert isinstance(generator, IdIssuer)
    assert check_issuer(generator) is generator


def test_redis_issuer_is_an_id_issuer(redis_ids: RedisIssuer) -> None:
    """A RedisIssuer satisfies IdIssuer and passes check_issuer unchanged."""
    assert isinstance(redis_ids, IdIssuer)
    assert check_issuer(redis_ids) is redis_ids


class _LayoutOnly:
    layout = LAYOUT


class _NextIdOnly:
    layout = "41t|10w|12s"

    def next_id(self, gene: object = None) -> int:
        return 1


@pytest.mark.parametrize(
    ("candidate", "missing"),
    [
        (lambda: 5, "a layout (a snowshard.Layout) and a next_id(gene=None) method"),
        (_LayoutOnly(), "lacks a next_id(gene=None) method"),
        (_NextIdOnly(), "lacks a layout (a snowshard.Layout)"),
    ],
    ids=["callable", "layout-only", "layout-not-a-Layout"],
)
def test_non_issuers_are_refused_naming_the_protocol(candidate: object, missing: str) -> None:
    """snowflake_pk refuses a non-issuer at once with a TypeError naming IdIssuer and the gap."""
    with pytest.raises(IssuerTypeError) as caught:
        snowflake_pk(candidate)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "snowshard.issuer.IdIssuer" in message and missing in message
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, SnowshardError)


def test_refusal_hides_the_password_of_a_url_passed_by_mistake() -> None:
    """A Redis URL given instead of an issuer is named in the error without its password."""
    with pytest.raises(IssuerTypeError) as caught:
        snowflake_default("redis://:s3cret-pw@cache:6379/0")  # type: ignore[arg-type]
    assert "s3cret-pw" not in str(caught.value) and "cache:6379" in str(caught.value)


def test_redis_issuer_fills_primary_keys_on_sqlite(
    redis_ids: RedisIssuer, engine: sa.Engine
) -> None:
    """Rows whose key default is a RedisIssuer get distinct IDs, increasing in insert order."""
    base, event, _ = models(redis_ids)
    base.metadata.create_all(engine)
    before_ms = time.time() * 1000
    with Session(engine) as session:
        first = [event(name=f"a{i}") for i in range(50)]
        session.add_all(first)
        session.flush()
        second = [event(name=f"b{i}") for i in range(50)]
        session.add_all(second)
        session.commit()
        ids = [row.id for row in first + second]
        stored = session.scalars(sa.select(event.id).order_by(event.name)).all()
    assert len(set(ids)) == 100 and ids == sorted(ids)
    assert sorted(stored) == ids
    parts = [LAYOUT.parse(i) for i in ids]
    assert {p.worker for p in parts} == {5}
    assert all(abs(p.unix_ms - before_ms) < 5000 for p in parts)


def test_redis_issuer_carries_genes_into_primary_keys(
    redis_ids: RedisIssuer, engine: sa.Engine
) -> None:
    """With gene_from, each RedisIssuer ID ends in the gene of the row's user_id."""
    base, _, order = models(redis_ids)
    base.metadata.create_all(engine)
    users = [1820, 7, 2**40 + 3, 15, 16]
    with Session(engine) as session:
        rows = [order(user_id=user) for user in users]
        session.add_all(rows)
        session.commit()
        pairs = session.execute(sa.select(order.id, order.user_id)).all()
    assert len(pairs) == len(users) and len({i for i, _ in pairs}) == len(users)
    assert all(i % GENES == gene_of(user, LAYOUT.gene_bits) for i, user in pairs)
