"""What ``pip install snowshard`` (no extras) must do, checked in the README line 1 venv.

Run by ``.ci/run`` with that venv's Python, after the demo: the sync ORM works on SQLite and
the migration helpers import; click and rich are not installed, so the ``snowshard`` command
and ``python -m snowshard`` print one line naming ``snowshard[cli]`` and exit 1; asyncio
support fails with :class:`snowshard.MissingExtra` naming its extra instead of a bare
``ImportError``.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

from sqlalchemy import BigInteger, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, MissingExtra, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all


def check(condition: bool, what: str) -> None:
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        raise SystemExit(1)


def sync_orm_round_trip() -> None:
    ids = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)

    class Base(DeclarativeBase):
        pass

    class Order(Sharded, Base):
        __tablename__ = "orders"
        __shards__ = Shards(16, key=("id", "user_id"))
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)

    engine = create_engine("sqlite://")
    create_all(Base.metadata, bind=engine)
    with ShardedSession(engine) as session:
        session.add(Order(user_id=1820))
        session.commit()
        found = session.scalars(select(Order).where(Order.user_id == 1820)).all()
    engine.dispose()
    check(len(found) == 1 and found[0].id % 16 == 1820 % 16, "sync sharded ORM on SQLite")


def extra_is_named(module: str, package: str, extra: str) -> None:
    """Importing ``module`` without ``package`` raises MissingExtra naming ``extra``."""
    if importlib.util.find_spec(package) is not None:
        print(f"skip {module}: {package} is installed in the base venv")
        return
    try:
        importlib.import_module(module)
    except MissingExtra as error:
        check(f"snowshard[{extra}]" in str(error), f"{module} without {package} names [{extra}]")
    else:
        check(False, f"{module} imports without {package}")


def command_names_the_extra(what: str, command: list[str]) -> None:
    """Without click and rich, ``command route 1820`` prints one line naming [cli], exit 1."""
    done = subprocess.run(
        [*command, "route", "1820"], capture_output=True, text=True, timeout=60, check=False
    )
    lines = done.stderr.splitlines()
    named = (
        done.returncode == 1
        and done.stdout == ""
        and len(lines) == 1
        and lines[0].startswith("Error: ")
        and 'pip install "snowshard[cli]"' in lines[0]
    )
    if not named:
        print(f"exit status {done.returncode}\n{done.stdout}{done.stderr}")
    check(named, f"{what} without click and rich names [cli] on one line and exits 1")


def main() -> None:
    check("sqlalchemy.ext.asyncio" not in sys.modules, "importing snowshard loads no asyncio")
    sync_orm_round_trip()
    check("sqlalchemy.ext.asyncio" not in sys.modules, "the sync ORM loads no asyncio")
    for package in ("click", "rich"):
        check(importlib.util.find_spec(package) is None, f"the base install has no {package}")
    command = shutil.which("snowshard", path=str(Path(sys.executable).parent))
    check(command is not None, "the snowshard command is installed")
    assert command is not None
    command_names_the_extra("the snowshard command", [command])
    command_names_the_extra("python -m snowshard", [sys.executable, "-m", "snowshard"])
    extra_is_named("snowshard.sharding.aio", "greenlet", "async")
    import snowshard.migrations

    check(callable(snowshard.migrations.collapse_sharded_ops), "the migration helpers import")


if __name__ == "__main__":
    main()
