"""Options shared by several commands: layout, routing, keys, times and ``--json``."""

from __future__ import annotations

import importlib
import os
import re
import sys
import uuid
from collections.abc import Callable
from datetime import timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any, TypeVar, Union
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click

from snowshard.cli.config import (
    SHIFT_BY,
    STRATEGIES,
    ConfigError,
    Layer,
    Resolved,
    parse_spec,
    parse_time,
    resolve,
)
from snowshard.errors import FieldOutOfRange, IdTypeError, SnowshardError
from snowshard.layout import Layout, is_decimal, parse_decimal
from snowshard.strategies import Gene, Hash, Mix, Mod, ShardStrategy, Shift

__all__ = [
    "KEY_TYPES",
    "Key",
    "TimeParam",
    "ZoneParam",
    "apply_to_key",
    "current_config",
    "import_target",
    "json_option",
    "key_kind",
    "key_type_option",
    "layout_options",
    "make_shift",
    "parse_key",
    "routing_options",
    "rule_of",
    "simple_strategy",
    "strategy_from",
]

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:  # click >= 8.4 types ParamType by its value; older click is not generic
    _IntParam = click.ParamType[int]
    _ZoneParam = click.ParamType[tzinfo]
else:
    _IntParam = _ZoneParam = click.ParamType

_META_SPEC = "snowshard.cli.layout_spec"
_META_FLAGS = "snowshard.cli.layout_flags"
_META_RESOLVED = "snowshard.cli.resolved"
KEY_TYPES = ("auto", "int", "str", "bytes", "uuid")

Key = Union[int, str, bytes, uuid.UUID]
"""A shard key as the library takes it (see :func:`snowshard.genes.key_to_int`)."""

_UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_SIMPLE_STRATEGIES: dict[str, Callable[[int], ShardStrategy]] = {
    "gene": Gene,
    "mod": Mod,
    "mix": Mix,
    "hash": Hash,
}


class TimeParam(_IntParam):
    """ISO 8601 (a date or naive time is UTC) or Unix milliseconds, converted to Unix ms."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_time(str(value))
        except (ValueError, SnowshardError) as exc:
            self.fail(str(exc), param, ctx)


class ZoneParam(_ZoneParam):
    """An IANA zone name (Europe/Paris) or a fixed offset (+08:00)."""

    name = "ZONE"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tzinfo:
        if isinstance(value, tzinfo):
            return value
        text = str(value).strip()
        if text[:1] in "+-" and len(text) in (3, 6):
            try:
                hours, minutes = int(text[1:3]), int(text[4:6] or 0)
            except ValueError:
                self.fail(f"{text!r} is not an offset like +08:00", param, ctx)
            sign = -1 if text[0] == "-" else 1
            return timezone(sign * timedelta(hours=hours, minutes=minutes))
        try:
            return ZoneInfo(text)
        except (ZoneInfoNotFoundError, ValueError):
            self.fail(f"unknown time zone {text!r}; use e.g. Europe/Paris or +08:00", param, ctx)


def _store_spec(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        try:
            ctx.meta[_META_SPEC] = parse_spec(value, "--layout")
        except ConfigError as exc:
            raise click.BadParameter(str(exc).removeprefix("--layout: "), ctx, param) from None


def _store_flag(ctx: click.Context, param: click.Parameter, value: int | None) -> None:
    if value is not None and param.name is not None:
        ctx.meta.setdefault(_META_FLAGS, {})[param.name] = value


def _width(name: str) -> Callable[[F], F]:
    flag = "--" + name.replace("_", "-")
    return click.option(
        flag,
        name,
        type=click.IntRange(0, 63),
        metavar="N",
        expose_value=False,
        callback=_store_flag,
        help=f"Width of the {name.removesuffix('_bits')} field.",
    )


_LAYOUT_OPTIONS: list[Callable[[F], F]] = [
    click.option(
        "-L",
        "--layout",
        "layout_spec",
        metavar="SPEC",
        expose_value=False,
        callback=_store_spec,
        help="Preset (default, twitter, discord, sonyflake, js_safe) or "
        "'worker_bits=8,gene_bits=4,epoch=2020-01-01'. Overrides $SNOWSHARD_LAYOUT, "
        "which overrides [tool.snowshard] in pyproject.toml.",
    ),
    *(_width(name) for name in ("timestamp_bits", "datacenter_bits", "worker_bits")),
    *(_width(name) for name in ("sequence_bits", "gene_bits")),
    click.option(
        "--epoch",
        type=TimeParam(),
        expose_value=False,
        callback=_store_flag,
        help="Epoch of the timestamp field (ISO date/time or Unix ms).",
    ),
    click.option(
        "--tick-ms",
        type=click.IntRange(min=1),
        metavar="MS",
        expose_value=False,
        callback=_store_flag,
        help="Milliseconds per timestamp tick.",
    ),
]


def layout_options(func: F) -> F:
    """Add the layout options; read the result with :func:`current_config`."""
    for option in reversed(_LAYOUT_OPTIONS):
        func = option(func)
    return func


def current_config() -> Resolved:
    """The layout and routing defaults of the running command (resolved once)."""
    ctx = click.get_current_context()
    resolved = ctx.meta.get(_META_RESOLVED)
    if not isinstance(resolved, Resolved):
        layers: list[tuple[str, Layer]] = [
            ("--layout", ctx.meta.get(_META_SPEC, {})),
            ("command-line options", ctx.meta.get(_META_FLAGS, {})),
        ]
        resolved = resolve(layers)
        ctx.meta[_META_RESOLVED] = resolved
    return resolved


def json_option(func: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON for machines (IDs as strings)."
    )(func)


def key_type_option(func: F) -> F:
    return click.option(
        "--key-type",
        type=click.Choice(KEY_TYPES),
        default="auto",
        show_default=True,
        help="How to read keys. auto: an integer (digits with an optional leading '-') is an "
        "int key, a UUID written 8-4-4-4-12 is a UUID key, anything else a str key; "
        "bytes: hexadecimal (0a1b or 0x0a1b). Keys route exactly as in snowshard: ints as "
        "themselves (negative ones are refused), UUIDs by their 128-bit value, str (UTF-8) "
        "and bytes by their BLAKE2b-64 digest.",
    )(func)


def routing_options(func: F) -> F:
    """``--strategy``, ``--shards``, ``--shift-bits`` and ``--shift-by``."""
    options: list[Callable[[F], F]] = [
        click.option(
            "-s",
            "--strategy",
            type=click.Choice(STRATEGIES),
            default=None,
            help="gene: x & (n-1); mod: x % n; mix: (x ^ x>>16) % n; hash: fmix64(x) % n; "
            "shift: (x >> bits) % n.",
        ),
        click.option(
            "--shards", type=click.IntRange(min=1), metavar="N", default=None, help="Shard count."
        ),
        click.option(
            "--shift-bits",
            type=click.IntRange(0, 63),
            metavar="N",
            default=None,
            help="Bits the shift strategy drops (overrides --shift-by).",
        ),
        click.option(
            "--shift-by",
            type=click.Choice(SHIFT_BY),
            default=None,
            help="Shift off everything below the timestamp (time, the default: spreads IDs "
            "evenly however few workers issue them) or below the worker (worker).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def parse_key(text: str, key_type: str, hint: str = "'KEY'") -> Key:
    """A shard key from the command line, read as ``--key-type`` says.

    Only the reading happens here; whether the library accepts the key (a negative int is
    refused) is left to the library, see :func:`apply_to_key`. ``hint`` names the argument
    or option in usage errors.
    """
    if key_type == "str":
        return text
    if key_type == "bytes":
        return _parse_bytes(text, hint)
    if key_type == "uuid":
        try:
            return uuid.UUID(text.strip())
        except ValueError:
            raise click.BadParameter(
                f"{text!r} is not a UUID; give one like 12345678-1234-5678-1234-567812345678",
                param_hint=hint,
            ) from None
    stripped = text.strip()
    digits = stripped.removeprefix("-")
    if is_decimal(digits):
        n = parse_decimal(digits, what="integer key")
        return -n if stripped.startswith("-") else n
    if key_type == "int":
        raise click.BadParameter(
            f"{text!r} is not an integer; give decimal digits such as 1820, or pick another "
            "--key-type",
            param_hint=hint,
        )
    if _UUID_TEXT.fullmatch(stripped):
        return uuid.UUID(stripped)
    return text


def _parse_bytes(text: str, hint: str) -> bytes:
    digits = text.strip()
    if digits[:2].lower() == "0x":
        digits = digits[2:]
    try:
        return bytes.fromhex(digits)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not hexadecimal bytes; give an even number of hex digits such as "
            "0a1b or 0x0a1b",
            param_hint=hint,
        ) from None


def key_kind(key: Key) -> str:
    """The ``--key-type`` name of a parsed key: int, str, bytes or uuid."""
    return "uuid" if isinstance(key, uuid.UUID) else type(key).__name__


def apply_to_key(
    func: Callable[[Key], int], text: str, key: Key, hint: str = "'KEY'"
) -> int:
    """``func(key)`` (a library call), with the library's key errors as usage errors.

    The library refuses keys by raising :class:`FieldOutOfRange` (a negative int) or
    :class:`IdTypeError`; the command reports the same error, by name, and exits 2.
    """
    try:
        return func(key)
    except (FieldOutOfRange, IdTypeError) as exc:
        if isinstance(key, int) and key < 0:
            todo = f"To use the text {text!r} as a str key instead, pass --key-type str"
        else:
            todo = "Give an int >= 0, a str, bytes or a UUID"
        raise click.BadParameter(f"{type(exc).__name__}: {exc}. {todo}.", param_hint=hint) from None


def strategy_from(
    config: Resolved,
    strategy: str | None,
    shards: int | None,
    shift_bits: int | None,
    shift_by: str | None,
    *,
    required: bool,
) -> ShardStrategy | None:
    """Build the strategy from options, falling back on ``[tool.snowshard]`` defaults."""
    routing = config.routing
    name = strategy if strategy is not None else routing.get("strategy")
    count = shards if shards is not None else routing.get("shards")
    given = strategy is not None or shards is not None
    if not required and not given and (name is None or count is None):
        return None  # optional, and neither the options nor the config name a strategy
    if name is None or count is None:
        missing = "--strategy" if name is None else "--shards"
        raise click.UsageError(f"{missing} is needed (or set it in [tool.snowshard])")
    assert isinstance(count, int)
    if name != "shift":
        if shift_bits is not None or shift_by is not None:
            raise click.UsageError("--shift-bits and --shift-by apply only to --strategy shift")
        return simple_strategy(str(name), count)
    return make_shift(config.layout, count, shift_bits, shift_by, routing)


def simple_strategy(name: str, count: int) -> ShardStrategy:
    """``Gene``, ``Mod``, ``Mix`` or ``Hash`` of ``count`` shards by its CLI name."""
    return _SIMPLE_STRATEGIES[name](count)


def make_shift(
    layout: Layout, count: int, bits: int | None, by: str | None, routing: Layer | None = None
) -> Shift:
    routing = routing or {}
    configured = routing.get("shift_bits")
    if bits is None and by is None and isinstance(configured, int):
        bits = configured
    if bits is not None:
        return Shift(count, bits)
    by = by if by is not None else str(routing.get("shift_by", "time"))
    return Shift.by_worker(count, layout) if by == "worker" else Shift.by_time(count, layout)


def rule_of(strategy: ShardStrategy) -> str:
    """The formula a strategy routes by, e.g. ``x & 15``."""
    n = strategy.count
    if isinstance(strategy, Gene):
        return f"x & {n - 1}"
    if isinstance(strategy, Mod):
        return f"x % {n}"
    if isinstance(strategy, Mix):
        return f"(x ^ (x >> 16)) % {n}"
    if isinstance(strategy, Hash):
        return f"fmix64(x) % {n}"
    if isinstance(strategy, Shift):
        return f"(x >> {strategy.bits}) % {n}"
    return repr(strategy)


def import_target(target: str, *, example: str, param_hint: str) -> tuple[str, str, Any]:
    """``(module, attribute, value)`` of ``module:attribute``, imported from the working
    directory as ``python -m`` would; ``value`` is None when the module has no such name.
    A malformed target or a module that does not import is a ``click.BadParameter`` whose
    message shows ``example``."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{target!r}: give {example}", param_hint=param_hint)
    if os.getcwd() not in sys.path:  # `snowshard` run from the project, like `python -m`
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r} ({exc}); run from the project directory or "
            "install it",
            param_hint=param_hint,
        ) from exc
    return module_name, attribute, getattr(module, attribute, None)
