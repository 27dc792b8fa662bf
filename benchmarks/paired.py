"""Timing benchmark variants against a baseline measured alongside them (paired ratios).

:func:`measure` runs every variant in rounds, each round starting with the next variant,
and reports, per variant, the median µs per call and the median over rounds of its time
divided by the first variant's *in the same round*. A slow stretch of a shared machine
slows every variant of its round alike and cancels out of that ratio; a ratio of medians
taken over different rounds keeps it (on a noisy 2-core VM the same code moved between
1.13x and 1.26x that way). Standard library only.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

__all__ = ["Action", "measure"]

Action = Callable[[], None]


def measure(
    actions: dict[str, Action],
    rounds: int,
    calls: int,
    warm_up: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, tuple[float, float]]:
    """Variant name -> (median µs per call, median ratio to the first variant).

    Each variant first runs ``warm_up`` calls (statement caches, prepared statements,
    connections); then each of ``rounds`` rounds times ``calls`` calls of every variant.
    ``clock`` is wall time by default; ``time.process_time`` counts this process's CPU
    only (what the client spends, not what it waits for).
    """
    for action in actions.values():
        for _ in range(warm_up):
            action()
    names = list(actions)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for number in range(rounds):
        first = number % len(names)
        for name in names[first:] + names[:first]:
            action = actions[name]
            started = clock()
            for _ in range(calls):
                action()
            samples[name].append((clock() - started) / calls * 1e6)
    base = samples[names[0]]
    return {
        name: (
            statistics.median(values),
            statistics.median(v / b for v, b in zip(values, base)),
        )
        for name, values in samples.items()
    }
