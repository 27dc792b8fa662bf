"""Change capture by PostgreSQL logical replication, instead of triggers.

``ReshardPlan(capture="logical")`` (CLI ``--capture logical``) captures the source tables'
changes from the write-ahead log: no trigger runs in the writers' transactions. On each
source database it sets ``REPLICA IDENTITY FULL`` on the source tables (so a DELETE
carries the row's shard key), creates a publication of them and a logical replication
slot using the built-in ``pgoutput`` plugin, before the copy starts. The server needs
``wal_level = logical``; anything else is refused up front with
:class:`~.errors.ReshardPlanError`.

:func:`pump` turns what the slot decoded into rows of the same change log the triggers
write (``snowshard_reshard_log``: table, primary key, shard key), then moves the slot past
them; the catch-up (:mod:`.catchup`) applies the log as it always does. The log rows are
committed before the slot moves, so a crash in between only logs a change twice, which
applying makes harmless (applying is idempotent).

Changes are read with ``pg_logical_slot_peek_binary_changes`` and parsed here (the
``pgoutput`` protocol, version 1: relation, insert, update, delete and truncate
messages). A TRUNCATE of a source table during a move cannot be replayed as row changes:
it stops the catch-up with :class:`~.errors.ReshardError`.

The slot holds back WAL until it moves: ``cutover`` and ``rollback`` drop it once the
source no longer needs watching, and ``cleanup`` drops whatever is left.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, Table, insert, text

from snowshard.operations.reshard.errors import ReshardError, ReshardPlanError
from snowshard.operations.reshard.state import LOG
from snowshard.redaction import redact_sqlalchemy_url

__all__ = [
    "Change",
    "PgOutputReader",
    "check_logical",
    "drop_logical",
    "install_logical",
    "pump",
    "slot_name",
]

PEEK_CHANGES = 5000
"""Decoded messages read per peek (whole transactions: a peek ends after the one that
crosses it)."""


def slot_name(job: str, database: str) -> str:
    """The slot's (and publication's) name for ``job`` in ``database`` (slots are named
    per server, so two source databases of one server need two names): lowercase, at most
    63 characters."""
    return "snowshard_" + hashlib.blake2b(f"{job}\0{database}".encode(), digest_size=8).hexdigest()


def _slot(connection: Connection, job: str) -> str:
    database = connection.execute(text("SELECT current_database()")).scalar_one()
    return slot_name(job, str(database))


def _slot_exists(connection: Connection, name: str) -> bool:
    return bool(connection.execute(
        text("SELECT 1 FROM pg_replication_slots WHERE slot_name = :name"), {"name": name}
    ).scalar())


# --------------------------------------------------------------------------- pgoutput


@dataclass(frozen=True)
class Change:
    """One row change: ``kind`` (``"I"``, ``"U"``, ``"D"``) in table ``table``, with the
    text values of the old row (``U``/``D``, by column name) and of the new one (``I``/``U``)."""

    kind: str
    table: str
    old: Mapping[str, str | None] | None
    new: Mapping[str, str | None] | None


@dataclass
class PgOutputReader:
    """Parses ``pgoutput`` (protocol 1) messages, one ``bytes`` each, into :class:`Change`.

    Keeps the relations (id -> table name and column names) that ``R`` messages announce.
    """

    relations: dict[int, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    def read(self, message: bytes) -> Change | None:
        """The change ``message`` holds, or None for begin/commit/relation/type/origin."""
        kind = chr(message[0])
        body = memoryview(message)[1:]
        if kind == "R":
            self._relation(body)
            return None
        if kind in "IUD":
            return self._change(kind, body)
        if kind == "T":
            (count,) = struct.unpack_from(">i", body, 0)
            ids = struct.unpack_from(f">{count}i", body, 5)
            names = [self.relations.get(i, (f"relation {i}", ()))[0] for i in ids]
            raise ReshardError(
                f"source tables {names} were truncated during the move; TRUNCATE cannot be "
                "replayed row by row: roll the job back and start it again"
            )
        return None  # B(egin), C(ommit), Y (type), O(rigin), M(essage)

    def _relation(self, body: memoryview) -> None:
        (relid,) = struct.unpack_from(">i", body, 0)
        at = 4
        _namespace, at = _string(body, at)
        name, at = _string(body, at)
        at += 1  # replica identity setting
        (count,) = struct.unpack_from(">h", body, at)
        at += 2
        columns = []
        for _ in range(count):
            at += 1  # flags (part of the key)
            column, at = _string(body, at)
            at += 8  # type oid, type modifier
            columns.append(column)
        self.relations[relid] = (name, tuple(columns))

    def _change(self, kind: str, body: memoryview) -> Change:
        (relid,) = struct.unpack_from(">i", body, 0)
        if relid not in self.relations:
            raise ReshardError(f"pgoutput sent a change of relation {relid} before describing it")
        table, columns = self.relations[relid]
        at = 4
        old = new = None
        if kind in "UD" and chr(body[at]) in "KO":
            values, at = _tuple(body, at + 1)
            old = dict(zip(columns, values))
        if kind in "IU":
            if chr(body[at]) != "N":
                raise ReshardError(f"pgoutput {kind} message of {table}: expected a new tuple")
            values, at = _tuple(body, at + 1)
            new = dict(zip(columns, values))
        return Change(kind, table, old, new)


def _string(body: memoryview, at: int) -> tuple[str, int]:
    end = bytes(body[at:]).index(0) + at
    return bytes(body[at:end]).decode(), end + 1


def _tuple(body: memoryview, at: int) -> tuple[list[str | None], int]:
    (count,) = struct.unpack_from(">h", body, at)
    at += 2
    values: list[str | None] = []
    for _ in range(count):
        kind = chr(body[at])
        at += 1
        if kind == "t":
            (length,) = struct.unpack_from(">i", body, at)
            at += 4
            values.append(bytes(body[at : at + length]).decode())
            at += length
        else:  # 'n' NULL, 'u' unchanged TOAST value (never a key column)
            values.append(None)
    return values, at


def log_rows(change: Change, pk: str, key: str) -> Iterator[tuple[str, int, int | None]]:
    """The change log rows (table, pk, shard key) of ``change``, as the triggers log them:
    the new key of an INSERT, the old one of a DELETE, the new one of an UPDATE and the old
    one too when the UPDATE changed it."""
    rows = [row for row in (change.old, change.new) if row is not None]
    seen: set[tuple[int, int | None]] = set()
    for row in rows:
        value = row.get(pk)
        if value is None:
            raise ReshardError(f"a change of {change.table} carries no {pk!r} value")
        shard = row.get(key)
        entry = (int(value), None if shard is None else int(shard))
        if entry not in seen:
            seen.add(entry)
            yield change.table, entry[0], entry[1]


# --------------------------------------------------------------------------- slot and publication


def check_logical(engine: Engine) -> None:
    """Refuse a source database that cannot be captured by logical replication."""
    url = redact_sqlalchemy_url(engine.url)
    if engine.dialect.name != "postgresql":
        raise ReshardPlanError(
            f"capture='logical' needs PostgreSQL source databases, not {engine.dialect.name} "
            f"({url}); use capture='triggers'"
        )
    with engine.connect() as connection:
        level = connection.execute(text("SHOW wal_level")).scalar()
    if level != "logical":
        raise ReshardPlanError(
            f"capture='logical' needs wal_level = logical on {url} (it is {level}): set it "
            "(ALTER SYSTEM SET wal_level = logical) and restart the server, or use "
            "capture='triggers'"
        )


def _quoted(connection: Connection, tables: Sequence[Table]) -> str:
    preparer = connection.dialect.identifier_preparer
    return ", ".join(preparer.format_table(table) for table in tables)


def _replica_identity(connection: Connection, table: Table, identity: str) -> None:
    connection.execute(text(f"ALTER TABLE {_quoted(connection, [table])} REPLICA IDENTITY {identity}"))


def install_logical(engine: Engine, job: str, tables: Sequence[Table]) -> None:
    """Replica identity, publication and slot for ``tables`` of one database (idempotent)."""
    with engine.begin() as connection:
        name = _slot(connection, job)
        for table in tables:
            _replica_identity(connection, table, "FULL")
        exists = connection.execute(
            text("SELECT 1 FROM pg_publication WHERE pubname = :name"), {"name": name}
        ).scalar()
        if not exists:
            connection.execute(text(f"CREATE PUBLICATION {name} FOR TABLE {_quoted(connection, tables)}"))
    # a logical slot cannot be made in a transaction that wrote: a connection of its own
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        if not _slot_exists(connection, name):
            connection.execute(
                text("SELECT pg_create_logical_replication_slot(:name, 'pgoutput')"), {"name": name}
            )


def drop_logical(engine: Engine, job: str, tables: Sequence[Table] = ()) -> None:
    """Drop the slot and publication of ``job`` (idempotent); ``tables`` that still exist
    get their replica identity back to the default."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        name = _slot(connection, job)
        if _slot_exists(connection, name):
            connection.execute(text("SELECT pg_drop_replication_slot(:name)"), {"name": name})
        connection.execute(text(f"DROP PUBLICATION IF EXISTS {name}"))
        for table in tables:
            if connection.dialect.has_table(connection, table.name):
                _replica_identity(connection, table, "DEFAULT")


_PEEK = text(
    "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(CAST(:slot AS name), "
    "CAST(:upto AS pg_lsn), CAST(:limit AS integer), 'proto_version', '1', "
    "'publication_names', CAST(:slot AS text))"
)


def pump(engine: Engine, job: str, log_job: str, pk: str, key: str) -> int:
    """Move what the slot of ``job`` decoded into the change log of this database (as
    ``log_job``); returns the log rows written. Reads up to the WAL position of the call,
    so writers that keep writing cannot keep it going."""
    written = 0
    with engine.connect() as connection:
        name = _slot(connection, job)
        if not _slot_exists(connection, name):
            return 0  # dropped at cutover or rollback: nothing left to capture
        upto = connection.execute(text("SELECT pg_current_wal_lsn()::text")).scalar_one()
    while True:
        reader = PgOutputReader()
        with engine.connect() as connection:
            messages = connection.execute(_PEEK, {"slot": name, "upto": upto, "limit": PEEK_CHANGES}).all()
        if not messages:
            return written
        rows: list[dict[str, object]] = []
        last_commit: str | None = None
        for lsn, data in messages:
            change = reader.read(bytes(data))
            if change is not None:
                rows.extend(
                    {"job": log_job, "tbl": table, "pk": pk_value, "shard_key": shard}
                    for table, pk_value, shard in log_rows(change, pk, key)
                )
            if bytes(data[:1]) == b"C":
                last_commit = lsn
        if last_commit is None:
            return written  # nothing committed decoded yet
        with engine.begin() as connection:
            for start in range(0, len(rows), 1000):
                connection.execute(insert(LOG), rows[start : start + 1000])
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(
                text("SELECT pg_replication_slot_advance(:slot, CAST(:lsn AS pg_lsn))"),
                {"slot": name, "lsn": last_commit},
            )
        written += len(rows)
