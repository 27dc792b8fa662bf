"""The session settings that change what a statement returns, kept equal across the
databases one sharded session uses.

A statement across databases gives one table's answer only if every database computes
as one server would. Some settings decide values, not only their form: PostgreSQL's
``TimeZone`` decides on which day a ``timestamp with time zone`` falls
(``cast(ts AS DATE)``, ``date_trunc``) and which instant a naive timestamp names;
``DateStyle``, ``IntervalStyle`` and ``extra_float_digits`` how values are read. On
MariaDB and MySQL, ``time_zone`` (the host's zone where it is ``SYSTEM``) decides the
local time a ``TIMESTAMP`` reads as, ``div_precision_increment`` the digits of a quotient,
``sql_mode`` and ``collation_connection`` how expressions and literals compare. Servers
set up apart differ in them silently: ``initdb`` takes the host's time zone.

Each connection reads these settings once, the first time a sharded session begins a
transaction on it (on the driver's own cursor, so no SQL event sees it; kept in the
connection's ``info``), after the session has begun its two-phase branch there. The
session compares them with those of the other databases (and replicas) it has used and
raises :class:`ServerSettingsDiffer`, naming the setting, the databases and their values,
before the statement runs. A setting changed later with ``SET`` on an open connection is
not seen; MariaDB's quotients are also checked per statement (:mod:`~.evaluate`).
"""

from __future__ import annotations

from threading import Lock

from sqlalchemy.engine import Connection

from snowshard.errors import ShardConfigError
from snowshard.sharding.errors import ShardingError

__all__ = ["ServerSettingsDiffer", "SettingsCheck", "settings_of"]

Settings = tuple[tuple[str, str], ...]
"""(name, value) of each setting, in a fixed order."""

_POSTGRES = ("TimeZone", "DateStyle", "IntervalStyle", "extra_float_digits")
_MARIADB = ("time_zone", "div_precision_increment", "sql_mode", "collation_connection")
_QUERIES = {
    "postgresql": "SELECT " + ", ".join(f"current_setting('{name}')" for name in _POSTGRES),
    "mysql": "SELECT @@session.time_zone, @@session.div_precision_increment, "
    "@@session.sql_mode, @@session.collation_connection, @@system_time_zone",
}
_INFO_KEY = "snowshard.server_settings"

_WHERE = {
    "TimeZone": "postgresql.conf's timezone, ALTER DATABASE ... SET timezone, or the "
    "connection's options='-c timezone=UTC'",
    "time_zone": "default_time_zone in the server's configuration, or SET time_zone in a "
    "connect event",
}


class ServerSettingsDiffer(ShardingError, ShardConfigError):
    """The databases (or replicas) one sharded session uses run with different settings
    that change what a statement returns (time zone, quotient digits, SQL mode...)."""


def settings_of(connection: Connection) -> Settings | None:
    """The settings of ``connection``'s database session that change what statements
    return (read once per connection); None on databases without such settings (SQLite)."""
    dialect = "mysql" if connection.dialect.name == "mariadb" else connection.dialect.name
    query = _QUERIES.get(dialect)
    if query is None:
        return None
    info = connection.info
    found: Settings | None = info.get(_INFO_KEY)
    if found is None:
        cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(query)
            row = [str(value) for value in cursor.fetchone() or ()]
        finally:
            cursor.close()
        if dialect == "postgresql":
            found = tuple(zip(_POSTGRES, row))
        else:  # the zone SYSTEM stands for is the host's
            zone = row[4] if row[0] == "SYSTEM" else row[0]
            found = tuple(zip(_MARIADB, [zone, *row[1:4]]))
        info[_INFO_KEY] = found
    return found


class SettingsCheck:
    """One session's settings of each database it began a transaction on, compared as
    each is added."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, Settings]] = {}
        """Database (or replica) name -> its dialect and settings."""
        self._lock = Lock()  # a fan-out begins its databases from several threads

    def began(self, database: tuple[str, bool], connection: Connection) -> None:
        """Add the settings of ``connection``, to ``database`` (its key, and whether it is
        a replica); raise :class:`ServerSettingsDiffer` where another database of its
        kind has other values."""
        try:
            settings = settings_of(connection)
        except connection.dialect.loaded_dbapi.Error:
            return  # a lost connection: the statement fails on it, named, and says so
        if settings is None:
            return
        key, replica = database
        name = f"a replica of database {key!r}" if replica else f"database {key!r}"
        dialect = connection.dialect.name
        with self._lock:
            for other, (kind, theirs) in self.seen.items():
                if other == name or kind != dialect or theirs == settings:
                    continue
                setting, mine, their = next(
                    (n, v, t) for (n, v), (_, t) in zip(settings, theirs) if v != t
                )
                where = _WHERE.get(setting, "the servers' configuration")
                raise ServerSettingsDiffer(
                    f"{other} and {name} run with different {setting} ({their!r} and "
                    f"{mine!r}): a statement across them would compute what depends on it "
                    f"otherwise than one server; set the same {setting} on every server "
                    f"({where})"
                )
            self.seen[name] = (dialect, settings)

