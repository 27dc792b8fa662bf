"""``snowshard route``: the shard of a key or ID."""

from __future__ import annotations

import click

from snowshard.cli.advice import strategy_warnings
from snowshard.cli.cmd_inspect import read_tokens
from snowshard.cli.options import (
    current_config,
    json_option,
    key_type_option,
    layout_options,
    parse_key,
    routing_options,
    rule_of,
    strategy_from,
)
from snowshard.cli.output import echo_json, warn
from snowshard.strategies import Gene

__all__ = ["route_command"]


@click.command("route")
@click.argument("keys", nargs=-1, metavar="[KEY]...")
@routing_options
@key_type_option
@layout_options
@click.option("-q", "--quiet", is_flag=True, help="Print only the shard numbers, no warnings.")
@json_option
def route_command(
    keys: tuple[str, ...],
    strategy: str | None,
    shards: int | None,
    shift_bits: int | None,
    shift_by: str | None,
    key_type: str,
    quiet: bool,
    as_json: bool,
) -> None:
    """Print the shard of each KEY (a parent key or an ID; stdin when none or -).

    \b
    snowshard route 1820 --strategy gene --shards 16        # 12
    snowshard route 793292040770158592 --strategy mix --shards 1024   # 320
    """
    config = current_config()
    router = strategy_from(config, strategy, shards, shift_bits, shift_by, required=True)
    assert router is not None
    routed = [(text, router.shard_of(parse_key(text, key_type))) for text in read_tokens(keys)]
    if as_json:
        echo_json(
            {
                "strategy": repr(router),
                "rule": rule_of(router),
                "shards": router.count,
                "routes": [{"key": text, "shard": shard} for text, shard in routed],
            }
        )
        return
    if not quiet and isinstance(router, Gene):  # the other strategies' advice: `layout`
        for message in strategy_warnings(config.layout, router):
            warn(message)
    for text, shard in routed:
        click.echo(
            str(shard)
            if quiet
            else f"{text} -> shard {shard} of {router.count}  ({rule_of(router)})"
        )
