"""Sharded Alembic operations and their runner on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.operations import ops as alembic_ops
from sqlalchemy.pool import NullPool

from snowshard.migrations import (
    AddShardedColumnOp,
    CreateShardedIndexOp,
    CreateShardedTableOp,
    DropShardedColumnOp,
    DropShardedIndexOp,
    ShardMigrationError,
)
from snowshard.spec import ShardConfigError, ShardSpec

# four tables: t_00, t_01 in database "a"; t_02, t_03 in database "b"
SPEC = ShardSpec("t", 4, databases={"a": [0, 1], "b": [2, 3]})
PARENT = ShardSpec("p", 4, databases={"a": [0, 1], "b": [2, 3]})
IN_A = ["t_00", "t_01"]


@contextmanager
def operations(url: str, database: str | None = "a") -> Iterator[Operations]:
    """Operations on ``url`` in one transaction, migrating bind key ``database``."""
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            opts = {} if database is None else {"snowshard_database": database}
            yield Operations(MigrationContext.configure(connection, opts=opts))
    finally:
        engine.dispose()


def inspect(url: str, fn: Callable[[sa.Inspector], Any]) -> Any:
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return fn(sa.inspect(connection))
    finally:
        engine.dispose()


def columns(url: str) -> dict[str, set[str]]:
    """Column names of every table in the database."""
    return inspect(
        url,
        lambda insp: {
            t: {c["name"] for c in insp.get_columns(t)} for t in insp.get_table_names()
        },
    )


def make_tables(url: str, spec: ShardSpec = SPEC, *extra: sa.Column[Any]) -> None:
    """All physical tables of ``spec`` (both databases' worth) in this one database."""
    metadata = sa.MetaData()
    for name in spec.table_names:
        sa.Table(
            name,
            metadata,
            sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("email", sa.String(100)),
            *[c._copy() for c in extra],
        )
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        metadata.create_all(engine)
    finally:
        engine.dispose()


@contextmanager
def failing_on(table: str) -> Iterator[None]:
    """Make every DDL statement that names ``table`` fail, as a broken shard would."""

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        ddl = statement.lstrip().upper().startswith(("ALTER", "CREATE", "DROP"))
        if ddl and table in statement:
            raise RuntimeError(f"injected failure on {table}")

    sa.event.listen(sa.Engine, "before_cursor_execute", before)
    try:
        yield
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", before)


def test_add_sharded_column_changes_only_the_current_databases_tables(db_url: str) -> None:
    """add_sharded_column reaches every table of the migrated database and no other."""
    make_tables(db_url)
    with operations(db_url, "a") as op:
        op.add_sharded_column(SPEC, sa.Column("note", sa.String(50)))
    found = columns(db_url)
    assert [t for t in SPEC.table_names if "note" in found[t]] == IN_A


def test_add_sharded_column_skips_tables_that_already_have_it(db_url: str) -> None:
    """A table that already has the column (a half-done earlier run) is skipped, not an error."""
    make_tables(db_url)
    with operations(db_url) as op:
        op.add_column("t_01", sa.Column("note", sa.String(50)))
        op.add_sharded_column(SPEC, sa.Column("note", sa.String(50)))
    found = columns(db_url)
    assert all("note" in found[t] for t in IN_A)


def test_failure_names_database_and_table_and_rerun_completes(db_url: str) -> None:
    """A failure on shard 1 names the database and table; the next run finishes the rest."""
    make_tables(db_url)
    with pytest.raises(ShardMigrationError) as caught, failing_on("t_01"), operations(db_url) as op:
        op.add_sharded_column(SPEC, sa.Column("note", sa.String(50)))
    error = caught.value
    assert (error.database, error.table, error.done) == ("a", "t_01", ("t_00",))
    assert "database 'a'" in str(error) and "table 't_01'" in str(error)
    with operations(db_url) as op:
        op.add_sharded_column(SPEC, sa.Column("note", sa.String(50)))
    found = columns(db_url)
    assert all("note" in found[t] for t in IN_A)


def test_create_sharded_table_with_cosharded_foreign_key(db_url: str) -> None:
    """create_sharded_table fills in name and foreign key templates per physical table."""
    with operations(db_url) as op:
        op.create_sharded_table(
            PARENT, sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False)
        )
        op.create_sharded_table(
            SPEC,
            sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("p_id", sa.BigInteger, nullable=False),
            sa.ForeignKeyConstraint(["p_id"], ["p_{index:02d}.id"], name="fk_{table}_p"),
            sa.UniqueConstraint("p_id", name="uq_{table}_p_id"),
        )
    fks = inspect(db_url, lambda insp: {t: insp.get_foreign_keys(t) for t in IN_A})
    assert {t: [(fk["name"], fk["referred_table"]) for fk in fks[t]] for t in IN_A} == {
        "t_00": [("fk_t_00_p", "p_00")],
        "t_01": [("fk_t_01_p", "p_01")],
    }
    assert sorted(inspect(db_url, lambda insp: insp.get_table_names())) == [
        "p_00",
        "p_01",
        "t_00",
        "t_01",
    ]


def test_add_sharded_column_with_cosharded_foreign_key(db_url: str) -> None:
    """A column-level ForeignKey template points each table at its own co-sharded parent."""
    make_tables(db_url, PARENT)
    make_tables(db_url, SPEC)
    with operations(db_url) as op:
        op.add_sharded_column(
            SPEC,
            sa.Column("p_id", sa.BigInteger, sa.ForeignKey("p_{index:02d}.id", name="fk_{table}")),
        )
    fks = inspect(db_url, lambda insp: {t: insp.get_foreign_keys(t) for t in SPEC.table_names})
    assert {t: [fk["referred_table"] for fk in fks[t]] for t in SPEC.table_names} == {
        "t_00": ["p_00"],
        "t_01": ["p_01"],
        "t_02": [],
        "t_03": [],
    }


def test_drop_sharded_table_is_the_reverse_of_create(db_url: str) -> None:
    """The reverse of create_sharded_table drops exactly the tables it created."""
    created = CreateShardedTableOp(
        SPEC,
        alembic_ops.CreateTableOp(
            "x", [sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False)]
        ),
    )
    with operations(db_url) as op:
        op.invoke(created)
    assert sorted(inspect(db_url, lambda insp: insp.get_table_names())) == IN_A
    with operations(db_url) as op:
        op.invoke(created.reverse())
    assert inspect(db_url, lambda insp: insp.get_table_names()) == []


def test_sharded_index_round_trip(db_url: str) -> None:
    """create_sharded_index names each index from its template; its reverse drops them."""
    make_tables(db_url)
    with operations(db_url) as op:
        op.create_sharded_index("ix_{table}_email", SPEC, ["email"])
    names = inspect(db_url, lambda i: {t: [x["name"] for x in i.get_indexes(t)] for t in IN_A})
    assert names == {"t_00": ["ix_t_00_email"], "t_01": ["ix_t_01_email"]}
    created = CreateShardedIndexOp(
        SPEC, alembic_ops.CreateIndexOp("ix_{table}_email", "x", ["email"])
    )
    dropped = created.reverse()
    assert isinstance(dropped, DropShardedIndexOp)
    with operations(db_url) as op:
        op.invoke(dropped)
    assert inspect(db_url, lambda i: [x for t in IN_A for x in i.get_indexes(t)]) == []


def test_sharded_unique_constraint_is_added_then_dropped(db_url: str) -> None:
    """create/drop_sharded_unique_constraint work on every backend (SQLite via batch mode)."""
    make_tables(db_url)
    with operations(db_url) as op:
        op.create_sharded_unique_constraint("uq_{table}_email", SPEC, ["email"])

    def uniques(insp: sa.Inspector) -> dict[str, list[str | None]]:
        return {t: [u["name"] for u in insp.get_unique_constraints(t)] for t in IN_A}

    assert inspect(db_url, uniques) == {"t_00": ["uq_t_00_email"], "t_01": ["uq_t_01_email"]}
    with operations(db_url) as op:
        op.drop_sharded_constraint("uq_{table}_email", SPEC, type_="unique")
    assert inspect(db_url, uniques) == {"t_00": [], "t_01": []}


def test_alter_sharded_column_renames_and_resumes(db_url: str) -> None:
    """alter_sharded_column renames on every table and skips tables already renamed."""
    make_tables(db_url)
    with operations(db_url) as op:
        op.alter_column("t_00", "email", new_column_name="mail", existing_type=sa.String(100))
        op.alter_sharded_column(
            SPEC, "email", new_column_name="mail", existing_type=sa.String(100)
        )
    found = columns(db_url)
    assert [found[t] for t in IN_A] == [{"id", "mail"}, {"id", "mail"}]


def test_drop_sharded_column_reverse_restores_it(db_url: str) -> None:
    """drop_sharded_column removes the column; the reverse of add_sharded_column is it."""
    make_tables(db_url)
    added = AddShardedColumnOp(SPEC, alembic_ops.AddColumnOp("x", sa.Column("note", sa.Integer)))
    dropped = added.reverse()
    assert isinstance(dropped, DropShardedColumnOp)
    with operations(db_url) as op:
        op.invoke(added)
        op.invoke(dropped)
    found = columns(db_url)
    assert [found[t] for t in IN_A] == [{"id", "email"}, {"id", "email"}]


def test_offline_mode_writes_ddl_for_each_table_of_the_database() -> None:
    """With --sql nothing is inspected: the DDL for every table of the database is written."""
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name="postgresql",
        opts={"as_sql": True, "output_buffer": buffer, "snowshard_database": "b"},
    )
    Operations(context).add_sharded_column(SPEC, sa.Column("note", sa.Integer))
    sql = buffer.getvalue()
    assert "ALTER TABLE t_02 ADD COLUMN note INTEGER" in sql
    assert "ALTER TABLE t_03 ADD COLUMN note INTEGER" in sql
    assert "t_00" not in sql and "t_01" not in sql


def test_spread_spec_without_a_configured_database_is_refused() -> None:
    """A spec over several databases needs snowshard_database; the error says so."""
    context = MigrationContext.configure(
        dialect_name="sqlite", opts={"as_sql": True, "output_buffer": io.StringIO()}
    )
    with pytest.raises(ShardMigrationError, match="snowshard_database"):
        Operations(context).add_sharded_column(SPEC, sa.Column("note", sa.Integer))


@pytest.mark.parametrize(
    "template", ["ix_{tabel}", "ix_{table", "ix_{0}"], ids=["unknown", "unclosed", "positional"]
)
def test_bad_name_template_is_refused_at_construction(template: str) -> None:
    """A name template that does not format raises ShardConfigError before any DDL."""
    with pytest.raises(ShardConfigError, match="not a name template"):
        CreateShardedIndexOp(SPEC, alembic_ops.CreateIndexOp(template, "x", ["email"]))


def test_drop_without_known_definition_is_not_reversible() -> None:
    """Reversing a drop whose original column is unknown raises ValueError naming the op."""
    from alembic.operations import ops as alembic_ops

    from snowshard.migrations import SENTINEL_TABLE, DropShardedColumnOp
    from snowshard.spec import ShardSpec

    op = DropShardedColumnOp(ShardSpec("orders", 4), alembic_ops.DropColumnOp(SENTINEL_TABLE, "note"))
    with pytest.raises(ValueError, match="orders.note is not reversible: the original column"):
        op.reverse()
