"""``snowshard skew``: simulate ID streams and measure how evenly strategies spread them."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from snowshard.cli.advice import strategy_warnings
from snowshard.cli.config import STRATEGIES, Layer
from snowshard.cli.options import (
    TimeParam,
    current_config,
    json_option,
    layout_options,
    make_shift,
    rule_of,
    simple_strategy,
)
from snowshard.cli.output import console, echo_json
from snowshard.cli.plot import bar_chart, require_matplotlib, save_png
from snowshard.cli.simulate import Scenario, check, simulate
from snowshard.generator import SequenceStart
from snowshard.layout import Layout
from snowshard.skew import Skew
from snowshard.strategies import Gene, ShardStrategy, StrategyError

__all__ = ["skew_command"]

_AUTO_PROGRESS_IDS = 1_000_000


def build(
    layout: Layout,
    names: tuple[str, ...],
    shards: int,
    shift_bits: int | None,
    shift_by: str | None,
    routing: Layer | None = None,
) -> tuple[dict[str, ShardStrategy], list[str]]:
    """The strategies to measure, and notes on those skipped."""
    wanted = STRATEGIES if not names or "all" in names else tuple(dict.fromkeys(names))
    chosen: dict[str, ShardStrategy] = {}
    notes: list[str] = []
    for name in wanted:
        if name == "gene" and shards & (shards - 1):
            if "gene" in names:
                raise StrategyError(f"gene needs a power-of-two shard count, got {shards}")
            notes.append(f"gene skipped: {shards} shards is not a power of two")
        elif name == "shift":
            chosen[name] = make_shift(layout, shards, shift_bits, shift_by, routing)
        else:
            chosen[name] = simple_strategy(name, shards)
    return chosen, notes


@contextmanager
def _progress(total: int, show: bool) -> Iterator[Callable[[int], None] | None]:
    if not show:
        yield None
        return
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("ids", total=total)
        yield lambda n: bar.advance(task, n)


def _as_json(strategy: ShardStrategy, rule: str, result: Skew) -> dict[str, object]:
    return {
        "strategy": repr(strategy),
        "rule": rule,
        "max_over_mean": result.max_over_mean,
        "chi_square": result.chi_square,
        "p_value": result.p_value,
        "empty_shards": result.empty_shards,
        "total": result.total,
        "counts": list(result.counts),
    }


def _report(results: dict[str, tuple[str, Skew]], bins: int, chart: bool) -> None:
    out = console()
    table = Table(
        "strategy",
        "rule",
        "max/mean",
        "chi-square",
        "p-value",
        "empty shards",
        "fullest shard",
        box=None,
        pad_edge=False,
    )
    for name, (rule, result) in results.items():
        fullest = max(range(len(result.counts)), key=result.counts.__getitem__)
        table.add_row(
            name,
            rule,
            f"{result.max_over_mean:.2f}",
            f"{result.chi_square:,.0f}",
            f"{result.p_value:.3g}",
            f"{result.empty_shards:,}",
            f"{fullest} ({result.counts[fullest]:,} rows)",
        )
    out.print(table)
    if chart:
        for name, (rule, result) in results.items():
            even = result.total / len(result.counts)
            out.print(f"\n{name}: {rule}  shards by rows held (even: {even:,.1f})")
            for line in bar_chart(result.counts, bins):
                out.print("  " + line)


def finite(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """Refuse NaN and infinity, which ``FloatRange`` lets through."""
    if not math.isfinite(value):
        raise click.BadParameter(
            f"{value} is not a finite number; give a number > 0 (--rate in IDs per second, "
            "--duration in seconds)"
        )
    return value


@click.command("skew")
@click.option(
    "-s",
    "--strategy",
    "strategies",
    multiple=True,
    type=click.Choice([*STRATEGIES, "all"]),
    default=("all",),
    show_default=True,
    help="Strategy to measure; repeat for several.",
)
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=None,
    help="Shard count (default: [tool.snowshard] shards, else 1024).",
)
@click.option(
    "--shift-bits",
    type=click.IntRange(0, 63),
    default=None,
    help="Bits the shift strategy drops (overrides --shift-by).",
)
@click.option(
    "--shift-by",
    type=click.Choice(["time", "worker"]),
    default=None,
    help="Shift off all below the timestamp (time, default) or the worker.",
)
@click.option("-w", "--workers", type=click.IntRange(min=1), default=100, show_default=True)
@click.option(
    "-r",
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    callback=finite,
    default=1000.0,
    show_default=True,
    help="IDs per second per worker.",
)
@click.option(
    "-d",
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    callback=finite,
    default=2.048,
    show_default=True,
    help="Seconds of traffic (default: two full rounds of 1024 ms).",
)
@click.option(
    "--sequence-start",
    type=click.Choice(["continue", "reset", "random"]),
    default="continue",
    show_default=True,
    help="The generator's sequence policy; 'reset' (Twitter's) shows how mod piles rows "
    "into shard 0.",
)
@click.option(
    "--users",
    type=click.IntRange(min=1),
    default=1_000_000,
    show_default=True,
    help="Parent keys whose genes the IDs carry (layouts with gene bits).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of phases and genes.")
@click.option(
    "--start",
    type=TimeParam(),
    default=None,
    help="Time of the first tick (default 2024-01-01, or the epoch if later).",
)
@click.option(
    "--bins",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Most bars per chart (ranges of rows per shard).",
)
@click.option(
    "--chart/--no-chart",
    default=True,
    show_default=True,
    help="Print a histogram of shard loads per strategy.",
)
@click.option(
    "--plot",
    "plot_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also save the histograms as a PNG (needs snowshard[plot]).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar on stderr (default: on a terminal, for long runs).",
)
@layout_options
@json_option
def skew_command(
    strategies: tuple[str, ...],
    shards: int | None,
    shift_bits: int | None,
    shift_by: str | None,
    workers: int,
    rate: float,
    duration: float,
    sequence_start: SequenceStart,
    users: int,
    seed: int,
    start: int | None,
    bins: int,
    chart: bool,
    plot_file: Path | None,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Simulate WORKERS generators at RATE IDs/s for DURATION s and measure the spread.

    Runs the real generator on simulated clocks (default: 100 workers numbered 0..99 at
    1000 IDs/s each, 1024 shards) and reports, per strategy, max/mean (1.00 is even),
    the chi-square test's p-value (small: not random-like) and empty shards.

    \b
    snowshard skew --sequence-start reset          # mod piles into shard 0
    snowshard skew -s mod -s shift --shards 16 --workers 4 --rate 10 --duration 60
    """
    config = current_config()
    layout = config.layout
    count = shards if shards is not None else config.routing.get("shards", 1024)
    assert isinstance(count, int)
    if plot_file is not None:
        require_matplotlib()  # fail before a long run, not after
    scenario = Scenario(workers, rate, duration, sequence_start, start, users, seed)
    warnings = check(layout, scenario)
    chosen, notes = build(layout, strategies, count, shift_bits, shift_by, config.routing)
    for strategy in chosen.values():
        if isinstance(strategy, Gene):
            warnings += strategy_warnings(layout, strategy)
    if progress is None:
        progress = sys.stderr.isatty() and scenario.expected_ids >= _AUTO_PROGRESS_IDS
    with _progress(scenario.expected_ids, progress) as advance:
        measured = simulate(layout, scenario, chosen, advance)
    results = {name: (rule_of(chosen[name]), result) for name, result in measured.items()}
    total = next(iter(measured.values())).total if measured else 0
    title = (
        f"{total:,} IDs: {workers} workers x {rate:,g} IDs/s x {duration:g} s, "
        f"sequence_start={sequence_start}, {count} shards\nlayout {layout.describe()}"
    )
    if plot_file is not None:
        save_png(plot_file, results, title)
    if as_json:
        scene = {
            "workers": workers,
            "rate": rate,
            "duration": duration,
            "shards": count,
            "sequence_start": sequence_start,
            "users": users,
            "seed": seed,
            "start_ms": scenario.start_for(layout),
            "layout": layout.describe(),
            "ids": total,
        }
        echo_json(
            {
                "scenario": scene,
                "strategies": {name: _as_json(chosen[name], *res) for name, res in results.items()},
                "notes": notes,
                "warnings": warnings,
                "plot": str(plot_file) if plot_file is not None else None,
            }
        )
        return
    out = console()
    out.print(escape(title))
    _report(results, bins, chart)
    for line in notes:
        out.print(f"note: {escape(line)}")
    for line in warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(line)}")
    if plot_file is not None:
        out.print(f"histograms saved to {escape(str(plot_file))}")
