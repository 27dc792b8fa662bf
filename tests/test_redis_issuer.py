"""The Redis issuer: sequences from one Lua INCRBY + PEXPIRE per tick."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from snowshard import (
    ClockMovedBackwards,
    FieldOutOfRange,
    Layout,
    LayoutError,
    ManualClock,
    SnowshardError,
    gene_of,
)
from snowshard.redis_issuer import IssuerError, IssuerUnavailable, RedisIssuer
from tests.backends import RedisNamespace
from tests.faults.servers import RedisServer, make_tls_files

FIELDS = Layout(datacenter_bits=5, worker_bits=5)  # 41-bit ms, server, business, 12-bit seq
T = 1_800_000_000_000


def issuer(ns: RedisNamespace, layout: Layout = FIELDS, **kwargs: object) -> RedisIssuer:
    return RedisIssuer(ns.url, layout, key_prefix=ns.key("seq"), **kwargs)  # type: ignore[arg-type]


def test_ids_carry_the_fields_and_redis_time(redis_db: RedisNamespace) -> None:
    """An ID parses to the chosen server/business fields and Redis's current time."""
    with issuer(redis_db, datacenter=1, worker=2) as ids:
        parts = FIELDS.parse(ids.next_id())
    assert (parts.datacenter, parts.worker) == (1, 2)
    assert abs(parts.unix_ms - time.time() * 1000) < 1000


def test_batch_is_unique_increasing_and_spans_ticks(redis_db: RedisNamespace) -> None:
    """next_ids(10000) gives 10000 distinct increasing IDs over at least three ticks."""
    with issuer(redis_db) as ids:
        batch = ids.next_ids(10_000)
    assert len(set(batch)) == 10_000 and batch == sorted(batch)
    assert len({FIELDS.parse(i).ticks for i in batch}) >= 3


def test_batch_fills_a_tick_then_waits_for_the_next(redis_db: RedisNamespace) -> None:
    """With the clock fixed, 4096 IDs fill tick T and the rest wait for tick T+1."""
    clock = ManualClock(T)
    with issuer(redis_db, clock=clock, sleep=clock.sleep) as ids:
        batch = ids.next_ids(4100)
    ticks = [FIELDS.parse(i).unix_ms for i in batch]
    assert ticks.count(T) == 4096 and ticks.count(T + 1) == 4
    assert [FIELDS.parse(i).sequence for i in batch[4096:]] == [0, 1, 2, 3]
    assert clock.slept_ms >= 1


def test_per_id_overflow_waits_for_the_next_tick(redis_db: RedisNamespace) -> None:
    """The 4097th single ID of a tick comes from the next tick, with sequence 0."""
    clock = ManualClock(T)
    with issuer(redis_db, clock=clock, sleep=clock.sleep) as ids:
        for _ in range(4096):
            ids.next_id()
        parts = FIELDS.parse(ids.next_id())
    assert (parts.unix_ms, parts.sequence) == (T + 1, 0)


def test_clients_share_one_sequence(redis_db: RedisNamespace) -> None:
    """Eight threads with their own issuers on one sequence never repeat an ID."""
    got: list[list[int]] = []

    def run() -> None:
        with issuer(redis_db) as ids:
            got.append([ids.next_id() for _ in range(300)] + ids.next_ids(3000))

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [i for chunk in got for i in chunk]
    assert len(flat) == 8 * 3300 and len(set(flat)) == len(flat)


def test_clock_step_back_waits_instead_of_repeating(redis_db: RedisNamespace) -> None:
    """A client clock 500 ms behind the last tick issued waits, then issues later IDs."""
    clock = ManualClock(T)
    with issuer(redis_db, clock=clock, sleep=clock.sleep) as ids:
        before = ids.next_ids(10)
        clock.set(T - 500)
        after = ids.next_ids(10)
    assert min(after) > max(before)
    assert FIELDS.parse(after[0]).unix_ms == T + 1


def test_clock_far_behind_raises(redis_db: RedisNamespace) -> None:
    """A clock further behind than max_backwards_ms raises without issuing or sleeping."""
    clock = ManualClock(T)
    with issuer(redis_db, clock=clock, sleep=clock.sleep, max_backwards_ms=1000) as ids:
        ids.next_id()
        clock.set(T - 5000)
        with pytest.raises(ClockMovedBackwards, match=r"catching up takes 5001 ms"):
            ids.next_id()
    assert clock.slept_ms == 0


def test_expired_key_of_the_last_tick_is_never_restarted(redis_db: RedisNamespace) -> None:
    """If the last tick's key expired, that tick is not reused (its sequence would restart)."""
    clock = ManualClock(T)
    with issuer(redis_db, clock=clock, sleep=clock.sleep) as ids:
        first = ids.next_id()
        tick = FIELDS.parse(first).ticks
        redis_db.client.delete(redis_db.key("seq") + f":0:0:{tick}")  # as if it expired
        second = ids.next_id()
    assert FIELDS.parse(second).unix_ms == T + 1 and second > first


def test_tick_keys_expire(redis_db: RedisNamespace) -> None:
    """A tick's key gets a PEXPIRE (key_ttl_ms); the last-tick key does not."""
    clock = ManualClock(T)
    with issuer(redis_db, clock=clock, key_ttl_ms=5000) as ids:
        tick = FIELDS.parse(ids.next_id()).ticks
    assert 0 < redis_db.client.pttl(redis_db.key("seq") + f":0:0:{tick}") <= 5000
    assert redis_db.client.get(redis_db.key("seq") + ":0:0:last") == str(tick).encode()


def test_random_sequence_start(redis_db: RedisNamespace) -> None:
    """With sequence_start='random', fresh ticks start in the lower half, not always at 0."""
    clock = ManualClock(T)
    with issuer(redis_db, clock=clock, sequence_start="random") as ids:
        starts = []
        for _ in range(20):
            starts.append(FIELDS.parse(ids.next_id()).sequence)
            clock.advance(1)
    assert all(0 <= s < 2048 for s in starts) and len(set(starts)) > 1


def test_gene_is_carried(redis_db: RedisNamespace) -> None:
    """With gene bits, IDs end in the gene of the key given."""
    layout = Layout(worker_bits=6, gene_bits=4)
    with issuer(redis_db, layout) as ids:
        assert ids.next_id(gene=1820) & 15 == gene_of(1820, 4)
        assert all(i & 15 == gene_of(5, 4) for i in ids.next_ids(50, gene=5))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"datacenter": 32}, FieldOutOfRange, r"datacenter must be in 0\.\.31"),
        ({"worker": -1}, FieldOutOfRange, r"worker must be in 0\.\.31"),
        ({"sequence_start": "continue"}, LayoutError, r"sequence_start must be one of"),
        ({"max_backwards_ms": -5}, LayoutError, r"max_backwards_ms must be an int >= 0"),
    ],
)
def test_invalid_settings_are_refused(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    """Out-of-range fields and unknown options fail at construction."""
    with pytest.raises(error, match=match):
        RedisIssuer("redis://127.0.0.1:1/0", FIELDS, **kwargs)  # type: ignore[arg-type]


def test_negative_count_is_refused(redis_db: RedisNamespace) -> None:
    """next_ids(-1) is an error, not an empty list."""
    with issuer(redis_db) as ids, pytest.raises(FieldOutOfRange, match="count must be"):
        ids.next_ids(-1)


def test_clock_before_epoch(redis_db: RedisNamespace) -> None:
    """A clock before the layout's epoch is refused when the issuer is built, naming both."""
    with pytest.raises(LayoutError, match=r"epoch 2020-01-01.* later than now \(1970-01-01"):
        issuer(redis_db, clock=lambda: 1000)


def test_unreachable_redis_is_a_snowshard_error() -> None:
    """A Redis that does not answer raises IssuerUnavailable, never returns an ID."""
    with RedisIssuer("redis://127.0.0.1:1/0", timeout=0.5) as ids:
        with pytest.raises(IssuerUnavailable, match=r"127\.0\.0\.1:1/0 is unreachable"):
            ids.next_id()


def test_wrong_key_type_is_an_issuer_error(redis_db: RedisNamespace) -> None:
    """A foreign value in the issuer's keys raises IssuerError (a SnowshardError)."""
    redis_db.client.hset(redis_db.key("seq") + ":0:0:last", "x", "1")
    with issuer(redis_db) as ids, pytest.raises(IssuerError, match="rejected") as caught:
        ids.next_id()
    assert isinstance(caught.value, SnowshardError)


def test_password_and_tls(tmp_path: Path) -> None:
    """rediss:// with a password works; a wrong password is a clear IssuerUnavailable."""
    tls = make_tls_files(tmp_path)
    with RedisServer(tmp_path, password="s3cret", tls=tls) as server:
        assert server.url.startswith("rediss://:s3cret@")
        with RedisIssuer(server.url, FIELDS) as ids:
            assert len(set(ids.next_ids(5000))) == 5000
        wrong = server.url.replace("s3cret", "nope")
        with RedisIssuer(wrong, FIELDS) as ids:
            with pytest.raises(IssuerUnavailable, match="refused the credentials") as caught:
                ids.next_id()
        assert "nope" not in str(caught.value)


def test_no_password_against_a_protected_redis(tmp_path: Path) -> None:
    """Omitting the password of a protected Redis says how to give one."""
    with RedisServer(tmp_path, password="s3cret") as server:
        with RedisIssuer(server.url.replace(":s3cret@", ""), FIELDS) as ids:
            with pytest.raises(IssuerUnavailable, match=r"redis://:PASSWORD@host"):
                ids.next_id()
