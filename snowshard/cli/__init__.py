"""The ``snowshard`` command: inspect, gen, route, layout, skew and demo.

The command needs the ``cli`` extra (click and rich): ``pip install "snowshard[cli]"``.
This module imports neither, so that without them the console script and
``python -m snowshard`` print one ``Error: ...`` line naming the extra and exit with
status 1 instead of showing a traceback.

Tests and scripts call :func:`main` with a list of arguments and get the exit code back;
the console script calls :func:`entrypoint`.
"""

from __future__ import annotations

import importlib
import sys

from snowshard.errors import MissingExtra

__all__ = ["CLI_PACKAGES", "entrypoint", "main", "require_cli"]

CLI_PACKAGES = ("click", "rich")
"""The packages of the ``cli`` extra that every command needs."""


def require_cli() -> None:
    """Import the ``cli`` extra's packages, or raise :class:`MissingExtra` naming the extra."""
    for name in CLI_PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise MissingExtra(
                f"the snowshard command needs {' and '.join(CLI_PACKAGES)} ({error}); "
                f'install them with: pip install "snowshard[cli]"'
            ) from error


def main(argv: list[str] | None = None) -> int:
    """Run ``snowshard`` with ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    Without the ``cli`` extra, prints one line naming it on stderr and returns 1.
    """
    try:
        require_cli()
    except MissingExtra as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    from snowshard.cli.app import main as run

    return run(argv)


def entrypoint() -> None:
    """The console script and ``python -m snowshard``: ``sys.exit(main())``."""
    sys.exit(main())
