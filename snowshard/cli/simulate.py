"""How do strategies spread the IDs of W busy workers? A simulation.

Each of ``workers`` generators is the real :class:`~snowshard.Snowflake` on its own
:class:`~snowshard.ManualClock`. Worker ``i`` issues its ``j``-th ID at
``(j + phase_i) / rate`` seconds (phases drawn from ``seed``), for ``duration`` seconds from
``start_ms``. The clock is set once per tick and the tick's IDs are taken with one
``next_ids`` call, so 100 workers x 1000 IDs/s x 1 s takes well under a second. When the
layout has gene bits, every ID carries the gene of a parent key drawn from ``1..users``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from snowshard.clock import ManualClock
from snowshard.errors import LayoutError
from snowshard.generator import SequenceStart, Snowflake
from snowshard.layout import Layout
from snowshard.skew import Skew
from snowshard.strategies import ShardStrategy

__all__ = ["DEFAULT_START_MS", "Scenario", "simulate", "stream", "summarise"]

DEFAULT_START_MS = 1_704_067_200_000
"""2024-01-01T00:00:00Z: a fixed start, so results repeat (the epoch, if that is later)."""


@dataclass(frozen=True)
class Scenario:
    """Who issues IDs, how fast and for how long (default: 100 workers at 1 ID/ms each)."""

    workers: int = 100
    rate: float = 1000.0
    """IDs per second per worker."""
    duration: float = 2.048
    """Seconds."""
    sequence_start: SequenceStart = "continue"
    start_ms: int | None = None
    users: int = 1_000_000
    """Parent keys 1..users whose genes the IDs carry (layouts with gene bits only)."""
    seed: int = 0

    @property
    def expected_ids(self) -> int:
        return round(self.workers * self.rate * self.duration)

    def start_for(self, layout: Layout) -> int:
        return (
            self.start_ms if self.start_ms is not None else max(DEFAULT_START_MS, layout.epoch_ms)
        )


def check(layout: Layout, scenario: Scenario) -> list[str]:
    """Raise if the layout cannot run ``scenario``; return warnings about it."""
    nodes = (layout.max_datacenter + 1) * (layout.max_worker + 1)
    if not 1 <= scenario.workers <= nodes:
        raise LayoutError(
            f"workers must be in 1..{nodes} for this layout (its worker and datacenter "
            f"bits), got {scenario.workers}"
        )
    if scenario.rate <= 0 or scenario.duration <= 0 or scenario.users < 1:
        raise LayoutError("rate, duration and users must be positive")
    limit = layout.ids_per_tick * 1000 / layout.tick_ms
    if scenario.rate > limit:
        return [
            f"{scenario.rate:,.0f} IDs/s per worker exceeds the layout's {limit:,.0f}: "
            "workers wait for later ticks, as the real generator does"
        ]
    return []


def stream(layout: Layout, scenario: Scenario, *, chunk: int = 65_536) -> Iterator[list[int]]:
    """The scenario's IDs, about ``chunk`` at a time (all workers, a window of ticks)."""
    check(layout, scenario)
    rng = random.Random(scenario.seed)
    count = scenario.workers
    phases = [rng.random() for _ in range(count)]
    per_ms = scenario.rate / 1000
    tick_ms = layout.tick_ms
    end_ms = scenario.duration * 1000
    totals = [max(0, math.ceil(per_ms * end_ms - phase)) for phase in phases]
    ticks = max(1, math.ceil(end_ms / tick_ms))
    per_tick = per_ms * tick_ms
    span = max(1, min(ticks, int(chunk / (per_tick * count))))
    start = scenario.start_for(layout)
    clocks = [ManualClock(start) for _ in range(count)]
    workers = [
        Snowflake(
            layout,
            datacenter=i // (layout.max_worker + 1),
            worker=i % (layout.max_worker + 1),
            clock=clocks[i],
            sleep=clocks[i].sleep,
            sequence_start=scenario.sequence_start,
        )
        for i in range(count)
    ]
    genes = layout.gene_bits > 0
    users = scenario.users

    def before(i: int, ms: float) -> int:
        """How many IDs worker ``i`` issued before ``ms`` ms into the run."""
        return min(max(0, math.ceil(per_ms * ms - phases[i])), totals[i])

    def issue(out: list[int], i: int, tick: int, n: int) -> None:
        clock, generator = clocks[i], workers[i]
        target = start + tick * tick_ms
        if clock() < target:
            clock.set(target)
        if genes:
            out.extend(generator.next_id(gene=rng.randint(1, users)) for _ in range(n))
        else:
            out.extend(generator.next_ids(n))

    for first in range(0, ticks, span):
        last = min(first + span, ticks)
        out: list[int] = []
        for i in range(count):
            if per_tick >= 1:  # dense: every tick has IDs, issue them per tick
                done = before(i, first * tick_ms)
                for tick in range(first, last):
                    upto = before(i, (tick + 1) * tick_ms)
                    if upto > done:
                        issue(out, i, tick, upto - done)
                    done = upto
            else:  # sparse: visit each ID's tick only
                for j in range(before(i, first * tick_ms), before(i, last * tick_ms)):
                    issue(out, i, int((j + phases[i]) / per_ms // tick_ms), 1)
        yield out


def summarise(counts: Sequence[int]) -> Skew:
    """The :class:`~snowshard.Skew` of per-shard counts (as :func:`snowshard.skew` computes)."""
    return Skew.from_counts(counts)


def simulate(
    layout: Layout,
    scenario: Scenario,
    strategies: Mapping[str, ShardStrategy],
    progress: Callable[[int], None] | None = None,
) -> dict[str, Skew]:
    """Run ``scenario`` once and measure every strategy on the same IDs."""
    counts = {name: [0] * strategy.count for name, strategy in strategies.items()}
    saved = random.getstate()
    if scenario.sequence_start == "random":  # the generator draws from the global random
        random.seed(scenario.seed)
    try:
        for ids in stream(layout, scenario):
            for name, strategy in strategies.items():
                tally = counts[name]
                for shard in map(strategy.shard_of, ids):
                    tally[shard] += 1
            if progress is not None:
                progress(len(ids))
    finally:
        if scenario.sequence_start == "random":
            random.setstate(saved)
    return {name: summarise(tally) for name, tally in counts.items()}
