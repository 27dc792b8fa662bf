"""Database triggers of a reshard: change capture on the tables being moved, and fences.

* **Capture** (:func:`install_capture`): AFTER INSERT / UPDATE / DELETE row triggers that
  log, in the writer's own transaction, which primary key changed and its shard key
  (``snowshard_reshard_log``, :mod:`.state`): the new key for an INSERT, the old one for
  a DELETE, the new one for an UPDATE and the old one too when the UPDATE changed it.
  On PostgreSQL a BEFORE TRUNCATE trigger refuses a TRUNCATE, which no row trigger sees.
* **Fence** (:func:`install_fence`): BEFORE triggers refusing every write with an error
  whose text holds :data:`~snowshard.sharding.shard_map.FENCE_MARK`, which a sharded
  session turns into :class:`~snowshard.sharding.shard_map.StaleShardMap`. A BEFORE
  trigger fires before any AFTER trigger, so a refused write is never logged.
* :func:`fence_bypass` lets the reshard itself write through a fence, on one connection
  and in its current transaction: a transaction-local setting on PostgreSQL, a user
  variable on MariaDB; SQLite has neither, so its fence triggers skip while the table
  ``snowshard_fence_bypass`` holds the job's row, which the bypass inserts and deletes
  inside the caller's transaction (no other connection ever sees it committed).

Re-installing is idempotent **without a gap**: SQLite and MariaDB create only missing
triggers (``CREATE TRIGGER IF NOT EXISTS``; pysqlite and MariaDB commit each DDL
statement on its own, so a drop-then-create would leave a moment with no trigger),
PostgreSQL drops and creates them in one transaction (its DDL is transactional).

Names: ``ss_<hash of job>_<c|f><i|u|d>_<hash of table>``, well within MariaDB's 64
characters and unique per table and job. Every statement quotes identifiers with the
dialect's preparer; table names are never pasted unquoted.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Table

from snowshard.operations.reshard.errors import ReshardError
from snowshard.sharding.shard_map import FENCE_MARK

__all__ = [
    "TriggerError",
    "drop_capture",
    "drop_fence",
    "fence_bypass",
    "install_capture",
    "install_fence",
    "trigger_names",
]

SUPPORTED = ("sqlite", "postgresql", "mysql")
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9_~-]{0,63}")
_EVENTS = {"i": "INSERT", "u": "UPDATE", "d": "DELETE"}
_PG_BYPASS = "snowshard.fence_bypass"
_MY_BYPASS = "@snowshard_fence_bypass"
_SQLITE_BYPASS = "snowshard_fence_bypass"


class TriggerError(ReshardError):
    """A capture or fence trigger cannot be made: unsupported database or bad job name."""


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _check(connection: Connection, job: str) -> str:
    if not isinstance(job, str) or not _JOB.fullmatch(job):
        raise TriggerError(
            f"job {job!r} must be 1-64 letters, digits, '-', '_' or '~', starting with a "
            "letter or digit"
        )
    dialect = connection.dialect.name
    if dialect not in SUPPORTED:
        raise TriggerError(
            f"resharding triggers support {', '.join(SUPPORTED)} (MariaDB/MySQL), not "
            f"{dialect!r}"
        )
    return dialect


def _name(table: Table, job: str, kind: str, event: str) -> str:
    return f"ss_{_short(job)}_{kind}{event}_{_short(table.name)}"


def trigger_names(table: Table, *, job: str) -> list[str]:
    """Every trigger name this module may create on ``table`` for ``job``."""
    capture = [_name(table, job, "c", event) for event in (*_EVENTS, "m", "t")]
    return capture + [_name(table, job, "f", event) for event in _EVENTS]


def _q(connection: Connection, name: str) -> str:
    return connection.dialect.identifier_preparer.quote_identifier(name)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _exec(connection: Connection, sql: str) -> None:
    connection.exec_driver_sql(sql)  # no parameters, and no % in any statement here


# ---------------------------------------------------------------------- capture


def _log_insert(connection: Connection, table: Table, job: str, row: str, key: str, pk: str) -> str:
    log = _q(connection, "snowshard_reshard_log")
    return (
        f"INSERT INTO {log} (job, tbl, pk, shard_key) VALUES "
        f"({_literal(job)}, {_literal(table.name)}, {row}.{_q(connection, pk)}, "
        f"{row}.{_q(connection, key)})"
    )


def install_capture(connection: Connection, table: Table, *, job: str, pk: str, key: str) -> None:
    """Log every change of ``table`` under ``job`` (idempotent)."""
    dialect = _check(connection, job)
    if dialect == "postgresql":  # transactional DDL: the drop and the creates are atomic
        drop_capture(connection, table, job=job)
    target = connection.dialect.identifier_preparer.format_table(table)
    keyq = _q(connection, key)
    create = "CREATE TRIGGER" if dialect == "postgresql" else "CREATE TRIGGER IF NOT EXISTS"
    for event, verb in _EVENTS.items():
        name = _q(connection, _name(table, job, "c", event))
        rows = {"i": ["NEW"], "d": ["OLD"], "u": ["NEW"]}[event]
        inserts = [_log_insert(connection, table, job, row, key, pk) for row in rows]
        moved = _log_insert(connection, table, job, "OLD", key, pk)
        if dialect == "postgresql":
            function = _q(connection, _name(table, job, "c", event) + "_fn")
            body = "; ".join(inserts)
            if event == "u":
                body += f"; IF OLD.{keyq} IS DISTINCT FROM NEW.{keyq} THEN {moved}; END IF"
            _exec(connection, (
                f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS "
                f"$ss$ BEGIN {body}; RETURN NULL; END $ss$"
            ))
            _exec(connection, (
                f"CREATE TRIGGER {name} AFTER {verb} ON {target} FOR EACH ROW "
                f"EXECUTE FUNCTION {function}()"
            ))
        elif dialect == "mysql":
            body = "; ".join(inserts)
            if event == "u":
                body += f"; IF NOT (OLD.{keyq} <=> NEW.{keyq}) THEN {moved}; END IF"
            _exec(connection, (
                f"{create} {name} AFTER {verb} ON {target} FOR EACH ROW BEGIN {body}; END"
            ))
        else:
            body = "; ".join(inserts)
            _exec(connection, (
                f"{create} {name} AFTER {verb} ON {target} FOR EACH ROW BEGIN {body}; END"
            ))
            if event == "u":
                _exec(connection, (
                    f"{create} {_q(connection, _name(table, job, 'c', 'm'))} AFTER UPDATE "
                    f"ON {target} FOR EACH ROW WHEN OLD.{keyq} IS NOT NEW.{keyq} "
                    f"BEGIN {moved}; END"
                ))
    if dialect == "postgresql":
        # TRUNCATE fires no row trigger: the target would keep rows the source lost.
        # Refuse it while the move runs (MariaDB's TRUNCATE fires no trigger at all, and
        # SQLite has none: its DELETE without WHERE fires the row triggers above).
        raw = _name(table, job, "c", "t")
        function = _q(connection, raw + "_fn")
        refusal = (f"snowshard: table {table.name} is being resharded (job {job}); a TRUNCATE "
                   "cannot be captured: roll the job back (or finish it) first")
        _exec(connection, (
            f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$ss$ BEGIN RAISE EXCEPTION {_literal(refusal)} USING ERRCODE = '55000'; END $ss$"
        ))
        _exec(connection, (
            f"CREATE TRIGGER {_q(connection, raw)} BEFORE TRUNCATE ON {target} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        ))


def drop_capture(connection: Connection, table: Table, *, job: str) -> None:
    """Drop ``job``'s capture triggers of ``table`` (idempotent)."""
    _drop(connection, table, job, "c", [*_EVENTS, "m", "t"])


def _drop(connection: Connection, table: Table, job: str, kind: str, events: list[str]) -> None:
    dialect = _check(connection, job)
    target = connection.dialect.identifier_preparer.format_table(table)
    for event in events:
        raw = _name(table, job, kind, event)
        if dialect == "postgresql":
            _exec(connection, f"DROP TRIGGER IF EXISTS {_q(connection, raw)} ON {target}")
            _exec(connection, f"DROP FUNCTION IF EXISTS {_q(connection, raw + '_fn')}()")
        else:
            _exec(connection, f"DROP TRIGGER IF EXISTS {_q(connection, raw)}")


# ---------------------------------------------------------------------- fence


def _message(table: Table) -> str:
    return f"{FENCE_MARK}: table {table.name} was moved by a reshard"


def install_fence(connection: Connection, table: Table, *, job: str) -> None:
    """Refuse every write to ``table`` (idempotent)."""
    dialect = _check(connection, job)
    if dialect == "postgresql":
        drop_fence(connection, table, job=job)
    elif dialect == "sqlite":
        _exec(connection, f"CREATE TABLE IF NOT EXISTS {_q(connection, _SQLITE_BYPASS)} (job TEXT PRIMARY KEY)")
    target = connection.dialect.identifier_preparer.format_table(table)
    message = _message(table)
    for event, verb in _EVENTS.items():
        raw = _name(table, job, "f", event)
        name = _q(connection, raw)
        if dialect == "postgresql":
            function = _q(connection, raw + "_fn")
            _exec(connection, (
                f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $ss$ "
                f"BEGIN IF coalesce(current_setting({_literal(_PG_BYPASS)}, true), '') = 'on' THEN "
                f"RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END; END IF; "
                f"RAISE EXCEPTION {_literal(message.replace('%', ''))}; END $ss$"
            ))
            _exec(connection, (
                f"CREATE TRIGGER {name} BEFORE {verb} ON {target} FOR EACH ROW "
                f"EXECUTE FUNCTION {function}()"
            ))
        elif dialect == "mysql":
            _exec(connection, (
                f"CREATE TRIGGER IF NOT EXISTS {name} BEFORE {verb} ON {target} FOR EACH ROW "
                f"IF {_MY_BYPASS} IS NULL OR {_MY_BYPASS} <> 1 THEN "
                f"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = {_literal(message[:120])}; END IF"
            ))
        else:
            bypass = _q(connection, _SQLITE_BYPASS)
            _exec(connection, (
                f"CREATE TRIGGER IF NOT EXISTS {name} BEFORE {verb} ON {target} FOR EACH ROW "
                f"WHEN NOT EXISTS (SELECT 1 FROM {bypass} WHERE job = {_literal(job)}) "
                f"BEGIN SELECT RAISE(ABORT, {_literal(message)}); END"
            ))


def drop_fence(connection: Connection, table: Table, *, job: str) -> None:
    """Let writes reach ``table`` again (idempotent)."""
    _drop(connection, table, job, "f", list(_EVENTS))


@contextmanager
def fence_bypass(connection: Connection, table: Table, *, job: str) -> Iterator[None]:
    """Writes through ``connection``, in its current transaction, pass ``table``'s fence."""
    dialect = _check(connection, job)
    if dialect == "postgresql":
        _exec(connection, f"SELECT set_config({_literal(_PG_BYPASS)}, 'on', true)")
        try:
            yield
        finally:
            _exec(connection, f"SELECT set_config({_literal(_PG_BYPASS)}, '', true)")
    elif dialect == "mysql":
        _exec(connection, f"SET {_MY_BYPASS} = 1")
        try:
            yield
        finally:
            _exec(connection, f"SET {_MY_BYPASS} = NULL")
    else:
        bypass = _q(connection, _SQLITE_BYPASS)
        _exec(connection, f"INSERT OR IGNORE INTO {bypass} (job) VALUES ({_literal(job)})")
        try:
            yield
        finally:
            _exec(connection, f"DELETE FROM {bypass} WHERE job = {_literal(job)}")
