"""The ``snowshard`` command: inspect, gen, route, layout, skew and demo.

Tests and scripts call :func:`main` with a list of arguments and get the exit code back;
the console script calls :func:`entrypoint`.
"""

from __future__ import annotations

from snowshard.cli.app import entrypoint, main

__all__ = ["entrypoint", "main"]
