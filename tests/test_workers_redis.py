"""RedisLease specifics: key layout, atomic claims, the error for a full ID space, restarts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from snowshard import Layout, Snowflake
from snowshard.workers import RedisLease, WorkerConfigError, WorkerIdsExhausted
from tests.backends import RedisNamespace
from tests.faults.servers import RedisServer

SIXTEEN = Layout(worker_bits=4)


def test_keys_hold_the_token_with_a_ttl(redis_db: RedisNamespace) -> None:
    """The lease key holds the holder token and expires within the TTL."""
    prefix = redis_db.key("w")
    with RedisLease(redis_db.url, SIXTEEN, key_prefix=prefix, ttl=2.0) as lease:
        Snowflake(SIXTEEN, worker=lease)
        assert redis_db.client.get(f"{prefix}:lease:0") == lease.holder.encode()
        assert 0 < redis_db.client.pttl(f"{prefix}:lease:0") <= 2000
        assert redis_db.client.hget(f"{prefix}:info:0", "holder") == lease.holder.encode()
    assert redis_db.client.exists(f"{prefix}:lease:0") == 0
    assert redis_db.client.hget(f"{prefix}:info:0", "clean") == b"1"


def test_key_prefixes_are_independent(redis_db: RedisNamespace) -> None:
    """Leases under different key prefixes both get worker 0."""
    with RedisLease(redis_db.url, key_prefix=redis_db.key("a")) as a, RedisLease(
        redis_db.client, key_prefix=redis_db.key("b")
    ) as b:
        assert (a.claim(lambda: 0).worker, b.claim(lambda: 0).worker) == (0, 0)


def test_concurrent_claims_get_distinct_ids(redis_db: RedisNamespace) -> None:
    """Sixteen threads claiming at once get all sixteen IDs, each once."""
    prefix = redis_db.key("w")
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


def test_new_namespace_on_a_long_running_redis_grants_at_once(redis_db: RedisNamespace) -> None:
    """On a Redis up for longer than the TTL, the first claim does not wait."""
    start = time.monotonic()
    with RedisLease(redis_db.url, key_prefix=redis_db.key("w"), ttl=0.5) as lease:
        Snowflake(worker=lease)
    assert time.monotonic() - start < 0.5
    assert redis_db.client.exists(redis_db.key("w") + ":ready") == 1


def test_freshly_started_redis_grants_after_the_ttl(tmp_path: Path) -> None:
    """A Redis that just started may have lost live leases: the first claim waits them out."""
    with RedisServer(tmp_path) as server:
        start = time.monotonic()
        with RedisLease(server.url, ttl=0.5) as lease:
            generator = Snowflake(worker=lease)
            waited = time.monotonic() - start
        assert generator.worker == 0
    # ready = start + ttl + 1 s - uptime (whole seconds, so between 0.5 and 1.5 s)
    assert 0.4 <= waited <= 2.0


def test_password_protected_redis(tmp_path: Path) -> None:
    """A lease works with a password in the URL."""
    with RedisServer(tmp_path, password="s3cret") as server:
        with redis.Redis.from_url(server.url) as admin:
            # a brand-new server holds no leases: skip the wait for forgotten ones
            admin.set("snowshard:workers:ready", 0)
        with RedisLease(server.url, ttl=2.0) as lease:
            assert Snowflake(worker=lease).worker == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ttl": 0.01}, r"ttl must be in 0\.05\.\.86400 seconds, got 0\.01"),
        ({"ttl": 1.0, "renew_every": 0.9}, r"renew_every must be in \(0, ttl/2\] = \(0, 0\.5\]"),
        ({"ttl": 1.0, "margin": 0.8}, r"margin must be in \[0, ttl - renew_every\)"),
        ({"ttl": "10"}, r"ttl must be a number of seconds, got '10'"),
        ({"key_prefix": ""}, r"key_prefix must be a non-empty str"),
    ],
)
def test_invalid_settings_are_refused(kwargs: dict[str, object], match: str) -> None:
    """TTL, renewal interval, margin and prefix are checked at construction."""
    with pytest.raises(WorkerConfigError, match=match):
        RedisLease("redis://127.0.0.1:1/0", **kwargs)  # type: ignore[arg-type]
