"""An ID issuer whose sequence lives in Redis: no worker IDs to hand out.

Every process, on any host, asks Redis for the next sequence numbers of the current tick::

    from snowshard import Layout
    from snowshard.redis_issuer import RedisIssuer

    layout = Layout(datacenter_bits=5, worker_bits=5)   # e.g. a server ID and a business ID
    with RedisIssuer("redis://:secret@cache:6379/0", layout, datacenter=1, worker=2) as ids:
        ids.next_id()            # one round trip per ID
        ids.next_ids(1000)       # one INCRBY for up to a whole tick of IDs

One Lua script does ``INCRBY`` and ``PEXPIRE`` on the key of the current tick
(``<prefix>:<datacenter>:<worker>:<tick>``), so two clients never get the same sequence
number of a tick. The ``datacenter`` and ``worker`` fields carry what the caller chooses
(a site and a business line, say); they need not be unique per process. A
:class:`RedisIssuer` is an :class:`~snowshard.issuer.IdIssuer`, so it can fill a primary
key column's default (:func:`~snowshard.orm.snowflake_pk`), genes included.

What keeps the IDs unique where a plain "INCR a per-millisecond key" design does not:

* **Time.** Were each client to read its own clock, and a tick's key to expire 1 ms after
  its tick, a client whose clock lags another's by more than that would find the key gone
  and restart the tick's sequence: duplicates. Here the tick comes from Redis's ``TIME``
  (one clock for all clients) unless ``clock=`` is given, and Redis remembers the last tick
  issued (``<prefix>:<datacenter>:<worker>:last``): a tick before it, or equal to it once
  its key has expired, is refused and the client waits (at most ``max_backwards_ms``, then
  :class:`~snowshard.ClockMovedBackwards`). A clock that steps back cannot repeat IDs.
* **Overflow.** A sequence allowed to reach ``2**sequence_bits`` spills into the worker
  field; here a full tick makes the client wait for the next tick and ask again.
* **Errors.** Any Redis failure raises :class:`IssuerUnavailable` or :class:`IssuerError`
  (both :class:`~snowshard.SnowshardError`); no ID is returned that Redis did not grant.
  A request that timed out may have consumed sequence numbers: they are skipped, never
  reused.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from snowshard.errors import (
    ClockMovedBackwards,
    ConfigurationError,
    FieldOutOfRange,
    IssuerError,
    IssuerUnavailable,
    LayoutError,
)
from snowshard.layout import Layout, check_layout
from snowshard.redaction import redact_url, scrub
from snowshard.workers.redis_connection import connect, import_redis

if TYPE_CHECKING:
    from redis import Redis

__all__ = ["IssuerError", "IssuerUnavailable", "RedisIssuer"]

_OK, _BEHIND, _FULL, _BEFORE_EPOCH = 0, 1, 2, 3

_ISSUE = """
local n, size = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = tonumber(ARGV[7])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local since = now - tonumber(ARGV[5])
if since < 0 then return {3, 0, 0, now} end
local tick = math.floor(since / tonumber(ARGV[6]))
local last = tonumber(redis.call('GET', KEYS[1]) or '-1')
local key = ARGV[1] .. string.format('%d', tick)
if tick < last or (tick == last and redis.call('EXISTS', key) == 0) then
  return {1, tick, last, now}
end
local v = redis.call('INCRBY', key, n)
local offset = tonumber(ARGV[8])
if v == n and offset > 0 then v = redis.call('INCRBY', key, offset) end
redis.call('PEXPIRE', key, ARGV[4])
if tick > last then redis.call('SET', KEYS[1], string.format('%d', tick)) end
local first = v - n
if first >= size then return {2, tick, 0, now} end
return {0, tick, first, math.min(n, size - first), now}
"""


SequenceStart = Literal["reset", "random"]
_I = TypeVar("_I", bound="RedisIssuer")


class RedisIssuer:
    """Issues IDs of ``layout`` whose sequence numbers come from Redis.

    :param redis: a URL (``redis://[:password@]host:port/db``; ``rediss://`` for TLS, with
        e.g. ``?ssl_ca_certs=/path/ca.pem``; ``unix:///path?password=...``; messages show it
        with passwords masked; one redis-py cannot parse raises
        :class:`~snowshard.LayoutError`) or a ``redis.Redis`` client (not closed by
        :meth:`close`).
    :param layout: the bit layout (default :class:`~snowshard.Layout`).
    :param datacenter: the datacenter field of every ID (a server or site ID, say).
    :param worker: the worker field of every ID (a business line, say). Issuers with
        the same ``key_prefix``, datacenter and worker share one sequence.
    :param clock: Unix ms from the client instead of Redis ``TIME``; every client of a
        sequence must then share a clock (a lagging one waits, up to ``max_backwards_ms``).
    :param sleep: how to wait (default :func:`time.sleep`).
    :param sequence_start: ``"reset"``: each tick's sequence starts at 0; ``"random"``: at
        a random point in its lower half, so ``id % 2**k`` routing does not pile low-rate
        IDs into shard 0 (at one ID per tick a reset sequence leaves the low bits all zero),
        at the cost of up to half a tick.
    :param key_ttl_ms: how long a tick's key outlives its last use (default: 1 s or two
        ticks, whichever is longer).
    :param timeout: socket timeout of a URL's client, in seconds.
    """

    def __init__(
        self,
        redis: str | Redis,
        layout: Layout | None = None,
        *,
        datacenter: int = 0,
        worker: int = 0,
        key_prefix: str = "snowshard:seq",
        clock: Callable[[], int] | None = None,
        sleep: Callable[[float], None] | None = None,
        sequence_start: SequenceStart = "reset",
        max_backwards_ms: int = 1000,
        key_ttl_ms: int | None = None,
        timeout: float = 2.0,
    ) -> None:
        self.layout = layout = check_layout(layout if layout is not None else Layout())
        _check_target(redis)
        if not isinstance(key_prefix, str) or not key_prefix:
            raise ConfigurationError(
                f"key_prefix must be a non-empty str, got {type(key_prefix).__name__} "
                f"{key_prefix!r}; the default is 'snowshard:seq'"
            )
        for name, function in (("clock", clock), ("sleep", sleep)):
            if function is not None and not callable(function):
                raise ConfigurationError(
                    f"{name} must be a callable or None, got {type(function).__name__} "
                    f"{function!r}; e.g. a snowshard.ManualClock and its sleep"
                )
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout < float("inf")
        ):
            raise ConfigurationError(
                f"timeout must be a finite number of seconds > 0, got {timeout!r}; "
                "the default is 2.0"
            )
        if clock is not None:
            layout.check_started(clock(), clock="clock=")
        else:
            layout.check_started(time.time_ns() // 1_000_000, clock="this host's clock")
        if sequence_start not in ("reset", "random"):
            raise LayoutError(
                f"sequence_start must be one of ('reset', 'random'), got {sequence_start!r}"
            )
        for name, value in (("max_backwards_ms", max_backwards_ms), ("key_ttl_ms", key_ttl_ms)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise LayoutError(f"{name} must be an int >= 0, got {value!r}")
        node = layout.compose_ticks(0, datacenter=datacenter, worker=worker)
        self.datacenter = datacenter
        self.worker = worker
        self.sequence_start = sequence_start
        self.max_backwards_ms = max_backwards_ms
        self._node = node
        self._clock = clock
        self._sleep = sleep if sleep is not None else time.sleep
        self._size = layout.ids_per_tick
        self._ts_shift = layout.timestamp_shift
        self._seq_shift = layout.sequence_shift
        self._key_ttl_ms = (
            key_ttl_ms if key_ttl_ms is not None else max(1000, 2 * layout.tick_ms)
        )
        base = f"{key_prefix}:{datacenter}:{worker}:"
        self._tick_prefix = base
        self._last_key = base + "last"
        self._client, self._owns_client, self._where, self._secrets = connect(
            redis, timeout=timeout, error=ConfigurationError
        )
        self._script = self._client.register_script(_ISSUE)
        self._errors: Any = import_redis().exceptions

    # -- issuing -----------------------------------------------------------------------

    def next_id(self, gene: object = None) -> int:
        """The next ID: one script call (one round trip) unless the tick is full."""
        return self._issue(1, gene)[0]

    def next_ids(self, count: int, gene: object = None) -> list[int]:
        """``count`` IDs, increasing, taken with one ``INCRBY`` per tick they span."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise FieldOutOfRange(f"count must be an int >= 0, got {count!r}")
        return self._issue(count, gene)

    def _issue(self, count: int, gene: object) -> list[int]:
        g = self._gene(gene)
        out: list[int] = []
        waited_ms = 0
        step = 1 << self._seq_shift
        while len(out) < count:
            want = min(count - len(out), self._size)
            reply = self._call(want)
            status, tick = int(reply[0]), int(reply[1])
            if status == _OK:
                first, got = int(reply[2]), int(reply[3])
                if tick > self.layout.max_ticks:
                    self._expired(tick)
                start = (tick << self._ts_shift) | self._node | (first << self._seq_shift) | g
                out.extend(range(start, start + got * step, step))
                continue
            now_ms = int(reply[-1])
            if status == _BEFORE_EPOCH:
                raise FieldOutOfRange(
                    f"the issuer's clock reads Unix ms {now_ms}, before the layout's epoch "
                    f"{self.layout.epoch.isoformat()}; fix the clock or choose an earlier epoch"
                )
            tick_ms = self.layout.tick_ms
            into_tick = (now_ms - self.layout.epoch_ms) % tick_ms
            if status == _FULL:
                self._sleep((tick_ms - into_tick) / 1000)  # until the next tick starts
                continue
            # _BEHIND: the clock is before (or at an expired) last tick issued
            last = int(reply[2])
            pause = max((last + 1 - tick) * tick_ms - into_tick, 1)
            if waited_ms + pause > self.max_backwards_ms:
                raise ClockMovedBackwards(
                    f"the issuer's clock is at tick {tick}, behind the last tick issued "
                    f"({last}); catching up takes {waited_ms + pause} ms, more than "
                    f"max_backwards_ms={self.max_backwards_ms}. No ID was issued; fix the "
                    f"clock of {'this client' if self._clock else self._where}"
                )
            self._sleep(pause / 1000)
            waited_ms += pause
        return out

    def _call(self, count: int) -> Any:
        offset = 0
        if self.sequence_start == "random":
            offset = random.randrange((self._size + 1) // 2)
        now = -1 if self._clock is None else int(self._clock())
        args: list[str | int] = [
            self._tick_prefix,
            count,
            self._size,
            self._key_ttl_ms,
            self.layout.epoch_ms,
            self.layout.tick_ms,
            now,
            offset,
        ]
        errors = self._errors
        secrets = self._secrets
        try:
            return self._script(keys=[self._last_key], args=args)
        except errors.RedisError as exc:
            text = scrub(str(exc), secrets)
            if _refused_credentials(exc, errors):
                raise IssuerUnavailable(
                    f"{self._where} refused the credentials ({text}); give the password in "
                    "the URL as redis://:PASSWORD@host:port/db (or user:PASSWORD@, or "
                    "?password=PASSWORD). No ID was issued"
                ) from exc
            if isinstance(exc, (errors.ConnectionError, errors.TimeoutError)):
                raise IssuerUnavailable(
                    f"{self._where} is unreachable ({type(exc).__name__}: {text}); no ID was "
                    "issued. Check the URL and that Redis is up, then retry"
                ) from exc
            raise IssuerError(
                f"{self._where} rejected the issuer's script ({type(exc).__name__}: {text}); "
                f"no ID was issued. Is {self._last_key!r} used by something else?"
            ) from exc

    def _gene(self, gene: object) -> int:
        return 0 if gene is None else self.layout.gene_for(gene)

    def _expired(self, tick: int) -> None:
        raise self.layout.expired(tick)

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the client if the issuer created it from a URL."""
        if self._owns_client:
            self._client.close()

    def __enter__(self: _I) -> _I:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return redact_url(
            f"RedisIssuer({self._where}, {self.layout.describe()}, "
            f"datacenter={self.datacenter}, worker={self.worker})"
        )


def _refused_credentials(error: Exception, errors: Any) -> bool:
    """Whether Redis turned the client away for want of (the right) password.

    redis-py raises ``AuthenticationError`` when its connection handshake is refused. A
    client that sends no command before the script (redis-py 5.0.0 does not) gets the
    server's refusal of the script itself instead: ``NOAUTH`` or, for a long command, a
    "Protocol error: unauthenticated multibulk length".
    """
    if isinstance(error, errors.AuthenticationError):
        return True
    text = str(error)
    return isinstance(error, errors.ResponseError) and (
        text.startswith("NOAUTH") or "unauthenticated" in text
    )


def _check_target(redis: object) -> None:
    """Refuse, before any I/O, a ``redis`` argument that is neither a URL nor a client."""
    if isinstance(redis, str):
        if not redis.strip():
            raise ConfigurationError(
                "the Redis URL is empty; expected redis://[[user]:PASSWORD@]host[:port][/db], "
                "rediss://... or unix:///path/to/socket"
            )
        return
    if not callable(getattr(redis, "register_script", None)):
        raise ConfigurationError(
            f"redis must be a Redis URL (str) or a redis.Redis client, got "
            f"{type(redis).__name__} {redact_url(repr(redis))}; e.g. 'redis://127.0.0.1:6379/0'"
        )
