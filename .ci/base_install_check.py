"""What ``pip install snowshard`` (no extras) must do, checked in the README line 1 venv.

Run by ``.ci/run`` with that venv's Python, after the demo: the sync ORM works on SQLite,
the ``snowshard`` command and the migration helpers work, and asyncio support fails with
:class:`snowshard.MissingExtra` naming its extra instead of a bare ``ImportError``.
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


def main() -> None:
    check("sqlalchemy.ext.asyncio" not in sys.modules, "importing snowshard loads no asyncio")
    sync_orm_round_trip()
    check("sqlalchemy.ext.asyncio" not in sys.modules, "the sync ORM loads no asyncio")
    command = shutil.which("snowshard", path=str(Path(sys.executable).parent))
    check(command is not None, "the snowshard command is installed")
    assert command is not None
    routed = subprocess.run(
        [command, "route", "1820", "--strategy", "gene", "--shards", "16", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    check(routed.returncode == 0 and routed.stdout.strip() == "12", "snowshard route works")
    extra_is_named("snowshard.sharding.aio", "greenlet", "async")
    import snowshard.migrations

    check(callable(snowshard.migrations.collapse_sharded_ops), "the migration helpers import")


if __name__ == "__main__":
    main()
