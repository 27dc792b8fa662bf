"""The one rewrite between sharded operations and physical ones, both ways, for every op type."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa
from alembic.autogenerate import render_op_text
from alembic.migration import MigrationContext
from alembic.operations import MigrateOperation
from alembic.operations import ops as alembic_ops

from snowshard.migrations import (
    SENTINEL_TABLE,
    AddShardedColumnOp,
    AlterShardedColumnOp,
    CreateShardedCheckConstraintOp,
    CreateShardedForeignKeyOp,
    CreateShardedIndexOp,
    CreateShardedTableOp,
    CreateShardedUniqueConstraintOp,
    ShardedOperation,
    sharded_operation,
)
from snowshard.migrations.naming import Shard, Templater
from snowshard.migrations.ops import SHARDED_OPERATIONS
from snowshard.migrations.physical import FIELDS, rewrite
from snowshard.migrations.render import autogen_context_for
from snowshard.spec import ShardConfigError, ShardInfo, ShardSpec

SPEC = ShardSpec("t", 4)
PARENT = ShardSpec("p", 4)
SHARD = Shard(SPEC, 2)
SHARDS = {
    name: ShardInfo(spec, index)
    for spec in (SPEC, PARENT)
    for index, name in enumerate(spec.table_names)
}
RENDER = autogen_context_for(MigrationContext.configure(dialect_name="sqlite"))


def create_table() -> ShardedOperation:
    return CreateShardedTableOp(
        SPEC,
        alembic_ops.CreateTableOp(
            "x",
            [
                sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
                sa.Column("p_id", sa.BigInteger, nullable=False),
                sa.Column("n", sa.Integer, sa.CheckConstraint("n > 0", name="ck_{table}_n")),
                sa.ForeignKeyConstraint(
                    ["p_id"], ["p_{index:02d}.id"], name="fk_{table}_p", ondelete="CASCADE"
                ),
                sa.ForeignKeyConstraint(["n"], ["{table}.id"], name="fk_{table}_self"),
                sa.UniqueConstraint("p_id", name="uq_{table}_p"),
                sa.CheckConstraint("p_id > 0", name="ck_{{literal}}_{table}"),
                sa.PrimaryKeyConstraint("id", name="pk_{table}"),
            ],
            comment="orders",
        ),
    )


def add_column() -> ShardedOperation:
    column = sa.Column(
        "p_id", sa.BigInteger, sa.ForeignKey("p_{index:02d}.id", name="fk_{table}_p")
    )
    return AddShardedColumnOp(SPEC, alembic_ops.AddColumnOp("x", column))


def alter_column() -> ShardedOperation:
    template = alembic_ops.AlterColumnOp(
        "x", "note", modify_name="memo", existing_type=sa.String(10), modify_nullable=False
    )
    return AlterShardedColumnOp(SPEC, template)


def create_index(*expressions: sa.TextClause) -> ShardedOperation:
    columns: list[str | sa.TextClause] = ["note", *expressions]
    return CreateShardedIndexOp(
        SPEC, alembic_ops.CreateIndexOp("ix_{table}_note", "x", columns, unique=True)
    )


def create_unique() -> ShardedOperation:
    template = alembic_ops.CreateUniqueConstraintOp("uq_{table}_note", "x", ["note"])
    return CreateShardedUniqueConstraintOp(SPEC, template)


def create_foreign_key() -> ShardedOperation:
    template = alembic_ops.CreateForeignKeyOp(
        "fk_{table}_p", "x", "p_{index:02d}", ["p_id"], ["id"], ondelete="CASCADE"
    )
    return CreateShardedForeignKeyOp(SPEC, template)


def create_check() -> ShardedOperation:
    template = alembic_ops.CreateCheckConstraintOp("ck_{table}_n", "x", "n > 0")
    return CreateShardedCheckConstraintOp(SPEC, template)


CASES: dict[str, Callable[[], ShardedOperation]] = {
    "create_table": create_table,
    "drop_table": lambda: create_table().reverse(),
    "add_column": add_column,
    "drop_column": lambda: add_column().reverse(),
    "alter_column": alter_column,
    "create_index": lambda: create_index(sa.text("lower(note)")),
    "drop_index": lambda: create_index().reverse(),
    "create_unique_constraint": create_unique,
    "create_foreign_key": create_foreign_key,
    "create_check_constraint": create_check,
    "drop_constraint": lambda: create_foreign_key().reverse(),
}


def column_foreign_keys(op: MigrateOperation) -> list[tuple[str, str | None]]:
    """The foreign keys of an added column (Alembic does not render them)."""
    column = getattr(op, "column", None)
    if column is None:
        return []
    return sorted((fk.target_fullname, fk.name) for fk in column.foreign_keys)


def text_of(op: MigrateOperation) -> str:
    """``op`` as Alembic renders it; check constraints spelled out by hand, because
    Alembic before 1.13.2 cannot render them (a floor version)."""
    if isinstance(op, CreateShardedCheckConstraintOp):
        return f"sharded({op.spec!r}, {text_of(op.template)})"
    if isinstance(op, alembic_ops.CreateCheckConstraintOp):
        return (
            f"create_check_constraint({op.constraint_name!r}, {op.table_name!r}, "
            f"{str(op.condition)!r}, schema={op.schema!r}, kw={sorted(op.kw.items())!r})"
        )
    return render_op_text(RENDER, op)


def signature(op: ShardedOperation) -> tuple[str, str, list[tuple[str, str | None]]]:
    """How ``op`` renders, how its reverse renders, and its column's foreign keys."""
    return text_of(op), text_of(op.reverse()), column_foreign_keys(op.template)


def test_every_wrapped_alembic_operation_has_its_fields_described() -> None:
    """Each Alembic operation a sharded one wraps says which of its fields name tables."""
    assert set(FIELDS) == set(SHARDED_OPERATIONS)


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_physical_then_template_gives_the_original_operation(
    make: Callable[[], ShardedOperation],
) -> None:
    """physical(op, shard) rewritten back into templates renders as op, and so does its reverse."""
    op = make()
    templater = Templater(SHARD, SHARDS.get)
    back = sharded_operation(SPEC, rewrite(op.physical(SHARD), templater))
    assert type(back) is type(op)
    assert signature(back) == signature(op)


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_physical_operation_names_only_physical_objects(
    make: Callable[[], ShardedOperation],
) -> None:
    """The physical operation is on t_02, with every template filled in."""
    physical = make().physical(SHARD)
    rendered = text_of(physical)
    assert "'t_02'" in rendered
    assert SENTINEL_TABLE not in rendered and "{table}" not in rendered
    assert "{index" not in rendered
    assert all("p_02" in target for target, _ in column_foreign_keys(physical))


def test_added_columns_foreign_key_names_its_own_parent() -> None:
    """add_sharded_column's ForeignKey template becomes p_02.id, named for t_02."""
    physical = add_column().physical(SHARD)
    assert column_foreign_keys(physical) == [("p_02.id", "fk_t_02_p")]


def test_cosharded_referent_becomes_a_pattern_and_a_plain_one_stays() -> None:
    """A foreign key to p_02 from t_02 becomes p_{index:02d}; one to users stays users."""
    templater = Templater(SHARD, SHARDS.get)
    assert templater.referent("p_02") == "p_{index:02d}"
    assert templater.referent("p_03") == "p_03"
    assert templater.referent("users") == "users"
    assert templater.referent("t_02") == "{table}"


def test_expression_bound_to_a_physical_table_has_no_template() -> None:
    """An index on lower(t_02.note) cannot be written for every table: ShardConfigError."""
    table = sa.Table("t_02", sa.MetaData(), sa.Column("note", sa.String(10)))
    physical = alembic_ops.CreateIndexOp("ix_t_02_note", "t_02", [sa.func.lower(table.c.note)])
    with pytest.raises(ShardConfigError, match="sa.text"):
        rewrite(physical, Templater(SHARD, SHARDS.get))


def test_column_level_constraint_name_is_filled_in_per_table() -> None:
    """A CHECK given on the column gets the physical table's name, not the template."""
    physical = create_table().physical(SHARD)
    assert isinstance(physical, alembic_ops.CreateTableOp)
    names = {c.name for c in physical.to_table().c.n.constraints}
    assert names == {"ck_t_02_n"}


def test_indexes_in_a_new_sharded_table_are_refused() -> None:
    """index=True in create_sharded_table would be lost: ShardConfigError names the fix."""
    template = alembic_ops.CreateTableOp(
        "x", [sa.Column("id", sa.Integer, primary_key=True), sa.Column("n", sa.Integer, index=True)]
    )
    with pytest.raises(ShardConfigError, match="create_sharded_index"):
        CreateShardedTableOp(SPEC, template)


def test_unnamed_sharded_index_is_refused() -> None:
    """A sharded index without a name template raises ShardConfigError with an example."""
    with pytest.raises(ShardConfigError, match=r"ix_\{table\}_user_id"):
        CreateShardedIndexOp(SPEC, alembic_ops.CreateIndexOp(None, "x", ["n"]))
