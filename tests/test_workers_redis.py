"""RedisLease specifics: key layout, atomic claims, the error for a full ID space, restarts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from snowshard import Layout, Snowflake
from snowshard.workers import (
    LeaseLost,
    RedisLease,
    WorkerConfigError,
    WorkerIdsExhausted,
)
from tests.backends import RedisNamespace
from tests.faults.servers import RedisServer

SIXTEEN = Layout(worker_bits=4)


def settle(redis_db: RedisNamespace, prefix: str) -> None:
    """Give ``prefix`` the continuity marker of a namespace in long use on this server."""
    run_id = redis_db.client.info("server")["run_id"]
    redis_db.client.set(f"{prefix}:era", f"{run_id}:0")


def test_keys_hold_the_token_with_a_ttl(redis_db: RedisNamespace) -> None:
    """The lease key holds the holder token and expires within the TTL."""
    prefix = redis_db.key("w")
    settle(redis_db, prefix)
    with RedisLease(redis_db.url, SIXTEEN, key_prefix=prefix, ttl=2.0) as lease:
        Snowflake(SIXTEEN, worker=lease)
        assert redis_db.client.get(f"{prefix}:lease:0") == lease.holder.encode()
        assert 0 < redis_db.client.pttl(f"{prefix}:lease:0") <= 2000
        assert redis_db.client.hget(f"{prefix}:info:0", "holder") == lease.holder.encode()
    assert redis_db.client.exists(f"{prefix}:lease:0") == 0
    assert redis_db.client.hget(f"{prefix}:info:0", "clean") == b"1"


def test_key_prefixes_are_independent(redis_db: RedisNamespace) -> None:
    """Leases under different key prefixes both get worker 0."""
    settle(redis_db, redis_db.key("a"))
    settle(redis_db, redis_db.key("b"))
    with RedisLease(redis_db.url, key_prefix=redis_db.key("a")) as a, RedisLease(
        redis_db.client, key_prefix=redis_db.key("b")
    ) as b:
        assert (a.claim(lambda: 0).worker, b.claim(lambda: 0).worker) == (0, 0)


def test_concurrent_claims_get_distinct_ids(redis_db: RedisNamespace) -> None:
    """Sixteen threads claiming at once get all sixteen IDs, each once."""
    prefix = redis_db.key("w")
    settle(redis_db, prefix)
    leases = [RedisLease(redis_db.url, SIXTEEN, key_prefix=prefix) for _ in range(16)]
    got: list[int] = []
    barrier = threading.Barrier(16)

    def claim(lease: RedisLease) -> None:
        barrier.wait()
        got.append(lease.claim(lambda: 0).worker)

    threads = [threading.Thread(target=claim, args=(lease,)) for lease in leases]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(got) == list(range(16))
    finally:
        for lease in leases:
            lease.close()


def test_full_id_space_error_lists_holders(redis_db: RedisNamespace) -> None:
    """With all 1024 IDs leased, the error gives the count, five holders and the rest."""
    prefix = redis_db.key("w")
    with redis_db.client.pipeline() as pipe:
        for worker in range(1024):
            pipe.set(f"{prefix}:lease:{worker}", f"host-{worker}:1:ab", px=30_000)
        pipe.execute()
    with RedisLease(redis_db.url, key_prefix=prefix) as lease:
        with pytest.raises(WorkerIdsExhausted) as caught:
            Snowflake(worker=lease)
    message = str(caught.value)
    assert f"all 1024 worker IDs (0..1023) under '{prefix}'" in message
    assert "0 by host-0:1:ab (expires in" in message and "4 by host-4:1:ab" in message
    assert "and 1019 more" in message


def timed_first_claim(url: str, prefix: str, ttl: float, skew: float) -> float:
    """Seconds from building a lease to its generator's first ID."""
    start = time.monotonic()
    with RedisLease(url, key_prefix=prefix, ttl=ttl, clock_skew=skew) as lease:
        Snowflake(worker=lease).next_id()
        return time.monotonic() - start


def test_settled_namespace_grants_at_once(redis_db: RedisNamespace) -> None:
    """With the marker naming this server process and settled, the first ID comes at once."""
    settle(redis_db, redis_db.key("w"))
    assert timed_first_claim(redis_db.url, redis_db.key("w"), ttl=2.0, skew=0.5) < 1.0


def test_first_use_of_a_namespace_waits_ttl_plus_clock_skew(redis_db: RedisNamespace) -> None:
    """No marker (a flush looks the same): the first ID waits ttl + clock_skew, once."""
    waited = timed_first_claim(redis_db.url, redis_db.key("w"), ttl=0.5, skew=0.3)
    assert 0.75 <= waited <= 2.5
    run_id = redis_db.client.info("server")["run_id"]
    assert redis_db.client.get(redis_db.key("w") + ":era").decode().startswith(run_id + ":")


def test_marker_of_another_server_process_fences_the_claim(redis_db: RedisNamespace) -> None:
    """A marker from another run_id (a restart from a snapshot, a failover) means a wait."""
    redis_db.client.set(redis_db.key("w") + ":era", "0123456789abcdef:0")
    waited = timed_first_claim(redis_db.url, redis_db.key("w"), ttl=0.5, skew=0.3)
    assert waited >= 0.75


def test_flushed_store_fences_the_holder_until_its_era_settles(
    redis_db: RedisNamespace,
) -> None:
    """After FLUSHALL a holder refuses from its deadline until ttl + clock_skew have passed."""
    prefix = redis_db.key("w")
    settle(redis_db, prefix)
    with RedisLease(redis_db.url, key_prefix=prefix, ttl=0.6, clock_skew=0.3) as lease:
        generator = Snowflake(worker=lease)
        generator.next_id()
        redis_db.client.delete(*redis_db.keys())  # the namespace's FLUSHALL
        flushed = time.monotonic()
        refused = 0
        while True:
            try:
                generator.next_id()
            except LeaseLost:
                refused += 1
                time.sleep(0.01)
                continue
            if refused:
                break
            assert time.monotonic() - flushed < 0.6  # issuing under the old claim only
            time.sleep(0.01)
        resumed = time.monotonic() - flushed
    assert resumed >= 0.9 - 0.05  # the fence: ttl + clock_skew after the flush was noticed


def test_password_protected_redis(tmp_path: Path) -> None:
    """A lease works with a password in the URL."""
    with RedisServer(tmp_path, password="s3cret") as server, RedisLease(
        server.url, ttl=0.5, clock_skew=0.1
    ) as lease:
        assert Snowflake(worker=lease).worker == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ttl": 0.01}, r"ttl must be in 0\.05\.\.86400 seconds, got 0\.01"),
        ({"ttl": 1.0, "renew_every": 0.9}, r"renew_every must be in \(0, ttl/2\] = \(0, 0\.5\]"),
        ({"ttl": 1.0, "margin": 0.8}, r"margin must be in \[0, ttl - renew_every\)"),
        ({"ttl": "10"}, r"ttl must be a number of seconds, got '10'"),
        ({"key_prefix": ""}, r"key_prefix must be a non-empty str"),
        ({"clock_skew": -1}, r"clock_skew must be in 0\.\.3600 seconds, got -1"),
    ],
)
def test_invalid_settings_are_refused(kwargs: dict[str, object], match: str) -> None:
    """TTL, renewal interval, margin and prefix are checked at construction."""
    with pytest.raises(WorkerConfigError, match=match):
        RedisLease("redis://127.0.0.1:1/0", **kwargs)  # type: ignore[arg-type]
