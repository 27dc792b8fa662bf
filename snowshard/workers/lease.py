"""Leased worker IDs: the part every lease store shares (timing, renewal, fork, exit).

A :class:`Lease` holds one worker ID in a store (Redis: :class:`~snowshard.workers.RedisLease`,
a SQL table: :class:`~snowshard.workers.DatabaseLease`) for ``ttl`` seconds at a time and
renews it from a background thread every ``renew_every`` seconds. It implements the
generator's :class:`~snowshard.workers.base.WorkerLease` protocol::

    lease = RedisLease("redis://cache:6379/0", layout=layout, ttl=10)
    ids = Snowflake(layout, worker=lease)      # claims a free worker ID now
    ...
    lease.close()                              # or `with lease:`; also done at exit

The rules that keep IDs unique:

* **Deadline.** A claim is valid until ``t0 + ttl - margin`` on this process's monotonic
  clock, where ``t0`` is read *before* the request that took or renewed the lease was sent,
  so the store's own expiry is always later. The generator stops issuing IDs at that
  deadline unless a renewal moved it; when renewals fail, ``next_id`` raises a
  :class:`~snowshard.WorkerIdError` until a lease is held again (maybe another worker ID).
  A process paused past its TTL (``SIGSTOP``, a VM freeze) finds its deadline passed when
  it wakes and must renew or re-acquire before the next ID.
* **High-water mark.** Each renewal stores the generator's last issued time (Unix ms), and
  a release stores its final value. The next holder of that worker ID issues only after it
  (the claim's ``floor_unix_ms``), so a process restarted on a host whose wall clock was
  set back cannot reissue IDs its predecessor already issued. When the previous holder did
  not release the lease (it crashed, hung or lost its store), it may have issued IDs until
  its deadline: the floor is then the later of its high water + its TTL and its lease's
  expiry (store clock).
* **Fork.** A child process forked from a holder drops the parent's lease without releasing
  it and takes its own (a new worker ID) at its next ID.
* **One generator per lease.** A generator attaches itself to its lease when it is built
  (:meth:`Lease.attach`); a second generator built on the same lease while the first lives
  gets :class:`~snowshard.WorkerIdError`: two generators on one worker ID duplicate IDs.
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

__all__ = ["Grant", "Lease", "NotYet", "new_holder_token"]

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


class NotYet(Exception):
    """Raised by a store when it may grant worker IDs again only after ``retry_in_ms``."""

    def __init__(self, message: str, retry_in_ms: int) -> None:
        super().__init__(message)
        self.retry_in_ms = retry_in_ms


class Lease:
    """A worker ID held in a store under a time-limited, renewed lease (abstract base).

    Subclasses implement :meth:`_acquire`, :meth:`_renew` and :meth:`_release` against their
    store; this class decides when to call them and what the generator may do meanwhile.

    :param layout: the generator's layout; worker IDs 0..``layout.max_worker`` are leased.
    :param ttl: seconds a lease lasts without renewal (store-side expiry).
    :param renew_every: seconds between renewals (default ``ttl / 3``, at most ``ttl / 2``).
    :param margin: seconds the local deadline keeps before the store's expiry
        (default ``ttl / 10``), covering clock-rate differences.
    """

    #: passwords of the store's URL, scrubbed from driver messages (set by subclasses)
    _secrets: frozenset[str] = frozenset()

    def __init__(
        self,
        layout: Layout | None = None,
        *,
        ttl: float = 10.0,
        renew_every: float | None = None,
        margin: float | None = None,
    ) -> None:
        self.layout = layout if layout is not None else Layout()
        for name, value in (("ttl", ttl), ("renew_every", renew_every), ("margin", margin)):
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
        self.ttl = float(ttl)
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
        self._floor_ms = 0
        self._high_water: Callable[[], int] | None = None
        self._generator: weakref.ref[object] | None = None  # the attached generator
        self._failure: WorkerIdError | None = None
        self._failed_at_ns = 0
        self._closed = False

    # -- what a store implements ---------------------------------------------------------

    def _acquire(self, prefer: int | None, high_water_ms: int) -> Grant:
        """Take a free worker ID (``prefer`` first); raise WorkerIdsExhausted or NotYet."""
        raise NotImplementedError

    def _renew(self, worker: int, high_water_ms: int) -> bool:
        """Extend our lease on ``worker`` and store the high water; False if not ours now."""
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
        """The worker ID held now, or None (never acquired, lapsed or closed)."""
        with self._lock:
            if self._worker is not None and time.monotonic_ns() < self._deadline_ns:
                return self._worker
            return None

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
        :class:`~snowshard.WorkerIdError` when no lease can be held now.
        """
        if os.getpid() != self._pid:
            self._after_fork()
        with self._lock:
            self._check_open()
            _live.add(self)  # from now on: reset after fork(), closed at exit
            self._high_water = high_water
            valid = self._valid_claim()
            if valid is not None:
                return valid
            first = self._worker is None and self._failure is None and self._thread is None
        waited = 0.0
        while True:
            try:
                return self._hold(throttle=not first)
            except NotYet as exc:
                # Only the first claim (at the generator's construction) waits; later ones
                # raise so next_id never blocks for long. The thread keeps trying.
                delay = exc.retry_in_ms / 1000
                if not first or waited + delay > self.ttl + 2.0:
                    raise LeaseLost(str(exc)) from None
                time.sleep(delay)
                waited += delay

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
        held = self._worker if self._deadline_ns > time.monotonic_ns() else None
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
        """The claim if one is valid now; lock held."""
        if self._worker is not None and time.monotonic_ns() < self._deadline_ns:
            return WorkerClaim(self._worker, self._deadline_ns, self._floor_ms)
        return None

    def _high_water_ms(self) -> int:
        source = self._high_water
        if source is None:
            return 0
        try:
            return int(source())
        except Exception:  # noqa: BLE001 - a broken callback must not stop renewals
            return 0

    def _hold(self, *, throttle: bool) -> WorkerClaim:
        """Renew or acquire (called when no claim is valid) and return the new claim."""
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

        Records the outcome in the state (a new deadline, or ``_failure``). Raises only
        :class:`NotYet` (recorded as a failure too; nothing is held).
        """
        with self._lock:
            worker = self._worker
            if self._closed:
                return
        high_water = self._high_water_ms()
        try:
            started = time.monotonic_ns()
            renewed = worker is not None and self._renew(worker, high_water)
            grant = None if renewed else self._acquire(worker, high_water)
        except NotYet as exc:
            self._fail(LeaseLost(str(exc)))  # next_id then fails fast until the next try
            with self._lock:
                self._deadline_ns = min(self._deadline_ns, time.monotonic_ns())
            raise
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
        with self._lock:
            if grant is not None:
                self._worker = grant.worker
                self._floor_ms = grant.floor_unix_ms
                started = grant.sent_ns
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
            except NotYet:
                continue
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
        self._floor_ms = 0
        self._failure = None
        self._reset_store_after_fork()


def _after_fork_in_child() -> None:
    for lease in list(_live):
        lease._after_fork()


def _close_all_at_exit() -> None:
    for lease in list(_live):
        try:
            lease.close()
        except Exception:  # noqa: BLE001, S110 - exiting anyway; the lease expires by TTL
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)
