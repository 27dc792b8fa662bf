"""Leased worker IDs: the part every lease store shares (timing, fencing, renewal, fork).

A :class:`Lease` holds one worker ID in a store (Redis: :class:`~snowshard.workers.RedisLease`,
a SQL table: :class:`~snowshard.workers.DatabaseLease`) for ``ttl`` seconds at a time and
renews it from a background thread every ``renew_every`` seconds. It implements the
generator's :class:`~snowshard.workers.base.WorkerLease` protocol::

    lease = RedisLease("redis://cache:6379/0", layout=layout, ttl=10)
    ids = Snowflake(layout, worker=lease)      # claims a free worker ID now
    ...
    lease.close()                              # or `with lease:`; also done at exit

**The guarantee.** Whatever the store loses (a restart from an older snapshot, a flush, a
failover to a replica missing the latest writes, a table restored from an older copy, rows
deleted), however long it is unreachable, and however long a holder is paused, no two live
generators issue the same ID. Assumptions:

* **A.** monotonic clocks (of every holder, and the store's clock while it runs) advance at
  rates within ``margin / (2 * ttl)`` of each other (5 % by default; real clocks: ppm); the
  store's clock is not stepped while leases run (its lease expiry depends on it anyway);
* **B.** the wall clocks of the generators' hosts differ by at most ``clock_skew`` seconds
  minus the generator's ``max_borrow_ms`` (100 ms by default);
* **C.** every lease of one namespace has the same ``ttl`` and ``clock_skew``; only this code
  writes the store's keys or rows (a loss may wipe or roll them back: that is the point);
* **D.** the store never evicts lease keys on its own (Redis: ``maxmemory-policy
  noeviction``).

The rules:

1. **Deadline.** A claim is confirmed by a request sent at ``t0`` (this process's monotonic
   clock, read before sending) that took the lease or renewed it by compare-and-set (it
   fails, and never re-creates the lease, when the key or row is missing or names another
   holder). The claim is valid until ``t0 + ttl - margin``; the store keeps the lease until
   ``ttl`` after it saw the request, which is later. The generator reads the clock for an
   ID's time and *then* checks the deadline, so every ID's time was read before the
   deadline, even when the process was paused in between (``SIGSTOP``, a VM freeze). When
   renewals fail, ``next_id`` raises :class:`~snowshard.WorkerIdError` from the deadline
   on, until a lease is usable again.
2. **Fence.** A claim the store cannot prove exclusive becomes *usable* only ``ttl +
   clock_skew`` after it was confirmed (the *fence*). Until then the holder keeps it,
   renews it, and issues nothing under it. A holder that believed it held the same worker ID
   before the loss was confirmed before the loss, so by A it stopped at most ``ttl -
   margin`` after it, before the fence ends; by B its IDs' times are below every time the
   new holder reads after the fence. What is provable depends on the store:

   * *Redis* keeps a continuity marker, ``<prefix>:era`` = the server's ``run_id`` and the
     time (Redis clock) from which the era it opened is settled. Every script reads the
     current ``run_id`` (``INFO``) first: a marker that is missing (a flush, a failover to an
     empty replica, a restart without persistence) or names another ``run_id`` (a restart,
     from any snapshot, or a failover: every server process has its own) means the data may
     be older than what holders were told. The script then writes a new marker settled
     ``ttl + clock_skew`` from now, and every claim confirmed before that, taken or renewed,
     is fenced until then. After it, a key's presence is the truth again: a holder confirmed
     before the loss has stopped, and within one era ``SET NX`` and compare-and-set renewal
     keep holders apart. So in the common case (no loss in the last ``ttl + clock_skew``)
     a claim is usable at once. A restored "released" record proves nothing, and is not
     used as proof: only the marker is.
   * *A SQL table* has no such marker: a table restored from an older copy is
     indistinguishable from the current one. So every new claim of a :class:`DatabaseLease`
     is fenced, and so is a renewal sent after the claim's deadline passed (the row may
     have been taken, and then restored to this holder's old row, meanwhile). A renewal sent
     before the deadline continues a claim that the row has carried since it was confirmed:
     anyone else taking the row would have had to find it free while it was held.
     Assumption for this store: losses of the table are single events (one delete, or one
     restore), at most one per ``ttl + clock_skew``.

3. **High-water mark.** Each renewal stores the generator's last issued time (Unix ms), and
   a release stores its final value. The next holder of that worker ID issues only after it
   (the claim's ``floor_unix_ms``), so a process restarted on a host whose wall clock was
   set back cannot reissue IDs its predecessor already issued. When the previous holder did
   not release the lease (it crashed, hung or lost its store), it may have issued IDs until
   its deadline: the floor is then the later of its high water + its TTL and its lease's
   expiry (store clock). Together with the generator's own last time, a holder never issues
   a time at or below the highest one it can know of.
4. **Fork.** A child process forked from a holder drops the parent's lease without releasing
   it and takes its own (a new worker ID) at its next ID.
5. **One generator per lease.** A generator attaches itself to its lease when it is built
   (:meth:`Lease.attach`); a second generator built on the same lease while the first lives
   gets :class:`~snowshard.WorkerIdError`: two generators on one worker ID duplicate IDs.

**Time to first ID.** ``Snowflake(worker=lease)`` returns once a claim is usable: at once
on Redis whose era is settled; after ``ttl + clock_skew`` on Redis within that long of a
loss (or a namespace's first use), and always with :class:`DatabaseLease`. After a fault,
``next_id`` raises :class:`~snowshard.workers.LeaseLost` until the new claim's fence ends:
at most ``ttl + clock_skew`` after the store answers again.
"""

from __future__ import annotations

import atexit
import os
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from snowshard.errors import WorkerIdError
from snowshard.layout import Layout
from snowshard.redaction import redact_url, scrub
from snowshard.workers.base import WorkerClaim
from snowshard.workers.errors import LeaseBackendError, LeaseLost, WorkerConfigError

__all__ = ["Grant", "Lease", "new_holder_token"]

_live: weakref.WeakSet[Lease] = weakref.WeakSet()
_L = TypeVar("_L", bound="Lease")


def new_holder_token() -> str:
    """A string naming this process uniquely: ``host:pid:random``."""
    host = socket.gethostname()[:180] or "?"
    return f"{host}:{os.getpid()}:{secrets.token_hex(4)}"


class Grant(NamedTuple):
    """What a store answers to a successful acquisition."""

    worker: int
    floor_unix_ms: int
    """The holder may issue IDs only after this time (the previous holder's high water)."""
    sent_ns: int
    """:func:`time.monotonic_ns` just before the request that took the lease was sent: the
    store's expiry is at least ``ttl`` after it."""
    wait_ms: int = 0
    """The fence: ms after the answer before the claim may be used (0: at once)."""


class Lease:
    """A worker ID held in a store under a time-limited, renewed lease (abstract base).

    Subclasses implement :meth:`_acquire`, :meth:`_renew` and :meth:`_release` against their
    store; this class decides when to call them and what the generator may do meanwhile.

    :param layout: the generator's layout; worker IDs 0..``layout.max_worker`` are leased.
    :param ttl: seconds a lease lasts without renewal (store-side expiry).
    :param renew_every: seconds between renewals (default ``ttl / 3``, at most ``ttl / 2``).
    :param margin: seconds the local deadline keeps before the store's expiry
        (default ``ttl / 10``), covering clock-rate differences.
    :param clock_skew: seconds by which the wall clocks of the hosts sharing the store may
        differ, plus the generator's ``max_borrow_ms`` (default 1 s). A claim the store
        cannot prove exclusive is used only ``ttl + clock_skew`` after it was confirmed
        (see the module docstring).
    """

    #: whether the store's answers say when a claim may be used (else new claims are fenced)
    _proves_continuity = False

    #: passwords of the store's URL, scrubbed from driver messages (set by subclasses)
    _secrets: frozenset[str] = frozenset()

    def __init__(
        self,
        layout: Layout | None = None,
        *,
        ttl: float = 10.0,
        renew_every: float | None = None,
        margin: float | None = None,
        clock_skew: float = 1.0,
    ) -> None:
        self.layout = layout if layout is not None else Layout()
        for name, value in (
            ("ttl", ttl),
            ("renew_every", renew_every),
            ("margin", margin),
            ("clock_skew", clock_skew),
        ):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise WorkerConfigError(f"{name} must be a number of seconds, got {value!r}")
        if not 0.05 <= ttl <= 86_400:
            raise WorkerConfigError(
                f"ttl must be in 0.05..86400 seconds, got {ttl}; 5-30 s suits most services"
            )
        renew = ttl / 3 if renew_every is None else renew_every
        if not 0 < renew <= ttl / 2:
            raise WorkerConfigError(
                f"renew_every must be in (0, ttl/2] = (0, {ttl / 2:g}] seconds, got {renew}; "
                "a lease renewed less often than that lapses on one slow renewal"
            )
        guard = ttl / 10 if margin is None else margin
        if not 0 <= guard < ttl - renew:
            raise WorkerConfigError(
                f"margin must be in [0, ttl - renew_every) = [0, {ttl - renew:g}) seconds, "
                f"got {guard}"
            )
        if not 0 <= clock_skew <= 3600:
            raise WorkerConfigError(
                f"clock_skew must be in 0..3600 seconds, got {clock_skew}; it bounds how far "
                "the wall clocks of the hosts sharing the store disagree (NTP: well under 1 s)"
            )
        self.ttl = float(ttl)
        self.clock_skew = float(clock_skew)
        self._fence_ms = round((ttl + clock_skew) * 1000)
        self.renew_every = float(renew)
        self.margin = float(guard)
        self._ttl_ms = max(1, round(ttl * 1000))
        self._valid_ns = round((ttl - guard) * 1e9)
        self._retry_s = min(self.renew_every, 1.0)
        self._count = self.layout.max_worker + 1
        self._lock = threading.Lock()  # guards the state below; never held during I/O
        self._io = threading.Lock()  # serializes calls to the store; taken before _lock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._token = new_holder_token()
        self._worker: int | None = None  # last worker granted (maybe lapsed)
        self._deadline_ns = 0  # monotonic; the claim is valid before it
        self._usable_ns = 0  # monotonic; and from it (the fence; 0: no fence)
        self._floor_ms = 0
        self._high_water: Callable[[], int] | None = None
        self._generator: weakref.ref[object] | None = None  # the attached generator
        self._failure: WorkerIdError | None = None
        self._failed_at_ns = 0
        self._served = False  # a claim was handed out (later ones do not wait out fences)
        self._closed = False

    # -- what a store implements ---------------------------------------------------------

    def _acquire(self, prefer: int | None, high_water_ms: int) -> Grant:
        """Take a free worker ID (``prefer`` first), with its fence; or WorkerIdsExhausted."""
        raise NotImplementedError

    def _renew(self, worker: int, high_water_ms: int) -> int | None:
        """Extend our lease on ``worker`` (compare-and-set) and store the high water.

        Returns the fence in ms (0: usable at once), or None if ``worker`` is not ours now
        (its key or row is missing or names another holder: then nothing is written).
        """
        raise NotImplementedError

    def _release(self, worker: int, high_water_ms: int) -> None:
        """Free ``worker`` if we still hold it, storing the final high water."""
        raise NotImplementedError

    def _reset_store_after_fork(self) -> None:
        """Drop connections inherited from the parent process (in the child)."""

    def _close_store(self) -> None:
        """Close connections this lease opened."""

    def _describe(self) -> str:
        """Where the leases live, for messages."""
        return type(self).__name__

    # -- public API ------------------------------------------------------------------------

    @property
    def holder(self) -> str:
        """This process's holder token (``host:pid:random``), as stored with the lease."""
        return self._token

    @property
    def worker(self) -> int | None:
        """The worker ID usable now, or None (never acquired, fenced, lapsed or closed)."""
        with self._lock:
            claim = self._valid_claim()
            return None if claim is None else claim.worker

    @property
    def closed(self) -> bool:
        return self._closed

    def attach(self, generator: object) -> None:
        """Bind the lease to ``generator``, the one that issues IDs under it.

        Called by :class:`~snowshard.Snowflake` when it is built with ``worker=lease``.
        Raises :class:`~snowshard.WorkerIdError` while another generator is attached and
        alive: two generators on one worker ID issue the same IDs.
        """
        if os.getpid() != self._pid:
            self._after_fork()
        with self._lock:
            current = self._generator() if self._generator is not None else None
            if current is not None and current is not generator:
                raise WorkerIdError(
                    f"this lease already serves {current!r}; two generators on one worker ID "
                    "issue the same IDs. Give each Snowflake its own lease"
                )
            try:
                self._generator = weakref.ref(generator)
            except TypeError:  # not weak-referenceable: cannot tell generators apart
                self._generator = None

    def detach(self, generator: object) -> None:
        """Unbind ``generator`` (one whose construction failed) so another may attach.

        Also drops its high-water callback. Does nothing if ``generator`` is not attached.
        """
        with self._lock:
            current = self._generator() if self._generator is not None else None
            if current is generator:
                self._generator = None
                self._high_water = None

    def claim(self, high_water: Callable[[], int]) -> WorkerClaim:
        """The current claim, acquiring or renewing first when none is valid.

        Called by :class:`~snowshard.Snowflake` at construction, whenever the deadline of
        the claim it holds passes, and after ``fork()``. Raises a
        :class:`~snowshard.WorkerIdError` when no lease can be held now. Until a lease has
        handed out a claim, a fenced claim is waited out here (at most ``ttl +
        clock_skew``: the time to first ID); later, a fenced claim raises
        :class:`~snowshard.workers.LeaseLost`, so ``next_id`` never blocks for long.
        """
        if os.getpid() != self._pid:
            self._after_fork()
        with self._lock:
            self._check_open()
            _live.add(self)  # from now on: reset after fork(), closed at exit
            self._high_water = high_water
            valid = self._valid_claim()
            if valid is not None:
                self._served = True
                return valid
            first = not self._served
            fenced = self._fenced_until()
        # Only the first claim (at the generator's construction) waits out a fence; later
        # ones raise, so next_id never blocks for long. The thread keeps renewing meanwhile.
        give_up = time.monotonic_ns() + round((self.ttl + self.clock_skew + 2.0) * 1e9)
        while True:
            if fenced is None:
                got = self._hold(throttle=not first)
                if isinstance(got, WorkerClaim):
                    self._served = True
                    return got
                fenced = got
            if not first:
                raise self._fence_error(fenced)
            now = time.monotonic_ns()
            if fenced > give_up:
                raise self._fence_error(fenced)
            time.sleep(max(0, fenced - now) / 1e9)
            with self._lock:
                self._check_open()
                valid = self._valid_claim()
                if valid is not None:
                    self._served = True
                    return valid
                fenced = self._fenced_until()

    def close(self) -> None:
        """Stop renewing and release the worker ID (storing the high water). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            thread = self._thread
            mine = os.getpid() == self._pid
        if thread is not None and thread is not threading.current_thread() and mine:
            thread.join()
        with self._io:
            with self._lock:
                worker = self._worker if mine else None
                self._worker = None
                self._deadline_ns = 0
            try:
                if worker is not None:
                    self._release(worker, self._high_water_ms())
            except Exception:  # noqa: BLE001, S110 - the lease then expires after its TTL
                pass
            finally:
                self._close_store()
        _live.discard(self)

    def __enter__(self: _L) -> _L:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        now = time.monotonic_ns()
        held = self._worker if self._usable_ns <= now < self._deadline_ns else None
        return redact_url(
            f"{type(self).__name__}({self._describe()}, ttl={self.ttl:g}s, worker={held}, "
            f"holder={self._token!r})"
        )

    # -- internals -------------------------------------------------------------------------

    def _check_open(self) -> None:
        """Refuse a closed lease; lock held."""
        if self._closed:
            raise LeaseLost(
                f"this lease ({self._describe()}) is closed; create a new lease for a new "
                "generator"
            )

    def _valid_claim(self) -> WorkerClaim | None:
        """The claim if one is usable now; lock held."""
        now = time.monotonic_ns()
        if self._worker is not None and self._usable_ns <= now < self._deadline_ns:
            return WorkerClaim(self._worker, self._deadline_ns, self._floor_ms)
        return None

    def _fenced_until(self) -> int | None:
        """When the claim held but fenced becomes usable (monotonic ns), else None; lock held."""
        now = time.monotonic_ns()
        if self._worker is not None and now < self._usable_ns and now < self._deadline_ns:
            return self._usable_ns
        return None

    def _fence_error(self, usable_ns: int) -> LeaseLost:
        left = max(0, usable_ns - time.monotonic_ns()) // 1_000_000
        return LeaseLost(
            f"worker ID {self._worker} is leased from {self._describe()} but usable only in "
            f"{left} ms: the store cannot prove that no earlier holder still issues under it "
            f"(after a store loss, or for any new claim on a table), so the claim waits ttl + "
            f"clock_skew ({self.ttl + self.clock_skew:g} s) from when it was granted"
        )

    def _high_water_ms(self) -> int:
        source = self._high_water
        if source is None:
            return 0
        try:
            return int(source())
        except Exception:  # noqa: BLE001 - a broken callback must not stop renewals
            return 0

    def _hold(self, *, throttle: bool) -> WorkerClaim | int:
        """Renew or acquire (called when no claim is valid): the new claim, or when it is
        fenced, the monotonic ns it becomes usable at."""
        if throttle:
            with self._lock:
                self._raise_if_recently_failed()
        with self._io:
            with self._lock:
                if self._closed:
                    raise LeaseLost(f"this lease ({self._describe()}) is closed")
                valid = self._valid_claim()
                if valid is not None:
                    return valid  # the renewal thread got there first
                fenced = self._fenced_until()
                if fenced is not None:
                    return fenced
                if throttle:
                    self._raise_if_recently_failed()
            for _ in range(3):
                self._step()
                with self._lock:
                    if self._closed:
                        raise LeaseLost(f"this lease ({self._describe()}) is closed")
                    valid = self._valid_claim()
                    if valid is not None:
                        self._start_thread()
                        return valid
                    fenced = self._fenced_until()
                    if fenced is not None:
                        self._start_thread()  # keeps the fenced claim renewed
                        return fenced
                    failure = self._failure
                if failure is not None:
                    raise type(failure)(str(failure))
                # Granted or renewed, but the answer came after the deadline it set (a very
                # slow store): the lease is ours, so the next round renews it.
            raise LeaseLost(
                f"{self._describe()} answered slower than the lease's TTL ({self.ttl:g} s) "
                "three times; raise ttl or fix the store's latency"
            )

    def _raise_if_recently_failed(self) -> None:
        """Re-raise the last failure if it is under ``_retry_s`` old; lock held.

        Keeps ``next_id`` from waiting on the store on every call while it is down: the
        background thread keeps trying meanwhile.
        """
        failure = self._failure
        if failure is not None and time.monotonic_ns() - self._failed_at_ns < self._retry_s * 1e9:
            raise type(failure)(str(failure))

    def _step(self) -> None:
        """One round with the store: renew the lease held, or acquire one; _io held.

        Records the outcome in the state (a new deadline and fence, or ``_failure``).
        """
        with self._lock:
            worker = self._worker
            deadline = self._deadline_ns
            if self._closed:
                return
        high_water = self._high_water_ms()
        try:
            started = time.monotonic_ns()
            lapsed = started >= deadline
            wait_ms = None if worker is None else self._renew(worker, high_water)
            if wait_ms is not None and lapsed and not self._proves_continuity:
                wait_ms = max(wait_ms, self._fence_ms)  # the row may have changed hands
            grant = None if wait_ms is not None else self._acquire(worker, high_water)
        except WorkerIdError as exc:
            self._fail(exc)
            return
        except Exception as exc:  # noqa: BLE001 - any driver error: the store is unusable
            # a driver's text may quote the URL or the credentials: no secret in messages
            detail = " ".join(scrub(str(exc), self._secrets).split())[:300]
            self._fail(
                LeaseBackendError(
                    f"{self._describe()} failed: {type(exc).__name__}: {detail}; the worker "
                    f"ID is not renewed and the generator stops issuing IDs when its lease "
                    f"lapses (ttl {self.ttl:g} s). Check that the store is reachable"
                )
            )
            return
        answered = time.monotonic_ns()
        with self._lock:
            if grant is not None:
                self._worker = grant.worker
                self._floor_ms = grant.floor_unix_ms
                started = grant.sent_ns
                wait_ms = grant.wait_ms
                self._usable_ns = 0
            fence = answered + (wait_ms or 0) * 1_000_000 if wait_ms else 0
            self._usable_ns = max(self._usable_ns, fence)
            self._deadline_ns = started + self._valid_ns
            self._failure = None

    def _fail(self, exc: WorkerIdError) -> None:
        with self._lock:
            self._failure = exc
            self._failed_at_ns = time.monotonic_ns()

    def _start_thread(self) -> None:
        """Start the renewal thread if it is not running; lock held."""
        if self._thread is not None and self._thread.is_alive():
            return
        if self._closed:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"snowshard-lease-{self._token}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        """The renewal thread: renew while held, re-acquire while not, until closed."""
        stop = self._stop
        pid = self._pid
        while True:
            with self._lock:
                held = self._worker is not None and time.monotonic_ns() < self._deadline_ns
            if stop.wait(self.renew_every if held else self._retry_s):
                return
            if os.getpid() != pid:
                return
            try:
                with self._io:
                    if stop.is_set():
                        return
                    self._step()
            except Exception:  # noqa: BLE001, S112 - never die: the next round retries
                continue

    def _after_fork(self) -> None:
        """In a forked child: forget the parent's lease (it still holds it) and start over."""
        if os.getpid() == self._pid:
            return
        self._lock = threading.Lock()
        self._io = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._pid = os.getpid()
        self._token = new_holder_token()
        self._worker = None
        self._deadline_ns = 0
        self._usable_ns = 0
        self._floor_ms = 0
        self._failure = None
        self._served = False
        self._reset_store_after_fork()


_quiet_for_fork: list[threading.Lock] = []
"""The ``_io`` locks :func:`_before_fork` took, released again in the parent."""


def _before_fork() -> None:
    """Let no renewal be talking to its store while the process forks.

    A child inherits the parent's memory as it is at the fork: had a renewal thread been
    inside a SQLite transaction, the child's copy of SQLite's per-process lock state would
    say the file is locked (by a thread the child does not have), and every claim of the
    child would fail with "database is locked". So the forking thread waits (at most one
    TTL per lease) for each live lease's store I/O to finish, and holds it off until the
    fork is done.
    """
    for lease in list(_live):
        io = lease._io
        if io.acquire(timeout=max(lease.ttl, 0.1)):
            _quiet_for_fork.append(io)


def _after_fork_in_parent() -> None:
    while _quiet_for_fork:
        _quiet_for_fork.pop().release()


def _after_fork_in_child() -> None:
    _quiet_for_fork.clear()  # the child's leases get new locks below
    for lease in list(_live):
        lease._after_fork()


def _close_all_at_exit() -> None:
    for lease in list(_live):
        try:
            lease.close()
        except Exception:  # noqa: BLE001, S110 - exiting anyway; the lease expires by TTL
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
    )
atexit.register(_close_all_at_exit)
