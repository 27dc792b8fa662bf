"""``snowshard explain``: how a sharded session would run a statement, without running it.

The statement comes from a function of the application, named ``module:function``; it
takes no arguments and returns the statement (so its module imports the models)::

    # app/queries.py
    def recent_orders():
        return select(Order).order_by(Order.id.desc()).limit(20)

    snowshard explain app.queries:recent_orders --database a=postgresql://.../a \\
        --database b=postgresql://.../b

Engines are created from the URLs only for their dialects: nothing connects to them.
"""

from __future__ import annotations

from typing import Any

import click
from sqlalchemy import create_engine
from sqlalchemy.sql.base import Executable

from snowshard.cli.options import import_target
from snowshard.cli.output import echo_json
from snowshard.redaction import redact_url
from snowshard.sharding.explain import explain
from snowshard.sharding.session import ShardedSession

__all__ = ["explain_command", "load_statement"]


def load_statement(target: str) -> Executable:
    """Call the no-argument function ``module:function`` and return its statement."""
    module_name, attribute, function = import_target(
        target, example="module:function, e.g. app.queries:recent_orders", param_hint="TARGET"
    )
    if not callable(function):
        raise click.BadParameter(
            f"{module_name} has no function {attribute!r}", param_hint="TARGET"
        )
    statement = function()
    if not isinstance(statement, Executable):
        raise click.ClickException(
            f"{target}() returned {type(statement).__name__}, not a statement; return e.g. "
            "select(Order).where(...)"
        )
    return statement


def _database(text: str) -> tuple[str, str]:
    key, sep, url = text.partition("=")
    if not sep or not key or not url:
        raise click.BadParameter(
            f"{redact_url(text)!r}: give KEY=URL, e.g. a=postgresql://host/a",
            param_hint="--database",
        )
    return key, url


@click.command("explain")
@click.argument("target", metavar="MODULE:FUNCTION")
@click.option(
    "--bind",
    default="sqlite://",
    show_default=True,
    help="URL of the session's bind (default database, unsharded tables).",
)
@click.option(
    "--database",
    "databases",
    multiple=True,
    metavar="KEY=URL",
    help="A database of the session (repeat for each).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def explain_command(target: str, bind: str, databases: tuple[str, ...], as_json: bool) -> None:
    """Show how a ShardedSession would run the statement MODULE:FUNCTION() returns.

    Per database, the SQL of each physical statement; what is pushed down to the
    databases, merged in Python or refused; and the fan-out. Nothing is executed.

    \b
    snowshard explain app.queries:recent_orders
    snowshard explain app.queries:recent_orders --database a=sqlite:///a.db --json
    """
    statement = load_statement(target)
    engines: dict[str, Any] = {key: create_engine(url) for key, url in map(_database, databases)}
    main = create_engine(bind)
    try:
        with ShardedSession(main, databases=engines) as session:
            plan = explain(session, statement)
    finally:
        for engine in (main, *engines.values()):
            engine.dispose()
    if as_json:
        echo_json(plan.as_dict())
    else:
        click.echo(str(plan))
