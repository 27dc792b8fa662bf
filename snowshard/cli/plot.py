"""Histograms of shard loads for the terminal, and per-shard bar charts as a PNG."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from types import ModuleType

import click

from snowshard.errors import MissingExtra
from snowshard.skew import Skew

__all__ = ["bar_chart", "require_matplotlib", "save_png"]

_EIGHTHS = " ▏▎▍▌▋▊▉"


def _bar(fraction: float, width: int) -> str:
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    if fraction > 0:
        eighths = max(eighths, 1)  # a non-empty group always shows
    full, part = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[part] if part else "")


def bar_chart(counts: Sequence[int], bins: int = 10, width: int = 40) -> list[str]:
    """A histogram of shard loads: how many shards hold how many rows.

    The first line counts empty shards; the others group the non-empty ones into at most
    ``bins`` ranges of rows, each also shown as a multiple of an even share. Plain mod over IDs
    whose low bits are all zero reads as "1023 empty, 1 shard with every row"; an even spread as one hump near ×1.00.
    """
    n = len(counts)
    if n == 0:
        return []
    mean = sum(counts) / n or 1.0
    loaded = sorted(c for c in counts if c)
    groups: list[tuple[str, int]] = [("empty", n - len(loaded))]
    if loaded:
        lo, hi = loaded[0], loaded[-1]
        parts = max(1, min(bins, hi - lo + 1))
        edges = [lo + (hi - lo + 1) * i // parts for i in range(parts + 1)]
        at = 0
        for a, b in pairwise(edges):
            start = at
            while at < len(loaded) and loaded[at] < b:
                at += 1
            span = f"{a:,}" if b - 1 == a else f"{a:,}-{b - 1:,}"
            ratio = f"×{a / mean:.2f}" if b - 1 == a else f"×{a / mean:.2f}-{(b - 1) / mean:.2f}"
            groups.append((f"{span} rows ({ratio})", at - start))
    label_width = max(len(label) for label, _ in groups)
    top = max(shards for _, shards in groups) or 1
    digits = len(f"{top:,}")
    return [
        f"{label:>{label_width}} {shards:>{digits},} {_bar(shards / top, width)}"
        for label, shards in groups
    ]


def require_matplotlib() -> ModuleType:
    """``matplotlib.figure``, or :class:`MissingExtra` naming the ``plot`` extra."""
    try:
        return importlib.import_module("matplotlib.figure")
    except ImportError:
        raise MissingExtra(
            '--plot needs matplotlib; install it with: pip install "snowshard[plot]"'
        ) from None


def save_png(path: Path, results: Mapping[str, tuple[str, Skew]], title: str) -> None:
    """Write one bar chart per strategy (``name -> (rule, skew)``) to a PNG file."""
    figure_module = require_matplotlib()
    rows = max(1, len(results))
    figure = figure_module.Figure(figsize=(10, 2.2 * rows + 0.6), layout="constrained")
    axes = figure.subplots(rows, 1, squeeze=False)
    for (name, (rule, result)), ax in zip(results.items(), axes[:, 0], strict=True):
        n = len(result.counts)
        ax.bar(range(n), result.counts, width=1.0, color="tab:blue")
        ax.axhline(result.total / n, color="tab:red", linewidth=0.8, label="even")
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_ylabel("rows")
        ax.set_title(
            f"{name}: {rule}   max/mean {result.max_over_mean:.2f}   "
            f"p {result.p_value:.3g}   empty {result.empty_shards}",
            fontsize=10,
        )
        ax.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("shard")
    figure.suptitle(title, fontsize=11)
    try:
        figure.savefig(path, dpi=100, format="png")
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None
