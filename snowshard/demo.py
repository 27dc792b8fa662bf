"""A short tour of snowshard's IDs (replaced by the SQLite sharding demo)."""

from __future__ import annotations

from snowshard import Layout, ManualClock, Snowflake, gene_of
from snowshard.strategies import Gene


def main() -> None:
    layout = Layout(worker_bits=6, gene_bits=4)
    clock = ManualClock(1_700_000_000_000)
    generator = Snowflake(layout, worker=1, clock=clock, sleep=clock.sleep)
    for user_id in (1820, 5177331):
        order_id = generator.next_id(gene=user_id)
        print(f"user {user_id} -> order {order_id}, table {Gene(16).shard_of(order_id)}")
        assert gene_of(order_id, 4) == gene_of(user_id, 4)
    print(layout.explain(order_id))


if __name__ == "__main__":
    main()
