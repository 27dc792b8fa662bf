"""Warnings about a layout and a strategy: expiry, JavaScript, co-location, skew traps."""

from __future__ import annotations

from datetime import datetime, timezone

from snowshard.layout import Layout
from snowshard.strategies import Gene, Hash, Mix, Mod, ShardStrategy, Shift, colocates_genes

__all__ = ["layout_warnings", "strategy_warnings", "years"]

_YEAR_MS = 365.2425 * 86_400_000


def years(ms: float) -> float:
    return ms / _YEAR_MS


def _day(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d")


def layout_warnings(layout: Layout, now_ms: int) -> list[str]:
    """What may go wrong with ``layout`` as of ``now_ms`` (Unix ms)."""
    out: list[str] = []
    now = datetime.fromtimestamp(now_ms / 1000, timezone.utc)
    if layout.epoch_ms > now_ms:
        out.append(
            f"the epoch {_day(layout.epoch)} is in the future: no ID can be issued before it"
        )
    end = layout.expires_at
    left = years(end.timestamp() * 1000 - now_ms)
    if left <= 0:
        out.append(f"the layout expired on {_day(end)}: no new ID fits its timestamp field")
    elif left < 10:
        out.append(
            f"the layout expires on {_day(end)}, in {left:.1f} years: plan a later epoch "
            "or more timestamp bits"
        )
    unsafe = layout.js_unsafe_at
    if unsafe is not None:
        tense = "passed" if unsafe <= now else "will pass"
        out.append(
            f"IDs {tense} 2^53 on {_day(unsafe)}: JavaScript numbers cannot hold them "
            "exactly, so send IDs to browsers as strings"
        )
    return out


def strategy_warnings(layout: Layout, strategy: ShardStrategy) -> list[str]:
    """What ``strategy`` does badly on IDs of ``layout``."""
    n = strategy.count
    need = max(n - 1, 1).bit_length()
    out: list[str] = []
    if isinstance(strategy, Gene) and n > 1 << layout.gene_bits:
        out.append(
            f"Gene({n}) needs gene_bits >= {need} but the layout has gene_bits="
            f"{layout.gene_bits}: a child's ID does not land on its parent's shard, and IDs "
            "are routed by their sequence bits, which pile into a few shards like Mod does; "
            f"give the layout gene_bits >= {need}"
        )
    if isinstance(strategy, Mod) and n % 2 == 0 and not colocates_genes(strategy, layout):
        out.append(
            f"Mod({n}) reads the low bits of IDs: with the sequence reset each tick and at "
            "most one ID per tick per worker, rows pile into a few shards; keep "
            "sequence_start='continue' or route with shift or hash (check: snowshard skew "
            "--sequence-start reset)"
        )
    if isinstance(strategy, Mix):
        if layout.gene_bits:
            out.append(f"Mix({n}) does not keep a child's ID on its parent's shard")
        out.append(
            f"Mix({n}) folds bits 16 and up into the low bits: with the sequence reset each "
            "tick at low rates it spreads over only as many shards as those bits take values "
            "(few workers: few shards); check with snowshard skew --sequence-start reset"
        )
    if isinstance(strategy, Hash) and layout.gene_bits:
        out.append(f"Hash({n}) does not keep a child's ID on its parent's shard")
    if isinstance(strategy, Shift):
        out.extend(_shift_warnings(layout, strategy))
    return out


def _shift_warnings(layout: Layout, strategy: Shift) -> list[str]:
    n, bits = strategy.count, strategy.bits
    if bits >= layout.total_bits:
        return [f"Shift({n}, bits={bits}) drops every bit of the ID: all rows go to shard 0"]
    if bits >= layout.timestamp_shift:
        return [
            f"Shift({n}, bits={bits}) routes by time: all IDs of one "
            f"{layout.tick_ms * (1 << (bits - layout.timestamp_shift))} ms span go to one "
            "shard, so writes hit one table at a time"
        ]
    out: list[str] = []
    if bits >= layout.worker_shift:
        nodes = 1 << (layout.timestamp_shift - bits)
        out.append(
            f"Shift({n}, bits={bits}) routes by worker: a busy worker makes a hot shard"
            + (f", and at most {nodes} of {n} shards are used" if nodes < n else "")
        )
    if layout.gene_bits and bits > 0:
        out.append(f"Shift({n}, bits={bits}) does not keep a child's ID on its parent's shard")
    return out
