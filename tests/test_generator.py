"""Snowflake: issuing, genes, clock policies, overflow, expiry, determinism."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from snowshard import (
    ClockMovedBackwards,
    ClockStalled,
    Layout,
    LayoutError,
    LayoutExpired,
    ManualClock,
    Snowflake,
    WorkerIdError,
    gene_of,
)

UTC = timezone.utc
T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def manual(layout: Layout | None = None, **kwargs: object) -> tuple[Snowflake, ManualClock]:
    clock = ManualClock(T0)
    generator = Snowflake(layout, worker=7, clock=clock, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]
    return generator, clock


def test_ids_carry_worker_and_time() -> None:
    """An ID parses back to the generator's worker and the clock's time."""
    generator, _ = manual()
    parts = generator.layout.parse(generator.next_id())
    assert parts.worker == 7
    assert parts.unix_ms == T0


def test_default_clock_is_the_current_time() -> None:
    """Without an injected clock, an ID's time is within a second of the wall clock."""
    issued = Layout().parse(Snowflake(worker=1).next_id()).unix_ms
    assert abs(issued - time.time() * 1000) < 1000


def test_ids_strictly_increase() -> None:
    """Consecutive IDs from one generator strictly increase, across ticks too."""
    generator = Snowflake(worker=1)
    ids = [generator.next_id() for _ in range(20_000)]
    assert all(a < b for a, b in zip(ids, ids[1:]))


def test_gene_is_embedded() -> None:
    """With gene=key the ID's low bits equal gene_of(key), for int and str keys."""
    generator, _ = manual(Layout(worker_bits=6, gene_bits=4))
    for key in (1820, 5177331, "alice"):
        assert generator.next_id(gene=key) & 15 == gene_of(key, 4)


def test_gene_needs_gene_bits() -> None:
    """A gene given to a layout with gene_bits=0 is a LayoutError, not a dropped gene."""
    generator, _ = manual()
    with pytest.raises(LayoutError, match="gene_bits=0"):
        generator.next_id(gene=5)


@pytest.mark.parametrize("worker", [-1, 1024, "3"])
def test_worker_out_of_range_is_refused_at_construction(worker: object) -> None:
    """A worker ID outside 0..1023 (or not an int) raises WorkerIdError at once."""
    with pytest.raises(WorkerIdError, match="worker"):
        Snowflake(worker=worker)  # type: ignore[arg-type]


def test_worker_provider_is_called() -> None:
    """A callable worker is asked for its value."""
    assert Snowflake(worker=lambda: 42).worker == 42


def test_default_worker_comes_from_host_and_pid() -> None:
    """The default worker ID fits the layout and depends on the process ID's low bits."""
    import os

    generator = Snowflake(Layout(worker_bits=10))
    assert generator.worker & 31 == os.getpid() & 31


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_backwards": "ignore"}, "on_backwards"),
        ({"on_overflow": "drop"}, "on_overflow"),
        ({"sequence_start": "zero"}, "sequence_start"),
        ({"max_borrow_ms": -1}, "max_borrow_ms"),
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, object], message: str) -> None:
    """Unknown policies raise LayoutError naming the option."""
    with pytest.raises(LayoutError, match=message):
        Snowflake(worker=1, **kwargs)  # type: ignore[arg-type]


def test_clock_backwards_raise_policy() -> None:
    """on_backwards='raise' refuses to issue while the clock is behind, then recovers."""
    generator, clock = manual(on_backwards="raise")
    first = generator.next_id()
    clock.set(T0 - 5)
    with pytest.raises(ClockMovedBackwards, match="moved back 5 ms"):
        generator.next_id()
    clock.set(T0 + 1)
    assert generator.next_id() > first


def test_clock_backwards_wait_policy_waits_it_out() -> None:
    """on_backwards='wait' sleeps until the clock is back and issues a larger ID."""
    generator, clock = manual(on_backwards="wait")
    first = generator.next_id()
    clock.set(T0 - 20)
    second = generator.next_id()
    assert second > first
    assert clock.slept_ms >= 20


def test_clock_backwards_wait_policy_has_a_bound() -> None:
    """A rollback longer than max_backwards_ms raises instead of waiting."""
    generator, clock = manual(on_backwards="wait", max_backwards_ms=10)
    generator.next_id()
    clock.set(T0 - 11)
    with pytest.raises(ClockMovedBackwards, match="at most 10 ms"):
        generator.next_id()


def test_clock_that_never_recovers_raises() -> None:
    """If the clock stays behind while waiting, the wait ends with ClockMovedBackwards."""
    clock = ManualClock(T0)
    generator = Snowflake(worker=1, clock=clock, sleep=lambda s: None, max_backwards_ms=50)
    generator.next_id()
    clock.set(T0 - 3)
    with pytest.raises(ClockMovedBackwards, match="stayed behind"):
        generator.next_id()


TINY = Layout(worker_bits=4, sequence_bits=2)  # 4 IDs per tick


def test_overflow_wait_moves_to_next_tick() -> None:
    """The 5th ID of a 4-per-tick layout waits for the next tick (the clock is slept)."""
    generator, clock = manual(TINY, on_overflow="wait", sequence_start="reset")
    ticks = [TINY.parse(generator.next_id()).ticks for _ in range(5)]
    assert ticks[:4] == [ticks[0]] * 4
    assert ticks[4] == ticks[0] + 1
    assert clock.slept_ms == 1


def test_overflow_borrow_takes_next_tick_without_waiting() -> None:
    """on_overflow='borrow' issues the 5th ID in the next tick without sleeping."""
    generator, clock = manual(TINY, on_overflow="borrow", sequence_start="reset")
    ids = [generator.next_id() for _ in range(12)]
    assert TINY.parse(ids[-1]).ticks == TINY.parse(ids[0]).ticks + 2
    assert clock.slept_ms == 0
    assert ids == sorted(set(ids))


def test_borrow_is_bounded() -> None:
    """Borrowing runs at most max_borrow_ms ahead of the clock, then waits."""
    generator, clock = manual(TINY, on_overflow="borrow", max_borrow_ms=3)
    ids = generator.next_ids(4 * 10)
    ahead = TINY.parse(ids[-1]).unix_ms - clock()
    assert ahead <= 3
    assert clock.slept_ms > 0


def test_layout_expiry_raises_instead_of_wrapping() -> None:
    """Past the last tick the generator raises LayoutExpired, never a wrapped ID."""
    layout = Layout(timestamp_bits=3, worker_bits=1, sequence_bits=1, epoch=0)
    clock = ManualClock(7)
    generator = Snowflake(layout, worker=1, clock=clock, sleep=clock.sleep)
    assert len(generator.next_ids(2)) == 2
    with pytest.raises(LayoutExpired, match="3-bit timestamp"):
        generator.next_id()


def test_clock_past_the_end_fails_at_construction() -> None:
    """A generator whose clock is already past the layout's end is refused."""
    clock = ManualClock(100)
    with pytest.raises(LayoutExpired):
        Snowflake(Layout(timestamp_bits=3, epoch=0), worker=1, clock=clock)


def test_continue_policy_spreads_sequences_at_low_rate() -> None:
    """With the default policy, one ID per tick still counts 0, 1, 2, ... in the sequence."""
    generator, clock = manual()
    sequences = []
    for _ in range(5):
        sequences.append(generator.layout.parse(generator.next_id()).sequence)
        clock.advance(1)
    assert sequences == [sequences[0] + i for i in range(5)]


def test_reset_policy_restarts_each_tick() -> None:
    """sequence_start='reset' gives sequence 0 to the first ID of every tick."""
    generator, clock = manual(sequence_start="reset")
    sequences = []
    for _ in range(3):
        sequences.append(generator.layout.parse(generator.next_id()).sequence)
        clock.advance(1)
    assert sequences == [0, 0, 0]


def test_random_policy_starts_in_lower_half() -> None:
    """sequence_start='random' starts each tick below half the range, and varies."""
    generator, clock = manual(sequence_start="random")
    starts = set()
    for _ in range(50):
        starts.add(generator.layout.parse(generator.next_id()).sequence)
        clock.advance(1)
    assert max(starts) < 2048
    assert len(starts) > 10


def test_next_ids_are_increasing_and_disjoint() -> None:
    """next_ids returns strictly increasing IDs disjoint from IDs before and after."""
    generator, clock = manual(TINY)
    before = generator.next_id()
    batch = generator.next_ids(10)
    after = generator.next_id()
    assert before < batch[0]
    assert all(a < b for a, b in zip(batch, batch[1:]))
    assert batch[-1] < after
    assert len(batch) == 10


def test_next_ids_with_gene() -> None:
    """Every ID of a batch carries the gene."""
    generator, _ = manual(Layout(worker_bits=6, gene_bits=4))
    assert {i & 15 for i in generator.next_ids(100, gene=1820)} == {1820 & 15}


def test_next_ids_rejects_negative_count() -> None:
    """A negative count is a ValueError naming the value."""
    generator, _ = manual()
    with pytest.raises(ValueError, match="count must be an int >= 0, got -1"):
        generator.next_ids(-1)


def test_id_at_is_deterministic() -> None:
    """id_at(time, key) gives the same ID every time, with the key in the low 22 bits."""
    generator, _ = manual()
    at = datetime(2024, 3, 1, 8, tzinfo=UTC)
    first = generator.id_at(at, 123456)
    assert first == generator.id_at(at, 123456)
    assert first == (generator.layout.ticks_of(at) << 22) | 123456
    assert generator.id_at(at, 123456 + 2**22) == first  # documented collision


def test_id_at_hashes_string_keys_stably() -> None:
    """A str key fills the low bits with its BLAKE2b-64 value (stable across processes)."""
    import hashlib

    generator, _ = manual()
    expected = int.from_bytes(hashlib.blake2b(b"sensor-9", digest_size=8).digest(), "big")
    assert generator.id_at(T0, "sensor-9") & (2**22 - 1) == expected & (2**22 - 1)


def test_stalled_injected_clock_raises_instead_of_hanging() -> None:
    """Overflow with an injected clock that never advances raises ClockStalled."""
    clock = ManualClock(T0)
    generator = Snowflake(TINY, worker=1, clock=clock, sleep=lambda s: None)
    generator.next_ids(4)
    with pytest.raises(ClockStalled, match="stayed at tick"):
        generator.next_id()


def test_lease_protocol_lives_in_workers_base_and_is_re_exported() -> None:
    """snowshard.generator re-exports WorkerClaim and WorkerLease from workers.base, unchanged."""
    from snowshard import generator, workers
    from snowshard.workers import base

    assert generator.WorkerClaim is base.WorkerClaim is workers.WorkerClaim
    assert generator.WorkerLease is base.WorkerLease is workers.WorkerLease


def test_importing_the_generator_loads_neither_sqlalchemy_nor_redis() -> None:
    """import snowshard.generator (and the workers package) stays free of SQLAlchemy and redis."""
    import subprocess
    import sys

    code = (
        "import sys, snowshard.generator, snowshard.workers, snowshard.workers.base\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'redis'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"

