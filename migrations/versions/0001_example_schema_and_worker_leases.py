"""example schema and worker leases

Revision ID: 0001
Revises:
Create Date: 2026-11-22 08:08:14.798983

"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import snowshard.orm.types
from snowshard.spec import ShardSpec

# revision identifiers, used by Alembic.
revision: str = '0001'
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The layout of the sharded tables at this revision (autogenerate writes it inline).
ORDERS = ShardSpec('orders', 16, databases={'default': range(8), 'db1': range(8, 16)})
ORDER_ITEMS = ShardSpec('order_items', 16, databases={'default': range(8), 'db1': range(8, 16)})


def upgrade(engine_name: str) -> None:
    """Upgrade the database ``engine_name``."""
    globals()[f"upgrade_{engine_name}"]()


def downgrade(engine_name: str) -> None:
    """Downgrade the database ``engine_name``."""
    globals()[f"downgrade_{engine_name}"]()


def _create_sharded_tables() -> None:
    """orders_NN and order_items_NN: the sharded operations create those of this database."""
    op.create_sharded_table(ORDERS,
    sa.Column('id', snowshard.orm.types.SnowflakeType(), autoincrement=False, nullable=False),
    sa.Column('user_id', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.String(length=20), server_default='new', nullable=False),
    sa.Column('total_cents', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name='pk_{table}')
    )
    op.create_sharded_index('ix_{table}_user_id', ORDERS, ['user_id'], unique=False)
    op.create_sharded_table(ORDER_ITEMS,
    sa.Column('id', snowshard.orm.types.SnowflakeType(), autoincrement=False, nullable=False),
    sa.Column('order_id', sa.BigInteger(), nullable=False),
    sa.Column('sku', sa.String(length=40), nullable=False),
    sa.Column('quantity', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['order_id'], ['orders_{index:02d}.id'], name='fk_{table}_order_id', ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name='pk_{table}')
    )
    op.create_sharded_index('ix_{table}_order_id', ORDER_ITEMS, ['order_id'], unique=False)


def _exists(table: str) -> bool:
    """Whether ``table`` is there already: after a failed upgrade on MariaDB, which commits
    DDL implicitly, a rerun must not trip over the tables the earlier attempt created (the
    sharded operations skip those on their own). Offline there is nothing to look at.

    (``if_not_exists=`` would do the same, but ``op.create_table``/``op.drop_table`` take it
    from Alembic 1.13.3 only.)
    """
    if op.get_context().as_sql:
        return False
    return sa.inspect(op.get_bind()).has_table(table)


def _drop_sharded_tables() -> None:
    # the indexes go with their tables (MariaDB refuses to drop one a foreign key needs)
    op.drop_sharded_table(ORDER_ITEMS)
    op.drop_sharded_table(ORDERS)


def upgrade_default() -> None:
    """Upgrade the default database."""
    if not _exists('users'):
        op.create_table('users',
        sa.Column('id', snowshard.orm.types.SnowflakeType(), autoincrement=False, nullable=False),
        sa.Column('email', sa.String(length=255), nullable=False),
        sa.Column('name', sa.String(length=100), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
        sa.UniqueConstraint('email', name=op.f('uq_users_email')),
        )
    if not _exists('snowshard_worker_leases'):
        op.create_table('snowshard_worker_leases',
        sa.Column('namespace', sa.String(length=64), nullable=False),
        sa.Column('worker_id', sa.Integer(), autoincrement=False, nullable=False),
        sa.Column('holder', sa.String(length=255), nullable=True),
        sa.Column('expires_at_ms', sa.BigInteger(), nullable=False),
        sa.Column('high_water_ms', sa.BigInteger(), nullable=False),
        sa.Column('ttl_ms', sa.BigInteger(), nullable=False),
        sa.Column('released', sa.Boolean(), nullable=False),
        sa.Column('last_holder', sa.String(length=255), nullable=True),
        sa.Column('version', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('namespace', 'worker_id', name=op.f('pk_snowshard_worker_leases')),
        comment='snowshard worker ID leases (snowshard.workers.DatabaseLease)',
        )
    _create_sharded_tables()


def downgrade_default() -> None:
    """Downgrade the default database."""
    _drop_sharded_tables()
    for table in ('snowshard_worker_leases', 'users'):
        if op.get_context().as_sql or _exists(table):
            op.drop_table(table)


def upgrade_db1() -> None:
    """Upgrade the db1 database."""
    _create_sharded_tables()


def downgrade_db1() -> None:
    """Downgrade the db1 database."""
    _drop_sharded_tables()
