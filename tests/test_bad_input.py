"""Every bad argument to the public API and the CLI gets a named error, up front.

Each row: a call with one bad argument, the exception class it must raise (from the
library's error tree, never a bare AttributeError/TypeError from deep inside, never a
driver error) and a piece of text the message must contain (the value, the allowed range
or what to do). URL arguments point at closed ports (127.0.0.1:1), so a call that did
I/O before checking its arguments would fail with a connection error instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.operations import ops as alembic_ops

from snowshard import (
    ClockMovedBackwards,
    ConfigurationError,
    FieldOutOfRange,
    IdTypeError,
    InvalidId,
    Layout,
    LayoutError,
    ManualClock,
    Snowflake,
    SnowshardError,
    StrategyError,
    WorkerClaim,
    WorkerIdError,
    gene_of,
    key_to_int,
    skew,
)
from snowshard.errors import IssuerTypeError, ShardConfigError
from snowshard.issuer import check_issuer
from snowshard.sharding.errors import InvalidShardHint
from snowshard.layout import parse_decimal, to_unix_ms
from snowshard.orm import (
    SnowflakeDefault,
    SnowflakeType,
    UtcDateTime,
    id_between,
    id_since,
    id_time,
    id_unix_ms,
    snowflake_default,
    snowflake_pk,
    to_id,
)
from snowshard.orm.errors import NaiveDatetimeError, TimeRangeError
from snowshard.skew import chi_square_sf
from snowshard.spec import ShardSpec
from snowshard.strategies import Gene, Hash, Mix, Mod, Shift, colocates_genes
from snowshard.workers.errors import WorkerConfigError
from tests.cli_support import isolated, run  # noqa: F401 (isolated: fixture)

LAYOUT = Layout(worker_bits=6, gene_bits=4)
NAIVE = datetime(2024, 1, 1)
AWARE = datetime(2024, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(2999, 1, 1, tzinfo=timezone.utc)
PASSWORD = "Pw-7f3k-distinctive"
CLOSED_REDIS = "redis://127.0.0.1:1/0"
COLUMN = sa.column("id", sa.BigInteger)
SPEC = ShardSpec("orders", 4)
NAN = math.nan
INF = math.inf


def _redis_issuer(*args: Any, **kwargs: Any) -> object:
    from snowshard.redis_issuer import RedisIssuer

    return RedisIssuer(*args, **kwargs)


def _workers(name: str) -> Callable[..., object]:
    def call(*args: Any, **kwargs: Any) -> object:
        import snowshard.workers

        return getattr(snowshard.workers, name)(*args, **kwargs)

    return call


def _sharding(name: str) -> Callable[..., object]:
    def call(*args: Any, **kwargs: Any) -> object:
        import snowshard.sharding

        return getattr(snowshard.sharding, name)(*args, **kwargs)

    return call


def _migrations(name: str) -> Callable[..., object]:
    def call(*args: Any, **kwargs: Any) -> object:
        import snowshard.migrations

        return getattr(snowshard.migrations, name)(*args, **kwargs)

    return call


def _recover(*args: Any, **kwargs: Any) -> object:
    from snowshard.operations import recover

    return recover(*args, **kwargs)


def _issue_after_jump(**options: Any) -> object:
    clock = ManualClock(LAYOUT.epoch_ms + 10_000_000)
    ids = Snowflake(LAYOUT, worker=1, clock=clock, sleep=clock.sleep, **options)
    ids.next_id()
    clock.advance(3_600_000)
    ids.next_id()
    clock.set(clock() - 3_600_000)
    return ids.next_id()


def row(
    id_: str, call: Callable[[], object], error: type[Exception], text: str, *marks: Any
) -> Any:
    return pytest.param(call, error, text, id=id_, marks=marks)


ROWS = [
    # --- snowshard.layout -----------------------------------------------------------------
    row("Layout-bits-None", lambda: Layout(timestamp_bits=None), LayoutError, "None"),  # type: ignore[arg-type]
    row("Layout-bits-bool", lambda: Layout(worker_bits=True), LayoutError, "must be an int"),
    row("Layout-bits-float", lambda: Layout(sequence_bits=1.5), LayoutError, "1.5"),  # type: ignore[arg-type]
    row("Layout-bits-str", lambda: Layout(gene_bits="4"), LayoutError, "'4'"),  # type: ignore[arg-type]
    row("Layout-bits-negative", lambda: Layout(worker_bits=-1), LayoutError, ">= 0, got -1"),
    row("Layout-bits-too-wide", lambda: Layout(worker_bits=70), LayoutError, "at most 63"),
    row("Layout-epoch-naive", lambda: Layout(epoch=NAIVE), LayoutError, "naive datetime"),
    row("Layout-epoch-str", lambda: Layout(epoch="2020"), IdTypeError, "'2020'"),  # type: ignore[arg-type]
    row("Layout-epoch-nan", lambda: Layout(epoch=NAN), IdTypeError, "nan"),  # type: ignore[arg-type]
    row("Layout-epoch-object", lambda: Layout(epoch=object()), IdTypeError, "aware datetime"),  # type: ignore[arg-type]
    row("Layout-epoch-before-1970", lambda: Layout(epoch=-1), LayoutError, "1970"),
    row("Layout-tick-zero", lambda: Layout(tick_ms=0), LayoutError, ">= 1, got 0"),
    row("Layout-tick-nan", lambda: Layout(tick_ms=NAN), LayoutError, "nan"),  # type: ignore[arg-type]
    row("Layout.parse-word", lambda: LAYOUT.parse("abc"), InvalidId, "'abc'"),
    row("Layout.parse-None", lambda: LAYOUT.parse(None), IdTypeError, "None"),  # type: ignore[arg-type]
    row("Layout.parse-float", lambda: LAYOUT.parse(1.5), IdTypeError, "1.5"),  # type: ignore[arg-type]
    row("Layout.parse-bool", lambda: LAYOUT.parse(True), IdTypeError, "bool"),
    row("Layout.parse-negative", lambda: LAYOUT.parse(-1), InvalidId, "-1 is negative"),
    row("Layout.compose-naive", lambda: LAYOUT.compose(NAIVE), LayoutError, "naive"),
    row("Layout.compose-inf", lambda: LAYOUT.compose(INF), IdTypeError, "inf"),  # type: ignore[arg-type]
    row("Layout.compose-worker", lambda: LAYOUT.compose(AWARE, worker=64), FieldOutOfRange, "64"),
    row("Layout.min_id-object", lambda: LAYOUT.min_id(object()), IdTypeError, "aware datetime"),  # type: ignore[arg-type]
    row("Layout.min_id-naive", lambda: LAYOUT.min_id(NAIVE), LayoutError, "naive"),
    row("Layout.explain-object", lambda: LAYOUT.explain(object()), IdTypeError, "object"),  # type: ignore[arg-type]
    row("to_unix_ms-bool", lambda: to_unix_ms(True), IdTypeError, "bool True"),
    row("parse_decimal-None", lambda: parse_decimal(None), IdTypeError, "None"),  # type: ignore[arg-type]
    row("parse_decimal-empty", lambda: parse_decimal(""), InvalidId, "''"),
    row("Layout.check_started-future", lambda: Layout(epoch=FUTURE).check_started(0),
        LayoutError, "choose an epoch in the past"),
    # --- snowshard.genes ------------------------------------------------------------------
    row("gene_of-None", lambda: gene_of(None, 4), IdTypeError, "None"),
    row("gene_of-float-key", lambda: gene_of(1.5, 4), IdTypeError, "1.5"),
    row("gene_of-bits-negative", lambda: gene_of(1, -1), FieldOutOfRange, ">= 0, got -1"),
    row("gene_of-bits-bool", lambda: gene_of(1, True), FieldOutOfRange, "True"),
    row("key_to_int-object", lambda: key_to_int(object()), IdTypeError, "int, str, bytes or UUID"),
    row("key_to_int-negative", lambda: key_to_int(-1), FieldOutOfRange, ">= 0, got -1"),
    # --- snowshard.strategies -------------------------------------------------------------
    row("Gene-not-power-of-two", lambda: Gene(3), StrategyError, "use 2 or 4"),
    row("Gene-str", lambda: Gene("4"), StrategyError, "'4'"),  # type: ignore[arg-type]
    row("Mod-zero", lambda: Mod(0), StrategyError, ">= 1, got 0"),
    row("Mod-nan", lambda: Mod(NAN), StrategyError, "nan"),  # type: ignore[arg-type]
    row("Mix-object", lambda: Mix(object()), StrategyError, "shard count"),  # type: ignore[arg-type]
    row("Hash-bool", lambda: Hash(True), StrategyError, "True"),
    row("Shift-bits-negative", lambda: Shift(4, -1), StrategyError, "0..63, got -1"),
    row("Shift.by_time-not-a-layout", lambda: Shift.by_time(4, object()), LayoutError,  # type: ignore[arg-type]
        "must be a snowshard.Layout"),
    row("Shift.by_worker-None", lambda: Shift.by_worker(4, None), LayoutError, "NoneType None"),  # type: ignore[arg-type]
    row("shard_of-None", lambda: Mod(4).shard_of(None), IdTypeError, "None"),
    row("shard_of-negative", lambda: Hash(4).shard_of(-1), FieldOutOfRange, "-1"),
    row("colocates_genes-not-a-strategy", lambda: colocates_genes(object(), LAYOUT),
        StrategyError, "Gene(n)"),
    row("colocates_genes-not-a-layout", lambda: colocates_genes(Gene(4), "default"),  # type: ignore[arg-type]
        LayoutError, "'default'"),
    # --- snowshard.skew -------------------------------------------------------------------
    row("skew-not-a-strategy", lambda: skew(object(), [1, 2]), StrategyError,  # type: ignore[arg-type]
        "must be a shard strategy"),
    row("skew-ids-None", lambda: skew(Mod(4), None), IdTypeError, "iterable"),  # type: ignore[arg-type]
    row("skew-id-float", lambda: skew(Mod(4), [1.5]), IdTypeError, "1.5"),
    row("skew-shard-out-of-range", lambda: skew(_BadStrategy(), [1]), StrategyError, "0..3"),
    row("chi_square_sf-nan", lambda: chi_square_sf(NAN, 3), FieldOutOfRange, "nan"),
    row("chi_square_sf-df-negative", lambda: chi_square_sf(1.0, -1), FieldOutOfRange, "-1"),
    # --- snowshard.clock ------------------------------------------------------------------
    row("ManualClock-None", lambda: ManualClock(None), FieldOutOfRange, "None"),  # type: ignore[arg-type]
    row("ManualClock-float", lambda: ManualClock(1.5), FieldOutOfRange, "1.5"),  # type: ignore[arg-type]
    row("ManualClock-negative", lambda: ManualClock(-1), FieldOutOfRange, "int >= 0"),
    row("ManualClock-datetime", lambda: ManualClock(AWARE), FieldOutOfRange, "Unix milliseconds"),  # type: ignore[arg-type]
    row("ManualClock.advance-negative", lambda: ManualClock(0).advance(-5), FieldOutOfRange,
        "use set() to go back"),
    row("ManualClock.sleep-nan", lambda: ManualClock(0).sleep(NAN), FieldOutOfRange, "nan"),
    # --- snowshard.spec -------------------------------------------------------------------
    row("ShardSpec-name-empty", lambda: ShardSpec("", 4), ShardConfigError, "non-empty str"),
    row("ShardSpec-name-None", lambda: ShardSpec(None, 4), ShardConfigError, "None"),  # type: ignore[arg-type]
    row("ShardSpec-count-zero", lambda: ShardSpec("t", 0), ShardConfigError, ">= 1, got 0"),
    row("ShardSpec-count-str", lambda: ShardSpec("t", "4"), ShardConfigError, "'4'"),  # type: ignore[arg-type]
    row("ShardSpec-count-float", lambda: ShardSpec("t", 4.0), ShardConfigError, "4.0"),  # type: ignore[arg-type]
    row("ShardSpec-pattern-unknown-field", lambda: ShardSpec("t", 4, pattern="{name}_{shard}"),
        ShardConfigError, "{shard}"),
    row("ShardSpec-pattern-attribute", lambda: ShardSpec("t", 4, pattern="{name.__class__}_{index}"),
        ShardConfigError, "only {name} and {index}"),
    row("ShardSpec-pattern-conversion", lambda: ShardSpec("t", 4, pattern="{name!r}_{index}"),
        ShardConfigError, "{name!r}"),
    row("ShardSpec-pattern-positional", lambda: ShardSpec("t", 4, pattern="{}_{index}"),
        ShardConfigError, "only {name} and {index}"),
    row("ShardSpec-pattern-unbalanced", lambda: ShardSpec("t", 4, pattern="{name}_{index"),
        ShardConfigError, "not a format string"),
    row("ShardSpec-pattern-None", lambda: ShardSpec("t", 4, pattern=None), ShardConfigError,  # type: ignore[arg-type]
        "{name}_{index:02d}"),
    row("ShardSpec-pattern-duplicates", lambda: ShardSpec("t", 4, pattern="{name}"),
        ShardConfigError, "include {index}"),
    row("ShardSpec-databases-None", lambda: ShardSpec("t", 4, databases=None), ShardConfigError,  # type: ignore[arg-type]
        "mapping"),
    row("ShardSpec-databases-str", lambda: ShardSpec("t", 4, databases={"a": "0123"}),  # type: ignore[dict-item]
        ShardConfigError, "'0123'"),
    row("ShardSpec-databases-bool-index", lambda: ShardSpec("t", 2, databases={"a": [0, True]}),
        ShardConfigError, "True"),
    row("ShardSpec-databases-missing", lambda: ShardSpec("t", 4, databases={"a": [0, 1]}),
        ShardConfigError, "[2, 3]"),
    # --- snowshard.issuer -----------------------------------------------------------------
    row("check_issuer-object", lambda: check_issuer(object()), IssuerTypeError, "next_id"),
    # --- snowshard (generator) ------------------------------------------------------------
    row("Snowflake-layout-str", lambda: Snowflake("default"), LayoutError, "'default'"),  # type: ignore[arg-type]
    row("Snowflake-worker-negative", lambda: Snowflake(LAYOUT, worker=-1), WorkerIdError,
        "0..63"),
    row("Snowflake-worker-str", lambda: Snowflake(LAYOUT, worker="x"), WorkerIdError, "'x'"),  # type: ignore[arg-type]
    row("Snowflake-datacenter-negative", lambda: Snowflake(LAYOUT, worker=1, datacenter=-1),
        WorkerIdError, "-1"),
    row("Snowflake-clock-not-callable", lambda: Snowflake(LAYOUT, worker=1, clock=5),  # type: ignore[arg-type]
        ConfigurationError, "clock must be a callable"),
    row("Snowflake-on_backwards", lambda: Snowflake(LAYOUT, worker=1, on_backwards="x"),  # type: ignore[arg-type]
        LayoutError, "'x'"),
    row("Snowflake-max_backwards-nan",
        lambda: Snowflake(LAYOUT, worker=1, max_backwards_ms=NAN), LayoutError, "nan"),  # type: ignore[arg-type]
    row("Snowflake-future-epoch", lambda: Snowflake(Layout(epoch=FUTURE), worker=1),
        LayoutError, "choose an epoch in the past"),
    row("Snowflake.next_ids-negative", lambda: Snowflake(LAYOUT, worker=1).next_ids(-1),
        FieldOutOfRange, ">= 0, got -1"),
    row("Snowflake.next_ids-None", lambda: Snowflake(LAYOUT, worker=1).next_ids(None),  # type: ignore[arg-type]
        FieldOutOfRange, "None"),
    row("Snowflake.next_id-gene-float", lambda: Snowflake(LAYOUT, worker=1).next_id(gene=1.5),
        IdTypeError, "1.5"),
    row("Snowflake.id_at-naive", lambda: Snowflake(LAYOUT, worker=1).id_at(NAIVE, 1),
        LayoutError, "naive"),
    row("WorkerClaim-negative", lambda: WorkerClaim(-1), WorkerIdError, "-1"),
    row("WorkerClaim-str", lambda: WorkerClaim("x"), WorkerIdError, "'x'"),  # type: ignore[arg-type]
    # --- the clock policy: a far jump back raises at once, never blocks for its size ------
    row("clock-jump-back-raises-at-once", lambda: _issue_after_jump(), ClockMovedBackwards,
        "moved back 3600000 ms"),
    row("clock-jump-back-raise-policy", lambda: _issue_after_jump(on_backwards="raise"),
        ClockMovedBackwards, "no ID was issued"),
    # --- snowshard.orm --------------------------------------------------------------------
    row("SnowflakeType-as_string-str", lambda: SnowflakeType(as_string="yes"), IdTypeError,  # type: ignore[arg-type]
        "'yes'"),
    row("SnowflakeType-bind-negative",
        lambda: SnowflakeType().process_bind_param(-1, sa.create_mock_engine(
            "sqlite://", executor=None).dialect), InvalidId, "-1 is negative"),
    row("SnowflakeDefault-not-an-issuer", lambda: SnowflakeDefault(object()), IssuerTypeError,  # type: ignore[arg-type]
        "lacks a layout"),
    row("SnowflakeDefault-gene_from-int",
        lambda: SnowflakeDefault(Snowflake(LAYOUT, worker=1), gene_from=5),  # type: ignore[arg-type]
        IdTypeError, "got int 5"),
    row("SnowflakeDefault-gene_from-empty",
        lambda: SnowflakeDefault(Snowflake(LAYOUT, worker=1), gene_from=""),
        IdTypeError, "non-empty str"),
    row("snowflake_default-None", lambda: snowflake_default(None), IssuerTypeError, "None"),  # type: ignore[arg-type]
    row("snowflake_pk-as_string-int",
        lambda: snowflake_pk(Snowflake(LAYOUT, worker=1), as_string=1), IdTypeError, "got 1"),  # type: ignore[arg-type]
    row("id_between-naive", lambda: id_between(COLUMN, LAYOUT, NAIVE, AWARE),
        NaiveDatetimeError, "naive"),
    row("id_between-reversed", lambda: id_between(COLUMN, LAYOUT, FUTURE, AWARE),
        TimeRangeError, "swap them"),
    row("id_between-not-a-layout", lambda: id_between(COLUMN, object(), 0, 1), LayoutError,  # type: ignore[arg-type]
        "must be a snowshard.Layout"),
    row("id_between-column-str", lambda: id_between("id", LAYOUT, 0, 1), IdTypeError, "'id'"),  # type: ignore[arg-type]
    row("id_since-None", lambda: id_since(COLUMN, LAYOUT, None), IdTypeError, "None"),  # type: ignore[arg-type]
    row("id_time-layout-None", lambda: id_time(COLUMN, None), LayoutError, "None"),  # type: ignore[arg-type]
    row("id_unix_ms-column-None", lambda: id_unix_ms(None, LAYOUT), IdTypeError, "None"),  # type: ignore[arg-type]
    row("to_id-float", lambda: to_id(1.5), IdTypeError, "1.5"),
    row("to_id-too-wide", lambda: to_id(2**63), InvalidId, "2**63-1"),
    row("UtcDateTime-bind-naive",
        lambda: UtcDateTime().process_bind_param(NAIVE, sa.create_mock_engine(
            "sqlite://", executor=None).dialect), NaiveDatetimeError, "naive"),
    row("UtcDateTime-bind-str",
        lambda: UtcDateTime().process_bind_param("2024", sa.create_mock_engine(  # type: ignore[arg-type]
            "sqlite://", executor=None).dialect), NaiveDatetimeError, "'2024'"),
    # --- snowshard.redis_issuer -----------------------------------------------------------
    row("RedisIssuer-int", lambda: _redis_issuer(12345), ConfigurationError, "got int 12345"),
    row("RedisIssuer-not-a-url", lambda: _redis_issuer("notaurl"), ConfigurationError,
        "redis://"),
    row("RedisIssuer-empty-url", lambda: _redis_issuer(""), ConfigurationError, "empty"),
    row("RedisIssuer-layout-str", lambda: _redis_issuer(CLOSED_REDIS, "default"), LayoutError,
        "'default'"),
    row("RedisIssuer-worker-negative", lambda: _redis_issuer(CLOSED_REDIS, LAYOUT, worker=-1),
        FieldOutOfRange, "0..63"),
    row("RedisIssuer-worker-float", lambda: _redis_issuer(CLOSED_REDIS, LAYOUT, worker=1.5),
        IdTypeError, "1.5"),
    row("RedisIssuer-key_prefix-empty",
        lambda: _redis_issuer(CLOSED_REDIS, LAYOUT, key_prefix=""), ConfigurationError,
        "key_prefix"),
    row("RedisIssuer-clock-int", lambda: _redis_issuer(CLOSED_REDIS, LAYOUT, clock=5),
        ConfigurationError, "got int 5"),
    row("RedisIssuer-timeout-inf", lambda: _redis_issuer(CLOSED_REDIS, LAYOUT, timeout=INF),
        ConfigurationError, "inf"),
    row("RedisIssuer-future-epoch", lambda: _redis_issuer(CLOSED_REDIS, Layout(epoch=FUTURE)),
        LayoutError, "choose an epoch in the past"),
    row("RedisIssuer-sequence_start", lambda: _redis_issuer(CLOSED_REDIS, sequence_start="x"),
        LayoutError, "'x'"),
    row("RedisIssuer.next_ids-negative",
        lambda: _redis_issuer(CLOSED_REDIS, LAYOUT).next_ids(-1),  # type: ignore[attr-defined]
        FieldOutOfRange, "-1"),
    # --- snowshard.migrations -------------------------------------------------------------
    row("sharded_operation-spec-None",
        lambda: _migrations("sharded_operation")(None, alembic_ops.DropTableOp("t")),
        ShardConfigError, "ShardSpec"),
    row("sharded_operation-template-object",
        lambda: _migrations("sharded_operation")(SPEC, object()), ShardConfigError,
        "CreateTableOp"),
    row("CreateShardedTableOp-wrong-template",
        lambda: _migrations("CreateShardedTableOp")(SPEC, alembic_ops.DropTableOp("t")),
        ShardConfigError, "CreateTableOp"),
    row("render_spec-object", lambda: _migrations("render_spec")(object()), ShardConfigError,
        "ShardSpec"),
    row("include_database-empty", lambda: _migrations("include_database")(""),
        ShardConfigError, "non-empty str"),
    row("include_database-unsharded-int",
        lambda: _migrations("include_database")("a", unsharded=5), ShardConfigError, "5"),
    row("shard_info_of-None", lambda: _migrations("shard_info_of")(None), ShardConfigError,
        "Table"),
    row("current_database-None", lambda: _migrations("current_database")(None),
        ShardConfigError, "MigrationContext"),
    # --- snowshard.workers ------------------------------------------------------------------
    row("RedisLease-int", lambda: _workers("RedisLease")(12345), WorkerConfigError, "12345"),
    row("RedisLease-not-a-url", lambda: _workers("RedisLease")("notaurl"), WorkerConfigError,
        "redis://"),
    row("RedisLease-ttl-nan", lambda: _workers("RedisLease")(CLOSED_REDIS, ttl=NAN),
        WorkerConfigError, "nan"),
    row("join_cluster-int", lambda: _workers("join_cluster")(5), WorkerConfigError, "5"),
    row("DatabaseLease-not-a-url", lambda: _workers("DatabaseLease")("not a url"),
        WorkerConfigError, "dialect[+driver]://"),
    row("DatabaseLease-int", lambda: _workers("DatabaseLease")(5), WorkerConfigError, "5"),
    row("HostWorker-layout-None", lambda: _workers("HostWorker")(None), LayoutError, "None"),
    row("fixed_worker-negative", lambda: _workers("fixed_worker")(-1), WorkerConfigError,
        "0..1023"),
    row("fixed_worker-str", lambda: _workers("fixed_worker")("3"), WorkerConfigError, "'3'"),
    row("worker_from_env-word",
        lambda: _workers("worker_from_env")(environ={"SNOWSHARD_WORKER_ID": "x"}),
        WorkerConfigError, "'x'"),
    row("worker_from_hostname-no-ordinal",
        lambda: _workers("worker_from_hostname")(hostname="web"), WorkerConfigError, "'web'"),
    row("make_lease_table-None", lambda: _workers("make_lease_table")(None),
        WorkerConfigError, "MetaData"),
    row("create_table-None", lambda: _workers("create_table")(None), WorkerConfigError,
        "Engine"),
    # --- snowshard.sharding ---------------------------------------------------------------
    row("Shards-count-zero", lambda: _sharding("Shards")(0, key="id"), ShardConfigError,
        ">= 1, got 0"),
    row("Shards-key-None", lambda: _sharding("Shards")(4, key=None), ShardConfigError, "None"),
    row("Shards-strategy-object", lambda: _sharding("Shards")(4, key="id", strategy=object()),
        StrategyError, "must be a shard strategy"),
    row("Shards-fan_out-str", lambda: _sharding("Shards")(4, key="id", fan_out="no"),
        ShardConfigError, "'no'"),
    row("ShardedSession-databases-int", lambda: _sharding("ShardedSession")(databases=5),
        ShardConfigError, "5"),
    row("ShardedSession-twophase-str", lambda: _sharding("ShardedSession")(twophase="yes"),
        ConfigurationError, "'yes'"),
    row("keyset-size-zero", lambda: _sharding("keyset")(sa.select(COLUMN), COLUMN, size=0),
        SnowshardError, "got 0"),
    row("keyset-statement-object", lambda: _sharding("keyset")(object(), COLUMN),
        ShardConfigError, "Select"),
    row("sharded_model-not-sharded", lambda: _sharding("sharded_model")(object),
        ShardConfigError, "not a sharded model"),
    row("reference_table-object", lambda: _sharding("reference_table")(object()),
        ShardConfigError, "Table"),
    row("create_all-None", lambda: _sharding("create_all")(None), ShardConfigError, "MetaData"),
    row("tables_by_database-None", lambda: _sharding("tables_by_database")(None),
        ShardConfigError, "MetaData"),
    row("shard_hint-no-session", lambda: _sharding("shard_hint")(None, shard=1).__enter__(),  # type: ignore[attr-defined]
        InvalidShardHint, "NoneType"),
    row("explain-None", lambda: _sharding("explain")(None, None), ShardConfigError, "None"),
    # --- snowshard.operations -------------------------------------------------------------
    row("recover-None", lambda: _recover(None), ConfigurationError, "None"),
    row("recover-grace-nan", lambda: _recover({}, grace=NAN), ConfigurationError, "nan"),
]


class _BadStrategy:
    """A strategy that answers outside its range."""

    count = 4

    def shard_of(self, value: object) -> int:
        return 7


@pytest.mark.parametrize(("call", "error", "text"), ROWS)
def test_bad_argument_raises_a_named_error(
    call: Callable[[], object], error: type[Exception], text: str
) -> None:
    """The call raises the named library error, whose message names the problem."""
    with pytest.raises(error) as caught:
        call()
    assert isinstance(caught.value, SnowshardError)
    assert isinstance(caught.value, (ValueError, TypeError, LookupError)) or issubclass(
        error, (ClockMovedBackwards, WorkerIdError)
    )
    assert text in str(caught.value)


URL_CALLS = [
    pytest.param(lambda url: _redis_issuer(url), id="RedisIssuer"),
    pytest.param(lambda url: _workers("RedisLease")(url), id="RedisLease"),
    pytest.param(lambda url: _workers("join_cluster")(url), id="join_cluster"),
    pytest.param(lambda url: _workers("DatabaseLease")(url), id="DatabaseLease"),
]
BAD_URLS = [
    pytest.param(f"http://user:{PASSWORD}@127.0.0.1:1/0", id="wrong-scheme"),
    pytest.param(f"redis//user:{PASSWORD}@127.0.0.1:1/0", id="no-colon"),
    pytest.param(f"nosuchdb://user:{PASSWORD}@127.0.0.1:1/x", id="unknown-dialect"),
    pytest.param(f"redis://127.0.0.1:notaport/0?password={PASSWORD}", id="query-password"),
]


@pytest.mark.parametrize("url", BAD_URLS)
@pytest.mark.parametrize("call", URL_CALLS)
def test_password_of_a_bad_url_never_appears(call: Callable[[str], object], url: str) -> None:
    """A malformed URL raises a library error whose message and repr omit its password."""
    with pytest.raises(SnowshardError) as caught:
        call(url)
    assert PASSWORD not in str(caught.value) and PASSWORD not in repr(caught.value)


def test_far_clock_jump_does_not_block_for_its_size() -> None:
    """After a 1 h jump back the generator raises at once: it sleeps no more than its limit."""
    clock = ManualClock(LAYOUT.epoch_ms + 10_000_000)
    ids = Snowflake(LAYOUT, worker=1, clock=clock, sleep=clock.sleep, max_backwards_ms=1000)
    ids.next_id()
    clock.advance(3_600_000)
    ids.next_id()
    clock.set(clock() - 3_600_000)
    with pytest.raises(ClockMovedBackwards):
        ids.next_id()
    assert clock.slept_ms <= 1000


def test_issuing_resumes_once_the_clock_passes_the_last_tick() -> None:
    """After the refusal, the next ID comes as soon as the clock is past the jump again."""
    clock = ManualClock(LAYOUT.epoch_ms + 10_000_000)
    ids = Snowflake(LAYOUT, worker=1, clock=clock, sleep=clock.sleep)
    clock.advance(3_600_000)
    last = ids.next_id()
    clock.set(clock() - 3_600_000)
    with pytest.raises(ClockMovedBackwards):
        ids.next_id()
    clock.set(clock() + 3_600_001)
    assert ids.next_id() > last


def test_small_clock_step_back_is_waited_out() -> None:
    """A step back within max_backwards_ms is waited out (by sleeping) and IDs still rise."""
    clock = ManualClock(LAYOUT.epoch_ms + 10_000_000)
    ids = Snowflake(LAYOUT, worker=1, clock=clock, sleep=clock.sleep, max_backwards_ms=1000)
    first = ids.next_id()
    clock.set(clock() - 500)
    assert ids.next_id() > first
    assert 500 <= clock.slept_ms <= 1000


CLI_ROWS = [
    pytest.param(("skew", "--rate", "nan"), 2, "not a finite number", id="skew-rate-nan"),
    pytest.param(("skew", "--duration", "inf"), 2, "not a finite number", id="skew-duration-inf"),
    pytest.param(("skew", "--rate", "-1"), 2, "x>0", id="skew-rate-negative"),
    pytest.param(("skew", "--workers", "0"), 2, "x>=1", id="skew-workers-zero"),
    pytest.param(("skew", "--shards", "-1"), 2, "x>=1", id="skew-shards-negative"),
    pytest.param(("gen", "-n", "-1"), 2, "x>=0", id="gen-count-negative"),
    pytest.param(("gen", "-n", "x"), 2, "'x'", id="gen-count-word"),
    pytest.param(("gen", "--worker", "99999"), 1, "0..1023", id="gen-worker-too-big"),
    pytest.param(("gen", "-L", "epoch=2999-01-01"), 1, "choose an epoch in the past",
                 id="gen-future-epoch"),
    pytest.param(("inspect", "-1"), 1, "-1 is negative", id="inspect-negative"),
    pytest.param(("inspect", "abc"), 1, "'abc'", id="inspect-word"),
    pytest.param(("inspect", ""), 1, "''", id="inspect-empty"),
    pytest.param(("inspect", "99999999999999999999999"), 1, "0..9223372036854775807",
                 id="inspect-too-wide"),
    pytest.param(("route", "-s", "gene", "--shards", "16", "-1"), 2, "got -1",
                 id="route-negative-key"),
    pytest.param(("route", "1", "-s", "mod", "--shards", "0"), 2, "x>=1", id="route-shards-zero"),
    pytest.param(("route", "1", "-s", "mod", "--shards", "nan"), 2, "'nan'", id="route-shards-nan"),
    pytest.param(("route", "1", "-s", "nope", "--shards", "4"), 2, "'nope'", id="route-strategy"),
    pytest.param(("layout", "-L", "nope"), 2, "choose from", id="layout-preset"),
    pytest.param(("layout", "-L", "worker_bits=x"), 2, "'x'", id="layout-width-word"),
    pytest.param(("layout", "-L", "worker_bits=-1"), 1, ">= 0, got -1", id="layout-width-negative"),
    pytest.param(("layout", "--worker-bits", "-1"), 2, "0<=x<=63", id="layout-option-negative"),
    pytest.param(("layout", "-L", "bogus=1"), 2, "known keys", id="layout-unknown-key"),
]


@pytest.mark.parametrize(("argv", "code", "text"), CLI_ROWS)
def test_cli_bad_argument_is_one_error_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], code: int, text: str
) -> None:
    """A bad CLI argument exits 1 (or 2 for usage) with an Error: line naming the value."""
    got, _, err = run(capsys, *argv)
    assert got == code
    assert "Error:" in err and text in err
    assert "Traceback" not in err

