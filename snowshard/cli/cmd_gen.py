"""``snowshard gen``: issue IDs with the real generator."""

from __future__ import annotations

import click

from snowshard.cli.options import (
    TimeParam,
    apply_to_key,
    current_config,
    json_option,
    key_type_option,
    layout_options,
    parse_key,
)
from snowshard.cli.output import echo_json
from snowshard.clock import ManualClock
from snowshard.generator import SequenceStart, Snowflake

__all__ = ["gen_command"]

_BATCH = 100_000


@click.command("gen")
@click.option("-n", "--count", type=click.IntRange(min=0), default=1, show_default=True)
@click.option(
    "--gene",
    "gene",
    metavar="KEY",
    default=None,
    help="Parent key whose low bits the IDs carry, read as --key-type says (the layout "
    "needs gene bits).",
)
@key_type_option
@click.option(
    "--worker",
    type=click.IntRange(min=0),
    default=None,
    help="Worker ID (default: from the host's address and process ID).",
)
@click.option("--datacenter", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--at",
    "at",
    type=TimeParam(),
    default=None,
    help="Issue at this time on a stopped clock, for repeatable output.",
)
@click.option(
    "--sequence-start",
    type=click.Choice(["continue", "reset", "random"]),
    default="continue",
    show_default=True,
    help="Where each tick's sequence starts.",
)
@layout_options
@json_option
def gen_command(
    count: int,
    gene: str | None,
    key_type: str,
    worker: int | None,
    datacenter: int,
    at: int | None,
    sequence_start: SequenceStart,
    as_json: bool,
) -> None:
    """Print COUNT new IDs, one per line.

    \b
    snowshard gen -n 5
    snowshard gen -n 3 --gene 1820 --layout gene_bits=4,worker_bits=6 --worker 1 --at 2024-01-01
    """
    layout = current_config().layout
    clock = ManualClock(at) if at is not None else None
    generator = Snowflake(
        layout,
        worker=worker,
        datacenter=datacenter,
        clock=clock,
        sleep=clock.sleep if clock is not None else None,
        sequence_start=sequence_start,
    )
    key = None
    if gene is not None:
        key = parse_key(gene, key_type, "'--gene'")
        apply_to_key(layout.gene_for, gene, key, "'--gene'")  # the library's key checks
    if as_json:
        echo_json([str(value) for value in generator.next_ids(count, gene=key)])
        return
    left = count
    while left:
        batch = generator.next_ids(min(left, _BATCH), gene=key)
        click.echo("\n".join(map(str, batch)))
        left -= len(batch)
