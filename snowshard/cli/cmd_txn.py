"""``snowshard txn recover``: finish two-phase commits left in doubt by crashed writers.

::

    snowshard txn recover postgresql://app@db1/shop mysql+pymysql://app@db2/shop
    snowshard txn recover a=postgresql://... b=postgresql://... --decisions postgresql://...

Each argument is a SQLAlchemy URL, optionally prefixed with the database key the sessions
use (``KEY=URL``; with keys, decision records of finished groups are cleaned up too). The
decision records are read from ``--decisions`` (default: the first URL). Prints one row per
in-doubt branch (passwords masked) and exits 1 if a branch past the grace period is left in
doubt (a failure, or ``--dry-run``). See :mod:`snowshard.operations.recovery`.
"""

from __future__ import annotations

import click
from rich.table import Table

from snowshard.cli.output import console
from snowshard.redaction import redact_url

__all__ = ["txn_group"]


def _split(argument: str) -> tuple[str | None, str]:
    """``KEY=URL`` -> (KEY, URL); a bare URL -> (None, URL)."""
    key, sep, rest = argument.partition("=")
    if sep and "://" not in key and "://" in rest and key:
        return key, rest
    return None, argument


@click.group("txn")
def txn_group() -> None:
    """Two-phase commits across databases."""


@txn_group.command("recover")
@click.argument("urls", nargs=-1, required=True)
@click.option("--decisions", help="URL of the database holding snowshard_txn_decisions "
              "(default: the first URL).")
@click.option("--grace", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Leave groups younger than this many seconds alone.")
@click.option("--dry-run", is_flag=True, help="Report what would be done; change nothing.")
def recover_command(urls: tuple[str, ...], decisions: str | None, grace: float,
                    dry_run: bool) -> None:
    """Commit or roll back every in-doubt snowshard branch on URLS (KEY=URL or URL)."""
    from sqlalchemy import Engine, create_engine
    from sqlalchemy.pool import NullPool

    from snowshard.operations import recover
    from snowshard.operations.recovery import Engines

    pairs = [_split(u) for u in urls]
    engines: list[Engine] = []
    try:
        for _, url in pairs:
            engines.append(create_engine(url, poolclass=NullPool))
        decision_engine = engines[0]
        if decisions:
            decision_engine = create_engine(decisions, poolclass=NullPool)
            engines.append(decision_engine)
        given: Engines = engines[:len(pairs)]
        if all(key is not None for key, _ in pairs):
            given = {str(key): e for (key, _), e in zip(pairs, engines)}
        report = recover(given, decisions=decision_engine, grace=grace, dry_run=dry_run)
    finally:
        for engine in engines:
            engine.dispose()
    table = Table(title="in-doubt branches" + (" (dry run)" if dry_run else ""))
    for name in ("outcome", "group", "database", "age (s)", "found in", "detail"):
        table.add_column(name)
    servers = list(dict.fromkeys(action.server for action in report.actions))
    for action in report.actions:
        table.add_row(action.outcome, action.group, action.database, f"{action.age_s:.0f}",
                      f"#{servers.index(action.server) + 1}", redact_url(action.detail))
    out = console()
    for number, server in enumerate(servers, 1):
        out.print(f"#{number}: {redact_url(server)}", soft_wrap=True)
    if report.actions:
        out.print(table)
    else:
        out.print("no in-doubt branches")
    out.print(f"decision records removed: {len(report.decisions_removed)}, "
              f"kept: {len(report.decisions_kept)}")
    if report.unresolved:
        raise click.exceptions.Exit(1)
