"""Alembic environment: several databases migrated together, sharded tables included.

Shaped like Alembic's ``multidb`` template. The databases are the bind keys listed in
``alembic.ini`` (``databases = default, db1``); each one's URL is ``$SNOWSHARD_URL_<KEY>``
or else the ``sqlalchemy.url`` of its ``[<key>]`` section.

Online, every database gets a connection and a transaction first; the migrations run
database by database (each tells the sharded operations which database it is through
``snowshard_database=<key>``); then all transactions commit, or on any error all roll back.
``twophase = true`` prepares them all before committing (PostgreSQL). SQLite connections
are switched to explicit ``BEGIN`` so their DDL is transactional too. MariaDB/MySQL commit
DDL implicitly, so there a rollback cannot undo the DDL already run; running the upgrade
again finishes it (see :mod:`snowshard.migrations.runner`).

Offline (``--sql``), each database's script is written to ``<sql_dir>/<key>.sql``, with
``sql_dir`` from ``-x sql_dir=...`` or the ``sql_output_dir`` option.

Autogenerate compares each database with the tables of the models that live there
(:func:`~snowshard.migrations.include_database`) and collapses per-shard operations into
sharded ones (:data:`~snowshard.migrations.collapse_sharded_ops`, which also imports the
snowshard column types a revision renders and orders drops so downgrades run on MariaDB).

Programmatic use (tests): ``config.attributes["target_metadata"]`` replaces the example
schema's metadata, and ``config.attributes["configure_logger"] = False`` leaves logging alone.
"""

from __future__ import annotations

import logging
import os
import re
from logging.config import fileConfig
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import context
from sqlalchemy.pool import NullPool

import snowshard.migrations  # noqa: F401  (registers op.*_sharded_* and their renderers)
from snowshard.migrations import collapse_sharded_ops, include_database

config = context.config

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)
logger = logging.getLogger("alembic.env")

_TRUE = {"1", "true", "yes", "on"}


def _databases() -> list[str]:
    names = [n for n in re.split(r",\s*", config.get_main_option("databases", "")) if n]
    if not names:
        raise RuntimeError("alembic.ini: list the databases to migrate in 'databases = ...'")
    return names


def _url(name: str) -> str:
    env = f"SNOWSHARD_URL_{re.sub(r'[^A-Za-z0-9]', '_', name).upper()}"
    url = os.environ.get(env) or config.get_section_option(name, "sqlalchemy.url")
    if not url:
        raise RuntimeError(f"no URL for database {name!r}: set ${env} or [{name}] sqlalchemy.url")
    return url


def _engine(name: str) -> sa.Engine:
    engine = sa.create_engine(_url(name), poolclass=NullPool)
    if engine.dialect.name == "sqlite":
        # pysqlite opens transactions only before DML, so CREATE/ALTER would autocommit;
        # SQLAlchemy's recipe makes SQLite DDL transactional, and rollback-all real.
        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, record: Any) -> None:
            dbapi_connection.isolation_level = None

        @sa.event.listens_for(engine, "begin")
        def _begin(connection: sa.Connection) -> None:
            connection.exec_driver_sql("BEGIN")

    return engine


def _target_metadata() -> sa.MetaData:
    metadata = config.attributes.get("target_metadata")
    if metadata is None:
        from migrations.schema import metadata
    assert isinstance(metadata, sa.MetaData)
    return metadata


def _options(name: str) -> dict[str, Any]:
    """What every database's ``context.configure()`` gets, online and offline."""
    unsharded = config.get_main_option("unsharded_database", "default")
    return {
        "target_metadata": _target_metadata(),
        "include_object": include_database(name, unsharded=unsharded),
        "process_revision_directives": collapse_sharded_ops,
        "snowshard_database": name,
        "upgrade_token": f"{name}_upgrades",
        "downgrade_token": f"{name}_downgrades",
    }


def run_migrations_offline() -> None:
    """Write one SQL script per database."""
    x_args = context.get_x_argument(as_dictionary=True)
    sql_dir = Path(x_args.get("sql_dir") or config.get_main_option("sql_output_dir", "."))
    sql_dir.mkdir(parents=True, exist_ok=True)
    for name in _databases():
        path = sql_dir / f"{name}.sql"
        logger.info("Migrating database %s: writing %s", name, path)
        with path.open("w", encoding="utf-8") as buffer:
            context.configure(
                url=_url(name),
                output_buffer=buffer,
                literal_binds=True,
                dialect_opts={"paramstyle": "named"},
                **_options(name),
            )
            with context.begin_transaction():
                context.run_migrations(engine_name=name)


def run_migrations_online() -> None:
    """One transaction per database; commit them all, or roll them all back."""
    x_args = context.get_x_argument(as_dictionary=True)
    twophase = (x_args.get("twophase") or config.get_main_option("twophase", "false")).lower()
    use_twophase = twophase in _TRUE
    engines = {name: _engine(name) for name in _databases()}
    open_: list[tuple[str, sa.Connection, Any]] = []
    try:
        for name, engine in engines.items():
            connection = engine.connect()
            transaction = connection.begin_twophase() if use_twophase else connection.begin()
            open_.append((name, connection, transaction))
        for name, connection, _ in open_:
            logger.info("Migrating database %s", name)
            context.configure(connection=connection, **_options(name))
            context.run_migrations(engine_name=name)
        if use_twophase:
            for _, _, transaction in open_:
                transaction.prepare()
        for _, _, transaction in open_:
            transaction.commit()
    except BaseException:
        for name, _, transaction in open_:
            try:
                if transaction.is_active:
                    transaction.rollback()
            except Exception:  # roll back the others; the first error is raised
                logger.exception("rollback of database %s failed", name)
        raise
    finally:
        for _, connection, _ in open_:
            connection.close()
        for engine in engines.values():
            engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
