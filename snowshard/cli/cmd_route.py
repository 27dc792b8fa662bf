"""``snowshard route``: the shard of a key or ID."""

from __future__ import annotations

import click

from snowshard.cli.advice import strategy_warnings
from snowshard.cli.cmd_inspect import read_tokens
from snowshard.cli.options import (
    apply_to_key,
    current_config,
    json_option,
    key_kind,
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


@click.command("route", context_settings={"ignore_unknown_options": True})
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

    Keys route exactly as the library routes them (see --key-type); a key the library
    refuses, such as a negative int (-1 too, as the library refuses it), is a usage error.

    \b
    snowshard route 1820 --strategy gene --shards 16        # 12
    snowshard route 793292040770158592 --strategy hash --shards 1024
    snowshard route 3f2a1c4e-8b7d-4e6f-9a0b-1c2d3e4f5a6b --strategy gene --shards 16
    """
    config = current_config()
    router = strategy_from(config, strategy, shards, shift_bits, shift_by, required=True)
    assert router is not None
    routed: list[tuple[str, str, int]] = []
    for text in read_tokens(keys):
        key = parse_key(text, key_type)
        routed.append((text, key_kind(key), apply_to_key(router.shard_of, text, key)))
    if as_json:
        echo_json(
            {
                "strategy": repr(router),
                "rule": rule_of(router),
                "shards": router.count,
                "routes": [
                    {"key": text, "key_type": kind, "shard": shard}
                    for text, kind, shard in routed
                ],
            }
        )
        return
    if not quiet and isinstance(router, Gene):  # the other strategies' advice: `layout`
        for message in strategy_warnings(config.layout, router):
            warn(message)
    for text, kind, shard in routed:
        note = "" if kind == "int" else f"; {kind} key"
        click.echo(
            str(shard)
            if quiet
            else f"{text} -> shard {shard} of {router.count}  ({rule_of(router)}{note})"
        )
