"""``snowshard layout``: what a layout can hold, until when, and what to watch out for.

With ``--model module:Class`` it also lists the layout generations of a sharded model
(:mod:`snowshard.sharding.generations`): per generation its switch time, lowest ID, global
table indices, table names, strategy and databases.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.table import Table

from snowshard.cli.advice import layout_warnings, strategy_warnings, years
from snowshard.cli.options import (
    TimeParam,
    current_config,
    import_target,
    json_option,
    layout_options,
    routing_options,
    rule_of,
    strategy_from,
)
from snowshard.cli.output import console, echo_json, utc_text
from snowshard.errors import ShardConfigError
from snowshard.layout import Layout

if TYPE_CHECKING:
    from snowshard.sharding.model import ShardedModel

__all__ = ["capacity", "generation_facts", "layout_command", "load_model"]

_FIELDS = ("timestamp", "datacenter", "worker", "sequence", "gene")


def capacity(layout: Layout, now_ms: int) -> dict[str, object]:
    """The capacity facts of ``layout``, JSON-ready."""
    lifetime_ms = layout.expires_at.timestamp() * 1000 - layout.epoch_ms
    nodes = (layout.max_datacenter + 1) * (layout.max_worker + 1)
    per_second = layout.ids_per_tick * 1000 / layout.tick_ms
    unsafe = layout.js_unsafe_at
    return {
        "describe": layout.describe(),
        "total_bits": layout.total_bits,
        "fields": {
            name: {
                "bits": getattr(layout, f"{name}_bits"),
                "shift": getattr(layout, f"{name}_shift") if name != "gene" else 0,
            }
            for name in _FIELDS
        },
        "epoch": layout.epoch.isoformat(timespec="milliseconds"),
        "tick_ms": layout.tick_ms,
        "expires_at": layout.expires_at.isoformat(timespec="milliseconds"),
        "lifetime_years": round(years(lifetime_ms), 2),
        "years_left": round(years(layout.expires_at.timestamp() * 1000 - now_ms), 2),
        "ids_per_tick_per_worker": layout.ids_per_tick,
        "ids_per_second_per_worker": per_second,
        "max_worker": layout.max_worker,
        "max_datacenter": layout.max_datacenter,
        "workers_total": nodes,
        "ids_per_second_total": per_second * nodes,
        "genes": 1 << layout.gene_bits,
        "max_id": str(layout.max_value),
        "js_unsafe_at": unsafe.isoformat(timespec="milliseconds") if unsafe else None,
    }


def load_model(target: str) -> ShardedModel:
    """The sharded model of the class ``module:Class`` (imported from the working directory)."""
    from snowshard.sharding.declare import sharded_model  # SQLAlchemy: only when asked

    module_name, attribute, cls = import_target(
        target, example="module:Class, e.g. app.models:Order", param_hint="--model"
    )
    if not isinstance(cls, type):
        raise click.BadParameter(f"{module_name} has no class {attribute!r}", param_hint="--model")
    try:
        return sharded_model(cls)
    except ShardConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from exc


def generation_facts(model: ShardedModel) -> list[dict[str, Any]]:
    """Each generation of ``model``: since, first ID, indices, tables, strategy, databases."""
    facts = []
    for period in model.generations:
        spec = period.spec
        facts.append(
            {
                "generation": period.number,
                "since": period.since,
                "first_id": str(period.first_id),
                "indices": [period.offset, period.offset + spec.count - 1],
                "tables": [spec.table_name(0), spec.table_name(spec.count - 1)],
                "count": spec.count,
                "strategy": repr(period.strategy),
                "databases": {key: len(indices) for key, indices in spec.databases.items()},
            }
        )
    return facts


def _generation_table(model: ShardedModel) -> Table:
    table = Table(
        "generation", "since (UTC)", "indices", "tables", "strategy", "databases",
        box=None, pad_edge=False, title=f"{model.name}: layout generations", title_justify="left",
    )  # fmt: skip
    for fact in generation_facts(model):
        first, last = fact["tables"]
        low, high = fact["indices"]
        table.add_row(
            str(fact["generation"]),
            fact["since"] or "(from the start)",
            f"{low}..{high}",
            f"{first}..{last}",
            escape(fact["strategy"]),
            ", ".join(f"{key}: {n}" for key, n in fact["databases"].items()),
        )
    return table


def _rows(layout: Layout, facts: dict[str, object]) -> list[tuple[str, str]]:
    unsafe = layout.js_unsafe_at
    return [
        ("epoch", utc_text(layout.epoch)),
        ("tick", f"{layout.tick_ms} ms"),
        (
            "expires",
            f"{utc_text(layout.expires_at)}  ({facts['lifetime_years']} years after "
            f"the epoch, {facts['years_left']} from now)",
        ),
        (
            "IDs per tick",
            f"{layout.ids_per_tick:,} per worker "
            f"({facts['ids_per_second_per_worker']:,.0f} per second)",
        ),
        ("workers", f"{layout.max_worker + 1:,} per datacenter (0..{layout.max_worker})"),
        ("datacenters", f"{layout.max_datacenter + 1:,} (0..{layout.max_datacenter})"),
        (
            "all nodes",
            f"{facts['workers_total']:,} workers, "
            f"{facts['ids_per_second_total']:,.0f} IDs per second",
        ),
        ("genes", f"{1 << layout.gene_bits:,} (shards a gene can address)"),
        (
            "JavaScript",
            f"IDs pass 2^53 at {utc_text(unsafe)}"
            if unsafe is not None
            else "every ID stays below 2^53",
        ),
    ]


@click.command("layout")
@layout_options
@routing_options
@click.option(
    "--now",
    "now",
    type=TimeParam(),
    default=None,
    help="Judge expiry and 2^53 as of this time (default: now).",
)
@click.option(
    "--model",
    "model_target",
    metavar="MODULE:CLASS",
    default=None,
    help="Also list the layout generations of this sharded model (e.g. app.models:Order).",
)
@json_option
def layout_command(
    strategy: str | None,
    shards: int | None,
    shift_bits: int | None,
    shift_by: str | None,
    now: int | None,
    model_target: str | None,
    as_json: bool,
) -> None:
    """Show a layout's fields, capacity and lifetime, with warnings.

    With --strategy and --shards, also warn about that strategy on this layout
    (e.g. gene with more shards than 2^gene_bits).

    \b
    snowshard layout --layout twitter
    snowshard layout --gene-bits 4 --worker-bits 6 --strategy gene --shards 32
    snowshard layout --model app.models:Order
    """
    config = current_config()
    layout = config.layout
    now_ms = now if now is not None else time.time_ns() // 1_000_000
    router = strategy_from(config, strategy, shards, shift_bits, shift_by, required=False)
    model = load_model(model_target) if model_target is not None else None
    facts = capacity(layout, now_ms)
    warnings = layout_warnings(layout, now_ms)
    if router is not None:
        warnings += strategy_warnings(layout, router)
    if as_json:
        facts["sources"] = config.sources
        if router is not None:
            facts["strategy"] = {"name": repr(router), "rule": rule_of(router)}
        facts["warnings"] = warnings
        if model is not None:
            facts["generations"] = generation_facts(model)
        echo_json(facts)
        return
    out = console()
    source = ", ".join(config.sources) or "the default layout"
    out.print(f"Layout {layout.describe()}  [dim](from {escape(source)})[/dim]")
    fields = Table("field", "bits", "shift", "values", box=None, pad_edge=False)
    for name in _FIELDS:
        width = getattr(layout, f"{name}_bits")
        shift = getattr(layout, f"{name}_shift") if name != "gene" else 0
        fields.add_row(name, str(width), str(shift), f"0..{(1 << width) - 1:,}" if width else "-")
    out.print(fields)
    out.print()
    facts_table = Table(box=None, show_header=False, pad_edge=False)
    for label, shown in _rows(layout, facts):
        facts_table.add_row(label, shown)
    out.print(facts_table)
    if model is not None:
        out.print()
        out.print(_generation_table(model))
    for message in warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(message)}")
