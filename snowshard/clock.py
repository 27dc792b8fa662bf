"""Clocks: the drift-proof default and a manual clock for tests and simulations."""

from __future__ import annotations

import threading
import time

from snowshard.errors import FieldOutOfRange

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
        self._ms = _unix_ms(start_ms, "start_ms")
        self._lock = threading.Lock()
        self.slept_ms = 0
        """Total milliseconds :meth:`sleep` advanced the clock by."""

    def __call__(self) -> int:
        return self._ms

    def set(self, ms: int) -> None:
        """Jump to ``ms`` (backwards too: that is what rollback tests need)."""
        ms = _unix_ms(ms, "ms")
        with self._lock:
            self._ms = ms

    def advance(self, ms: int) -> None:
        """Move forward by ``ms`` (an int >= 0); use :meth:`set` to go back."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise FieldOutOfRange(
                f"advance() takes an int of milliseconds >= 0, got {ms!r}; use set() to go back"
            )
        with self._lock:
            self._ms += ms

    def sleep(self, seconds: float) -> None:
        """Advance by ``seconds`` (at least 1 ms) instead of blocking."""
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not 0 <= seconds < float("inf")
        ):
            raise FieldOutOfRange(f"sleep() takes a finite number of seconds >= 0, got {seconds!r}")
        step = max(1, round(seconds * 1000))
        with self._lock:
            self._ms += step
            self.slept_ms += step


def _unix_ms(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FieldOutOfRange(
            f"ManualClock {what} must be Unix milliseconds (an int >= 0), got "
            f"{type(value).__name__} {value!r}; e.g. Layout().epoch_ms or 1_700_000_000_000"
        )
    return value
