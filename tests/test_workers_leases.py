"""The lease contract, run over every store: Redis, SQLite, PostgreSQL and MariaDB.

Each test gets a fresh store (a Redis key prefix or a new database with the lease table);
leases are closed afterwards. TTLs are short (0.3-1 s) and ``clock_skew`` is 0.05 s (one
host) so the suite stays fast; the Redis namespace starts in a settled era, as one in
long use would, while every new claim on a table waits ``ttl + clock_skew``.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

from snowshard import ClockMovedBackwards, Layout, ManualClock, Snowflake, WorkerIdError
from snowshard.generator import WorkerLease
from snowshard.workers import (
    DatabaseLease,
    Lease,
    LeaseBackendError,
    LeaseLost,
    RedisLease,
    WorkerIdsExhausted,
    create_table,
    worker_leases,
)
from tests.backends import DatabaseFactory, RedisNamespace

TWO = Layout(worker_bits=1)  # workers 0 and 1
SKEW = 0.05  # clock_skew of the leases: one host
START = 1_800_000_000_000  # a fixed Unix ms for injected clocks (2027-01-15)

STORES = [
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


@dataclass
class Store:
    """One lease store under test, with the few direct reads/writes the tests need."""

    kind: str
    new: Callable[..., Lease]
    high_water: Callable[[int], int]
    plant_dead_holder: Callable[[int, int, int], None]
    steal: Callable[[int], None]
    break_store: Callable[[], None]
    mend_store: Callable[[], None]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> Iterator[Store]:
    """A fresh lease store of each kind; every lease made through it is closed afterwards."""
    leases: list[Lease] = []
    kind: str = request.param
    if kind == "redis":
        ns: RedisNamespace = request.getfixturevalue("redis_db")
        prefix = ns.prefix + "leases"
        client = ns.client

        run_id = client.info("server")["run_id"]
        client.set(f"{prefix}:era", f"{run_id}:0")  # settled long ago: claims are usable now

        def new(layout: Layout | None = None, **kwargs: Any) -> Lease:
            kwargs.setdefault("ttl", 1.0)
            kwargs.setdefault("clock_skew", SKEW)
            lease = RedisLease(ns.url, layout, key_prefix=prefix, **kwargs)
            leases.append(lease)
            return lease

        def high_water(worker: int) -> int:
            return int(client.hget(f"{prefix}:info:{worker}", "hw") or 0)

        def plant(worker: int, hw: int, ttl_ms: int) -> None:
            client.hset(
                f"{prefix}:info:{worker}",
                mapping={"hw": hw, "clean": "0", "ttl": ttl_ms, "holder": "deadhost:1:dead"},
            )

        def steal(worker: int) -> None:
            client.set(f"{prefix}:lease:{worker}", "thief:2:beef", px=60_000)

        saved: list[bytes] = []

        def break_store() -> None:
            saved.append(client.get(f"{prefix}:era"))
            client.delete(f"{prefix}:era")
            client.hset(f"{prefix}:era", "x", "1")  # a hash: every script now fails

        def mend_store() -> None:
            client.delete(f"{prefix}:era")
            client.set(f"{prefix}:era", saved.pop())

        yield Store(kind, new, high_water, plant, steal, break_store, mend_store)
    else:
        url = database_factory(kind)[0]
        engine = database_factory.engine(url)
        create_table(engine)
        t = worker_leases.c

        def new(layout: Layout | None = None, **kwargs: Any) -> Lease:
            kwargs.setdefault("ttl", 1.0)
            kwargs.setdefault("clock_skew", SKEW)
            lease = DatabaseLease(engine, layout, **kwargs)
            leases.append(lease)
            return lease

        def high_water(worker: int) -> int:
            with engine.connect() as conn:
                query = sa.select(t.high_water_ms).where(t.worker_id == worker)
                return int(conn.execute(query).scalar_one())

        def plant(worker: int, hw: int, ttl_ms: int) -> None:
            with engine.begin() as conn:
                conn.execute(
                    sa.insert(worker_leases).values(
                        namespace="default", worker_id=worker, holder="deadhost:1:dead",
                        expires_at_ms=0, high_water_ms=hw, ttl_ms=ttl_ms, released=False,
                        last_holder="deadhost:1:dead", version=0,
                    )
                )

        def steal(worker: int) -> None:
            with engine.begin() as conn:
                conn.execute(
                    sa.update(worker_leases)
                    .where(t.worker_id == worker)
                    .values(holder="thief:2:beef", expires_at_ms=2**60, version=t.version + 1)
                )

        def rename(old: str, new_name: str) -> None:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"ALTER TABLE {old} RENAME TO {new_name}")

        yield Store(
            kind, new, high_water, plant, steal,
            lambda: rename("snowshard_worker_leases", "moved_leases"),
            lambda: rename("moved_leases", "snowshard_worker_leases"),
        )
    for lease in leases:
        lease.close()


def wait_until(predicate: Callable[[], bool], timeout: float) -> float:
    """Poll ``predicate`` every 20 ms; return the seconds it took, fail after ``timeout``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(0.02)
    return time.monotonic() - start


def test_lease_is_a_worker_lease(store: Store) -> None:
    """Leases satisfy the generator's WorkerLease protocol."""
    assert isinstance(store.new(), WorkerLease)


def test_first_free_ids_are_taken_in_order(store: Store) -> None:
    """Two leases get worker IDs 0 and 1, and their generators' IDs carry them."""
    first = Snowflake(TWO, worker=store.new(TWO))
    second = Snowflake(TWO, worker=store.new(TWO))
    assert (first.worker, second.worker) == (0, 1)
    assert TWO.parse(second.next_id()).worker == 1


def test_all_ids_taken_names_count_and_holders(store: Store) -> None:
    """With every worker ID leased, the error says how many exist and who holds them."""
    holders = [store.new(TWO) for _ in range(2)]
    for lease in holders:
        Snowflake(TWO, worker=lease)
    with pytest.raises(WorkerIdsExhausted) as caught:
        Snowflake(TWO, worker=store.new(TWO))
    message = str(caught.value)
    assert "all 2 worker IDs (0..1)" in message
    assert f"0 by {holders[0].holder}" in message and f"1 by {holders[1].holder}" in message
    assert "widen worker_bits" in message


def test_renewal_keeps_the_lease_past_its_ttl(store: Store) -> None:
    """A lease renewed in the background outlives several TTLs and stays exclusive."""
    # a TTL of 1 s leaves renewals 0.67 s of slack: with 0.4 s (0.27 s of slack) a CI run
    # on two busy cores once saw a renewal come later than that, and the lease was
    # (rightly) lost
    lease = store.new(TWO, ttl=1.0)
    generator = Snowflake(TWO, worker=lease)
    time.sleep(3.2)  # over three TTLs
    assert TWO.parse(generator.next_id()).worker == 0
    assert Snowflake(TWO, worker=store.new(TWO)).worker == 1  # 0 is still taken


def test_close_releases_at_once_with_the_high_water(store: Store) -> None:
    """A closed lease frees its ID now; the next holder's floor is the last ID's time."""
    clock = ManualClock(START)
    old_lease = store.new(TWO)
    old = Snowflake(TWO, worker=old_lease, clock=clock)
    old.next_id()
    clock.advance(5)
    last = old.next_id()
    old_lease.close()
    assert store.high_water(0) == TWO.parse(last).unix_ms
    successor = store.new(TWO)
    claim = successor.claim(lambda: 0)
    assert (claim.worker, claim.floor_unix_ms) == (0, START + 5)


def test_renewal_stores_the_high_water(store: Store) -> None:
    """Renewals write the generator's last issued time into the store."""
    clock = ManualClock(START)
    generator = Snowflake(TWO, worker=store.new(TWO, ttl=0.3), clock=clock)
    clock.advance(1234)
    generator.next_id()
    wait_until(lambda: store.high_water(0) == START + 1234, timeout=2.0)


def test_dead_holders_id_floor_adds_its_ttl(store: Store) -> None:
    """An expired, unreleased lease passes on its high water plus its TTL as the floor."""
    store.plant_dead_holder(0, START, 15_000)
    claim = store.new(TWO).claim(lambda: 0)
    assert (claim.worker, claim.floor_unix_ms) == (0, START + 15_000)


def test_new_holder_never_issues_at_or_below_the_stored_tick(store: Store) -> None:
    """After a restart whose clock went back 10 s, IDs still come after the stored tick."""
    clock = ManualClock(START)
    lease = store.new(TWO)
    before = Snowflake(TWO, worker=lease, clock=clock, sleep=clock.sleep)
    first_ids = before.next_ids(5000)  # spans two ticks
    lease.close()
    clock.set(START - 10_000)  # the restarted process's clock is 10 s behind
    after = Snowflake(
        TWO, worker=store.new(TWO), clock=clock, sleep=clock.sleep, max_backwards_ms=60_000
    )
    assert after.worker == 0
    assert min(after.next_ids(5000)) > max(first_ids)


def test_stored_tick_with_default_wait_refuses_instead_of_repeating(store: Store) -> None:
    """With the default max_backwards_ms, a clock far behind the stored tick raises."""
    clock = ManualClock(START)
    lease = store.new(TWO)
    Snowflake(TWO, worker=lease, clock=clock).next_id()
    lease.close()
    clock.set(START - 10_000)
    after = Snowflake(TWO, worker=store.new(TWO), clock=clock, sleep=clock.sleep)
    with pytest.raises(ClockMovedBackwards, match="moved back 10000 ms"):
        after.next_id()


def test_stolen_lease_is_not_used_after_its_deadline(store: Store) -> None:
    """If another holder owns our ID at renewal, the generator moves to a free ID."""
    lease = store.new(TWO, ttl=0.4)
    generator = Snowflake(TWO, worker=lease)
    store.steal(0)

    def on_worker_1() -> bool:
        try:
            return TWO.parse(generator.next_id()).worker == 1
        except LeaseLost:  # the new claim's fence (tables): not usable yet
            return False

    wait_until(on_worker_1, timeout=3.0)
    assert lease.worker == 1


def test_store_failure_stops_ids_until_it_recovers(store: Store) -> None:
    """When renewals fail the generator raises once its deadline passes, then resumes."""
    lease = store.new(TWO, ttl=0.5)
    generator = Snowflake(TWO, worker=lease)
    issued_before = generator.next_id()
    store.break_store()
    broken_at = int(time.time() * 1000)
    start = time.monotonic()
    last = issued_before
    with pytest.raises(WorkerIdError):
        while time.monotonic() - start < 2.0:
            last = generator.next_id()
    # its deadline is 0.9 TTL after the last renewal, which came before the break
    assert TWO.parse(last).unix_ms <= broken_at + 450 + 5
    with pytest.raises(LeaseBackendError, match="failed"):
        generator.next_id()
    store.mend_store()

    def issues() -> bool:
        try:
            generator.next_id()
        except WorkerIdError:
            return False
        return True

    wait_until(issues, timeout=3.0)
    assert generator.next_id() > issued_before


def test_closed_lease_refuses_new_claims(store: Store) -> None:
    """A closed lease raises LeaseLost instead of handing out a worker ID."""
    lease = store.new(TWO, ttl=0.3)
    generator = Snowflake(TWO, worker=lease)
    lease.close()
    assert lease.closed and lease.worker is None
    time.sleep(0.3)  # past the deadline the generator holds
    with pytest.raises(LeaseLost, match="is closed"):
        generator.next_id()


def test_one_lease_serves_one_generator(store: Store) -> None:
    """A second generator on the same lease is refused: it would duplicate IDs."""
    lease = store.new(TWO)
    Snowflake(TWO, worker=lease)
    with pytest.raises(WorkerIdError, match="already serves Snowflake"):
        Snowflake(TWO, worker=lease)


def test_generator_that_failed_to_start_leaves_the_lease_usable(store: Store) -> None:
    """A generator whose first claim failed is detached: a later one on the lease starts."""
    holders = [store.new(TWO) for _ in range(2)]
    generators = [Snowflake(TWO, worker=lease) for lease in holders]
    lease = store.new(TWO, ttl=0.3)
    with pytest.raises(WorkerIdsExhausted):
        Snowflake(TWO, worker=lease)
    holders[0].close()
    time.sleep(lease.renew_every + 0.05)  # past the lease's retry pause after a failure
    assert Snowflake(TWO, worker=lease).worker == 0
    assert generators[1].worker == 1


def test_lease_binds_the_generator_that_attaches(store: Store) -> None:
    """attach() alone names the generator: claims through any callback bind nobody."""
    lease = store.new(TWO)
    bystander = Snowflake(TWO, worker=1)  # what a callback might close over
    assert lease.claim(lambda: bystander.last_unix_ms).worker == 0
    generator = Snowflake(TWO, worker=lease)
    assert generator.worker == 0
    with pytest.raises(WorkerIdError, match="already serves Snowflake"):
        lease.attach(Snowflake(TWO, worker=1))
    lease.attach(generator)  # the attached generator again: accepted


def test_detach_frees_the_lease_for_another_generator(store: Store) -> None:
    """After detach(first), a second generator may attach; detaching a stranger does nothing."""
    lease = store.new(TWO)
    first = Snowflake(TWO, worker=lease)
    stranger = Snowflake(TWO, worker=1)
    lease.detach(stranger)
    with pytest.raises(WorkerIdError, match="already serves"):
        lease.attach(stranger)
    lease.detach(first)
    lease.attach(stranger)


def test_forked_child_takes_its_own_lease(store: Store) -> None:
    """A child forked from a holder leases another worker ID; the parent keeps its own."""
    lease = store.new(TWO)
    generator = Snowflake(TWO, worker=lease)
    parent_id = generator.next_id()
    read, write = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns on fork() with threads running (the renewal thread); the
        # lease is built for exactly that case.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            child_worker = TWO.parse(generator.next_id()).worker
            lease.close()
            os.write(write, str(child_worker).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        answer = os.read(read, 16)
    finally:
        os.close(read)
        _, status = os.waitpid(pid, 0)
    assert status == 0
    assert TWO.parse(parent_id).worker == 0
    assert answer == b"1"
    assert lease.worker == 0 and TWO.parse(generator.next_id()).worker == 0


def _fork_and_claim(generator: Snowflake, lease: Lease, limit: float) -> tuple[int, float]:
    """Fork; the child issues an ID and exits 0. (child's exit status, seconds it took);
    a child still running after ``limit`` seconds is killed (status -9)."""
    began = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with the renewal thread
        pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            generator.next_id()
            lease.close()
            code = 0
        finally:
            os._exit(code)
    while time.monotonic() - began < limit:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, time.monotonic() - began
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return -9, limit


def test_fork_while_a_sqlite_lease_renews_leaves_the_child_a_working_store(
    database_factory: DatabaseFactory,
) -> None:
    """Forks while renewals run every 10 ms: each child claims at once, never "database is
    locked" (a fork amid a renewal's transaction used to lock the child out for good)."""
    engine = database_factory.engine(database_factory("sqlite")[0])
    create_table(engine)
    for round_ in range(15):
        lease = DatabaseLease(engine, TWO, ttl=0.3, clock_skew=0.01, renew_every=0.01)
        try:
            generator = Snowflake(TWO, worker=lease)
            generator.next_id()
            time.sleep(0.02 + 0.003 * round_)  # land the forks at varied points of a renewal
            status, took = _fork_and_claim(generator, lease, limit=10.0)
            assert status == 0, f"round {round_}: the child exited with {status} after {took:.1f} s"
        finally:
            lease.close()
