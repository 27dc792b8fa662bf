"""A top-20 by a string across databases under a language collation vs one plain table.

    python benchmarks/bench_string_order.py              # needs PostgreSQL with ICU
    python benchmarks/bench_string_order.py --rows 20000 --rounds 30 --calls 20

A merged ORDER BY of a string under a collation Python cannot reproduce (PostgreSQL's
language or ICU collations, the usual database default) costs one more statement: one of
the databases ranks the candidate strings (:mod:`snowshard.sharding.ranking`). This script
measures what that costs next to the same merge without strings.

Method. PostgreSQL comes from ``--postgres URL`` or ``SNOWSHARD_TEST_POSTGRES_URL``; two
throw-away databases ``snowshard_bench_*`` whose default collation is ICU ``en`` are
created there and dropped afterwards. The same ``--rows`` customers (seeded: a name of
mixed case and accents each) are loaded into a plain table in the first database and into
a snowshard model of 16 tables over both, each with an index on ``name``. Variants, each
reading 20 customers as ORM objects (a new statement per call):

* ``plain by name``: ``ORDER BY name, id LIMIT 20`` on the plain table (the baseline);
* ``sharded by name``: the same on the sharded model: each database sends its 20 first,
  one database ranks the names, the merge keeps 20;
* ``plain by id`` and ``sharded by id``: ``ORDER BY id DESC LIMIT 20``, the same merge
  with no strings to rank.

Ratios are paired (:mod:`paired`): the median over rounds of each variant's time divided
by the baseline's in the same round. "ranking" is what ordering by name adds to the
sharded read beyond what it adds to the plain one: (sharded by name - plain by name) -
(sharded by id - plain by id), in µs per call.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from bench_fanout import postgres_databases
from paired import Action, measure
from sqlalchemy import BigInteger, String, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all, sharded_model

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)
TOP = 20
SYLLABLES = ["an", "Be", "ço", "de", "É", "fi", "Gu", "hä", "Ja", "ko", "Lø", "mi", "ñu", "Or"]


class Base(DeclarativeBase):
    pass


class PlainCustomer(Base):
    __tablename__ = "plain_customers"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(String(40), index=True)


class Customer(Sharded, Base):
    __tablename__ = "customers"
    __shards__ = Shards(16, key=("id", "user_id"), databases={"a": range(8), "b": range(8, 16)})
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(String(40), index=True)


def make_rows(count: int) -> list[dict[str, Any]]:
    rng = random.Random(20261127)
    rows = []
    for _ in range(count):
        user = rng.randrange(1, 10_000_000)
        name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randrange(2, 5)))
        rows.append({"id": IDS.next_id(gene=user), "user_id": user, "name": name})
    return rows


def load(engines: dict[str, Engine], rows: list[dict[str, Any]]) -> None:
    """The tables, and the same rows in the plain table and the shards."""
    create_all(Base.metadata, bind=engines["a"], databases=engines)
    spec = sharded_model(Customer)
    with engines["a"].begin() as conn:
        conn.execute(PlainCustomer.__table__.insert(), rows)  # type: ignore[attr-defined]
    by_shard: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_shard.setdefault(spec.shard_of("user_id", row["user_id"]), []).append(row)
    for shard, part in by_shard.items():
        with engines[spec.database_of(shard)].begin() as conn:
            conn.execute(spec.tables[shard].insert(), part)
    for engine in engines.values():
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")


def reader(session: Session, model: Any, by_name: bool) -> Action:
    """Reads the 20 first ``model`` rows by name (or newest by ID) as objects."""

    def run() -> None:
        order = (model.name, model.id) if by_name else (model.id.desc(),)
        session.scalars(select(model).order_by(*order).limit(TOP)).all()
        session.expunge_all()

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="customers (default 20,000)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds (default 30)")
    parser.add_argument("--calls", type=int, default=20, help="calls per round (default 20)")
    parser.add_argument("--postgres", default=os.environ.get("SNOWSHARD_TEST_POSTGRES_URL"))
    args = parser.parse_args(argv)
    if not args.postgres:
        raise SystemExit("give --postgres URL or set SNOWSHARD_TEST_POSTGRES_URL")
    with postgres_databases(args.postgres, 2, "LOCALE_PROVIDER icu ICU_LOCALE 'en'") as urls:
        engines = {key: sa.create_engine(url) for key, url in zip("ab", urls)}
        try:
            load(engines, make_rows(args.rows))
            plain = Session(engines["a"])
            sharded = ShardedSession(engines["a"], databases=engines)
            for model, session in ((PlainCustomer, plain), (Customer, sharded)):
                names = session.scalars(
                    select(model.name).order_by(model.name, model.id).limit(TOP)
                ).all()
                if model is PlainCustomer:
                    expected = names
                elif names != expected:
                    raise SystemExit(f"the sharded read differs: {names} != {expected}")
            actions = {
                "plain by name": reader(plain, PlainCustomer, True),
                "sharded by name": reader(sharded, Customer, True),
                "plain by id": reader(plain, PlainCustomer, False),
                "sharded by id": reader(sharded, Customer, False),
            }
            found = measure(actions, args.rounds, args.calls, warm_up=20)
            plain.close()
            sharded.close()
        finally:
            for engine in engines.values():
                engine.dispose()
        names = [u.database for u in urls]
    load_avg = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"\nsnowshard string-order benchmark, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, load {load_avg}), "
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}, PostgreSQL (ICU en "
        f"default); {args.rows:,} rows, 16 tables over 2 databases, {args.rounds} rounds x "
        f"{args.calls} calls"
    )
    print("µs per call (median of rounds) and paired ratio to plain by name")
    for name, (micros, ratio) in found.items():
        print(f"{name:<20} {micros:>8.0f} µs {ratio:>6.2f}x")
    extra = (found["sharded by name"][0] - found["plain by name"][0]) - (
        found["sharded by id"][0] - found["plain by id"][0]
    )
    print(f"ranking              {extra:>+8.0f} µs per call")
    print(f"throw-away databases (dropped): {', '.join(str(n) for n in names)}")


if __name__ == "__main__":
    main()
