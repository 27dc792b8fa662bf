"""Every worked number in the seed articles (../shared/seeds), reproduced exactly."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from snowshard import Layout, gene_of
from snowshard.strategies import Gene, Mix, Mod

UTC = timezone.utc


def test_seed000_plain_unix_ms_shift() -> None:
    """1572057648000 << 22 with a zero epoch is 6593687681236992000."""
    assert Layout(epoch=0).compose(1572057648000) == 6593687681236992000


def test_seed000_custom_epoch() -> None:
    """With epoch 2019-10-01 (1569859200000) the same instant gives 9220959240192000."""
    assert Layout(epoch=1569859200000).compose(1572057648000) == 9220959240192000


ORDER_LAYOUT = Layout(timestamp_bits=41, worker_bits=6, sequence_bits=12, gene_bits=4, epoch=0)


@pytest.mark.parametrize(
    ("uid", "order_id", "table"),
    [(1820, 6593741087309889548, 12), (5177331, 6593741087309889539, 3)],
)
def test_seed000_order_id_carries_uid_gene(uid: int, order_id: int, table: int) -> None:
    """An order of uid u composed with gene u & 15 is the article's ID and shares u's table."""
    composed = ORDER_LAYOUT.compose(1572070381000, worker=1, gene=gene_of(uid, 4))
    assert composed == order_id
    assert order_id % 16 == uid % 16 == table
    assert Gene(16).shard_of(order_id) == Gene(16).shard_of(uid) == table


def test_seed001_newlife_id_parses() -> None:
    """NewLife's 152075078181383514 (epoch 2020-01-01) is 2021-02-23 15:32:04.056, worker 782, seq 3418."""
    parts = Layout().parse(152075078181383514)
    assert parts.time == datetime(2021, 2, 23, 15, 32, 4, 56000, tzinfo=UTC)
    assert (parts.worker, parts.sequence) == (782, 3418)


def test_seed004_redis_issuer_id_parses() -> None:
    """Seed 004's 1369734562062337 is diffTime 326570168, server 1, business 2, sequence 1."""
    layout = Layout(timestamp_bits=41, datacenter_bits=5, worker_bits=5, sequence_bits=12)
    parts = layout.parse(1369734562062337)
    assert (parts.ticks, parts.datacenter, parts.worker, parts.sequence) == (326570168, 1, 2, 1)


@pytest.mark.parametrize("snowflake", [793292040770158592, 793292040774352896])
def test_seed002_mod_sends_low_rate_ids_to_table_zero(snowflake: int) -> None:
    """Seed 002's IDs issued at one per millisecond both land in table 0 under % 1024."""
    assert Mod(1024).shard_of(snowflake) == 0


@pytest.mark.parametrize(
    ("snowflake", "mixed", "table"),
    [
        (793292040770158592, 793299744572601664, 320),
        (793292040774352896, 793299744568407424, 384),
    ],
)
def test_seed002_mixing_spreads_them(snowflake: int, mixed: int, table: int) -> None:
    """HashMap-style mixing turns seed 002's IDs into its mixed values, tables 320 and 384."""
    assert snowflake ^ (snowflake >> 16) == mixed
    assert Mix(1024).shard_of(snowflake) == table
