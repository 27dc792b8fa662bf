"""Autogenerate for sharded models: per-shard diffs collapse into one sharded operation."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import produce_migrations, render_python_code
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import ops as alembic_ops
from sqlalchemy.pool import NullPool

from migrations.schema import ORDERS, build_metadata
from snowshard.migrations import (
    AddShardedColumnOp,
    CreateShardedTableOp,
    DropShardedTableOp,
    collapse_sharded_ops,
    include_database,
)
from snowshard.spec import ShardInfo, ShardSpec
from tests.backends import DatabaseFactory
from tests.test_migrations_env import KEYS, alembic_config

REPO_VERSIONS = Path(__file__).resolve().parents[1] / "migrations" / "versions"
SPEC = ShardSpec("t", 2)


@pytest.fixture(autouse=True)
def _no_url_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment reads $SNOWSHARD_URL_<KEY> first; tests use the ini sections only."""
    for key in KEYS:
        monkeypatch.delenv(f"SNOWSHARD_URL_{key.upper()}", raising=False)


def metadata_with_note() -> sa.MetaData:
    """The example schema after a model change: orders gained a ``note`` column."""
    metadata = build_metadata()
    for name in ORDERS.table_names:
        metadata.tables[name].append_column(sa.Column("note", sa.String(200)))
    return metadata


def generate_note_revision(urls: list[str], tmp_path: Path) -> tuple[str, Config]:
    """Upgrade to head, autogenerate revision 0002 against metadata_with_note()."""
    config = alembic_config(urls, tmp_path, metadata_with_note())
    versions = tmp_path / "versions"
    versions.mkdir()
    # one location holding a copy of the repository's revisions: how several locations are
    # separated in version_locations differs between Alembic versions
    for revision in REPO_VERSIONS.glob("*.py"):
        shutil.copy(revision, versions)
    config.set_main_option("version_locations", str(versions))
    command.upgrade(config, "head")
    command.revision(
        config, "orders note", autogenerate=True, rev_id="0002", version_path=str(versions)
    )
    return (versions / "0002_orders_note.py").read_text(), config


def function_body(source: str, name: str) -> str:
    match = re.search(rf"^def {name}\(\) -> None:\n(.*?)(?=^def |\Z)", source, re.MULTILINE | re.DOTALL)
    assert match is not None, name
    return match.group(1)


@contextmanager
def context_on(url: str, **opts: object) -> Iterator[MigrationContext]:
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            yield MigrationContext.configure(connection, opts=opts)
    finally:
        engine.dispose()


def sharded_tables(metadata: sa.MetaData, spec: ShardSpec, *columns: sa.Column[object]) -> None:
    for index in range(spec.count):
        sa.Table(
            spec.table_name(index),
            metadata,
            sa.Column("id", sa.Integer, primary_key=True),
            *[c._copy() for c in columns],
            info={"snowshard": ShardInfo(spec, index)},
        )


def test_new_column_is_one_sharded_operation_per_database(
    database_factory: DatabaseFactory, tmp_path: Path
) -> None:
    """A column added to the model renders as one add_sharded_column in each database."""
    source, _ = generate_note_revision(database_factory("sqlite", 2), tmp_path)
    assert "op.add_column(" not in source and "op.drop_column(" not in source
    spec = "ShardSpec('orders', 16, databases={'default': range(8), 'db1': range(8, 16)})"
    for key in ("default", "db1"):
        upgrade = function_body(source, f"upgrade_{key}")
        assert upgrade.count("op.add_sharded_column(") == 1
        assert f"op.add_sharded_column({spec}, sa.Column('note', sa.String(length=200)" in upgrade
        downgrade = function_body(source, f"downgrade_{key}")
        assert downgrade.count(f"op.drop_sharded_column({spec}, 'note')") == 1
    assert "from snowshard.spec import ShardSpec" in source


def test_generated_revision_applies_and_leaves_no_diff(
    db_urls_2: list[str], tmp_path: Path
) -> None:
    """Upgrading with the generated revision adds the column to all 16 tables; check is clean."""
    _, config = generate_note_revision(db_urls_2, tmp_path)
    command.upgrade(config, "head")
    command.check(config)
    found = set()
    for url in db_urls_2:
        engine = sa.create_engine(url, poolclass=NullPool)
        try:
            with engine.connect() as connection:
                insp = sa.inspect(connection)
                for name in ORDERS.table_names:
                    columns = insp.get_columns(name) if insp.has_table(name) else []
                    if "note" in {c["name"] for c in columns}:
                        found.add(name)
        finally:
            engine.dispose()
    assert found == set(ORDERS.table_names)


def test_new_sharded_tables_render_templates(sqlite_url: str) -> None:
    """New physical tables become create_sharded_table with {table} and co-sharded FK templates."""
    metadata = build_metadata()
    with context_on(
        sqlite_url, target_metadata=metadata, include_object=include_database("default")
    ) as context:
        script = produce_migrations(context, metadata)
        collapse_sharded_ops(context, None, [script])
        assert script.upgrade_ops is not None
        code = render_python_code(script.upgrade_ops, migration_context=context)
    assert code.count("op.create_sharded_table(") == 2
    assert code.count("op.create_sharded_index(") == 2
    assert "op.create_table('orders_" not in code and "op.create_index(" not in code
    assert "sa.ForeignKeyConstraint(['order_id'], ['orders_{index:02d}.id'], " in code
    assert "name='fk_{table}_order_id'" in code and "'ix_{table}_user_id'" in code


def test_shards_that_disagree_stay_per_table(sqlite_url: str) -> None:
    """A change that differs between shards is not collapsed: each table keeps its own op."""
    engine = sa.create_engine(sqlite_url, poolclass=NullPool)
    try:
        sharded_tables(existing := sa.MetaData(), SPEC)
        existing.create_all(engine)
    finally:
        engine.dispose()
    metadata = sa.MetaData()
    sharded_tables(metadata, SPEC)
    metadata.tables["t_00"].append_column(sa.Column("note", sa.Integer))
    metadata.tables["t_01"].append_column(sa.Column("note", sa.String(10)))
    with context_on(sqlite_url, target_metadata=metadata) as context:
        script = produce_migrations(context, metadata)
        collapse_sharded_ops(context, None, [script])
    assert script.upgrade_ops is not None
    ops = script.upgrade_ops.ops
    assert all(isinstance(op, alembic_ops.ModifyTableOps) for op in ops)
    assert sorted(op.table_name for op in ops if isinstance(op, alembic_ops.ModifyTableOps)) == [
        "t_00",
        "t_01",
    ]


def test_removed_sharded_table_collapses_when_its_spec_is_listed(sqlite_url: str) -> None:
    """Tables gone from the models collapse into drop_sharded_table given snowshard_specs."""
    engine = sa.create_engine(sqlite_url, poolclass=NullPool)
    try:
        sharded_tables(existing := sa.MetaData(), SPEC, sa.Column("note", sa.String(10)))
        existing.create_all(engine)
    finally:
        engine.dispose()
    with context_on(
        sqlite_url, target_metadata=sa.MetaData(), snowshard_specs=[SPEC]
    ) as context:
        script = produce_migrations(context, sa.MetaData())
        collapse_sharded_ops(context, None, [script])
    assert script.upgrade_ops is not None and script.downgrade_ops is not None
    [dropped] = script.upgrade_ops.ops
    assert isinstance(dropped, DropShardedTableOp)
    [created] = script.downgrade_ops.ops
    assert isinstance(created, CreateShardedTableOp)
    assert {c.name for c in created.template.to_table().columns} == {"id", "note"}


def test_reverse_of_reverse_is_the_same_operation() -> None:
    """add_sharded_column reversed twice renders like the original."""
    added = AddShardedColumnOp(SPEC, alembic_ops.AddColumnOp("x", sa.Column("n", sa.Integer)))
    again = added.reverse().reverse()
    assert isinstance(again, AddShardedColumnOp)
    assert (again.spec, again.target, repr(again.template.column.type)) == (SPEC, "n", "Integer()")
