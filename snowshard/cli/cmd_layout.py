"""``snowshard layout``: what a layout can hold, until when, and what to watch out for."""

from __future__ import annotations

import time

import click
from rich.markup import escape
from rich.table import Table

from snowshard.cli.advice import layout_warnings, strategy_warnings, years
from snowshard.cli.options import (
    TimeParam,
    current_config,
    json_option,
    layout_options,
    routing_options,
    rule_of,
    strategy_from,
)
from snowshard.cli.output import console, echo_json, utc_text
from snowshard.layout import Layout

__all__ = ["capacity", "layout_command"]

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
@json_option
def layout_command(
    strategy: str | None,
    shards: int | None,
    shift_bits: int | None,
    shift_by: str | None,
    now: int | None,
    as_json: bool,
) -> None:
    """Show a layout's fields, capacity and lifetime, with warnings.

    With --strategy and --shards, also warn about that strategy on this layout
    (e.g. gene with more shards than 2^gene_bits).

    \b
    snowshard layout --layout twitter
    snowshard layout --gene-bits 4 --worker-bits 6 --strategy gene --shards 32
    """
    config = current_config()
    layout = config.layout
    now_ms = now if now is not None else time.time_ns() // 1_000_000
    router = strategy_from(config, strategy, shards, shift_bits, shift_by, required=False)
    facts = capacity(layout, now_ms)
    warnings = layout_warnings(layout, now_ms)
    if router is not None:
        warnings += strategy_warnings(layout, router)
    if as_json:
        facts["sources"] = config.sources
        if router is not None:
            facts["strategy"] = {"name": repr(router), "rule": rule_of(router)}
        facts["warnings"] = warnings
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
    for message in warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(message)}")
