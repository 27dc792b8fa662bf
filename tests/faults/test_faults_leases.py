"""Leases under faults, over Redis, SQLite, PostgreSQL and MariaDB: churn, SIGKILL, SIGSTOP,
and a clock that jumps back across a crash. Child processes run ``tests.faults.procs``."""

from __future__ import annotations

import json
import signal
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import redis
import sqlalchemy as sa

from snowshard import ClockMovedBackwards, Layout, ManualClock, Snowflake
from snowshard.generator import WorkerClaim
from snowshard.workers import Lease, WorkerIdsExhausted, worker_leases
from tests.faults.conftest import Child, Target, wall_ms

pytestmark = pytest.mark.slow

TTL = 0.5  # of the leases that a test waits out
RENEW = TTL / 3
PAUSE_TTL = 1.5  # a holder paused past it: room for renewals starved by a loaded machine
CHURN_TTL = 1.0  # 8 busy processes on 2 cores: room for a late renewal
ONE = Layout(worker_bits=0)  # a single worker ID: whoever holds it excludes everyone else


class TakeOver(NamedTuple):
    lease: Lease
    claim: WorkerClaim
    refusal: str  # the first refusal's message
    last_refused: float  # time.monotonic() when the last refusal came
    granted: float  # time.monotonic() when the try that got it began


def take_over(target: Target, layout: Layout, timeout: float, ttl: float = TTL) -> TakeOver:
    """Lease the (only) worker ID as soon as it is free: a new lease per try, as a freshly
    started process would. The claim returns once its fence (if any) has passed."""
    refusal = ""
    last_refused = 0.0
    deadline = time.monotonic() + timeout
    while True:
        lease = target.lease(layout, ttl)
        began = time.monotonic()
        try:
            return TakeOver(lease, lease.claim(lambda: 0), refusal, last_refused, began)
        except WorkerIdsExhausted as exc:
            refusal = refusal or str(exc)
            last_refused = time.monotonic()
            lease.close()
        if time.monotonic() > deadline:
            pytest.fail(f"the worker ID was not free within {timeout} s")
        time.sleep(0.01)


def lease_expiry_ms(target: Target, worker: int) -> int:
    """When ``worker``'s lease expires, as its holder last set it (store clock, Unix ms)."""
    if target.store == "redis":
        with redis.Redis.from_url(target.url) as client:
            return int(client.hget(f"{target.prefix}:info:{worker}", "exp") or 0)
    engine = sa.create_engine(target.url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            t = worker_leases.c
            query = sa.select(t.expires_at_ms).where(
                t.namespace == target.prefix, t.worker_id == worker
            )
            return int(conn.execute(query).scalar_one())
    finally:
        engine.dispose()


def test_eight_processes_churning_leases_issue_no_duplicates(
    target: Target, spawn: Callable[..., Child], tmp_path: Path
) -> None:
    """8 processes x 100k IDs, re-leasing 4 shared worker IDs 4 times each: no duplicates."""
    children = [
        spawn(
            f"churn{i}", "churn", "--store", target.store, "--target", target.url,
            "--prefix", target.prefix, "--ttl", str(CHURN_TTL), "--worker-bits", "2",
            "--rounds", "4", "--per-round", "25000",
        )
        for i in range(8)
    ]
    for child in children:
        child.finish(timeout=120)
    ids = array("q")
    holders: dict[int, set[int]] = {}
    for child in children:
        ids.frombytes(child.out.read_bytes())
        info = json.loads(Path(str(child.out) + ".json").read_text())
        for round_ in info["rounds"]:
            holders.setdefault(round_["worker"], set()).add(info["pid"])
    assert len(ids) == 800_000
    assert len(set(ids)) == 800_000
    assert set(holders) <= {0, 1, 2, 3}
    assert max(len(pids) for pids in holders.values()) >= 2  # IDs really changed hands


def test_killed_holders_id_is_reused_only_after_its_ttl(
    target: Target, spawn: Callable[..., Child]
) -> None:
    """After SIGKILL the holder's worker ID stays taken until its lease expires (TTL)."""
    holder = spawn(
        "holder", "hold", "--store", target.store, "--target", target.url,
        "--prefix", target.prefix, "--ttl", str(TTL), "--worker-bits", "0",
    )
    holder.wait_ready()
    time.sleep(0.3)  # it renews at least once
    expires_in = target.expires_in_ms(0) / 1000  # as the store sees it (a renewal may follow)
    expiry = lease_expiry_ms(target, 0)  # the same, in the store's clock
    killed_at_wall = wall_ms()
    killed_at = time.monotonic()
    holder.kill()
    last_issued = max(value for value, _ in holder.record().ids)
    taken = take_over(target, ONE, timeout=TTL + 5)
    claim, refusal = taken.claim, taken.refusal
    assert f":{holder.pid}:" in refusal  # the error named the dead holder
    assert "all 1 worker IDs (0..0)" in refusal
    assert 0 < expires_in <= TTL
    # granted only once its lease expired (store clock), and soon after
    assert lease_expiry_ms(target, 0) - round(TTL * 1000) >= expiry
    assert taken.granted - killed_at <= expires_in + RENEW + 0.5
    # the new holder issues only after anything the dead one may have issued
    assert claim.floor_unix_ms > killed_at_wall
    assert claim.floor_unix_ms >= ONE.parse(last_issued).unix_ms


def test_paused_holder_does_not_issue_under_a_stolen_lease(
    target: Target, spawn: Callable[..., Child]
) -> None:
    """A holder SIGSTOPped past its TTL loses the ID to another; resumed, it issues nothing."""
    holder = spawn(
        "holder", "hold", "--store", target.store, "--target", target.url,
        "--prefix", target.prefix, "--ttl", str(PAUSE_TTL), "--worker-bits", "0",
    )
    holder.wait_ready()
    holder.wait_issued_after(wall_ms(), timeout=10)
    for _ in range(10):
        stopped_at = wall_ms()
        holder.signal(signal.SIGSTOP)
        if target.row_lock_free(0):
            break
        # frozen inside its renewal transaction: its row stays locked until it resumes
        holder.signal(signal.SIGCONT)
        time.sleep(0.03)
    else:
        pytest.fail("the holder always froze holding its lease row's lock")
    taken = take_over(target, ONE, timeout=PAUSE_TTL + 5, ttl=PAUSE_TTL)
    assert taken.refusal  # it was still held right after the pause
    thief = Snowflake(ONE, worker=taken.lease)
    thief_ids = []
    for _ in range(200):
        thief_ids.append(thief.next_id())
        time.sleep(0.001)
    holder.signal(signal.SIGCONT)
    resumed_at = wall_ms()
    # the thief keeps issuing until the first holder, awake again, has tried and been refused
    deadline = time.monotonic() + 20
    while not [wall for wall, _, _ in holder.record().errors if wall >= resumed_at]:
        assert time.monotonic() < deadline, "the resumed holder never tried to issue"
        thief_ids.append(thief.next_id())
        time.sleep(0.005)
    for _ in range(50):
        thief_ids.append(thief.next_id())
    holder.finish()
    record = holder.record()
    assert record.ids, "the holder issued IDs before the pause"
    # Nothing the first holder returned was issued after its pause (a call caught by
    # SIGSTOP mid-way may return after SIGCONT, but with a time from before the pause).
    assert max(ONE.parse(value).unix_ms for value, _ in record.ids) <= stopped_at + 50
    refused = {name for wall, name, _ in record.errors if wall >= resumed_at}
    assert "WorkerIdsExhausted" in refused  # its ID is the thief's and no other exists
    assert refused <= {"WorkerIdsExhausted", "LeaseLost", "LeaseBackendError"}
    assert max(value for value, _ in record.ids) < min(thief_ids)


def test_clock_behind_after_a_crash_cannot_repeat_ids(
    target: Target, spawn: Callable[..., Child]
) -> None:
    """A successor whose clock is 3 s behind a crashed holder's waits or refuses, never repeats."""
    # The stored high-water tick is what tells the successor where the crashed holder got to.
    holder = spawn(
        "holder", "hold", "--store", target.store, "--target", target.url,
        "--prefix", target.prefix, "--ttl", str(TTL), "--worker-bits", "0",
        "--clock-offset-ms", "3000",
    )
    holder.wait_ready()
    time.sleep(0.3)  # issues at "now + 3 s" and renews, storing that time
    holder.kill()
    before = [value for value, _ in holder.record().ids]
    assert ONE.parse(max(before)).unix_ms > wall_ms() + 1500  # it really ran ahead

    # default max_backwards_ms (1 s): the successor refuses rather than repeat
    lease, claim, *_ = take_over(target, ONE, timeout=TTL + 5)
    assert claim.floor_unix_ms >= ONE.parse(max(before)).unix_ms
    clock = ManualClock(wall_ms())
    refusing = Snowflake(ONE, worker=lease, clock=clock, sleep=clock.sleep)
    with pytest.raises(ClockMovedBackwards, match="moved back"):
        refusing.next_id()
    lease.close()

    # allowed to wait it out: every new ID comes after every ID of the crashed holder
    started_ms = wall_ms()
    clock = ManualClock(started_ms)
    lease = target.lease(ONE, TTL)
    waiting = Snowflake(ONE, worker=lease, clock=clock, sleep=clock.sleep, max_backwards_ms=10_000)
    after = waiting.next_ids(5000)
    assert min(after) > max(before)
    assert clock.slept_ms >= ONE.parse(max(before)).unix_ms - started_ms > 0
