"""``snowshard reshard``: move a sharded table's rows to a new layout while writes go on.

::

    snowshard reshard plan    app.models:Order app.models:OrderV2 --db a=postgresql://... --db b=...
    snowshard reshard start   app.models:Order app.models:OrderV2 --db ... [--rows-per-second N]
                              [--replica a=postgresql://standby1/shop --max-replica-lag 5]
    snowshard reshard status  ...           # phase, rows copied, changes waiting
    snowshard reshard verify  ... [--repair]
    snowshard reshard cutover ... [--max-lag N]
    snowshard reshard rollback ...          # until cleanup
    snowshard reshard cleanup ... [--keep-tables]

``OLD`` and ``NEW`` are two declarations of one table (``module:Class``); ``--db KEY=URL``
gives every database the layouts name (``default`` for a one-database layout). Every
step reads its state from the databases, so each can be run again after a crash.
``plan`` (and ``--dry-run`` on the steps that write) prints what would be done and its
size without writing anything. See :mod:`snowshard.operations.reshard`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from snowshard.cli.options import import_target
from snowshard.cli.output import console, echo_json
from snowshard.errors import SnowshardError
from snowshard.redaction import redact_url

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from snowshard.operations.reshard import Reshard
    from snowshard.sharding.model import ShardedModel

__all__ = ["reshard_group"]


def _model(target: str, hint: str) -> ShardedModel:
    from snowshard.sharding.declare import sharded_model

    module_name, attribute, cls = import_target(
        target, example="module:Class, e.g. app.models:Order", param_hint=hint
    )
    if cls is None:
        raise click.BadParameter(f"{module_name} has no class {attribute!r}", param_hint=hint)
    try:
        model = sharded_model(cls) if isinstance(cls, type) else None
    except SnowshardError:
        model = None
    if model is None:
        raise click.BadParameter(
            f"{target} is not a sharded model class (declare it with Sharded and __shards__)",
            param_hint=hint,
        )
    return model


def _pairs(values: tuple[str, ...], option: str) -> Iterator[tuple[str, str]]:
    """``KEY=URL`` option values, split (a malformed one is named, its password hidden)."""
    for value in values:
        key, sep, url = value.partition("=")
        if not sep or not key or "://" in key or "://" not in url:
            raise click.BadParameter(
                f"{redact_url(value)!r}: give KEY=URL, e.g. a=postgresql+psycopg://app@db1/shop",
                param_hint=option,
            )
        yield key, url


def _databases(values: tuple[str, ...]) -> dict[str, str]:
    return dict(_pairs(values, "--db"))


@dataclass
class _Job:
    reshard: Reshard
    engines: dict[str, Engine]


@contextmanager
def _open(
    ctx: click.Context,
    progress: Callable[[str, int, int | None], None] | None = None,
    replicas: dict[str, list[str]] | None = None,
) -> Iterator[_Job]:
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from snowshard.operations.reshard import Reshard, ReshardPlan

    options = ctx.obj
    old = _model(options["old"], "OLD")
    new = _model(options["new"], "NEW")
    plan = ReshardPlan.between(
        old, new, job=options["job"], control=options["control"], chunk_rows=options["chunk_rows"],
        capture=options["capture"],
    )
    engines = {key: create_engine(url, poolclass=NullPool) for key, url in options["db"].items()}
    standbys = {key: [create_engine(url, poolclass=NullPool) for url in urls]
                for key, urls in (replicas or {}).items()}
    try:
        job = Reshard(plan, engines, progress=progress, replicas=standbys, lock_wait=options["lock_wait"])
        yield _Job(job, engines)
    finally:
        for engine in [*engines.values(), *(e for copies in standbys.values() for e in copies)]:
            engine.dispose()


def _shared(command: Callable[..., Any]) -> Callable[..., Any]:
    """The arguments and options every subcommand takes, stored on the click context."""

    @click.argument("old")
    @click.argument("new")
    @click.option("--db", "db", multiple=True, required=True, metavar="KEY=URL",
                  help="An engine per database key the layouts name (repeat).")
    @click.option("--job", default=None, help="Job name (default: <table>-<new count>).")
    @click.option("--control", default=None, help="Database key of the job and shard map rows.")
    @click.option("--chunk-rows", type=click.IntRange(1, 1_000_000), default=10_000, show_default=True)
    @click.option("--lock-wait", type=click.FloatRange(0, 3600), default=5.0, show_default=True,
                  metavar="SECONDS", help="How long to wait for another run of the job to end.")
    @click.option("--capture", type=click.Choice(["triggers", "logical"]), default="triggers",
                  show_default=True, help="How changes are captured (logical: PostgreSQL "
                  "logical replication, wal_level=logical); every step of a job the same.")
    @click.pass_context
    def wrapper(ctx: click.Context, /, old: str, new: str, db: tuple[str, ...], job: str | None,
                control: str | None, chunk_rows: int, lock_wait: float, capture: str,
                **kw: Any) -> Any:
        ctx.obj = {"old": old, "new": new, "db": _databases(db), "job": job,
                   "control": control, "chunk_rows": chunk_rows, "lock_wait": lock_wait,
                   "capture": capture}
        return ctx.invoke(command, **kw)

    wrapper.__doc__ = command.__doc__
    wrapper.__name__ = command.__name__
    # the subcommand's own options (decorated below @_shared) come after the shared ones
    own: list[Any] = getattr(command, "__click_params__", [])
    shared: list[Any] = getattr(wrapper, "__click_params__", [])
    wrapper.__click_params__ = own + shared  # type: ignore[attr-defined]
    return wrapper


class _RowsPerSecond(ProgressColumn):
    """Rows per second of a step (rich's own speed columns count bytes)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f} rows/s")


@contextmanager
def _bar() -> Iterator[Callable[[str, int, int | None], None]]:
    """A rich progress callback: one bar per step, rows/s and time left."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               _RowsPerSecond(), TimeRemainingColumn())
    with Progress(*columns, console=console(stderr=True), transient=False) as progress:
        tasks: dict[str, TaskID] = {}

        def report(step: str, done: int, total: int | None) -> None:
            if step not in tasks:
                tasks[step] = progress.add_task(step, total=total)
            progress.update(tasks[step], completed=done, total=total)

        yield report


def _say(text: str) -> None:
    """Print ``text`` as it is: no wrapping (so lines can be parsed), no markup."""
    console().print(text, soft_wrap=True, markup=False, highlight=False)


@click.group("reshard")
def reshard_group() -> None:
    """Move a sharded table's rows to a new layout online (plan, start, cutover...)."""


@reshard_group.command("plan")
@_shared
@click.option("--alembic", is_flag=True,
              help="Also print the Alembic upgrade() lines that create the target tables.")
def plan_command(alembic: bool) -> None:
    """Print the plan and its size; write nothing (the dry run of the whole job)."""
    with _open(click.get_current_context()) as job:
        _describe(job)
        if alembic:
            from snowshard.operations.reshard.targets import revision_text

            _say("  target tables as an Alembic revision (start creates any still missing):")
            _say(revision_text(job.reshard.plan))


def _describe(job: _Job) -> None:
    from sqlalchemy import func, select

    plan = job.reshard.plan
    _say(plan.describe())
    total = 0
    for database, indices in plan.by_database(plan.source):
        tables = plan.tables(plan.source)
        rows = 0
        with job.engines[database].connect() as connection:
            for index in indices:
                if connection.dialect.has_table(connection, tables[index].name):
                    rows += connection.execute(select(func.count()).select_from(tables[index])).scalar_one()
        _say(f"  source rows in {database}: {rows:,}")
        total += rows
    _say(f"  source rows in total: {total:,}; target tables to create: {plan.target.spec.count}")
    _say(f"  phase: {job.reshard.phase() or 'not started'}")


@reshard_group.command("start")
@_shared
@click.option("--rows-per-second", type=click.FloatRange(min=1), default=None,
              help="Throttle the copy to about this many rows per second.")
@click.option("--replica", "replica", multiple=True, metavar="KEY=URL",
              help="A PostgreSQL standby or MariaDB replica of database KEY to watch (repeat).")
@click.option("--max-replica-lag", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS", help="Pause the copy while a --replica is further behind.")
@click.option("--dry-run", is_flag=True, help="Print the plan and its size; write nothing.")
def start_command(
    rows_per_second: float | None, replica: tuple[str, ...], max_replica_lag: float | None, dry_run: bool
) -> None:
    """Create the targets, capture changes, copy and catch up (run again to resume)."""
    ctx = click.get_current_context()
    replicas = _replicas(replica)
    if dry_run:
        with _open(ctx) as job:
            _describe(job)
        return
    with _bar() as bar, _open(ctx, bar, replicas) as job:
        status = job.reshard.start(rows_per_second=rows_per_second, max_replica_lag=max_replica_lag)
    _say(str(status))


def _replicas(values: tuple[str, ...]) -> dict[str, list[str]]:
    """``--replica KEY=URL`` options, by database key."""
    found: dict[str, list[str]] = {}
    for key, url in _pairs(values, "--replica"):
        found.setdefault(key, []).append(url)
    return found


@reshard_group.command("status")
@_shared
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--watch", type=click.FloatRange(min=0.1), default=None, metavar="SECONDS",
              help="Follow a copy another process runs: a progress bar with rows/s and time "
                   "left, redrawn every SECONDS until the copy ends.")
def status_command(as_json: bool, watch: float | None) -> None:
    """The job's phase, rows copied of the source's rows, and changes waiting."""
    with _open(click.get_current_context()) as job:
        status = job.reshard.status()
        if watch is not None and not as_json:
            status = _watch(job, status, watch)
    if as_json:
        echo_json({"job": status.job, "phase": status.phase, "copied": status.copied,
                   "source_rows": status.source_rows, "lag": status.lag})
        return
    share = 100.0 * status.copied / status.source_rows if status.source_rows else 100.0
    _say(f"{status} ({min(share, 100.0):.0f}% copied)")


def _watch(job: _Job, status: Any, every: float) -> Any:
    """Redraw the copy's progress bar (rows/s, time left) every ``every`` seconds while the
    job copies (another process runs ``start``); the last status read."""
    with _bar() as bar:
        while True:
            bar("copy", status.copied, status.source_rows or None)
            bar("changes waiting", status.lag, None)
            if status.phase != "copying":
                return status
            time.sleep(every)
            status = job.reshard.status()


@reshard_group.command("verify")
@_shared
@click.option("--repair", is_flag=True, help="Copy differing ranges again.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def verify_command(repair: bool, as_json: bool) -> None:
    """Compare source and target per key range; exit 1 if a range differs."""
    with _open(click.get_current_context()) as job:
        report = job.reshard.verify(repair=repair)
    if as_json:
        echo_json({"ranges": len(report.ranges), "rows": report.rows,
                   "mismatches": [[c.low, c.high] for c in report.mismatches],
                   "repaired": [list(r) for r in report.repaired]})
    else:
        _say(str(report))
        if report.repaired:
            _say(f"repaired {len(report.repaired)} ranges: run verify again to check")
    if report.mismatches and not report.repaired:
        raise click.exceptions.Exit(1)


@reshard_group.command("cutover")
@_shared
@click.option("--max-lag", type=click.IntRange(min=0), default=500, show_default=True,
              help="Catch up until at most this many changes wait, then fence.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--dry-run", is_flag=True, help="Print what would be done; write nothing.")
def cutover_command(max_lag: int, as_json: bool, dry_run: bool) -> None:
    """Fence the old tables, apply the last changes, flip the shard map."""
    ctx = click.get_current_context()
    if dry_run:
        with _open(ctx) as job:
            status = job.reshard.status()
        _say(f"{status}\nwould fence {job.reshard.plan.source.spec.count} tables, apply "
                        f"the last changes, and flip the shard map to the new layout")
        return
    with _bar() as bar, _open(ctx, bar) as job:
        report = job.reshard.cutover(max_lag=max_lag)
    if as_json:
        echo_json({"pause_ms": report.pause_ms, "applied": report.applied_during_pause,
                   "map_version": report.map_version, **report.checks})
    else:
        parts = ", ".join(f"{k} {v:.0f}" for k, v in report.checks.items())
        _say(f"{report} ({parts})")


@reshard_group.command("rollback")
@_shared
@click.option("--dry-run", is_flag=True, help="Print the phase; write nothing.")
def rollback_command(dry_run: bool) -> None:
    """Undo the move, keeping every write made since the cutover (until cleanup)."""
    with _open(click.get_current_context()) as job:
        if dry_run:
            _say(f"{job.reshard.status()}\nwould roll the job back")
            return
        _say(job.reshard.rollback())


@reshard_group.command("cleanup")
@_shared
@click.option("--keep-tables", is_flag=True, help="Keep the tables of the layout no longer used.")
@click.option("--dry-run", is_flag=True, help="Print the phase; write nothing.")
def cleanup_command(keep_tables: bool, dry_run: bool) -> None:
    """Drop the old layout's tables, the triggers and the logs."""
    with _open(click.get_current_context()) as job:
        if dry_run:
            _say(f"{job.reshard.status()}\nwould drop the unused layout's tables, "
                            "triggers and logs")
            return
        _say(job.reshard.cleanup(drop_tables=not keep_tables))
