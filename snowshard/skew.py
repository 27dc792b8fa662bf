"""How evenly a strategy spreads a stream of IDs over its shards (do IDs pile into a few tables?)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from snowshard.errors import FieldOutOfRange, IdTypeError, StrategyError
from snowshard.strategies import ShardStrategy, check_strategy

__all__ = ["Skew", "chi_square_sf", "skew"]


@dataclass(frozen=True)
class Skew:
    """Per-shard counts of a stream and how far they are from even."""

    counts: tuple[int, ...]
    total: int
    max_over_mean: float
    """Rows in the fullest shard over rows per shard if spread evenly (1.0 is perfect)."""
    chi_square: float
    p_value: float
    """Probability of a chi-square at least this large if rows were spread at random."""

    @property
    def empty_shards(self) -> int:
        return sum(1 for c in self.counts if c == 0)

    @classmethod
    def from_counts(cls, counts: Sequence[int]) -> Skew:
        """The spread of rows already counted per shard."""
        n = len(counts)
        total = sum(counts)
        if total == 0:
            return cls(tuple(counts), 0, 0.0, 0.0, 1.0)
        mean = total / n
        chi = sum((c - mean) ** 2 for c in counts) / mean
        return cls(tuple(counts), total, max(counts) / mean, chi, chi_square_sf(chi, n - 1))


def skew(strategy: ShardStrategy, ids: Iterable[object]) -> Skew:
    """Route every ID of ``ids`` with ``strategy`` and measure the spread.

    Raises :class:`StrategyError` for an object that is not a strategy, or a strategy that
    returns a shard outside ``0..count-1``, and :class:`IdTypeError` if ``ids`` is not an
    iterable (each ID then meets the strategy's own checks).
    """
    check_strategy(strategy)
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise IdTypeError(
            f"ids must be an iterable of IDs or keys (a list, a generator), got "
            f"{type(ids).__name__} {ids!r}"
        )
    n = strategy.count
    counts = [0] * n
    shard_of = strategy.shard_of
    for value in ids:
        shard = shard_of(value)
        if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < n:
            raise StrategyError(
                f"{strategy!r}.shard_of({value!r}) returned {shard!r}, outside 0..{n - 1}; "
                "a strategy must return a shard index below its count"
            )
        counts[shard] += 1
    return Skew.from_counts(counts)


def chi_square_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df): the regularised upper incomplete gamma Q(df/2, x/2)."""
    if isinstance(df, bool) or not isinstance(df, int) or df < 0:
        raise FieldOutOfRange(f"df (degrees of freedom) must be an int >= 0, got {df!r}")
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x):
        raise FieldOutOfRange(f"x must be a number (not NaN), got {x!r}")
    if df == 0:
        return 1.0
    if x <= 0:
        return 1.0
    return _gamma_q(df / 2.0, x / 2.0)


def _gamma_q(a: float, x: float) -> float:
    # Numerical Recipes' split: series for x < a + 1, continued fraction (Lentz) otherwise.
    log_prefix = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return min(1.0, math.exp(log_prefix) * h)
