"""Redis clients for the Redis lease and the Redis issuer, with secrets kept out of messages.

:func:`connect` turns a URL or a client into a :class:`Connected`: the client, whether the
caller owns it, a description for messages and the passwords to scrub from driver errors.
Needs ``redis`` (``snowshard[redis]``); :func:`import_redis` says so when it is missing.
"""

from __future__ import annotations

import socket
import struct
from typing import TYPE_CHECKING, Any, NamedTuple

from snowshard.errors import MissingExtra
from snowshard.redaction import redact_url, scrub, url_secrets
from snowshard.workers._redis_compat import redis_socket
from snowshard.workers.errors import WorkerConfigError

if TYPE_CHECKING:
    from redis import Redis

__all__ = ["Connected", "connect", "describe", "import_redis"]


def import_redis() -> Any:
    """The ``redis`` module, or a clear error naming the extra to install."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - redis is installed in the test env
        raise MissingExtra(
            "this feature needs redis-py: pip install 'snowshard[redis]'"
        ) from exc
    return redis


class Connected(NamedTuple):
    """What :func:`connect` returns."""

    client: Redis
    owned: bool  # created from a URL: close it when done
    where: str  # "Redis at ..." without secrets, for messages
    secrets: frozenset[str]  # passwords to scrub from driver messages


def connect(
    target: str | Redis, *, timeout: float, error: type[Exception] = WorkerConfigError
) -> Connected:
    """A client for ``target`` (a URL or a client), whether we own it, and a description.

    A URL (``redis://``, ``rediss://`` for TLS, ``unix://``; password as
    ``redis://:PASSWORD@host`` or ``?password=PASSWORD``) gets socket timeouts of
    ``timeout`` seconds and at most one immediate retry, so an unreachable server fails
    fast instead of after redis-py's default backoff; options in the URL's query string
    win, and its connections refuse to talk to themselves (:func:`_handshake`). A client is
    used as configured. A URL redis-py cannot parse raises ``error``, whose message shows
    the URL without its secrets.
    """
    redis = import_redis()
    if isinstance(target, str):
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        secrets = url_secrets(target)
        where = f"Redis at {redact_url(target)}"
        problem: str | None = None
        try:
            client: Redis = redis.Redis.from_url(
                target,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 1),
                redis_connect_func=_handshake,
            )
        except (ValueError, TypeError) as exc:
            # redis-py's text may quote a piece of a malformed URL: keep it only when the
            # URL holds no secret. Raised below, outside this block: no chained driver text.
            detail = f": {scrub(str(exc), secrets)}" if not secrets else ""
            problem = f"{type(exc).__name__}{detail}"
        if problem is not None:
            raise error(
                f"invalid Redis URL {redact_url(target)} ({problem}); expected "
                "redis://[[user]:PASSWORD@]host[:port][/db], rediss://... or "
                "unix:///path/to/socket[?db=N], with special characters percent-encoded"
            )
        return Connected(client, True, where, secrets)
    if not isinstance(target, redis.Redis):
        raise error(
            f"redis must be a Redis URL (str) or a redis.Redis client, got "
            f"{type(target).__name__} {scrub(repr(target), url_secrets(str(target)))}"
        )
    kwargs: dict[str, Any] = getattr(target.connection_pool, "connection_kwargs", {})
    password = kwargs.get("password")
    secrets = frozenset({password}) if isinstance(password, str) and password else frozenset()
    return Connected(target, False, describe(target), secrets)


def _handshake(connection: Any) -> None:
    """redis-py's connection handshake, once the socket is known to reach a server.

    When nothing listens on a local port in the kernel's ephemeral range (Redis restarting
    on 127.0.0.1:50002, say), a connect to it can be given that very port as its own: TCP
    then connects the socket to itself. redis-py would read its own commands back as
    replies (an ``AttributeError`` or ``ValueError`` far from the cause), keep the socket,
    and hold the port, so Redis could not start on it again. Such a connection is refused
    with redis-py's ``ConnectionError`` after closing it with a reset (redis-py's own close
    would leave the port in TIME_WAIT for a minute, which no server's ``SO_REUSEADDR``
    overrides). redis-py has no public accessor for the socket:
    :func:`~snowshard.workers._redis_compat.redis_socket` reads it.
    """
    redis = import_redis()
    sock = redis_socket(connection)
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        here = sock.getsockname()
        if here == sock.getpeername():
            # closed here, with a reset: redis-py's close (shutdown first) would leave the
            # port in TIME_WAIT for a minute, where a server cannot bind it either
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            raise redis.exceptions.ConnectionError(
                f"nothing listens on {here[0]} port {here[1]}: the connection reached "
                "itself (the kernel gave it that port as its own), so it was closed"
            )
    connection.on_connect()


def describe(client: Redis) -> str:
    """``Redis at host:port/db`` for a client (no password)."""
    kwargs: dict[str, Any] = getattr(client.connection_pool, "connection_kwargs", {})
    if "path" in kwargs:
        return f"Redis at unix://{kwargs['path']}"
    return f"Redis at {kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"
