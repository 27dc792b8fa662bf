"""Names of a two-phase transaction: its group ID and the XIDs of its branches.

A group ID is ``<Unix ms>-<12 hex digits>`` (its creation time, then randomness); a
branch's XID is ``snowshard-<scope>.<group>:<database key>`` on PostgreSQL and the pair
``'snowshard-<scope>.<group>', '<database key>'`` on MariaDB/MySQL (each part at most 64
bytes, made of ``[A-Za-z0-9_.-]``), so an operator can pair the branches of a group and
recovery can tell snowshard's branches from any other (:mod:`.twophase`).

The *scope* (:func:`scope_of`, 8 hex digits) names the decisions database that holds the
group's decision. ``XA RECOVER`` lists every branch of a MariaDB server, so recovery run
for one application would otherwise see another's branches there, find no decision row
for them in its own decisions database, presume abort and roll back a group that its own
coordinator had decided to commit. Recovery leaves branches of another scope alone.
XIDs written before scopes existed (``snowshard-<group>``) carry none and are recovered
by any decisions database, as they were.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PREFIX", "Xid", "branch_name", "group_created_ms", "new_group", "scope_of"]

PREFIX = "snowshard-"

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_MAX_PART = 64  # MySQL: gtrid and bqual at most 64 bytes each
_HEX = frozenset("0123456789abcdef")
_SCOPE_DIGITS = 8


def scope_of(decisions_database: str | None) -> str:
    """The scope of groups whose decisions live in the database named
    ``decisions_database`` (its name in the engine's URL): 8 hex digits, or ``""`` (no
    scope) for a URL that names no database."""
    if not decisions_database:
        return ""
    digest = hashlib.blake2b(decisions_database.encode(), digest_size=_SCOPE_DIGITS // 2)
    return digest.hexdigest()


def new_group(now_ms: int | None = None) -> str:
    """A new group ID: ``<Unix ms>-<12 random hex digits>``."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return f"{ms}-{secrets.token_hex(6)}"


def group_created_ms(group: str) -> int | None:
    """The creation time (Unix ms) a group ID encodes, or None if it is not one."""
    ms, sep, rest = group.partition("-")
    if not sep or not ms.isdigit() or len(rest) != 12:
        return None
    if any(ch not in _HEX for ch in rest):
        return None
    return int(ms)


@dataclass(frozen=True)
class Xid:
    """A branch's transaction ID: its group, the database key it writes, and the scope of
    its decisions database (``""``: none, an XID of an earlier version)."""

    group: str
    database: str
    scope: str = ""

    @property
    def gtrid(self) -> str:
        """The global part, shared by every branch of the group
        (``snowshard-<scope>.<group>``, or ``snowshard-<group>`` without a scope)."""
        return PREFIX + (f"{self.scope}." if self.scope else "") + self.group

    def __str__(self) -> str:
        """The PostgreSQL GID form, also used in messages: ``<gtrid>:<key>``."""
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
        scope, dot, group = gtrid[len(PREFIX):].rpartition(".")
        if dot and (len(scope) != _SCOPE_DIGITS or any(ch not in _HEX for ch in scope)):
            return None
        if group_created_ms(group) is None:
            return None
        return cls(group, bqual, scope)

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
