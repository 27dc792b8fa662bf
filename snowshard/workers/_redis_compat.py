"""The one private redis-py name snowshard uses, kept apart from the SQLAlchemy compat module.

The Redis lease and issuer must not import SQLAlchemy, so this is not in
:mod:`snowshard._compat`. Supported: redis-py from the floor in ``pyproject.toml`` (5.1)
through 8.x; ``tests/test_compat.py`` allows private names here and nowhere else, and no
SQLAlchemy or Alembic import.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["redis_socket"]


def redis_socket(connection: Any) -> socket.socket | None:
    """The socket of a redis-py ``Connection`` (``None`` while it has none).

    redis-py versions 5.1 through 8.x keep it in the private ``_sock``, with no public
    accessor; :mod:`snowshard.workers.redis_connection` needs its addresses. On a redis-py
    without the attribute this returns ``None`` and the check it serves is skipped.
    """
    found = getattr(connection, "_sock", None)
    return found if isinstance(found, socket.socket) else None
