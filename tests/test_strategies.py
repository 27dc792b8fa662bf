"""Shard strategies: formulas, validation and gene co-location."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowshard import Layout, ManualClock, Snowflake
from snowshard.strategies import (
    Gene,
    Hash,
    Mix,
    Mod,
    ShardStrategy,
    Shift,
    StrategyError,
    colocates_genes,
)

GENE_LAYOUT = Layout(worker_bits=6, gene_bits=4)


@pytest.mark.parametrize("strategy", [Mod(7), Mix(7), Shift(7, 12), Gene(8), Hash(7)])
def test_results_are_in_range(strategy: ShardStrategy) -> None:
    """shard_of always returns a shard in [0, count)."""
    assert {strategy.shard_of(x) for x in range(0, 10**6, 997)} <= set(range(strategy.count))


def test_formulas() -> None:
    """Each strategy computes its documented formula."""
    x = 0x1234_5678_9ABC
    assert Mod(1000).shard_of(x) == x % 1000
    assert Mix(1000).shard_of(x) == (x ^ (x >> 16)) % 1000
    assert Shift(1000, 22).shard_of(x) == (x >> 22) % 1000
    assert Gene(64).shard_of(x) == x & 63


def test_shift_presets_follow_the_layout() -> None:
    """Shift.by_worker drops sequence+gene bits; Shift.by_time drops everything below time."""
    assert Shift.by_worker(16, GENE_LAYOUT).bits == 16
    assert Shift.by_time(16, GENE_LAYOUT).bits == 22


@pytest.mark.parametrize("n", [3, 12, 1000])
def test_gene_needs_power_of_two(n: int) -> None:
    """Gene(n) with n not a power of two is a ValueError suggesting neighbours."""
    with pytest.raises(StrategyError, match=f"power-of-two shard count, got {n}"):
        Gene(n)
    assert issubclass(StrategyError, ValueError)


@pytest.mark.parametrize("n", [0, -4, True, 2.0])
def test_counts_must_be_positive_ints(n: object) -> None:
    """A shard count that is not an int >= 1 is refused."""
    with pytest.raises(StrategyError, match="shard count >= 1"):
        Mod(n)  # type: ignore[arg-type]


@given(st.one_of(st.integers(0, 2**62), st.text(), st.uuids()))
def test_gene_colocates_parent_and_child(parent: object) -> None:
    """Gene(16) sends a parent key and the ID of a child with its gene to the same shard."""
    generator = Snowflake(GENE_LAYOUT, worker=1, clock=ManualClock(1_700_000_000_000))
    child = generator.next_id(gene=parent)
    assert Gene(16).shard_of(child) == Gene(16).shard_of(parent)


def test_colocation_is_reported_honestly() -> None:
    """colocates_genes is True only for gene-preserving strategies within gene_bits."""
    assert colocates_genes(Gene(16), GENE_LAYOUT)
    assert colocates_genes(Mod(8), GENE_LAYOUT)
    assert not colocates_genes(Gene(32), GENE_LAYOUT)
    assert not colocates_genes(Mod(12), GENE_LAYOUT)
    assert not colocates_genes(Mix(16), GENE_LAYOUT)
    assert not colocates_genes(Shift(16, 4), GENE_LAYOUT)


def test_strategies_accept_uuid_and_str_keys() -> None:
    """Every strategy routes UUID and str keys through the same stable key_to_int."""
    key = uuid.UUID(int=0xABCDEF)
    assert Mod(16).shard_of(key) == 0xF
    assert Mix(16).shard_of("a") == Mix(16).shard_of(b"a")


def test_strategies_compare_by_value() -> None:
    """Two strategies with the same parameters are equal and hash alike."""
    assert Shift(4, 12) == Shift(4, 12) != Shift(4, 22)
    assert {Gene(16), Gene(16), Mod(16)} == {Gene(16), Mod(16)}


Builtin = Mod | Mix | Hash | Gene | Shift
ALL_KINDS: list[Builtin] = [Mod(8), Mix(8), Hash(8), Gene(8), Shift(8, 12)]


@pytest.mark.parametrize("strategy", ALL_KINDS, ids=repr)
def test_equal_parameters_make_equal_strategies(strategy: Builtin) -> None:
    """Two strategies built with the same class and parameters are equal and hash alike."""
    twin = type(strategy)(*strategy.params())
    assert twin == strategy and twin is not strategy
    assert hash(twin) == hash(strategy)
    assert {strategy: "bound"}[twin] == "bound"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (Mod(8), Mod(16)),
        (Mix(8), Mix(9)),
        (Hash(8), Hash(7)),
        (Gene(8), Gene(16)),
        (Shift(8, 12), Shift(8, 13)),
        (Shift(8, 12), Shift(16, 12)),
    ],
    ids=repr,
)
def test_any_differing_parameter_makes_strategies_unequal(one: object, other: object) -> None:
    """A strategy differing in any parameter (count, bits) is not equal."""
    assert one != other


def test_different_classes_with_the_same_count_are_unequal() -> None:
    """Mod(8), Mix(8), Hash(8), Gene(8) and Shift(8, 0) are five different strategies."""
    kinds = [Mod(8), Mix(8), Hash(8), Gene(8), Shift(8, 0)]
    assert len(set(kinds)) == 5
    assert all(a != b for i, a in enumerate(kinds) for b in kinds[i + 1 :])


@pytest.mark.parametrize("strategy", ALL_KINDS, ids=repr)
def test_strategies_are_immutable(strategy: ShardStrategy) -> None:
    """Setting a hashable strategy's count raises instead of changing its hash under a dict."""
    with pytest.raises(AttributeError, match="immutable"):
        strategy.count = 4  # type: ignore[misc]
    assert strategy.count == 8


@pytest.mark.parametrize("strategy", ALL_KINDS, ids=repr)
def test_strategies_survive_pickling_as_equal_values(strategy: ShardStrategy) -> None:
    """A pickled and loaded strategy (as multiprocessing sends it) equals the original."""
    import pickle

    assert pickle.loads(pickle.dumps(strategy)) == strategy
