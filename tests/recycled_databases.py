"""PostgreSQL test databases, recycled: emptied and renamed at teardown instead of dropped.

``CREATE DATABASE`` copies the template's catalog (about 7 MB) through the WAL: 70-350 ms a
database, measured on the CI VM, which made it a third of the sharding tests' time; emptying
a used database and renaming it takes a few tens of milliseconds. What the suite relies on
holds: every test gets an empty database under a name never used before, and the name a
test used is gone once it ends (its connections are ended before the rename, so a leaked
connection or a stray thread cannot reach the next test's database by the old name).

A database is recycled only when nothing outside its schemas is left: one with prepared
transactions, replication slots or subscriptions, or with anything still in it after its
schemas are dropped, is dropped as before. Only the shared servers' databases are recycled
(the caller decides); a server a test starts, and may stop, keeps plain drops.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager

import sqlalchemy as sa

__all__ = ["RecycledDatabases"]

Admin = Callable[[str], AbstractContextManager[sa.Connection]]
DETACH_TIMEOUT = 5.0  # seconds to wait for ended connections to go

_BLOCKERS = """
SELECT (SELECT count(*) FROM pg_prepared_xacts WHERE database = :name)
     + (SELECT count(*) FROM pg_replication_slots WHERE database = :name)
     + (SELECT count(*) FROM pg_subscription s JOIN pg_database d ON d.oid = s.subdbid
        WHERE d.datname = :name)
"""
_USER_SCHEMAS = r"""
SELECT nspname FROM pg_namespace
WHERE nspname NOT IN ('pg_catalog', 'information_schema')
  AND nspname NOT LIKE 'pg\_toast%' AND nspname NOT LIKE 'pg\_temp\_%'
"""
# What an empty database from template0 has none of (plpgsql is template0's own extension).
_LEFTOVERS = r"""
SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp\_%')
     + (SELECT count(*) FROM pg_namespace WHERE nspname NOT IN ('pg_catalog',
        'information_schema', 'public') AND nspname NOT LIKE 'pg\_toast%'
        AND nspname NOT LIKE 'pg\_temp\_%')
     + (SELECT count(*) FROM pg_extension WHERE extname <> 'plpgsql')
     + (SELECT count(*) FROM pg_publication)
     + (SELECT count(*) FROM pg_event_trigger)
     + (SELECT count(*) FROM pg_largeobject_metadata)
     + (SELECT count(*) FROM pg_default_acl)
     + (SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
        WHERE d.datname = current_database())
"""


def _quoted(conn: sa.Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote_identifier(name)


class RecycledDatabases:
    """Empty PostgreSQL databases kept for reuse, per (server, creation options).

    ``admin(url)`` opens an autocommit connection to the database ``url`` names;
    ``new_name()`` gives a database name never used before; ``drop(server, name)`` drops
    a database, ending its connections.
    """

    def __init__(
        self, admin: Admin, new_name: Callable[[], str], drop: Callable[[str, str], None]
    ) -> None:
        self._admin = admin
        self._new_name = new_name
        self._drop = drop
        self._free: defaultdict[tuple[str, str | None], list[str]] = defaultdict(list)

    def take(self, server: str, options: str | None) -> str | None:
        """An empty database's name on ``server`` made with ``options``, or None."""
        free = self._free.get((server, options))
        return free.pop(0) if free else None

    def give_back(self, server: str, options: str | None, name: str) -> bool:
        """End ``name``'s connections, rename it, empty it and keep it; False when it is
        left as it was, for the caller to drop (something outside its schemas holds it)."""
        fresh = self._new_name()
        with self._admin(server) as conn:
            if not self._detached(conn, name):
                return False
            try:
                conn.exec_driver_sql(
                    f"ALTER DATABASE {_quoted(conn, name)} RENAME TO {_quoted(conn, fresh)}"
                )
            except sa.exc.DBAPIError:  # someone connected again in between
                return False
            conn.exec_driver_sql(f"ALTER DATABASE {_quoted(conn, fresh)} RESET ALL")
        emptied = False
        with contextlib.suppress(sa.exc.DBAPIError):
            emptied = self._emptied(sa.engine.make_url(server).set(database=fresh))
        if emptied:
            self._free[(server, options)].append(fresh)
        else:
            self._drop(server, fresh)
        return True

    def drop_all(self) -> list[str]:
        """Drop every kept database; the problems, one line each (none: all dropped)."""
        problems = []
        for (server, _), names in self._free.items():
            while names:
                name = names.pop()
                try:
                    self._drop(server, name)
                except sa.exc.DBAPIError as exc:
                    problems.append(f"postgresql {name}: {type(exc).__name__}: {exc}")
        return problems

    def _detached(self, conn: sa.Connection, name: str) -> bool:
        """End every other connection to ``name``: False if something else holds it."""
        if conn.execute(sa.text(_BLOCKERS), {"name": name}).scalar_one():
            return False
        others = sa.text(
            "SELECT pid FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"
        )
        deadline = time.monotonic() + DETACH_TIMEOUT
        while pids := list(conn.execute(others, {"name": name}).scalars()):
            if time.monotonic() > deadline:
                return False
            for pid in pids:
                conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            time.sleep(0.01)
        return True

    def _emptied(self, url: sa.URL) -> bool:
        """Drop the schemas and publications of the database at ``url``, make ``public``
        as template0 has it, and say whether nothing else is left."""
        with self._admin(url.render_as_string(hide_password=False)) as conn:
            for schema in conn.execute(sa.text(_USER_SCHEMAS)).scalars().all():
                conn.exec_driver_sql(f"DROP SCHEMA {_quoted(conn, schema)} CASCADE")
            publications = conn.exec_driver_sql("SELECT pubname FROM pg_publication")
            for publication in publications.scalars().all():
                conn.exec_driver_sql(f"DROP PUBLICATION {_quoted(conn, publication)}")
            version = conn.dialect.server_version_info or (0,)
            owner = "pg_database_owner" if version >= (14,) else "CURRENT_USER"
            conn.exec_driver_sql(f"CREATE SCHEMA public AUTHORIZATION {owner}")
            conn.exec_driver_sql("GRANT USAGE ON SCHEMA public TO PUBLIC")
            conn.exec_driver_sql("COMMENT ON SCHEMA public IS 'standard public schema'")
            left: int = conn.execute(sa.text(_LEFTOVERS)).scalar_one()
        return left == 0
