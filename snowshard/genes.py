"""Genes: the low bits of a parent key, carried in the low bits of a child's ID.

A child row (an order) whose ID ends in the same ``n`` bits as its parent key (the user ID)
lives in the same one of ``2**n`` shards as every other row of that parent, whether the
shard is looked up from the parent key or from the child's own ID::

    order_id & (2**n - 1) == gene_of(user_id, n)
"""

from __future__ import annotations

import hashlib
import uuid

from snowshard.errors import FieldOutOfRange, IdTypeError

__all__ = ["gene_of", "key_to_int"]


def key_to_int(key: object) -> int:
    """A stable non-negative integer for a key, identical in every process and version.

    ``int`` keys map to themselves (negative ones are refused), ``uuid.UUID`` to its 128-bit
    value, ``str`` (UTF-8 encoded) and ``bytes`` to the first 8 bytes of their BLAKE2b-64
    digest read big-endian. Python's own ``hash()`` is salted per process, so it is never
    used. ``bool``, ``float``, ``None`` and other types raise :class:`IdTypeError`.
    """
    if isinstance(key, bool) or key is None:
        raise IdTypeError(f"a shard key must be int, str, bytes or UUID, got {key!r}")
    if isinstance(key, int):
        if key < 0:
            raise FieldOutOfRange(f"a shard key must be >= 0, got {key}")
        return key
    if isinstance(key, uuid.UUID):
        return key.int
    if isinstance(key, str):
        key = key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        digest = hashlib.blake2b(bytes(key), digest_size=8).digest()
        return int.from_bytes(digest, "big")
    raise IdTypeError(
        f"a shard key must be int, str, bytes or UUID, got {type(key).__name__} {key!r}"
    )


def gene_of(key: object, bits: int) -> int:
    """The low ``bits`` bits of ``key`` (see :func:`key_to_int` for non-int keys)."""
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < 0:
        raise FieldOutOfRange(f"gene bits must be an int >= 0, got {bits!r}")
    return key_to_int(key) & ((1 << bits) - 1)
