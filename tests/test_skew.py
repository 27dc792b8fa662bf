"""Plain mod piles low-rate snowflake IDs into shard 0 (low bits mostly zero); cures work."""

from __future__ import annotations

import functools
import random

import pytest

from snowshard import Layout, ManualClock, Snowflake, skew
from snowshard.skew import chi_square_sf
from snowshard.strategies import Gene, Hash, Mix, Mod, Shift, ShardStrategy

WORKERS = 100
TICKS = 2048
SHARDS = 1024
LAYOUT = Layout()


def stream(sequence_start: str) -> list[int]:
    """100 workers each issuing one ID per millisecond for 2048 ms (a low-rate service)."""
    clock = ManualClock(1_700_000_000_000)
    generators = [
        Snowflake(LAYOUT, worker=w, clock=clock, sequence_start=sequence_start)  # type: ignore[arg-type]
        for w in range(WORKERS)
    ]
    ids = []
    for _ in range(TICKS):
        ids.extend(g.next_id() for g in generators)
        clock.advance(1)
    return ids


@pytest.fixture(scope="module")
def reset_ids() -> list[int]:
    return stream("reset")


@functools.cache
def continue_ids() -> list[int]:
    return stream("continue")


def test_mod_piles_reset_sequence_ids_into_shard_zero(reset_ids: list[int]) -> None:
    """With Twitter's reset sequence, every ID lands in shard 0 under Mod(1024)."""
    result = skew(Mod(SHARDS), reset_ids)
    assert result.counts[0] == len(reset_ids)
    assert result.max_over_mean == SHARDS
    assert result.p_value < 1e-12


@pytest.mark.parametrize(
    "strategy", [Hash(SHARDS), Shift.by_time(SHARDS, LAYOUT)], ids=["hash", "shift-time"]
)
def test_hashing_and_shifting_spread_reset_ids(
    reset_ids: list[int], strategy: ShardStrategy
) -> None:
    """Hash and Shift-by-time spread the reset stream to within 2x of even."""
    result = skew(strategy, reset_ids)
    assert result.max_over_mean < 2.0
    assert result.empty_shards == 0


def test_mix_avoids_the_pile_but_not_evenly(reset_ids: list[int]) -> None:
    """Mix reaches 112 shards (7 worker-high values x 16 time values), not just shard 0."""
    result = skew(Mix(SHARDS), reset_ids)
    assert SHARDS - result.empty_shards == 7 * 16
    assert result.max_over_mean == pytest.approx(10.24)


def test_gene_spreads_children_of_random_users() -> None:
    """Gene routing by users' genes spreads children evenly."""
    clock = ManualClock(1_700_000_000_000)
    layout = Layout(worker_bits=0, gene_bits=10)
    generator = Snowflake(layout, worker=0, clock=clock, sleep=clock.sleep)
    rng = random.Random(2)
    ids = [generator.next_id(gene=rng.randrange(10**9)) for _ in range(WORKERS * TICKS)]
    result = skew(Gene(SHARDS), ids)
    assert result.max_over_mean < 2.0
    assert result.p_value > 0.001


@pytest.mark.parametrize("strategy", [Mod(SHARDS), Mix(SHARDS), Hash(SHARDS)], ids=["mod", "mix", "hash"])
def test_default_sequence_policy_makes_every_strategy_even(strategy: ShardStrategy) -> None:
    """With the default 'continue' policy even plain Mod(1024) spreads the stream evenly."""
    result = skew(strategy, continue_ids())
    assert result.max_over_mean < 1.5
    assert result.empty_shards == 0


@pytest.mark.parametrize(
    ("x", "df", "expected"),
    [(3.841458820694124, 1, 0.05), (18.307038053275146, 10, 0.05), (1074.679, 1023, 0.125)],
)
def test_chi_square_survival_matches_tables(x: float, df: int, expected: float) -> None:
    """chi_square_sf matches published critical values (and scipy's for df=1023)."""
    assert chi_square_sf(x, df) == pytest.approx(expected, rel=2e-2)
