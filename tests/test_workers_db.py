"""DatabaseLease specifics: the table for Alembic, namespaces, atomic claims, a missing table."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from snowshard import Layout, Snowflake
from snowshard.workers import (
    DatabaseLease,
    LeaseBackendError,
    create_table,
    lease_metadata,
    make_lease_table,
    worker_leases,
)
from tests.backends import DatabaseFactory

SIXTEEN = Layout(worker_bits=4)


def test_table_is_exported_on_its_metadata() -> None:
    """Alembic can find the lease table on lease_metadata under its documented name."""
    assert lease_metadata.tables["snowshard_worker_leases"] is worker_leases
    assert [c.name for c in worker_leases.primary_key.columns] == ["namespace", "worker_id"]
    assert {"holder", "expires_at_ms", "high_water_ms", "released", "version"} <= set(
        worker_leases.c.keys()
    )


def test_create_table_is_idempotent(db_url: str, database_factory: DatabaseFactory) -> None:
    """create_table creates the table once and leaves an existing one alone."""
    engine = database_factory.engine(db_url)
    create_table(engine)
    create_table(engine)
    assert "snowshard_worker_leases" in sa.inspect(engine).get_table_names()


def test_custom_table_name(db_url: str, database_factory: DatabaseFactory) -> None:
    """make_lease_table builds the same table under another name, and leases use it."""
    engine = database_factory.engine(db_url)
    table = make_lease_table(sa.MetaData(), "my_leases")
    create_table(engine, table)
    with DatabaseLease(engine, SIXTEEN, table=table) as lease:
        assert Snowflake(SIXTEEN, worker=lease).worker == 0
        with engine.connect() as conn:
            assert conn.execute(sa.select(table.c.holder)).scalar_one() == lease.holder


def test_namespaces_are_independent(db_url: str, database_factory: DatabaseFactory) -> None:
    """Leases in different namespaces of one table both get worker 0."""
    engine = database_factory.engine(db_url)
    create_table(engine)
    with DatabaseLease(engine, namespace="dc-a") as a, DatabaseLease(
        engine, namespace="dc-b"
    ) as b:
        assert (a.claim(lambda: 0).worker, b.claim(lambda: 0).worker) == (0, 0)


def test_concurrent_claims_get_distinct_ids(db_url: str, database_factory: DatabaseFactory) -> None:
    """Sixteen threads claiming at once get all sixteen IDs, each once (insert and reuse)."""
    engine = database_factory.engine(db_url, pool_size=20)
    create_table(engine)
    for round_ in range(2):  # first round inserts rows, second reuses released ones
        leases = [DatabaseLease(engine, SIXTEEN) for _ in range(16)]
        got: list[int] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(16)
        threads = [
            threading.Thread(target=_claim_at_once, args=(lease, barrier, got, errors))
            for lease in leases
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for lease in leases:
            lease.close()
        assert errors == [] and sorted(got) == list(range(16)), f"round {round_}"


def _claim_at_once(
    lease: DatabaseLease, barrier: threading.Barrier, got: list[int], errors: list[BaseException]
) -> None:
    barrier.wait()
    try:
        got.append(lease.claim(lambda: 0).worker)
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


def test_lease_from_url_owns_its_engine(database_factory: DatabaseFactory) -> None:
    """Given a URL, the lease makes its own engine and disposes of it on close."""
    url = database_factory("sqlite")[0]
    engine = database_factory.engine(url)
    create_table(engine)
    lease = DatabaseLease(url)
    with lease:
        assert Snowflake(worker=lease).worker == 0
    with engine.connect() as conn:
        released = conn.execute(sa.select(worker_leases.c.released)).scalar_one()
    assert released


def test_missing_table_is_a_clear_error(db_url: str, database_factory: DatabaseFactory) -> None:
    """Without the lease table, the generator's construction fails naming the table."""
    engine = database_factory.engine(db_url)
    missing = r"table 'snowshard_worker_leases' in .* failed"
    with DatabaseLease(engine) as lease, pytest.raises(LeaseBackendError, match=missing):
        Snowflake(worker=lease)


def test_database_url_password_is_hidden() -> None:
    """Messages show the database URL without its password."""
    engine = sa.create_engine("postgresql+psycopg://user:hunter2@127.0.0.1:1/db")
    try:
        lease = DatabaseLease(engine)
        assert "hunter2" not in repr(lease) and "***" in repr(lease)
        lease.close()
    finally:
        engine.dispose()
