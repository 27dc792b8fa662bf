"""The SQLite sharding demo: ``python -m snowshard.demo`` (or ``snowshard demo``).

Creates 16 order tables in an in-memory SQLite database, inserts orders whose IDs carry
their user's gene, shows the table each row went to, then runs routed and fan-out
queries and prints which tables each one read. A fixed clock makes the output the same
on every run.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Engine,
    Integer,
    String,
    Table,
    create_engine,
    event,
    func,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.visitors import iterate

from snowshard import Layout, ManualClock, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, create_all, sharded_model

USERS = (1820, 5177331, 42, 7, 2024, 99)


def _models(ids: Snowflake) -> tuple[type[DeclarativeBase], Any]:
    class Base(DeclarativeBase):
        pass

    class Order(Sharded, Base):
        __tablename__ = "orders"
        __shards__ = Shards(16, key=("id", "user_id"))  # Gene(16): the low 4 bits
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger, index=True)
        item: Mapped[str] = mapped_column(String(30))
        amount: Mapped[int] = mapped_column(Integer)

    return Base, Order


class _Reads:
    """Physical tables named by the statements an engine runs (read from the statement)."""

    def __init__(self, engine: Engine) -> None:
        self.tables: list[list[str]] = []
        event.listen(engine, "before_cursor_execute", self._record)

    def _record(
        self, conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool
    ) -> None:
        compiled = getattr(context, "compiled", None)
        names: list[str] = []
        for element in iterate(compiled.statement) if compiled is not None else ():
            if isinstance(element, Table) and "snowshard" in element.info:
                if element.name not in names:
                    names.append(element.name)
        self.tables.append(sorted(names))

    def take(self) -> str:
        tables = [t for t in self.tables if t]
        self.tables.clear()
        if len(tables) == 1 and len(tables[0]) > 2:
            return f"1 statement over {len(tables[0])} tables (UNION ALL)"
        return ", ".join("+".join(t) for t in tables)


def main() -> None:
    """Run the demo, printing each step."""
    clock = ManualClock(1_700_000_000_000)  # 2023-11-14T22:13:20Z
    ids = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1, clock=clock, sleep=clock.sleep)
    base, order = _models(ids)
    engine = create_engine("sqlite://")
    try:
        create_all(base.metadata, bind=engine)
        model = sharded_model(order)
        print("snowshard demo: orders sharded over 16 SQLite tables by the user's gene")
        print(
            f"created {model.spec.table_name(0)} .. {model.spec.table_name(15)}; "
            f"strategy {model.strategy!r}, keys {' and '.join(model.keys)}\n"
        )
        reads = _Reads(engine)
        with ShardedSession(engine, expire_on_commit=False) as session:
            rows = []
            for n, user in enumerate(USERS):
                for item, amount in (("book", 12 + n), ("lamp", 40 - 3 * n)):
                    clock.advance(1)
                    rows.append(order(user_id=user, item=item, amount=amount))
            session.add_all(rows)
            session.commit()
            reads.take()
            print(f"{'user':>8}  {'order id':>19}  table      id % 16  user % 16")
            for row in rows:
                print(
                    f"{row.user_id:>8}  {row.id:>19}  {row.__table__.name}  "
                    f"{row.id % 16:>7}  {row.user_id % 16:>9}"
                )
                assert row.id % 16 == row.user_id % 16
            print()
            mine = session.scalars(select(order).where(order.user_id == 1820)).all()
            _show("orders of user 1820", [f"{o.item} {o.amount}" for o in mine], reads)
            session.expunge_all()
            got = session.get(order, rows[5].id)
            assert got is not None
            _show(f"session.get(Order, {rows[5].id})", [f"{got.item} of user {got.user_id}"], reads)
            split = session.scalars(
                select(order.user_id)
                .where(order.user_id.in_([1820, 42, 7]))
                .distinct()
                .order_by(order.user_id)
            ).all()
            _show("user_id IN (1820, 42, 7)", [str(u) for u in split], reads)
            top = session.execute(
                select(order.user_id, order.amount).order_by(order.amount.desc()).limit(3)
            ).all()
            _show("top 3 amounts (fan-out)", [f"{u}:{a}" for u, a in top], reads)
            count, total, average = session.execute(
                select(func.count(), func.sum(order.amount), func.avg(order.amount))
            ).one()
            _show("count, sum, avg (fan-out)", [str(count), str(total), f"{average:.2f}"], reads)
    finally:
        engine.dispose()


def _show(what: str, answer: list[str], reads: _Reads) -> None:
    print(f"{what:<34} -> {', '.join(answer)}")
    print(f"{'':<34}    read: {reads.take()}")


if __name__ == "__main__":
    main()
