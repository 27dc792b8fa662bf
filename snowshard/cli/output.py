"""Printing: rich consoles, JSON, times and warnings."""

from __future__ import annotations

import json
import os
from datetime import datetime, tzinfo

import click
from rich.console import Console

__all__ = ["console", "echo_json", "local_text", "utc_text", "warn"]


def console(*, stderr: bool = False) -> Console:
    """A rich console on the current stdout (or stderr); 100 columns when not a terminal."""
    out = Console(stderr=stderr, highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = 100
    return out


def echo_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def _millis(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}"


def utc_text(moment: datetime) -> str:
    """``2021-02-23T15:32:04.056 UTC``."""
    return f"{_millis(moment)} UTC"


def local_time(moment: datetime, zone: tzinfo | None) -> datetime:
    """``moment`` in ``zone``, or in the system's local zone when ``zone`` is None."""
    return moment.astimezone(zone)


def local_text(moment: datetime) -> str:
    """``2021-02-23T23:32:04.056+08:00 (CST)`` for an aware local datetime."""
    name = moment.tzname() or ""
    offset = moment.isoformat()[-6:]
    shown = f" ({name})" if name and name not in (f"UTC{offset}", offset) else ""
    return f"{_millis(moment)}{offset}{shown}"
