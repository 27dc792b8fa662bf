"""Alembic support for sharded tables: operations, autogenerate, a multi-database env.

Importing this package registers the sharded operations on Alembic's ``op``
(``op.create_sharded_table``, ``op.add_sharded_column``, ...; see
:mod:`snowshard.migrations.ops`), their implementation (:mod:`snowshard.migrations.runner`)
and their autogenerate renderers (see :mod:`snowshard.migrations.autogenerate`). The
repository's ``migrations/`` directory is a runnable multi-database environment built on
them::

    alembic -c migrations/alembic.ini upgrade head

``docs/migrations.md`` ("Alembic in your project") has complete ``env.py`` files for one
database and for several.

MariaDB/MySQL commit DDL implicitly, so a failed upgrade can leave some physical tables
changed; the sharded operations skip what is already done, so running the upgrade again
completes it (details in :mod:`snowshard.migrations.runner`).

Modules, each depending only on those before it: ``naming`` (templates <-> physical
names), ``physical`` (the one rewrite between a template and a physical operation),
``ops`` (the operations), ``inspection`` (what a table already has), ``runner`` (each
table in turn), ``render`` (revision text and imports), ``ordering`` (drops in a safe
order), ``autogenerate`` (the rewriter).
"""

from __future__ import annotations

from snowshard.errors import MissingExtra

try:
    import alembic  # noqa: F401
except ImportError as error:
    raise MissingExtra(
        f"snowshard.migrations needs Alembic ({error}); install it with: "
        f"pip install \"snowshard[migrations]\""
    ) from error

from snowshard.migrations.autogenerate import (
    SPECS_OPTION,
    collapse_sharded_ops,
    include_database,
    shard_info_of,
)
from snowshard.migrations.naming import SENTINEL_TABLE
from snowshard.migrations.ops import (
    AddShardedColumnOp,
    AlterShardedColumnOp,
    CreateShardedCheckConstraintOp,
    CreateShardedForeignKeyOp,
    CreateShardedIndexOp,
    CreateShardedTableOp,
    CreateShardedUniqueConstraintOp,
    DropShardedColumnOp,
    DropShardedConstraintOp,
    DropShardedIndexOp,
    DropShardedTableOp,
    ShardedOperation,
    sharded_operation,
)
from snowshard.migrations.render import render_spec
from snowshard.migrations.runner import (
    DATABASE_OPTION,
    ShardMigrationError,
    current_database,
)

__all__ = [
    "DATABASE_OPTION",
    "SENTINEL_TABLE",
    "SPECS_OPTION",
    "AddShardedColumnOp",
    "AlterShardedColumnOp",
    "CreateShardedCheckConstraintOp",
    "CreateShardedForeignKeyOp",
    "CreateShardedIndexOp",
    "CreateShardedTableOp",
    "CreateShardedUniqueConstraintOp",
    "DropShardedColumnOp",
    "DropShardedConstraintOp",
    "DropShardedIndexOp",
    "DropShardedTableOp",
    "ShardMigrationError",
    "ShardedOperation",
    "collapse_sharded_ops",
    "current_database",
    "include_database",
    "render_spec",
    "shard_info_of",
    "sharded_operation",
]
