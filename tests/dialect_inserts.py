"""INSERTs that meet existing rows, in each backend's own dialect, for the tests.

SQLite and PostgreSQL say ``ON CONFLICT (id) DO NOTHING / DO UPDATE`` and name the row's new
values ``excluded``; MariaDB says ``INSERT IGNORE`` / ``ON DUPLICATE KEY UPDATE`` and names
them ``inserted``. ``backend`` is a backend's name or a name starting with it
(``"mysql-2"``, ``"postgresql-2-async"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.dialects import mysql, postgresql, sqlite

__all__ = ["dialect_insert", "skipping_existing", "updating_existing"]


def _is_mysql(backend: str) -> bool:
    return backend.startswith("mysql")


def dialect_insert(backend: str, target: Any) -> Any:
    """``insert(target)`` of ``backend``'s dialect, which can take the clauses below."""
    if _is_mysql(backend):
        return mysql.insert(target)
    return (postgresql if backend.startswith("postgresql") else sqlite).insert(target)


def skipping_existing(backend: str, statement: Any) -> Any:
    """``statement`` (a :func:`dialect_insert`) skipping rows whose ID exists."""
    if _is_mysql(backend):
        return statement.prefix_with("IGNORE")
    return statement.on_conflict_do_nothing()


def updating_existing(
    backend: str, statement: Any, values: Callable[[Any], dict[str, Any]]
) -> Any:
    """``statement`` (a :func:`dialect_insert`) setting ``values(new)`` where the ID exists;
    ``new`` is the row's new values (``excluded``, MariaDB's ``inserted``)."""
    if _is_mysql(backend):
        return statement.on_duplicate_key_update(values(statement.inserted))
    return statement.on_conflict_do_update(index_elements=["id"], set_=values(statement.excluded))
