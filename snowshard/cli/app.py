"""The ``snowshard`` command group, and :func:`main`, which turns errors into exit codes.

Exit codes: 0 success, 2 usage error (bad option or argument), 1 any other error. Errors
print one ``Error: ...`` line on stderr; ``--debug`` (or ``SNOWSHARD_DEBUG=1``) adds the
traceback. Both pass through :func:`~snowshard.redaction.redact_url`, so a URL echoed back
from an option, ``$SNOWSHARD_LAYOUT`` or ``pyproject.toml`` shows no password.
"""

from __future__ import annotations

import io
import os
import traceback
from dataclasses import dataclass

import click

from snowshard.cli.cmd_gen import gen_command
from snowshard.cli.cmd_explain import explain_command
from snowshard.cli.cmd_inspect import inspect_command
from snowshard.cli.cmd_layout import layout_command
from snowshard.cli.cmd_reshard import reshard_group
from snowshard.cli.cmd_route import route_command
from snowshard.cli.cmd_skew import skew_command
from snowshard.cli.cmd_txn import txn_group
from snowshard.errors import SnowshardError
from snowshard.redaction import redact_url

__all__ = ["cli", "main"]


@dataclass
class State:
    """Per-invocation settings shared by the group and its commands."""

    debug: bool = False


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(State).debug = True


_debug = click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_set_debug,
    help="Show tracebacks of errors.",
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("snowshard")
    except PackageNotFoundError:
        return "unknown"


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@_debug
@click.version_option(_version(), "-V", "--version", prog_name="snowshard")
def cli() -> None:
    """Inspect, generate and route snowflake IDs; simulate how strategies spread them.

    The layout comes from --layout and the width options, else $SNOWSHARD_LAYOUT, else
    [tool.snowshard] in the nearest pyproject.toml, else the default (41-bit ms since
    2020-01-01, 10-bit worker, 12-bit sequence). Run 'snowshard COMMAND --help' for more.
    """


@cli.command("demo")
@_debug
def demo_command() -> None:
    """Run the SQLite end-to-end demo (IDs, genes and sharded tables)."""
    from snowshard import demo

    demo.main()


for _command in (
    inspect_command,
    gen_command,
    route_command,
    layout_command,
    skew_command,
    txn_group,
    explain_command,
    reshard_group,
):
    _debug(_command)
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    """Run ``snowshard`` with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    state = State(debug=os.environ.get("SNOWSHARD_DEBUG", "") not in ("", "0"))
    try:
        code = cli.main(args=argv, prog_name="snowshard", standalone_mode=False, obj=state)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:  # UsageError (2) prints usage, then "Error: ..."
        shown = io.StringIO()
        exc.show(file=shown)
        click.echo(redact_url(shown.getvalue()), err=True, nl=False)  # a value may be a URL
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        return 1
    except SystemExit as exc:  # click exits 1 on a broken pipe
        return exc.code if isinstance(exc.code, int) else 1
    except SnowshardError as exc:
        return _fail(state, str(exc))
    except Exception as exc:
        return _fail(state, f"{type(exc).__name__}: {exc}", hint=True)
    return code if isinstance(code, int) else 0  # --help and --version return 0


def _fail(state: State, message: str, *, hint: bool = False) -> int:
    if state.debug:
        click.echo(redact_url(traceback.format_exc()), err=True, nl=False)
    suffix = " (run with --debug for the traceback)" if hint and not state.debug else ""
    click.echo(f"Error: {redact_url(message)}{suffix}", err=True)
    return 1
