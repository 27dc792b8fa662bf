"""DatabaseLease specifics: the table for Alembic, namespaces, atomic claims, a missing table."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from snowshard import Layout, Snowflake, WorkerIdError
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
START = 1_800_000_000_000  # a fixed Unix ms for injected clocks (2027-01-15)


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
    with DatabaseLease(engine, SIXTEEN, table=table, ttl=1.0, clock_skew=0.05) as lease:
        assert Snowflake(SIXTEEN, worker=lease).worker == 0
        with engine.connect() as conn:
            assert conn.execute(sa.select(table.c.holder)).scalar_one() == lease.holder


def test_namespaces_are_independent(db_url: str, database_factory: DatabaseFactory) -> None:
    """Leases in different namespaces of one table both get worker 0."""
    engine = database_factory.engine(db_url)
    create_table(engine)
    with DatabaseLease(
        engine, namespace="dc-a", ttl=1.0, clock_skew=0.05
    ) as a, DatabaseLease(engine, namespace="dc-b", ttl=1.0, clock_skew=0.05) as b:
        assert (a.claim(lambda: 0).worker, b.claim(lambda: 0).worker) == (0, 0)


def test_concurrent_claims_get_distinct_ids(db_url: str, database_factory: DatabaseFactory) -> None:
    """Sixteen threads claiming at once get all sixteen IDs, each once (insert and reuse)."""
    engine = database_factory.engine(db_url, pool_size=20)
    create_table(engine)
    for round_ in range(2):  # first round inserts rows, second reuses released ones
        leases = [DatabaseLease(engine, SIXTEEN, ttl=1.0, clock_skew=0.05) for _ in range(16)]
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
    lease = DatabaseLease(url, ttl=1.0, clock_skew=0.1)  # a short fence: the test waits it out
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


def test_new_claim_waits_ttl_plus_clock_skew(
    db_url: str, database_factory: DatabaseFactory
) -> None:
    """A table cannot prove that no earlier holder still issues: the first ID waits."""
    create_table(database_factory.engine(db_url))
    start = time.monotonic()
    with DatabaseLease(db_url, SIXTEEN, ttl=0.4, clock_skew=0.3) as lease:
        Snowflake(SIXTEEN, worker=lease).next_id()
        waited = time.monotonic() - start
    assert 0.7 <= waited <= 3.0


def test_renewal_after_the_deadline_is_fenced(database_factory: DatabaseFactory) -> None:
    """A holder whose renewals failed past its deadline waits ttl + clock_skew on success."""
    url = database_factory("sqlite")[0]
    engine = database_factory.engine(url)
    create_table(engine)

    def rename(old: str, new: str) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {old} RENAME TO {new}")

    with DatabaseLease(engine, SIXTEEN, ttl=0.4, clock_skew=0.3) as lease:
        generator = Snowflake(SIXTEEN, worker=lease)
        rename("snowshard_worker_leases", "moved")  # renewals now fail
        deadline = time.monotonic() + 3
        while lease.worker is not None:  # until the deadline passes
            assert time.monotonic() < deadline
            time.sleep(0.01)
        rename("moved", "snowshard_worker_leases")  # the row is still ours
        mended = time.monotonic()
        while True:
            try:
                generator.next_id()
                break
            except WorkerIdError:
                assert time.monotonic() < mended + 4
                time.sleep(0.01)
        assert time.monotonic() - mended >= 0.7 - 0.05


def test_clock_read_that_outlives_the_lease_deadline_is_not_used(tmp_path: Path) -> None:
    """The generator: a pause between reading the clock and issuing that outlives the
    claim's deadline makes it read the clock again under a renewed claim."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'leases.sqlite3'}")
    create_table(engine)
    caller = threading.get_ident()
    now = [START]
    pause = threading.Event()

    def clock() -> int:  # each read by the caller after the pause is 1 s later
        if threading.get_ident() == caller and pause.is_set():
            if now[0] == START:
                time.sleep(1.2)  # the claim's deadline (0.9 ttl) passes during this read
            now[0] += 1000
        return now[0]

    with DatabaseLease(engine, ttl=1.0, clock_skew=0.0) as lease:
        generator = Snowflake(worker=lease, clock=clock)
        pause.set()
        value = generator.next_id()
    engine.dispose()
    assert generator.layout.parse(value).unix_ms == START + 2000  # the read after the pause
