"""``snowshard reshard``: plan, start, status, verify, cutover, rollback and cleanup."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result
from sqlalchemy import select, update

from snowshard.cli import main
from snowshard.cli.cmd_reshard import reshard_group
from snowshard.sharding import sharded_model
from snowshard.sharding.shard_map import ShardMap
from tests.backends import DatabaseFactory
from tests.reshard_world import ReshardWorld, build, declare

Order, OrderV2 = declare(None)
OrderAB, OrderABV2 = declare({"a": range(2)})
MODELS = ["tests.test_cli_reshard:Order", "tests.test_cli_reshard:OrderV2"]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[ReshardWorld]:
    """A SQLite file database with the old layout (300 rows) and its twin."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'shop.db'}")
    try:
        yield build({"default": engine}, two_databases=False, models=(Order, OrderV2))
    finally:
        engine.dispose()


def _run(world: ReshardWorld, *args: str) -> Result:
    url = str(world.bind.url)
    command, *rest = args
    return CliRunner().invoke(reshard_group, [command, *MODELS, "--db", f"default={url}", *rest])


def _tables(world: ReshardWorld) -> set[str]:
    return set(sa.inspect(world.bind).get_table_names())


def test_plan_prints_the_size_and_writes_nothing(world: ReshardWorld) -> None:
    """plan names both layouts and 300 source rows, and creates no table."""
    before = _tables(world)
    result = _run(world, "plan")
    assert result.exit_code == 0, result.output
    assert "source rows in total: 300" in result.output and "target tables to create: 8" in result.output
    assert "phase: not started" in result.output
    assert _tables(world) == before


def test_start_dry_run_writes_nothing(world: ReshardWorld) -> None:
    """start --dry-run prints the plan and creates no table."""
    before = _tables(world)
    result = _run(world, "start", "--dry-run")
    assert result.exit_code == 0 and "source rows in total: 300" in result.output
    assert _tables(world) == before


def test_start_copies_every_row(world: ReshardWorld) -> None:
    """start copies all rows; status says copied, 100%, nothing waiting."""
    result = _run(world, "start", "--chunk-rows", "64")
    assert result.exit_code == 0, result.output
    assert "copied 300 of 300" in result.output
    status = _run(world, "status")
    assert "copied 300 of 300 source rows; 0 captured changes" in status.output
    assert "(100% copied)" in status.output
    assert world.rows_of(world.new) == world.twin_rows()


def test_status_json(world: ReshardWorld) -> None:
    """status --json before start says not started, with the source's rows."""
    result = _run(world, "status", "--json")
    assert json.loads(result.output) == {
        "job": "rs_orders-8", "phase": "not started", "copied": 0, "source_rows": 300, "lag": 0
    }


def test_verify_exits_1_on_a_difference_and_repair_fixes_it(world: ReshardWorld) -> None:
    """verify exits 0, then 1 after a target row is changed; --repair makes it pass again."""
    _run(world, "start")
    assert _run(world, "verify").exit_code == 0
    table = sharded_model(OrderV2).tables[0]
    with world.bind.begin() as connection:
        victim = connection.execute(select(table.c.id).limit(1)).scalar_one()
        connection.execute(update(table).where(table.c.id == victim).values(amount=-5))
    failed = _run(world, "verify")
    assert failed.exit_code == 1 and "1 differ" in failed.output
    assert _run(world, "verify", "--repair").exit_code == 0
    assert _run(world, "verify").exit_code == 0


def test_cutover_prints_the_pause_and_cleanup_drops_old_tables(world: ReshardWorld) -> None:
    """cutover reports the write pause; cleanup drops rs_orders_00..03."""
    _run(world, "start")
    result = _run(world, "cutover")
    assert result.exit_code == 0, result.output
    assert "writes paused" in result.output and "map version 1" in result.output
    cleaned = _run(world, "cleanup")
    assert cleaned.exit_code == 0 and "dropped 4 tables" in cleaned.output
    assert not {f"rs_orders_{i:02d}" for i in range(4)} & _tables(world)
    assert world.rows_of(world.new) == world.twin_rows()


def test_rollback_after_cutover_restores_the_old_map(world: ReshardWorld) -> None:
    """rollback after cutover flips the map back to the old declaration."""
    _run(world, "start")
    _run(world, "cutover")
    result = _run(world, "rollback")
    assert result.exit_code == 0 and "rolled back" in result.output
    assert ShardMap(world.bind).pick(Order, OrderV2) is Order


def test_cutover_before_start_is_a_clean_error(world: ReshardWorld) -> None:
    """cutover on a job never started exits 1 with the phase, no traceback."""
    url = str(world.bind.url)
    code = main(["reshard", "cutover", *MODELS, "--db", f"default={url}"])
    assert code == 1


def test_bad_db_value_is_a_usage_error(world: ReshardWorld) -> None:
    """--db without KEY= exits 2 and shows the form, masking the password."""
    result = CliRunner().invoke(
        reshard_group, ["plan", *MODELS, "--db", "postgresql://app:s3cret@db/shop"]
    )
    assert result.exit_code == 2 and "KEY=URL" in result.output
    assert "s3cret" not in result.output


def test_non_sharded_model_is_a_usage_error(world: ReshardWorld) -> None:
    """OLD naming a plain class exits 2 saying it is not a sharded model."""
    url = str(world.bind.url)
    result = CliRunner().invoke(
        reshard_group, ["plan", "tests.reshard_world:Twin", MODELS[1], "--db", f"default={url}"]
    )
    assert result.exit_code == 2 and "not a sharded model" in result.output


@pytest.mark.postgres
def test_move_between_two_postgresql_databases(database_factory: DatabaseFactory) -> None:
    """start, cutover, cleanup over two PostgreSQL servers: the new layout equals the twin."""
    urls = database_factory("postgresql", 2)
    engines = {key: database_factory.engine(url) for key, url in zip("ab", urls)}
    world = build(engines, two_databases=True, models=(OrderAB, OrderABV2))
    models = ["tests.test_cli_reshard:OrderAB", "tests.test_cli_reshard:OrderABV2"]
    dbs = [arg for key, url in zip("ab", urls) for arg in ("--db", f"{key}={url}")]
    for step in ("start", "cutover", "cleanup"):
        result = CliRunner().invoke(reshard_group, [step, *models, *dbs])
        assert result.exit_code == 0, result.output
    assert world.rows_of(world.new) == world.twin_rows()


def test_max_replica_lag_without_a_replica_is_a_clean_error(
    world: ReshardWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    """start --max-replica-lag with no --replica exits 1 naming what is missing; nothing starts."""
    url = str(world.bind.url)
    code = main(["reshard", "start", *MODELS, "--db", f"default={url}", "--max-replica-lag", "2"])
    assert code == 1
    assert "needs the replicas" in capsys.readouterr().err
    assert not {f"rs_orders_v2_{i:02d}" for i in range(8)} & _tables(world)


def test_bad_replica_value_is_a_usage_error(world: ReshardWorld) -> None:
    """--replica without KEY= exits 2 naming the option, masking the password."""
    result = _run(world, "start", "--replica", "postgresql://app:s3cret@standby/shop")
    assert result.exit_code == 2 and "--replica" in result.output and "KEY=URL" in result.output
    assert "s3cret" not in result.output


def test_start_while_the_job_runs_elsewhere_is_a_clean_error(
    world: ReshardWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    """start while another process holds the job exits 1 naming the holder; nothing is created."""
    from snowshard.operations.reshard.lock import JobLock

    held = JobLock(world.bind, "busy-job")
    held.acquire()
    try:
        code = main(["reshard", "start", *MODELS, "--db", f"default={world.bind.url}", "--job", "busy-job",
                     "--lock-wait", "0.2"])
    finally:
        held.release()
    assert code == 1
    err = capsys.readouterr().err
    assert "is running in another process" in err and "Traceback" not in err
    assert not {f"rs_orders_v2_{i:02d}" for i in range(8)} & _tables(world)


def test_plan_alembic_prints_the_revision_lines(world: ReshardWorld) -> None:
    """plan --alembic prints create_sharded_table / create_sharded_index and writes nothing."""
    result = _run(world, "plan", "--alembic")
    assert result.exit_code == 0, result.output
    assert "op.create_sharded_table(ShardSpec('rs_orders', 8" in result.output
    assert "op.create_sharded_index('ix_{table}_user_id'" in result.output
    assert not {f"rs_orders_v2_{i:02d}" for i in range(8)} & _tables(world)


@pytest.mark.postgres
def test_capture_logical_from_the_command_line(database_factory: DatabaseFactory, postgres2_url: str) -> None:
    """start --capture logical, then cutover without it is refused (exit 1, no traceback);
    cutover and cleanup with it finish the move."""
    (url,) = database_factory("postgresql", 1, server_url=postgres2_url)
    world = build({"default": database_factory.engine(url)}, two_databases=False, models=(Order, OrderV2))
    base = [*MODELS, "--db", f"default={url}"]
    started = CliRunner().invoke(reshard_group, ["start", *base, "--capture", "logical"])
    assert started.exit_code == 0, started.output
    assert main(["reshard", "cutover", *base]) == 1
    for step in ("cutover", "cleanup"):
        result = CliRunner().invoke(reshard_group, [step, *base, "--capture", "logical"])
        assert result.exit_code == 0, result.output
    assert world.rows_of(world.new) == world.twin_rows()


def test_status_watch_follows_a_running_copy(world: ReshardWorld, capsys: pytest.CaptureFixture[str]) -> None:
    """status --watch, while start runs in another thread at 100 rows/s, draws the copy's
    bar with rows/s until the copy ends, then prints the final status."""
    job = world.job(chunk_rows=20)
    # 3 s of copying: at 300 rows/s, a CI run's load once delayed the command's start-up
    # until the copy had ended, leaving it nothing to measure a speed from
    runner = threading.Thread(target=lambda: job.start(rows_per_second=100), daemon=True)
    runner.start()
    deadline = time.monotonic() + 30
    while job.phase() != "copying":
        assert time.monotonic() < deadline and runner.is_alive(), "start never began copying"
        time.sleep(0.01)
    code = main(["reshard", "status", *MODELS, "--db", f"default={world.bind.url}", "--job", "rs-orders",
                 "--watch", "0.2"])
    runner.join(30)
    out, err = capsys.readouterr()
    assert code == 0
    assert "copy" in err and "rows/s" in err and "300/300" in err
    assert "job 'rs-orders': copied; copied 300 of 300 source rows" in out
