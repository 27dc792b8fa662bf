"""Worker IDs from Redis: leased (:class:`RedisLease`) or counted (:func:`join_cluster`).

Keys under ``key_prefix`` (default ``snowshard:workers``), for each worker ID ``w``:

``<prefix>:lease:<w>``
    the holder's token (``host:pid:random``), with a ``PX`` TTL; present = taken.
``<prefix>:info:<w>``
    a hash kept forever: ``hw`` (the high-water mark of its holders, Unix ms), ``clean``
    (``1`` once the last holder released the lease), ``ttl`` (its TTL in ms), ``holder``
    (its token), ``exp`` (when its lease expires or expired, Redis clock, Unix ms).
``<prefix>:era``
    the continuity marker, ``<run_id>:<settled>``: the ``run_id`` of the Redis server
    process that wrote it, and the Unix ms (Redis clock) from which claims are usable at
    once.

Every step is one Lua script, so "find a free ID and take it" is atomic: a free ID is one
whose lease key is absent (never taken, released or expired), so IDs are reused. Renewal
is compare-and-set: it fails, and writes nothing, when the key is missing or holds another
token.

Each acquire and renew script first compares ``<prefix>:era`` with the server's current
``run_id`` (``INFO server``). Missing (a ``FLUSHALL``, a restart without persistence, a
failover to an empty replica) or naming another server process (a restart from any
snapshot or append-only file, a failover to any replica): the keys may be older than what
holders were told, so the script writes a new marker settled ``ttl + clock_skew`` from now,
and every claim confirmed before that is fenced until then (see
:mod:`snowshard.workers.lease` for why that is enough). A namespace's first use counts as
such a loss. A Redis that evicts keys (``maxmemory-policy`` other than ``noeviction``) can
drop lease keys unnoticed: do not use one. ``INFO`` must be callable from scripts (it is,
unless renamed). Keys are computed inside the scripts, so Redis Cluster is not supported.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from snowshard.layout import Layout
from snowshard.redaction import scrub
from snowshard.workers.errors import WorkerConfigError, WorkerIdsExhausted
from snowshard.workers.lease import Grant, Lease
from snowshard.workers.redis_connection import connect

if TYPE_CHECKING:
    from redis import Redis

__all__ = ["DEFAULT_COUNTER_KEY", "DEFAULT_KEY_PREFIX", "RedisLease", "join_cluster"]

DEFAULT_KEY_PREFIX = "snowshard:workers"
DEFAULT_COUNTER_KEY = "snowshard:worker-counter"

# Sets `now` (Redis clock, Unix ms) and `wait` (ms until this era is settled: the fence of
# any claim confirmed now). KEYS[1] is the marker, ARGV[1] the fence in ms (ttl + skew).
_ERA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local marker = redis.call('GET', KEYS[1])
local settled = nil
if marker then
  local r, s = string.match(marker, '^(%x+):(%d+)$')
  if r == run then settled = tonumber(s) end
end
if not settled then
  settled = now + tonumber(ARGV[1])
  redis.call('SET', KEYS[1], run .. ':' .. string.format('%d', settled))
end
local wait = 0
if settled > now then wait = settled - now end
"""

_ACQUIRE = _ERA + """
local prefix, token = ARGV[2], ARGV[3]
local ttl, count, prefer = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local function take(w)
  if redis.call('SET', prefix .. ':lease:' .. w, token, 'NX', 'PX', ttl) then
    local info = prefix .. ':info:' .. w
    local h = redis.call('HMGET', info, 'hw', 'clean', 'ttl', 'holder', 'exp')
    local hw = tonumber(h[1] or '0')
    if tonumber(ARGV[7]) > hw then hw = tonumber(ARGV[7]) end
    redis.call('HSET', info, 'clean', '0', 'ttl', ARGV[4], 'holder', token,
               'exp', string.format('%d', now + ttl), 'hw', string.format('%d', hw))
    return {w, h[1] or '0', h[2] or '1', h[3] or '0', h[4] or '', h[5] or '0', wait}
  end
  return false
end
if prefer >= 0 and prefer < count then
  local got = take(prefer)
  if got then return got end
end
for w = 0, count - 1 do
  local got = take(w)
  if got then return got end
end
local out = {-1, count}
for w = 0, math.min(count, 5) - 1 do
  local key = prefix .. ':lease:' .. w
  out[#out + 1] = w
  out[#out + 1] = redis.call('GET', key) or '?'
  out[#out + 1] = redis.call('PTTL', key)
end
return out
"""

_RENEW = _ERA + """
local key, info = ARGV[2] .. ':lease:' .. ARGV[3], ARGV[2] .. ':info:' .. ARGV[3]
if redis.call('GET', key) ~= ARGV[4] then return -1 end
redis.call('PEXPIRE', key, ARGV[5])
redis.call('HSET', info, 'exp', string.format('%d', now + tonumber(ARGV[5])))
if tonumber(ARGV[6]) > tonumber(redis.call('HGET', info, 'hw') or '0') then
  redis.call('HSET', info, 'hw', ARGV[6])
end
return wait
"""

_RELEASE = """
local key, info = ARGV[1] .. ':lease:' .. ARGV[2], ARGV[1] .. ':info:' .. ARGV[2]
if redis.call('GET', key) ~= ARGV[3] then return 0 end
if tonumber(ARGV[4]) > tonumber(redis.call('HGET', info, 'hw') or '0') then
  redis.call('HSET', info, 'hw', ARGV[4])
end
redis.call('HSET', info, 'clean', '1')
redis.call('DEL', key)
return 1
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisLease(Lease):
    """A worker ID leased from Redis with a TTL, renewed in the background.

    :param redis: a URL (``redis://[:password@]host:port/db``, ``rediss://`` for TLS,
        ``unix:///path?password=...``; shown in messages with passwords masked) or
        a ``redis.Redis`` client (then its own timeouts and retries apply, and it is not
        closed by :meth:`close`).
    :param layout: the generator's layout: IDs 0..``layout.max_worker`` are leased.
    :param key_prefix: the namespace; generators that must not share worker IDs share it
        (use one per datacenter ID).
    :param ttl: seconds a lease outlives its holder's last renewal.
    :param timeout: socket timeout for a URL's client (default ``min(ttl / 4, 2)`` s).

    :param clock_skew: see :class:`~snowshard.workers.lease.Lease`.

    See :class:`~snowshard.workers.lease.Lease` for renewal, deadlines, fences and fork.
    Time to first ID: at once, or ``ttl + clock_skew`` within that long of a loss of
    Redis's data (or of the namespace's first use).
    """

    _proves_continuity = True

    def __init__(
        self,
        redis: str | Redis,
        layout: Layout | None = None,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        ttl: float = 10.0,
        renew_every: float | None = None,
        margin: float | None = None,
        clock_skew: float = 1.0,
        timeout: float | None = None,
    ) -> None:
        super().__init__(
            layout, ttl=ttl, renew_every=renew_every, margin=margin, clock_skew=clock_skew
        )
        if not key_prefix or not isinstance(key_prefix, str):
            raise WorkerConfigError(f"key_prefix must be a non-empty str, got {key_prefix!r}")
        self.key_prefix = key_prefix
        self._client, self._owns_client, self._where, self._secrets = connect(
            redis, timeout=timeout if timeout is not None else min(self.ttl / 4, 2.0)
        )
        self._era_key = f"{key_prefix}:era"
        self._acquire_script = self._client.register_script(_ACQUIRE)
        self._renew_script = self._client.register_script(_RENEW)
        self._release_script = self._client.register_script(_RELEASE)

    def _describe(self) -> str:
        return f"{self._where}, key prefix {self.key_prefix!r}"

    def _acquire(self, prefer: int | None, high_water_ms: int) -> Grant:
        args: list[str | int] = [
            self._fence_ms,
            self.key_prefix,
            self._token,
            self._ttl_ms,
            self._count,
            -1 if prefer is None else prefer,
            high_water_ms,
        ]
        sent = time.monotonic_ns()
        reply = self._acquire_script(keys=[self._era_key], args=args)
        code = int(reply[0])
        if code == -1:
            raise self._exhausted(reply)
        high_water, clean, ttl_ms, previous, expired = (_text(v) for v in reply[1:6])
        floor = int(high_water)
        if clean != "1" and previous != self._token:
            # It died or lapsed holding the ID: it may have issued up to its deadline,
            # ttl past its last report, and never after its lease expired.
            floor = max(floor + int(ttl_ms), int(expired))
        return Grant(code, floor, sent, int(reply[6]))

    def _exhausted(self, reply: list[Any]) -> WorkerIdsExhausted:
        count = int(reply[1])
        holders = []
        for i in range(2, len(reply), 3):
            holders.append(
                f"{int(reply[i])} by {_text(reply[i + 1])} (expires in {int(reply[i + 2])} ms)"
            )
        more = f", and {count - len(holders)} more" if count > len(holders) else ""
        return WorkerIdsExhausted(
            f"all {count} worker IDs (0..{count - 1}) under {self.key_prefix!r} in "
            f"{self._where} are leased: {'; '.join(holders)}{more}. Wait up to "
            f"{self.ttl:g} s for a dead holder's lease to expire, close unused leases, or "
            "widen worker_bits"
        )

    def _renew(self, worker: int, high_water_ms: int) -> int | None:
        args: list[str | int] = [
            self._fence_ms, self.key_prefix, worker, self._token, self._ttl_ms, high_water_ms
        ]
        wait = int(self._renew_script(keys=[self._era_key], args=args))
        return None if wait < 0 else wait

    def _release(self, worker: int, high_water_ms: int) -> None:
        self._release_script(args=[self.key_prefix, worker, self._token, high_water_ms])

    def _close_store(self) -> None:
        if self._owns_client:
            self._client.close()


def join_cluster(
    redis: str | Redis,
    layout: Layout | None = None,
    *,
    key: str = DEFAULT_COUNTER_KEY,
    timeout: float = 5.0,
) -> int:
    """A worker ID from a Redis ``INCR`` at each process start, never reused.

    Returns ``(INCR(key) - 1) mod (max_worker + 1)``: the first process gets 0, the next 1,
    and so on. Simple, with no renewal, but after ``max_worker + 1`` joins the count wraps
    to IDs that long-running processes may still use. Use :class:`RedisLease` when
    processes restart often. The result is a plain ``int``: a forked child refuses to
    issue IDs with it.
    """
    layout = layout if layout is not None else Layout()
    client, owned, where, secrets = connect(redis, timeout=timeout)
    try:
        count = int(client.incr(key))
    except Exception as exc:
        from snowshard.workers.errors import LeaseBackendError

        raise LeaseBackendError(
            f"{where} failed on INCR {key!r}: {type(exc).__name__}: "
            f"{scrub(str(exc), secrets)}; no worker ID was assigned. Check that Redis is "
            "reachable"
        ) from exc
    finally:
        if owned:
            client.close()
    return (count - 1) % (layout.max_worker + 1)
