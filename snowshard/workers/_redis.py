"""Shared Redis plumbing for the Redis lease and the Redis issuer (needs ``redis``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from snowshard.errors import MissingExtra

if TYPE_CHECKING:
    from redis import Redis

__all__ = ["connect", "describe", "import_redis", "redact"]


def import_redis() -> Any:
    """The ``redis`` module, or a clear error naming the extra to install."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - redis is installed in the test env
        raise MissingExtra(
            "this feature needs redis-py: pip install 'snowshard[redis]'"
        ) from exc
    return redis


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def connect(target: str | Redis, *, timeout: float) -> tuple[Redis, bool, str]:
    """A client for ``target`` (a URL or a client), whether we own it, and a description.

    A URL (``redis://``, ``rediss://`` for TLS, ``unix://``; password as
    ``redis://:PASSWORD@host``) gets socket timeouts of ``timeout`` seconds and at most one
    immediate retry, so an unreachable server fails fast instead of after redis-py's default
    backoff; options in the URL's query string win. A client is used as configured.
    """
    redis = import_redis()
    if isinstance(target, str):
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client: Redis = redis.Redis.from_url(
            target,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1),
        )
        return client, True, f"Redis at {redact(target)}"
    if not isinstance(target, redis.Redis):
        raise TypeError(
            f"expected a Redis URL (str) or a redis.Redis client, got {type(target).__name__}"
        )
    return target, False, describe(target)


def describe(client: Redis) -> str:
    """``Redis at host:port/db`` for a client (no password)."""
    kwargs: dict[str, Any] = getattr(client.connection_pool, "connection_kwargs", {})
    if "path" in kwargs:
        return f"Redis at unix://{kwargs['path']}"
    return f"Redis at {kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"
