"""Reference tables: a copy in every database, writes to all copies, exact joins with shards."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, ForeignKey, String, delete, func, insert, select, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard.sharding.driver_errors import ShardOperationError
from snowshard.sharding import (
    Reference,
    ShardedSession,
    Sharded,
    Shards,
    UnsupportedShardQuery,
    create_all,
)
from snowshard.sharding.commit_errors import CommitFailed, PartialCommitError
from snowshard.spec import ShardConfigError
from tests.backends import DatabaseFactory
from tests.worlds import binary_string


class Base(DeclarativeBase):
    pass


class Country(Reference, Base):
    __tablename__ = "ref_countries"
    code: Mapped[str] = mapped_column(String(2), primary_key=True)
    name: Mapped[str] = mapped_column(binary_string(40))


class Note(Base):
    __tablename__ = "ref_notes"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    label: Mapped[str] = mapped_column(String(20))


class Order(Sharded, Base):
    __tablename__ = "ref_orders"
    __shards__ = Shards(4, key="user_id", databases={"a": [0, 1], "b": [2, 3]})
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger)
    country: Mapped[str] = mapped_column(String(2), ForeignKey("ref_countries.code"))
    amount: Mapped[int] = mapped_column(BigInteger)


class OrderTwin(Base):
    __tablename__ = "ref_orders_twin"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger)
    country: Mapped[str] = mapped_column(String(2), ForeignKey("ref_countries.code"))
    amount: Mapped[int] = mapped_column(BigInteger)


COUNTRIES = {"fr": "France", "de": "Germany", "jp": "Japan"}
ROWS = [
    {"id": n, "user_id": n * 7, "country": list(COUNTRIES)[n % 3], "amount": n * 10}
    for n in range(1, 25)
]

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", marks=pytest.mark.postgres, id="postgresql"),
    pytest.param("mysql", marks=pytest.mark.mysql, id="mysql"),
]


@dataclass
class Pair:
    a: sa.Engine
    b: sa.Engine

    def session(self, **kw: Any) -> ShardedSession:
        return ShardedSession(self.a, databases={"a": self.a, "b": self.b}, **kw)

    def codes(self, engine: sa.Engine) -> dict[str, str]:
        with engine.connect() as conn:
            return {code: name for code, name in conn.execute(select(Country.code, Country.name))}


def _pair(database_factory: DatabaseFactory, backend: str) -> Pair:
    a, b = (database_factory.engine(u) for u in database_factory(backend, 2))
    create_all(Base.metadata, bind=a, databases={"a": a, "b": b})
    return Pair(a, b)


@pytest.fixture(params=BACKENDS)
def pair(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> Pair:
    """Two fresh databases of one backend holding the schema, no rows."""
    return _pair(database_factory, request.param)


@pytest.fixture(params=BACKENDS)
def shop(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> Iterator[Pair]:
    """Two databases with the countries, the sharded orders and their unsharded twin."""
    found = _pair(database_factory, request.param)
    with found.session() as session:
        session.add_all(Country(code=c, name=n) for c, n in COUNTRIES.items())
        session.flush()
        session.execute(insert(Order), ROWS)
        session.execute(insert(OrderTwin), ROWS)
        session.commit()
    yield found


def test_create_all_creates_the_reference_table_in_every_database(pair: Pair) -> None:
    """create_all puts the reference table in both databases, the plain table in bind only."""
    a_tables = set(sa.inspect(pair.a).get_table_names())
    b_tables = set(sa.inspect(pair.b).get_table_names())
    assert "ref_countries" in a_tables and "ref_countries" in b_tables
    assert "ref_notes" in a_tables and "ref_notes" not in b_tables


def test_orm_insert_reaches_every_copy(pair: Pair) -> None:
    """session.add of a reference row stores it in both databases at commit."""
    with pair.session() as session:
        session.add(Country(code="fr", name="France"))
        session.commit()
    assert pair.codes(pair.a) == pair.codes(pair.b) == {"fr": "France"}


def test_orm_update_and_delete_reach_every_copy(pair: Pair) -> None:
    """Changing one reference row and deleting another is done in both databases."""
    with pair.session() as session:
        session.add_all([Country(code="fr", name="France"), Country(code="de", name="DE")])
        session.commit()
        session.get_one(Country, "de").name = "Germany"
        session.delete(session.get_one(Country, "fr"))
        session.commit()
    assert pair.codes(pair.a) == pair.codes(pair.b) == {"de": "Germany"}


def test_core_writes_reach_every_copy(pair: Pair) -> None:
    """insert (many rows), update and delete statements each run on both copies."""
    with pair.session() as session:
        session.execute(insert(Country), [{"code": "fr", "name": "F"}, {"code": "jp", "name": "J"}])
        session.execute(update(Country).where(Country.code == "fr").values(name="France"))
        session.execute(delete(Country).where(Country.code == "jp"))
        session.commit()
    assert pair.codes(pair.a) == pair.codes(pair.b) == {"fr": "France"}


def test_reference_read_goes_to_the_bind_copy(pair: Pair) -> None:
    """A read of the reference table alone reads the bind's copy, not the other one."""
    with pair.b.begin() as conn:
        conn.execute(insert(Country).values(code="zz", name="only in b"))
    with pair.session() as session:
        assert session.scalars(select(Country.code)).all() == []


def test_failed_copy_write_rolls_back_every_copy(pair: Pair) -> None:
    """A reference insert rejected by copy b leaves copy a without the row either."""
    with pair.b.begin() as conn:
        conn.execute(insert(Country).values(code="fr", name="already in b"))
    with pair.session() as session:
        session.add(Country(code="fr", name="France"))
        with pytest.raises(ShardOperationError, match="database 'b'") as caught:
            session.commit()
    assert caught.value.tables == (Country.__tablename__,)
    assert pair.codes(pair.a) == {}


def _join(model: Any) -> Any:
    return (
        select(Country.name, func.count(), func.sum(model.amount))
        .join(Country, Country.code == model.country)
        .group_by(Country.name)
        .order_by(Country.name)
    )


def test_join_with_sharded_model_across_databases_equals_the_twin(shop: Pair) -> None:
    """A grouped join of orders (two databases) with the reference table equals the twin's."""
    with shop.session() as session:
        got = [tuple(r) for r in session.execute(_join(Order))]
        twin = [tuple(r) for r in session.execute(_join(OrderTwin))]
    assert got == twin and len(got) == 3


def test_subquery_on_reference_table_across_databases_equals_the_twin(shop: Pair) -> None:
    """Orders filtered by an IN subquery on the reference table match the twin's rows."""

    def build(model: Any) -> Any:
        names = select(Country.code).where(Country.name != "Japan")
        return select(model.id).where(model.country.in_(names)).order_by(model.id)

    with shop.session() as session:
        got = session.scalars(build(Order)).all()
        twin = session.scalars(build(OrderTwin)).all()
    assert got == twin and len(got) == 16


def test_plain_unsharded_join_is_refused_naming_reference_tables(shop: Pair) -> None:
    """A sharded model joined with a plain unsharded table across databases is refused."""
    statement = select(Order.id).join(Note, Note.id == Order.id)
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="Reference"):
        session.execute(statement)


def test_reference_and_sharded_together_is_a_config_error() -> None:
    """A model deriving from both Reference and Sharded is refused at declaration."""

    class Other(DeclarativeBase):
        pass

    with pytest.raises(ShardConfigError, match="Sharded or from Reference"):

        class Both(Reference, Sharded, Other):
            __tablename__ = "both"
            __shards__ = Shards(2, key="id")
            id: Mapped[int] = mapped_column(BigInteger, primary_key=True)


def _deferred_unique_in_b(pair: Pair) -> None:
    """In b only, a deferred unique name and a row "France": a second one fails at COMMIT."""
    with pair.b.begin() as conn:
        conn.exec_driver_sql(
            "ALTER TABLE ref_countries ADD CONSTRAINT ref_name_once UNIQUE (name) "
            "DEFERRABLE INITIALLY DEFERRED"
        )
        conn.execute(insert(Country).values(code="xx", name="France"))


@pytest.fixture
def pg_pair(database_factory: DatabaseFactory, postgres_url: str) -> Pair:
    """Two PostgreSQL databases whose copy in b rejects a second "France" at COMMIT."""
    found = _pair(database_factory, "postgresql")
    _deferred_unique_in_b(found)
    return found


def test_copy_failing_at_commit_is_a_partial_commit(pg_pair: Pair) -> None:
    """Without two-phase commit, b rejecting the copy after a committed: PartialCommitError."""
    with pg_pair.session() as session:
        session.add(Country(code="fr", name="France"))
        with pytest.raises(PartialCommitError) as caught:
            session.commit()
    assert caught.value.failed == "b"
    assert pg_pair.codes(pg_pair.a) == {"fr": "France"}


def test_copy_failing_with_twophase_commits_no_copy(pg_pair: Pair) -> None:
    """With twophase=True, b rejecting the copy at PREPARE leaves a without the row too."""
    with pg_pair.session(twophase=True) as session:
        session.add(Country(code="fr", name="France"))
        with pytest.raises(CommitFailed, match="could not prepare database 'b'"):
            session.commit()
    assert pg_pair.codes(pg_pair.a) == {}
