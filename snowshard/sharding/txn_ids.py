"""Names of a two-phase transaction: its group ID and the XIDs of its branches.

A group ID is ``<Unix ms>-<12 hex digits>`` (its creation time, then randomness); a
branch's XID is ``snowshard-<group>:<database key>`` on PostgreSQL and the pair
``'snowshard-<group>', '<database key>'`` on MariaDB/MySQL (each part at most 64 bytes,
made of ``[A-Za-z0-9_.-]``), so an operator can pair the branches of a group and recovery
can tell snowshard's branches from any other (:mod:`.twophase`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PREFIX", "Xid", "branch_name", "group_created_ms", "new_group"]

PREFIX = "snowshard-"

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_MAX_PART = 64  # MySQL: gtrid and bqual at most 64 bytes each


def new_group(now_ms: int | None = None) -> str:
    """A new group ID: ``<Unix ms>-<12 random hex digits>``."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return f"{ms}-{secrets.token_hex(6)}"


def group_created_ms(group: str) -> int | None:
    """The creation time (Unix ms) a group ID encodes, or None if it is not one."""
    ms, sep, rest = group.partition("-")
    if not sep or not ms.isdigit() or len(rest) != 12:
        return None
    if any(ch not in "0123456789abcdef" for ch in rest):
        return None
    return int(ms)


@dataclass(frozen=True)
class Xid:
    """A branch's transaction ID: its group, and the database key it writes."""

    group: str
    database: str

    @property
    def gtrid(self) -> str:
        """The global part, shared by every branch of the group (``snowshard-<group>``)."""
        return PREFIX + self.group

    def __str__(self) -> str:
        """The PostgreSQL GID form, also used in messages: ``snowshard-<group>:<key>``."""
        return f"{self.gtrid}:{self.database}"

    def literal(self, backend: str) -> str:
        """The SQL literal naming this branch (``'gid'``, or ``'gtrid','bqual'`` on MySQL).

        Both parts are made of ``[A-Za-z0-9_.-]`` only (checked on creation and parsing).
        """
        if backend == "mysql":
            return f"'{self.gtrid}','{self.database}'"
        return f"'{self}'"

    @classmethod
    def parse(cls, gtrid: str, bqual: str) -> Xid | None:
        """The branch these parts name, or None if snowshard did not create them."""
        if not gtrid.startswith(PREFIX) or not _is_safe(bqual):
            return None
        group = gtrid[len(PREFIX):]
        if group_created_ms(group) is None:
            return None
        return cls(group, bqual)

    @classmethod
    def parse_gid(cls, gid: str) -> Xid | None:
        """The branch a PostgreSQL GID names, or None if snowshard did not create it."""
        gtrid, sep, bqual = gid.partition(":")
        return cls.parse(gtrid, bqual) if sep else None


def _is_safe(name: str) -> bool:
    return 0 < len(name) <= _MAX_PART and all(ch in _SAFE for ch in name)


def branch_name(key: str, taken: Iterable[str]) -> str:
    """``key`` as an XID part: unsafe characters become ``_``, cut to fit, made unique."""
    base = "".join(ch if ch in _SAFE else "_" for ch in key)[:_MAX_PART - 4] or "db"
    used = set(taken)
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{base}.{n}"  # "." is safe: recovery must be able to read the name back
    return name
