"""``snowshard inspect``: what an ID says (time, fields, bits) and where it is stored."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from datetime import tzinfo

import click

from snowshard.cli.options import (
    ZoneParam,
    current_config,
    json_option,
    layout_options,
    routing_options,
    rule_of,
    strategy_from,
)
from snowshard.cli.output import echo_json, local_text, local_time, utc_text
from snowshard.errors import InvalidId
from snowshard.layout import Layout, is_decimal
from snowshard.strategies import ShardStrategy

__all__ = ["inspect_command", "read_tokens"]

_FIELDS = ("datacenter", "worker", "sequence", "gene")


def read_tokens(args: Iterable[str]) -> Iterator[str]:
    """The arguments, or stdin's words (split on whitespace and commas) for none or ``-``."""
    values = list(args)
    if values and values != ["-"]:
        for value in values:
            # the commands take "-1" as an argument (refused as the library refuses it);
            # any other word starting with "-" is an unknown option
            if value.startswith("-") and value != "-" and not is_decimal(value[1:]):
                raise click.NoSuchOption(value)
        yield from values
        return
    stdin = sys.stdin
    if not values and stdin.isatty():
        raise click.UsageError("give IDs as arguments, or pipe them in on stdin")
    for line in stdin:
        yield from (word for word in re.split(r"[\s,]+", line) if word)


def to_id(layout: Layout, token: str) -> int:
    """A decimal (or ``0x`` hexadecimal) ID checked against ``layout``."""
    text = token.strip()
    if text[:2].lower() == "0x":
        try:
            return layout.validate(int(text, 16))
        except ValueError:
            raise InvalidId(f"{token!r} is not a hexadecimal ID") from None
    if text.startswith("-") and is_decimal(text[1:]):
        return layout.validate(int(text))  # refused as the library refuses a negative ID
    return layout.validate(text)


def describe(
    layout: Layout, value: int, zone: tzinfo | None, strategy: ShardStrategy | None
) -> dict[str, object]:
    """Everything ``inspect`` reports about one ID, JSON-ready."""
    parts = layout.parse(value)
    local = local_time(parts.time, zone)
    info: dict[str, object] = {
        "id": str(value),
        "hex": hex(value),
        "time_utc": parts.time.isoformat(timespec="milliseconds"),
        "time_local": local.isoformat(timespec="milliseconds"),
        "unix_ms": parts.unix_ms,
        "ticks": parts.ticks,
    }
    info.update({name: getattr(parts, name) for name in _FIELDS})
    info["bits"] = {name: getattr(layout, f"{name}_bits") for name in ("timestamp", *_FIELDS)}
    info["binary"] = f"{value:0{layout.total_bits + 1}b}"
    if strategy is not None:
        info["strategy"] = repr(strategy)
        info["rule"] = rule_of(strategy)
        info["shards"] = strategy.count
        info["shard"] = strategy.shard_of(value)
    return info


def _text(layout: Layout, value: int, zone: tzinfo | None, strategy: ShardStrategy | None) -> str:
    parts = layout.parse(value)
    rows = [
        ("time UTC", utc_text(parts.time)),
        ("time local", local_text(local_time(parts.time, zone))),
        ("unix ms", str(parts.unix_ms)),
        ("ticks", f"{parts.ticks}  ({layout.tick_ms} ms each since {utc_text(layout.epoch)})"),
    ]
    for name in _FIELDS:
        width = getattr(layout, f"{name}_bits")
        shown = str(getattr(parts, name)) if width else "-  (no bits in this layout)"
        rows.append((name, shown))
    if strategy is not None:
        shard = strategy.shard_of(value)
        rows.append(("shard", f"{shard} of {strategy.count}  ({rule_of(strategy)})"))
    lines = [f"ID {value}"]
    lines += [f"  {label:<11} {shown}" for label, shown in rows]
    lines.append("  binary:")
    lines += ["    " + line for line in layout.explain(value).splitlines()]
    return "\n".join(lines)


@click.command("inspect", context_settings={"ignore_unknown_options": True})
@click.argument("ids", nargs=-1, metavar="[ID]...")
@layout_options
@routing_options
@click.option(
    "--tz", "zone", type=ZoneParam(), default=None, help="Zone of the local time (default: system)."
)
@json_option
def inspect_command(
    ids: tuple[str, ...],
    strategy: str | None,
    shards: int | None,
    shift_bits: int | None,
    shift_by: str | None,
    zone: tzinfo | None,
    as_json: bool,
) -> None:
    """Decode IDs: time (UTC and local), every field, the bits, and the shard.

    IDs come from the arguments, or from stdin when there are none (or ID is -).
    With --strategy and --shards (or [tool.snowshard] defaults), also print the shard.

    \b
    snowshard inspect 152075078181383514
    snowshard inspect --strategy gene --shards 16 6593741087309889548
    """
    config = current_config()
    layout = config.layout
    router = strategy_from(config, strategy, shards, shift_bits, shift_by, required=False)
    values = [to_id(layout, token) for token in read_tokens(ids)]
    if as_json:
        echo_json([describe(layout, value, zone, router) for value in values])
        return
    click.echo("\n\n".join(_text(layout, value, zone, router) for value in values))
