"""Which layout (and default routing) a command uses.

Layers, later ones winning: the default layout, ``[tool.snowshard]`` of the nearest
``pyproject.toml`` (from the working directory upward), the ``SNOWSHARD_LAYOUT`` variable,
then the command line (``--layout`` first, then single options such as ``--gene-bits``).
A layer naming a ``preset`` starts over from that preset; its other keys then override it::

    [tool.snowshard]
    preset = "twitter"          # default | twitter | discord | sonyflake | js_safe
    gene_bits = 0               # timestamp_bits, datacenter_bits, worker_bits, sequence_bits
    epoch = 2020-01-01          # a TOML date/datetime, an ISO string or Unix ms
    tick_ms = 1
    strategy = "gene"           # routing defaults: strategy, shards, shift_bits, shift_by
    shards = 16

``SNOWSHARD_LAYOUT`` and ``--layout`` take a preset name, ``key=value,key=value`` or a
JSON object with the same keys.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path

from snowshard.errors import LayoutError
from snowshard.layout import Layout, is_decimal, parse_decimal, to_unix_ms

__all__ = [
    "ENV_VAR",
    "PRESETS",
    "ConfigError",
    "Resolved",
    "find_pyproject",
    "parse_spec",
    "parse_time",
    "resolve",
]

ENV_VAR = "SNOWSHARD_LAYOUT"
WIDTH_KEYS = ("timestamp_bits", "datacenter_bits", "worker_bits", "sequence_bits", "gene_bits")
LAYOUT_KEYS = (*WIDTH_KEYS, "epoch", "tick_ms")
STRATEGIES = ("gene", "mod", "mix", "hash", "shift")
SHIFT_BY = ("time", "worker")
_INT_KEYS = (*WIDTH_KEYS, "tick_ms", "shards", "shift_bits")
_KNOWN = ("preset", *LAYOUT_KEYS, "strategy", "shards", "shift_bits", "shift_by")

PRESETS: dict[str, Callable[[], Layout]] = {
    "default": Layout,
    "twitter": Layout.twitter,
    "discord": Layout.discord,
    "sonyflake": Layout.sonyflake,
    "js_safe": Layout.js_safe,
}

Layer = dict[str, object]


class ConfigError(LayoutError):
    """A layout or routing setting (option, variable or pyproject table) is invalid."""


@dataclass
class Resolved:
    """The layout a command uses, routing defaults, and where the settings came from."""

    layout: Layout
    routing: Layer = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)


def parse_time(text: str) -> int:
    """Unix ms of ``text``: digits are Unix ms; else ISO 8601 (a date, or naive, is UTC)."""
    value = text.strip()
    if is_decimal(value):
        return parse_decimal(value, what="Unix ms time", error=ConfigError)
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: give ISO 8601 (2021-02-23T15:32:04.056Z, 2021-02-23) "
            "or Unix milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return to_unix_ms(moment)


def _preset_name(value: object, source: str) -> str:
    name = str(value).strip().lower().replace("-", "_")
    if name not in PRESETS:
        raise ConfigError(
            f"{source}: unknown layout preset {value!r}; choose from {', '.join(PRESETS)}"
        )
    return name


def _epoch_ms(value: object, source: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{source}: epoch must be a date, time or Unix ms, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return to_unix_ms(aware)
    if isinstance(value, date):
        return to_unix_ms(datetime(value.year, value.month, value.day, tzinfo=timezone.utc))
    if isinstance(value, str):
        try:
            return parse_time(value)
        except ValueError as exc:
            raise ConfigError(f"{source}: epoch {exc}") from None
    raise ConfigError(f"{source}: epoch must be a date, time or Unix ms, got {value!r}")


def _choice(key: str, value: object, allowed: Sequence[str], source: str) -> str:
    text = str(value).strip().lower()
    if text not in allowed:
        raise ConfigError(f"{source}: {key} must be one of {', '.join(allowed)}, got {value!r}")
    return text


def normalise(raw: Mapping[str, object], source: str) -> Layer:
    """Check a layer's keys and convert its values (ints, epoch in Unix ms, names)."""
    out: Layer = {}
    for key, value in raw.items():
        name = key.strip().replace("-", "_")
        if name == "preset":
            out[name] = _preset_name(value, source)
        elif name in _INT_KEYS:
            if isinstance(value, str) and is_decimal(value.strip().removeprefix("-")):
                text = value.strip()
                number = parse_decimal(text.removeprefix("-"), what=name, error=ConfigError)
                value = -number if text.startswith("-") else number
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{source}: {name} must be an integer, got {value!r}")
            out[name] = value
        elif name == "epoch":
            out[name] = _epoch_ms(value, source)
        elif name == "strategy":
            out[name] = _choice(name, value, STRATEGIES, source)
        elif name == "shift_by":
            out[name] = _choice(name, value, SHIFT_BY, source)
        else:
            raise ConfigError(f"{source}: unknown key {key!r}; known keys: {', '.join(_KNOWN)}")
    return out


def parse_spec(text: str, source: str) -> Layer:
    """A preset name, ``key=value,...`` or a JSON object, as a checked layer."""
    spec = text.strip()
    if spec.startswith("{"):
        try:
            raw = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source}: invalid JSON ({exc.msg})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: expected a JSON object")
        return normalise(raw, source)
    if "=" not in spec:
        return {"preset": _preset_name(spec, source)}
    pairs: dict[str, object] = {}
    for item in re.split(r"[,;\s]+", spec):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{source}: expected key=value, got {item!r}")
        pairs[key] = value
    return normalise(pairs, source)


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` or a parent directory."""
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _load_toml(path: Path) -> dict[str, object]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise ConfigError(
                f"reading {path} needs Python 3.11+ or the tomli package; install it with: "
                f'pip install "snowshard[cli]"'
            ) from None
    try:
        with path.open("rb") as fh:
            data: dict[str, object] = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    return data


def pyproject_layer(path: Path) -> Layer | None:
    """The checked ``[tool.snowshard]`` table of ``path``, or None when it has none."""
    tool = _load_toml(path).get("tool")
    table = tool.get("snowshard") if isinstance(tool, dict) else None
    if table is None:
        return None
    source = f"{path} [tool.snowshard]"
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: expected a table")
    return normalise(table, source)


def _fields(layout: Layout) -> dict[str, int]:
    values = {key: getattr(layout, key) for key in (*WIDTH_KEYS, "tick_ms")}
    values["epoch"] = layout.epoch_ms
    return values


def resolve(
    cli_layers: Sequence[tuple[str, Layer]] = (),
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Resolved:
    """Merge the default layout, pyproject, ``$SNOWSHARD_LAYOUT`` and command-line layers."""
    environ = os.environ if environ is None else environ
    layers: list[tuple[str, Layer]] = []
    pyproject = find_pyproject(cwd if cwd is not None else Path.cwd())
    if pyproject is not None:
        table = pyproject_layer(pyproject)
        if table:
            layers.append((f"{pyproject} [tool.snowshard]", table))
    env = environ.get(ENV_VAR, "")
    if env.strip():
        layers.append((f"${ENV_VAR}", parse_spec(env, f"${ENV_VAR}")))
    layers.extend((source, layer) for source, layer in cli_layers if layer)

    fields = _fields(Layout())
    routing: Layer = {}
    sources: list[str] = []
    for source, layer in layers:
        if "preset" in layer:
            fields = _fields(PRESETS[str(layer["preset"])]())
        for key in LAYOUT_KEYS:
            if key in layer:
                value = layer[key]
                assert isinstance(value, int)
                fields[key] = value
        routing.update({k: v for k, v in layer.items() if k not in ("preset", *LAYOUT_KEYS)})
        if any(k == "preset" or k in LAYOUT_KEYS for k in layer):
            sources.append(source)
    try:
        layout = Layout(**fields)
    except LayoutError as exc:
        where = " + ".join(sources) or "layout"
        raise ConfigError(f"{where}: {exc}") from None
    return Resolved(layout, routing, sources)
