"""How a sharded operation runs: each physical table of the database being migrated in turn.

Every sharded operation of :mod:`snowshard.migrations.ops` is implemented by
:func:`run_sharded` (registered with Alembic's ``Operations.implementation_for``).

**Which tables.** An operation touches the physical tables of ``spec`` that live in the
database being migrated *now*: ``spec.tables_in(key)``, where ``key`` is the
``snowshard_database`` option given to ``context.configure()`` in ``env.py`` (the
multi-database environment passes each database's name). Without that option a spec kept
in one database is migrated in whatever database the environment runs on (a single-database
``env.py`` needs no option), and a spec spread over several databases raises
:class:`ShardMigrationError` rather than guessing, whatever its database keys are called. A
database that holds none of the spec's tables is left alone.

**Resuming.** Online, each physical table is checked with the SQLAlchemy inspector first and
skipped when it already has the change (:mod:`snowshard.migrations.inspection`). A failure
on one table raises :class:`ShardMigrationError` naming the database and the table and
listing the tables done before it; after fixing the cause, running the same upgrade again
completes it. Offline (``--sql``) nothing can be inspected, so the DDL for every table is
written out.

**MariaDB and MySQL commit DDL implicitly.** PostgreSQL and SQLite run DDL inside the
migration's transaction: when shard 7 fails, the environment rolls back and no table keeps
the change. MariaDB/MySQL commit before and after every ``CREATE``/``ALTER``/``DROP``, so the
tables changed before the failure stay changed, and rolling back cannot undo them (it only
undoes pending DML such as the ``alembic_version`` update, so the database keeps reporting
the previous revision). That half-applied state is what the idempotent operations are for:
fix the cause and run ``alembic upgrade`` again; the tables already changed are skipped and
the rest are done. Plain Alembic operations in the same revision are not idempotent on their
own; give them ``if_not_exists=True`` / ``if_exists=True`` where the backend supports it.

**SQLite** cannot ``ALTER`` a column or add and drop constraints, so on SQLite
``alter_sharded_column``, ``drop_sharded_column``, the constraint operations and
``add_sharded_column`` of a column with a foreign key run each table through Alembic's batch
mode (``recreate="auto"``: the table is copied). Batch mode needs to reflect the table, so
those operations are online-only on SQLite.

**Drops** run by name, as an operation written by hand: the definition a drop carries (so
that it can be reversed) is left out of what runs on each table.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from alembic.runtime.migration import MigrationContext

from snowshard._compat import alembic_reverse, set_alembic_reverse
from snowshard.errors import SnowshardError
from snowshard.migrations.inspection import applied
from snowshard.migrations.naming import Shard
from snowshard.migrations.ops import SHARDED_OPERATIONS, ShardedOperation
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError, ShardSpec

__all__ = ["DATABASE_OPTION", "ShardMigrationError", "current_database", "run_sharded"]

log = logging.getLogger(__name__)

DATABASE_OPTION = "snowshard_database"
"""The ``context.configure()`` keyword naming the database (bind key) being migrated."""


class ShardMigrationError(SnowshardError):
    """A sharded operation failed on one physical table (or cannot tell which tables).

    ``database`` is the bind key, ``table`` the physical table that failed and ``done`` the
    tables of that database changed before it in this run. On MariaDB/MySQL those keep the
    change (DDL commits implicitly); running the upgrade again skips them and finishes.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str = "",
        database: str | None = None,
        table: str | None = None,
        done: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.database = database
        self.table = table
        self.done = tuple(done)


def current_database(context: MigrationContext, spec: ShardSpec | None = None) -> str:
    """The bind key being migrated: ``context.configure(snowshard_database=...)``.

    Without the option, a ``spec`` kept in one database is migrated wherever the
    environment runs (its one key is returned), and without a ``spec`` this is
    ``"default"``. A ``spec`` spread over several databases raises
    :class:`ShardMigrationError`: every database would otherwise get the same tables
    (those of whichever key was assumed) and the others none, whatever the keys are called.
    """
    if not isinstance(context, MigrationContext):
        raise ShardConfigError(
            f"current_database needs the alembic MigrationContext (context.get_context() in "
            f"env.py, or op.get_context() in a revision), got {type(context).__name__} {context!r}"
        )
    if spec is not None and not isinstance(spec, ShardSpec):
        raise ShardConfigError(
            f"current_database: spec must be a snowshard.spec.ShardSpec or None, got "
            f"{type(spec).__name__} {spec!r}"
        )
    key = context.opts.get(DATABASE_OPTION)
    if key is not None:
        return str(key)
    if spec is None:
        return DEFAULT_DATABASE
    if len(spec.databases) > 1:
        raise ShardMigrationError(
            f"{spec.name} is spread over the databases {sorted(spec.databases)}, but the "
            f"migration context does not say which of them it is migrating: pass "
            f"{DATABASE_OPTION}=<database key> to context.configure() in env.py, with the "
            f"key of the database its connection reaches (the multi-database env.py in "
            f"docs/migrations.md passes {DATABASE_OPTION}=name for each database)",
            operation=spec.name,
        )
    [only] = spec.databases
    return only


def _by_name(plain: MigrateOperation) -> MigrateOperation:
    """``plain`` without the definition it undoes: Alembic then drops by name."""
    if alembic_reverse(plain) is not None:
        set_alembic_reverse(plain, None)
    return plain


def run_sharded(operations: Operations, operation: ShardedOperation) -> None:
    """The implementation of every sharded operation: each table of this database in turn."""
    context = operations.get_context()
    spec = operation.spec
    database = current_database(context, spec)
    indices = spec.tables_in(database)
    if not indices:
        log.info("%s: database %r holds none of its tables", operation.describe(), database)
        return
    online = not context.as_sql
    done: list[str] = []
    for index in indices:
        shard = Shard(spec, index)
        try:
            if online and applied(operation, sa.inspect(operations.get_bind()), shard):
                log.info("%s: %s already done, skipped", operation.describe(), shard.table)
                continue
            plain = _by_name(operation.physical(shard))
            if operation.use_batch(context.dialect.name):
                with operations.batch_alter_table(
                    shard.table, schema=operation.schema, recreate="auto"
                ) as batch:
                    batch.invoke(plain)
            else:
                operations.invoke(plain)
        except Exception as exc:
            raise _failure(operations, operation, database, shard.table, done, exc) from exc
        done.append(shard.table)


def _failure(
    operations: Operations,
    operation: ShardedOperation,
    database: str,
    table: str,
    done: list[str],
    exc: Exception,
) -> ShardMigrationError:
    context = operations.get_context()
    where = f"database {database!r}"
    if not context.as_sql:
        url_database = operations.get_bind().engine.url.database
        if url_database:
            where += f" ({url_database})"
    before = ", ".join(done) if done else "none"
    kept = (
        " MariaDB/MySQL committed those already (DDL commits implicitly)."
        if done and context.dialect.name in ("mysql", "mariadb")
        else ""
    )
    detail = " ".join(str(exc).split()).rstrip(".")
    return ShardMigrationError(
        f"{operation.describe()} failed on {where}, table {table!r}: "
        f"{type(exc).__name__}: {detail}. Changed before it in this run: {before}.{kept} "
        f"Fix the cause and run the upgrade again: tables that already have the change are "
        f"skipped.",
        operation=operation.describe(),
        database=database,
        table=table,
        done=done,
    )


def _register() -> None:
    for cls in SHARDED_OPERATIONS.values():
        Operations.implementation_for(cls)(run_sharded)


_register()
