"""Alembic in a user's own project, set up from docs/migrations.md alone, on every backend.

The project is built in ``tmp_path``, outside the repository: ``alembic init``, the
``alembic.ini`` essentials and the ``env.py`` copied from the docs page, a models module of
its own. Alembic runs in a subprocess from there, so snowshard is reached only as the
installed package, never through the repository's ``migrations/`` or ``tests/``.
"""

from __future__ import annotations

import ast
import builtins
import configparser
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import produce_migrations, render_python_code
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.operations import ops as alembic_ops
from sqlalchemy.pool import NullPool

from snowshard.migrations import (
    DropShardedConstraintOp,
    DropShardedIndexOp,
    DropShardedTableOp,
    ShardMigrationError,
    collapse_sharded_ops,
)
from snowshard.spec import ShardInfo, ShardSpec
from tests.backends import DatabaseFactory, table_names

DOCS = Path(__file__).resolve().parents[1] / "docs" / "migrations.md"
KEYS = ("default", "db1")

MODELS = '''\
"""The models of the application (a sharded model, a plain one, a sharded child)."""

from sqlalchemy import BigInteger, ForeignKey, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, Shards

ids = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = snowflake_pk(ids)
    email: Mapped[str] = mapped_column(String(200), unique=True)


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(16, key=("id", "user_id"), databases=ORDER_DATABASES)
    id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    item: Mapped[str] = mapped_column(String(30))


class Address(Sharded, Base):
    """Kept with users: a foreign key to them, and the index that key uses on MariaDB."""

    __tablename__ = "addresses"
    __shards__ = Shards(4, key="user_id")
    id: Mapped[int] = snowflake_pk(ids)
    user_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("users.id"), index=True)
    city: Mapped[str] = mapped_column(String(50))
'''
SPREAD = '{"default": range(8), "db1": range(8, 16)}'

RUN_ALEMBIC = "import sys\nfrom alembic.config import main\nmain(argv=sys.argv[1:], prog='alembic')\n"
NO_ASYNC = "import sys\nsys.modules['greenlet'] = None\nsys.modules['sqlalchemy.ext.asyncio'] = None\n"
LOGGING_SECTIONS = ("loggers", "handlers", "formatters", "logger_", "handler_", "formatter_")


def _shards(name: str, indices: range) -> set[str]:
    return {f"{name}_{i:02d}" for i in indices}


ONE_DATABASE = {"alembic_version", "users"} | _shards("orders", range(16)) | _shards(
    "addresses", range(4)
)
TWO_DATABASES = [
    {"alembic_version", "users"} | _shards("orders", range(8)) | _shards("addresses", range(4)),
    {"alembic_version"} | _shards("orders", range(8, 16)),
]


# --------------------------------------------------------------------------- the project


def doc_file(name: str) -> str:
    """The fenced block after ``<!-- file: name -->`` in docs/migrations.md."""
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(
        rf"^<!-- file: {re.escape(name)} -->\n```\w*\n(.*?)^```$", text, re.MULTILINE | re.DOTALL
    )
    assert match is not None, f"docs/migrations.md has no <!-- file: {name} --> block"
    return match.group(1)


def alembic(project: Path, *args: str, no_async: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the alembic command line in ``project``, with the installed snowshard only."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    code = (NO_ASYNC if no_async else "") + RUN_ALEMBIC
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code, *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def alembic_ok(project: Path, *args: str, no_async: bool = False) -> str:
    """Run alembic; fail with its output unless it succeeds."""
    done = alembic(project, *args, no_async=no_async)
    assert done.returncode == 0, f"alembic {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def write_ini(project: Path, essentials: str, urls: list[str]) -> None:
    """alembic.ini: the docs' essentials, the URLs, and the logging ``alembic init`` wrote."""
    generated = configparser.RawConfigParser()
    generated.read(project / "alembic.ini", encoding="utf-8")
    ini = configparser.RawConfigParser()
    ini.read_string(essentials)
    databases = [n for n in re.split(r",\s*", ini.get("alembic", "databases", fallback="")) if n]
    if databases:
        assert databases == list(KEYS), "the docs' databases must match the models' keys"
        for name, url in zip(databases, urls, strict=True):
            ini.set(name, "sqlalchemy.url", url)
    else:
        [url] = urls
        ini.set("alembic", "sqlalchemy.url", url)
    for section in generated.sections():
        if section.startswith(LOGGING_SECTIONS):
            ini.add_section(section)
            for key, value in generated.items(section):
                ini.set(section, key, value)
    buffer = io.StringIO()
    ini.write(buffer)
    (project / "alembic.ini").write_text(buffer.getvalue(), encoding="utf-8")


def make_project(
    root: Path, urls: list[str], *, env_py: str | None = None, spread: bool | None = None
) -> Path:
    """A project set up as docs/migrations.md says: one database, or several if 2 URLs."""
    multi = len(urls) > 1
    spread = multi if spread is None else spread
    project = root / "project"
    project.mkdir()
    # ``alembic init -t multidb|generic migrations``, in-process (it only copies templates)
    config = Config(str(project / "alembic.ini"), stdout=io.StringIO())
    command.init(config, str(project / "migrations"), template="multidb" if multi else "generic")
    (project / "myapp").mkdir()
    (project / "myapp" / "__init__.py").write_text("", encoding="utf-8")
    models = MODELS.replace("ORDER_DATABASES", SPREAD if spread else "{}")
    (project / "myapp" / "models.py").write_text(models, encoding="utf-8")
    env = env_py if env_py is not None else doc_file("env_multi.py" if multi else "env_single.py")
    (project / "migrations" / "env.py").write_text(env, encoding="utf-8")
    write_ini(project, doc_file("alembic_multi.ini" if multi else "alembic_single.ini"), urls)
    return project


def autogenerate(project: Path) -> str:
    """``alembic revision --autogenerate``; the source of the one revision it wrote."""
    alembic_ok(project, "revision", "--autogenerate", "-m", "first")
    [revision] = (project / "migrations" / "versions").glob("*_first.py")
    return revision.read_text(encoding="utf-8")


def unbound_names(source: str) -> set[str]:
    """Names a module reads but never imports, defines or gets from builtins."""
    tree = ast.parse(source)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            bound |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    used = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    return used - bound




def full_cycle(project: Path, urls: list[str], expected: list[set[str]]) -> str:
    """Autogenerate, upgrade, check, downgrade base, upgrade again; checks each step."""
    source = autogenerate(project)
    assert unbound_names(source) == set()
    assert "import snowshard.orm.types" in source
    alembic_ok(project, "upgrade", "head")
    assert [table_names(url) for url in urls] == expected
    alembic_ok(project, "check")
    alembic_ok(project, "downgrade", "base")
    assert [table_names(url) for url in urls] == [{"alembic_version"}] * len(urls)
    alembic_ok(project, "upgrade", "head")
    assert [table_names(url) for url in urls] == expected
    return source


# --------------------------------------------------------------------------- whole projects


@pytest.mark.slow
def test_sqlite_project_from_the_docs(database_factory: DatabaseFactory, tmp_path: Path) -> None:
    """One SQLite database: autogenerate, upgrade, check, downgrade, upgrade all work."""
    urls = database_factory("sqlite")
    source = full_cycle(make_project(tmp_path, urls), urls, [ONE_DATABASE])
    assert "op.create_sharded_table(ShardSpec('orders', 16)," in source
    assert "op.drop_sharded_index(" not in source  # the indexes go with their tables


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_two_database_project_from_the_docs(
    database_factory: DatabaseFactory, tmp_path: Path
) -> None:
    """Two PostgreSQL databases: each gets its own shards, users stay in the first."""
    urls = database_factory("postgresql", 2)
    source = full_cycle(make_project(tmp_path, urls), urls, TWO_DATABASES)
    assert source.count("op.create_sharded_table(ShardSpec('orders', 16, databases=") == 2


@pytest.mark.mysql
@pytest.mark.slow
def test_mariadb_two_database_project_from_the_docs(
    database_factory: DatabaseFactory, tmp_path: Path
) -> None:
    """Two MariaDB databases: the downgrade drops tables whose index a foreign key needs."""
    urls = database_factory("mysql", 2)
    full_cycle(make_project(tmp_path, urls), urls, TWO_DATABASES)


@pytest.mark.mysql
@pytest.mark.slow
def test_mariadb_one_database_project_from_the_docs(
    database_factory: DatabaseFactory, tmp_path: Path
) -> None:
    """One MariaDB database with the single-database env.py of the docs."""
    urls = database_factory("mysql")
    full_cycle(make_project(tmp_path, urls), urls, [ONE_DATABASE])


@pytest.mark.parametrize("name", ["env_single.py", "env_multi.py", "alembic_multi.ini"])
def test_readme_shows_the_tested_files(name: str) -> None:
    """The README's env.py and alembic.ini are, verbatim, the docs files the tests migrate."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert doc_file(name) in readme


def test_upgrade_needs_no_async_extra(database_factory: DatabaseFactory, tmp_path: Path) -> None:
    """A generated revision upgrades with greenlet and sqlalchemy.ext.asyncio unimportable."""
    urls = database_factory("sqlite")
    project = make_project(tmp_path, urls)
    autogenerate(project)
    alembic_ok(project, "upgrade", "head", no_async=True)
    assert table_names(urls[0]) == ONE_DATABASE


def test_env_without_database_option_fails_instead_of_misplacing(
    database_factory: DatabaseFactory, tmp_path: Path
) -> None:
    """The multi-database env.py minus snowshard_database: upgrade fails, no shard is created."""
    env_py = doc_file("env_multi.py")
    option = '        "snowshard_database": name,\n'
    assert option in env_py
    urls = database_factory("sqlite", 2)
    project = make_project(tmp_path, urls, env_py=env_py.replace(option, ""))
    autogenerate(project)
    done = alembic(project, "upgrade", "head")
    assert done.returncode != 0
    assert "ShardMigrationError" in done.stderr and "snowshard_database" in done.stderr
    assert all(not name.startswith("orders_") for url in urls for name in table_names(url))


# --------------------------------------------------------------------------- in-process


@contextmanager
def operations(url: str) -> Iterator[Operations]:
    """Operations on ``url`` in one transaction, with no snowshard_database option."""
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            yield Operations(MigrationContext.configure(connection))
    finally:
        engine.dispose()


@pytest.mark.parametrize("keys", [("default", "db1"), ("main", "archive"), ("a", "default")])
def test_spread_spec_without_database_option_raises(
    keys: tuple[str, str], sqlite_url: str
) -> None:
    """A spec over two databases and no snowshard_database: ShardMigrationError, no table."""
    spec = ShardSpec("t", 4, databases={keys[0]: [0, 1], keys[1]: [2, 3]})
    with pytest.raises(ShardMigrationError) as caught, operations(sqlite_url) as op:
        op.create_sharded_table(spec, sa.Column("id", sa.Integer, primary_key=True))  # type: ignore[attr-defined]
    message = str(caught.value)
    assert "snowshard_database=" in message and "context.configure(" in message
    assert table_names(sqlite_url) == set()


@pytest.mark.parametrize("key", ["default", "main"])
def test_spec_in_one_database_needs_no_option(key: str, sqlite_url: str) -> None:
    """A spec held in one database is created where the env runs, whatever its key."""
    spec = ShardSpec("t", 3, databases={key: range(3)})
    with operations(sqlite_url) as op:
        op.create_sharded_table(spec, sa.Column("id", sa.Integer, primary_key=True))  # type: ignore[attr-defined]
    assert table_names(sqlite_url) == {"t_00", "t_01", "t_02"}


# --------------------------------------------------------------------------- drop order

NAMING = {"ix": "ix_%(column_0_label)s", "fk": "fk_%(table_name)s_%(column_0_name)s"}
ADDRESSES = ShardSpec("addresses", 2)


def user_tables(*, child_fk: bool) -> sa.MetaData:
    """users, a plain child ``notes`` and sharded ``addresses``, with or without their FK."""
    metadata = sa.MetaData(naming_convention=NAMING)
    sa.Table("users", metadata, sa.Column("id", sa.BigInteger, primary_key=True))

    def user_id() -> sa.Column[int]:
        if child_fk:
            return sa.Column("user_id", sa.BigInteger, sa.ForeignKey("users.id"), index=True)
        return sa.Column("user_id", sa.BigInteger)

    sa.Table("notes", metadata, sa.Column("id", sa.BigInteger, primary_key=True), user_id())
    for index in range(ADDRESSES.count):
        sa.Table(
            ADDRESSES.table_name(index),
            metadata,
            sa.Column("id", sa.BigInteger, primary_key=True),
            user_id(),
            info={"snowshard": ShardInfo(ADDRESSES, index)},
        )
    return metadata


def flat(ops: list[alembic_ops.MigrateOperation]) -> list[alembic_ops.MigrateOperation]:
    """The operations, with those inside ModifyTableOps in their place."""
    out: list[alembic_ops.MigrateOperation] = []
    for op in ops:
        out += flat(list(op.ops)) if isinstance(op, alembic_ops.ModifyTableOps) else [op]
    return out


def test_downgrade_of_created_tables_drops_no_index_first(sqlite_url: str) -> None:
    """Undoing created tables drops them, not their indexes first (plain and sharded alike)."""
    metadata = user_tables(child_fk=True)
    engine = sa.create_engine(sqlite_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"target_metadata": metadata})
            script = produce_migrations(context, metadata)
            assert script.downgrade_ops is not None
            before = flat(script.downgrade_ops.ops)
            collapse_sharded_ops(context, None, [script])
    finally:
        engine.dispose()
    assert any(isinstance(op, alembic_ops.DropIndexOp) for op in before)
    after = flat(script.downgrade_ops.ops)
    assert not any(isinstance(op, (alembic_ops.DropIndexOp, DropShardedIndexOp)) for op in after)
    names = [
        op.spec.name if isinstance(op, DropShardedTableOp) else getattr(op, "table_name", None)
        for op in after
    ]
    assert names.index("users") > max(names.index("notes"), names.index("addresses"))


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ],
)
def test_foreign_key_is_dropped_before_its_index(
    backend: str, database_factory: DatabaseFactory
) -> None:
    """A removed FK and its index: the FK is dropped first, so the upgrade runs on MariaDB."""
    [url] = database_factory(backend)
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        user_tables(child_fk=True).create_all(engine)
        metadata = user_tables(child_fk=False)
        with engine.begin() as connection:
            context = MigrationContext.configure(connection, opts={"target_metadata": metadata})
            script = produce_migrations(context, metadata)
            collapse_sharded_ops(context, None, [script])
            assert script.upgrade_ops is not None
            ops = flat(script.upgrade_ops.ops)
            kinds = [type(op) for op in ops]
            assert kinds.index(DropShardedConstraintOp) < kinds.index(DropShardedIndexOp)
            notes = [type(op) for op in ops if getattr(op, "table_name", None) == "notes"]
            assert notes == [alembic_ops.DropConstraintOp, alembic_ops.DropIndexOp]
            operations = Operations(context)
            for op in ops:
                operations.invoke(op)
        with engine.connect() as connection:
            insp = sa.inspect(connection)
            for table in ("notes", *ADDRESSES.table_names):
                assert insp.get_foreign_keys(table) == []
                assert insp.get_indexes(table) == []
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- imports


def test_chained_rewriter_still_adds_imports_to_a_fresh_set() -> None:
    """Chained with another hook, the rewriter imports SnowflakeType's module, in a new set."""
    from snowshard.orm.types import SnowflakeType

    context = MigrationContext.configure(dialect_name="sqlite")
    table = alembic_ops.CreateTableOp(
        "users", [sa.Column("id", SnowflakeType(), primary_key=True)]
    )
    script = alembic_ops.MigrationScript(
        "1", alembic_ops.UpgradeOps([table]), alembic_ops.DowngradeOps([])
    )
    calls: list[str] = []
    hook = collapse_sharded_ops.chain(lambda context, revision, scripts: calls.append("other"))
    hook(context, (), [script])
    assert calls == ["other"]
    assert script.imports == {"import snowshard.orm.types"}
    fresh = alembic_ops.MigrationScript(
        "2", alembic_ops.UpgradeOps([]), alembic_ops.DowngradeOps([])
    )
    assert fresh.imports == set()  # Alembic's shared default set was left alone


def test_table_left_per_shard_renders_no_shard_info(sqlite_url: str) -> None:
    """Shards that differ stay per table, and their create_table carries no ShardInfo."""
    spec = ShardSpec("t", 2)
    metadata = sa.MetaData()
    types: list[sa.types.TypeEngine[Any]] = [sa.Integer(), sa.String(10)]
    for index, type_ in enumerate(types):
        sa.Table(
            spec.table_name(index),
            metadata,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("note", type_),
            info={"snowshard": ShardInfo(spec, index), "owner": "shop"},
        )
    engine = sa.create_engine(sqlite_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"target_metadata": metadata})
            script = produce_migrations(context, metadata)
            collapse_sharded_ops(context, None, [script])
            assert script.upgrade_ops is not None
            code = render_python_code(script.upgrade_ops, migration_context=context)
    finally:
        engine.dispose()
    assert code.count("op.create_table(") == 2
    assert "ShardInfo" not in code and "'snowshard'" not in code
    assert code.count("info={'owner': 'shop'}") == 2
