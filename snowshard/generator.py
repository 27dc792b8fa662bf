"""The ID generator: :class:`Snowflake`.

One generator per process and worker ID issues strictly increasing IDs. Its time comes from
the wall clock read once at construction and advanced by the monotonic clock, so changing
the system clock while it runs cannot repeat an ID. A ``clock`` callable (Unix ms) replaces
that for tests and simulations; then :attr:`on_backwards` decides what a step back does.

Clock policy: with the default clock, jumps of the wall clock, forward or back, never change
issuing (it follows the monotonic clock). With an injected ``clock``, a step back of up to
``max_backwards_ms`` is waited out when ``on_backwards="wait"``; a larger one (say, a far jump
forward and then back) raises :class:`~snowshard.ClockMovedBackwards` at once, without
sleeping for the size of the jump, and issuing resumes as soon as the clock passes the last
issued tick. A layout whose epoch lies after the clock is refused when the generator is
built (:class:`~snowshard.LayoutError`), not at the first ID.

Sequence policy (``sequence_start``) — where a new tick's sequence begins:

``"continue"`` (default)
    one past the previous ID's sequence, counted modulo half the range (a
    never-resetting sequence). At low rates the sequence counts 0, 1, 2, ... across ticks,
    so the low ``sequence_bits - 1`` bits of IDs are evenly spread and ``id % 2**k`` routing
    does not pile rows into shard 0 (which a sequence reset every tick does). Starting in
    the lower half leaves at least half of every tick's sequence for bursts, so the generator does not stall when the
    count passes the top (measured: a full-range wrap cost 20% of peak throughput). Within a
    tick the sequence never wraps, so IDs only grow.
``"reset"``
    0, as Twitter's original does. At one ID per tick every sequence is 0.
``"random"``
    a random point in the lower half of the range.
"""

from __future__ import annotations

import os
import random
import threading
import time
import weakref
from collections.abc import Callable
from typing import Literal, Union

from snowshard.clock import wall_anchored_ns
from snowshard.errors import (
    ClockMovedBackwards,
    ClockStalled,
    ConfigurationError,
    FieldOutOfRange,
    IdTypeError,
    LayoutError,
    WorkerIdError,
)
from snowshard.genes import key_to_int
from snowshard.layout import Layout, TimeLike, check_layout
from snowshard.workers.base import WorkerClaim, WorkerLease
from snowshard.workers.host import HostWorker

__all__ = ["Snowflake", "WorkerClaim", "WorkerLease", "WorkerSource"]

_NEVER = 1 << 62
_monotonic_ns = time.monotonic_ns


WorkerSource = Union[int, Callable[[], int], WorkerLease]
"""A worker (or datacenter) ID: a fixed ``int``, a provider callable, or a lease."""

OnBackwards = Literal["wait", "raise"]
OnOverflow = Literal["wait", "borrow"]
SequenceStart = Literal["continue", "reset", "random"]

_live: weakref.WeakSet[Snowflake] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for generator in list(_live):
        generator._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Snowflake:
    """Issues unique, time-ordered IDs of a :class:`Layout`.

    :param layout: the bit layout (default: 41-bit ms since 2020-01-01, 10-bit worker,
        12-bit sequence).
    :param worker: an ``int``, a callable returning one, or a :class:`WorkerLease`, which
        the generator attaches itself to (a lease serves one generator). Default:
        :class:`~snowshard.workers.host.HostWorker` (low bits of the IPv4 address and pid).
    :param datacenter: an ``int`` or callable, default 0.
    :param clock: a callable returning Unix ms, replacing the drift-proof default clock.
    :param sleep: how to wait (default :func:`time.sleep`); pass ``ManualClock.sleep`` in
        simulations.
    :param on_backwards: with an injected clock that goes back: ``"wait"`` until it
        catches up, for at most ``max_backwards_ms``, then raise; ``"raise"`` at once.
    :param on_overflow: when a tick's sequence runs out: ``"wait"`` for the next tick, or
        ``"borrow"`` it at once, running at most ``max_borrow_ms`` ahead of the clock.
    :param sequence_start: see the module docstring.
    """

    def __init__(
        self,
        layout: Layout | None = None,
        *,
        worker: WorkerSource | None = None,
        datacenter: int | Callable[[], int] = 0,
        clock: Callable[[], int] | None = None,
        sleep: Callable[[float], None] | None = None,
        on_backwards: OnBackwards = "wait",
        on_overflow: OnOverflow = "wait",
        sequence_start: SequenceStart = "continue",
        max_backwards_ms: int = 1000,
        max_borrow_ms: int = 100,
    ) -> None:
        self.layout = layout = check_layout(layout) if layout is not None else Layout()
        for name, given in (("clock", clock), ("sleep", sleep)):
            if given is not None and not callable(given):
                raise ConfigurationError(
                    f"{name} must be a callable or None, got {type(given).__name__} {given!r}"
                )
        layout.check_started(
            clock() if clock is not None else time.time_ns() // 1_000_000,
            clock="the clock" if clock is None else "the injected clock",
        )
        for name, value, allowed in (
            ("on_backwards", on_backwards, ("wait", "raise")),
            ("on_overflow", on_overflow, ("wait", "borrow")),
            ("sequence_start", sequence_start, ("continue", "reset", "random")),
        ):
            if value not in allowed:
                raise LayoutError(f"{name} must be one of {allowed}, got {value!r}")
        for name, bound in (("max_backwards_ms", max_backwards_ms), ("max_borrow_ms", max_borrow_ms)):
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
                raise LayoutError(f"{name} must be an int >= 0, got {bound!r}")
        self.on_backwards = on_backwards
        self.on_overflow = on_overflow
        self.sequence_start = sequence_start
        self._max_back_ticks = max_backwards_ms // layout.tick_ms
        self._max_borrow_ticks = max_borrow_ms // layout.tick_ms
        self._sleep = sleep if sleep is not None else time.sleep
        self._worker_source: WorkerSource = worker if worker is not None else HostWorker(layout)
        self._datacenter_source = datacenter

        self._ts_shift = layout.timestamp_shift
        self._seq_shift = layout.sequence_shift
        self._max_seq = layout.max_sequence
        self._half_mask = layout.max_sequence >> 1  # "continue" cycles through the lower half
        self._max_ticks = layout.max_ticks
        self._gene_mask = layout.max_gene
        self._tick_ns = layout.tick_ms * 1_000_000

        self._clock = clock
        if clock is None:
            wall_ns, mono_ns = wall_anchored_ns()
            # tick = (monotonic_ns() - base_ns) // tick_ns
            self._base_ns = mono_ns - (wall_ns - layout.epoch_ms * 1_000_000)

        self._lock = threading.Lock()
        self._last_tick = -1  # tick of the last ID issued (may run ahead when borrowing)
        self._clock_high = -1  # highest tick the clock itself has shown
        self._seq = self._max_seq  # sequence of the last ID issued
        self._node = 0  # datacenter and worker bits, already shifted
        self._cursor = self._max_seq << self._seq_shift  # the last ID issued, gene bits 0
        self._tick_top = 0  # the highest ID (gene bits 0) of the last tick
        self._seq_step = 1 << self._seq_shift
        self._fast_until_ns = -1  # monotonic ns until which next_id may skip the slow path
        self._worker = 0
        self._datacenter = 0
        self._valid_until_ns = _NEVER
        self._forked = False
        lease = self._worker_source if isinstance(self._worker_source, WorkerLease) else None
        if lease is not None:
            lease.attach(self)  # refuses a lease another live generator issues IDs under
        try:
            self._bind_node(first=True)
            if self._clock is not None:
                # fail fast on a clock before the epoch or past the layout's end
                layout.ticks_of(self._clock())
        except BaseException:
            if lease is not None:
                lease.detach(self)  # a generator that failed to start holds no lease
            raise
        _live.add(self)

    # -- identity of this generator ---------------------------------------------------

    @property
    def worker(self) -> int:
        return self._worker

    @property
    def datacenter(self) -> int:
        return self._datacenter

    @property
    def last_unix_ms(self) -> int:
        """Unix ms of the tick of the last ID issued (the epoch if none yet)."""
        return self.layout.unix_ms_of_ticks(max(self._last_tick, 0))

    def _high_water_ms(self) -> int:
        """Unix ms a lease stores: the later of the last ID's tick and the clock now.

        A successor of this worker ID starts after it. The clock term covers IDs issued
        after the last renewal, before a crash. Lock-free: called from renewal threads.
        """
        return self.layout.unix_ms_of_ticks(max(self._last_tick, self._clock_tick(), 0))

    def _resolve(self, what: str, source: object) -> int:
        value = source() if callable(source) else source
        try:
            return self.layout.check_field(what, value)
        except (IdTypeError, FieldOutOfRange) as exc:
            raise WorkerIdError(str(exc)) from None

    def _bind_node(self, *, first: bool) -> None:
        """(Re)read worker and datacenter from their sources; caller holds the lock."""
        layout = self.layout
        source = self._worker_source
        floor_tick = -1
        if isinstance(source, WorkerLease):
            claim = source.claim(self._high_water_ms)
            worker = self._resolve("worker", claim.worker)
            self._valid_until_ns = claim.expires_ns if claim.expires_ns is not None else _NEVER
            if claim.floor_unix_ms >= layout.epoch_ms:
                floor_tick = (claim.floor_unix_ms - layout.epoch_ms) // layout.tick_ms
        else:
            worker = self._resolve("worker", source)
        datacenter = self._resolve("datacenter", self._datacenter_source)
        changed = (worker, datacenter) != (self._worker, self._datacenter)
        self._worker, self._datacenter = worker, datacenter
        self._node = (datacenter << layout.datacenter_shift) | (worker << layout.worker_shift)
        if floor_tick > self._clock_high:
            self._clock_high = floor_tick  # the clock must pass the previous holder's time
        if floor_tick > self._last_tick:
            self._last_tick = floor_tick
            self._seq = self._max_seq
        elif changed and not first:
            self._seq = self._max_seq  # start the new node on a fresh tick: IDs keep growing

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._forked = True
        self._valid_until_ns = -1  # route the next call through _refresh
        self._fast_until_ns = -1

    def _refresh(self) -> None:
        """Slow path: after fork() or when a lease's deadline passed; caller holds the lock."""
        if self._forked:
            if isinstance(self._worker_source, int):
                raise WorkerIdError(
                    f"this process (pid {os.getpid()}) was forked from one that owns fixed "
                    f"worker ID {self._worker}; two processes must not share it. Give the "
                    "child its own Snowflake, or pass worker= a provider or lease"
                )
            self._forked = False
            self._valid_until_ns = _NEVER
        self._bind_node(first=False)

    # -- time --------------------------------------------------------------------------

    def _clock_tick(self) -> int:
        if self._clock is None:
            return (time.monotonic_ns() - self._base_ns) // self._tick_ns
        ms = self._clock()
        return (ms - self.layout.epoch_ms) // self.layout.tick_ms

    def _current_tick(self) -> int:
        """The clock's tick, with rollback handled per ``on_backwards``; lock held."""
        tick = self._clock_tick()
        if tick >= self._clock_high:
            self._clock_high = tick
            return tick
        behind = self._clock_high - tick
        ms = behind * self.layout.tick_ms
        if self.on_backwards == "raise" or behind > self._max_back_ticks:
            raise ClockMovedBackwards(
                f"the clock moved back {ms} ms (to tick {tick}, after {self._clock_high}); "
                f"on_backwards={self.on_backwards!r} waits at most "
                f"{self._max_back_ticks * self.layout.tick_ms} ms. Fix the clock or raise "
                "max_backwards_ms; no ID was issued"
            )
        target = self._clock_high
        slept = 0
        while tick < target:
            if slept > behind + self._max_back_ticks:
                raise ClockMovedBackwards(
                    f"the clock stayed behind tick {target} for over "
                    f"{self._max_back_ticks * self.layout.tick_ms} ms; no ID was issued"
                )
            self._sleep(self.layout.tick_ms / 1000)
            slept += 1
            tick = self._clock_tick()
        self._clock_high = tick
        return tick

    def _advance(self) -> int:
        """Move to the tick of the next ID and return it; lock held, ``self._seq`` updated."""
        self._seq = (self._cursor >> self._seq_shift) & self._max_seq
        while True:
            if self._valid_until_ns <= time.monotonic_ns():
                self._refresh()
            tick = self._step()
            # The deadline is checked after the clock was read: a pause between the two
            # (SIGSTOP, a VM freeze) must not give a lapsed claim a time from after it.
            if time.monotonic_ns() < self._valid_until_ns:
                break
        prefix = (tick << self._ts_shift) | self._node
        self._cursor = prefix | (self._seq << self._seq_shift)
        self._tick_top = prefix | (self._max_seq << self._seq_shift)
        if self._clock is None:
            tick_end = self._base_ns + (tick + 1) * self._tick_ns
            self._fast_until_ns = min(tick_end, self._valid_until_ns)
        return tick

    def _step(self) -> int:
        tick = self._current_tick()
        last = self._last_tick
        if tick > last:
            if tick > self._max_ticks:
                self._expired(tick)
            self._last_tick = tick
            if self.sequence_start == "continue":
                self._seq = (self._seq + 1) & self._half_mask
            elif self.sequence_start == "reset":
                self._seq = 0
            else:
                self._seq = random.randrange((self._max_seq + 2) // 2)
            return tick
        # the same tick as the last ID, or the clock trails a borrowed tick
        if self._seq < self._max_seq:
            self._seq += 1
            return last
        return self._overflow(tick)

    def _overflow(self, tick: int) -> int:
        nxt = self._last_tick + 1
        if nxt > self._max_ticks:
            self._expired(nxt)
        if self.on_overflow == "borrow" and nxt - tick <= self._max_borrow_ticks:
            pass
        else:
            # wait until the clock reaches the tick (borrow: until it is within the bound)
            target = nxt if self.on_overflow == "wait" else nxt - self._max_borrow_ticks
            started = time.monotonic()
            waited_ticks = 0
            while tick < target:
                self._pause_until(target, tick)
                waited_ticks += 1
                tick = self._current_tick()
                if tick < target and self._clock is not None and waited_ticks > 1000:
                    if self._sleep is not time.sleep or time.monotonic() - started > 1.0:
                        raise ClockStalled(
                            f"the injected clock stayed at tick {tick} while waiting for tick "
                            f"{target} (sequence exhausted); make the clock advance, or pass "
                            "sleep= a function that advances it (e.g. ManualClock.sleep)"
                        )
            if tick > nxt:
                nxt = tick
        self._last_tick = nxt
        self._seq = 0
        return nxt

    def _pause_until(self, target: int, tick: int) -> None:
        """Wait for the clock to reach tick ``target``; sleep most of it, spin the end."""
        if self._clock is not None or self._sleep is not time.sleep:
            self._sleep(min(target - tick, 5) * self.layout.tick_ms / 1000)
            return
        boundary = self._base_ns + target * self._tick_ns
        remaining = boundary - _monotonic_ns()
        # sleep() overshoots by 0.1-0.5 ms on VMs, a big share of a 1 ms tick: sleep only
        # long waits (coarse ticks), and spin through the last millisecond
        if remaining > 2_000_000:
            time.sleep((remaining - 1_000_000) / 1e9)
        while _monotonic_ns() < boundary:
            pass

    def _expired(self, tick: int) -> None:
        raise self.layout.expired(tick)

    # -- issuing -----------------------------------------------------------------------

    def _gene(self, gene: object) -> int:
        return 0 if gene is None else self.layout.gene_for(gene)

    def next_id(self, gene: object = None) -> int:
        """The next ID; with ``gene``, its low bits equal ``gene_of(gene, gene_bits)``."""
        g = self._gene(gene) if gene is not None else 0
        # Fast path: the clock is read before taking the lock, and the locked block makes no
        # call, so a thread never holds the lock while it waits for the GIL (no convoys).
        now = _monotonic_ns()
        with self._lock:
            if now < self._fast_until_ns:
                value = self._cursor + self._seq_step
                if value <= self._tick_top:
                    self._cursor = value
                    return value | g
            self._advance()
            return self._cursor | g

    def next_ids(self, count: int, gene: object = None) -> list[int]:
        """``count`` IDs, strictly increasing, issued as whole runs of sequence numbers."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise FieldOutOfRange(f"count must be an int >= 0, got {count!r}")
        g = self._gene(gene) if gene is not None else 0
        out: list[int] = []
        step = 1 << self._seq_shift
        with self._lock:
            while len(out) < count:
                self._advance()
                first = self._seq
                take = min(count - len(out), self._max_seq - first + 1)
                start = self._cursor
                self._cursor = start + (take - 1) * step
                out.extend(range(start | g, (self._cursor | g) + 1, step))
        return out

    def id_at(self, time: TimeLike, key: object) -> int:
        """A deterministic ID for ``(time, key)``, the same ID for the same pair every time.

        The tick of ``time`` fills the timestamp field; the low ``timestamp_shift`` bits (all
        of datacenter, worker, sequence and gene) are the low bits of the key
        (:func:`~snowshard.genes.key_to_int` for str/bytes/UUID keys). Writing the same
        reading twice gives the same ID, so it can be upserted. Two keys collide at the same
        tick exactly when their low ``timestamp_shift`` bits are equal (int keys congruent
        modulo ``2**timestamp_shift``: 4,194,304 in the default layout). These IDs do not
        involve the worker, so keep them apart from :meth:`next_id`'s (another table).
        """
        ticks = self.layout.ticks_of(time)
        low = key_to_int(key) & ((1 << self._ts_shift) - 1)
        return (ticks << self._ts_shift) | low

    def __repr__(self) -> str:
        return (
            f"Snowflake({self.layout.describe()}, datacenter={self._datacenter}, "
            f"worker={self._worker})"
        )

