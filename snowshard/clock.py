"""Clocks: the drift-proof default and a manual clock for tests and simulations."""

from __future__ import annotations

import threading
import time

__all__ = ["ManualClock", "wall_anchored_ns"]


def wall_anchored_ns() -> tuple[int, int]:
    """Read the wall clock once and pair it with the monotonic clock: ``(wall_ns, mono_ns)``.

    The generator then derives "now" as ``wall_ns + (monotonic_ns() - mono_ns)``, so a later
    change of the wall clock (NTP step, an operator) cannot move its time backwards.
    """
    mono_before = time.monotonic_ns()
    wall = time.time_ns()
    mono_after = time.monotonic_ns()
    return wall, (mono_before + mono_after) // 2


class ManualClock:
    """A clock that moves only when told: ``clock()`` returns Unix ms.

    ``sleep(seconds)`` advances it instead of blocking, so a generator built with
    ``Snowflake(clock=c, sleep=c.sleep)`` waits out overflow and rollback instantly.
    Thread-safe.
    """

    def __init__(self, start_ms: int) -> None:
        self._ms = start_ms
        self._lock = threading.Lock()
        self.slept_ms = 0
        """Total milliseconds :meth:`sleep` advanced the clock by."""

    def __call__(self) -> int:
        return self._ms

    def set(self, ms: int) -> None:
        """Jump to ``ms`` (backwards too: that is what rollback tests need)."""
        with self._lock:
            self._ms = ms

    def advance(self, ms: int) -> None:
        with self._lock:
            self._ms += ms

    def sleep(self, seconds: float) -> None:
        step = max(1, round(seconds * 1000))
        with self._lock:
            self._ms += step
            self.slept_ms += step
