"""``snowshard explain MODULE:FUNCTION``: the plan of a statement, as text or JSON."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner
from sqlalchemy import select

from snowshard.cli.cmd_explain import explain_command
from tests.test_sharding_reference import Note, Order

TARGET = "tests.test_cli_explain"
DATABASES = ["--database", "a=sqlite://", "--database", "b=sqlite://"]


def recent_orders() -> Any:
    """A statement for the command: the five newest orders."""
    return select(Order).order_by(Order.id.desc()).limit(5)


def refused() -> Any:
    """A statement refused across databases: a join with a plain unsharded table."""
    return select(Order.id).join(Note, Note.id == Order.id)


def not_a_statement() -> Any:
    """Returns something that is not a statement."""
    return 42


def test_text_plan_names_each_database() -> None:
    """The text output lists both databases and the fan-out."""
    result = CliRunner().invoke(explain_command, [f"{TARGET}:recent_orders", *DATABASES])
    assert result.exit_code == 0, result.output
    assert "database 'a'" in result.output and "database 'b'" in result.output
    assert "fan-out: 4 table(s), 2 database(s)" in result.output


def test_json_plan_holds_the_statements() -> None:
    """--json prints the plan with one statement per database."""
    args = [f"{TARGET}:recent_orders", *DATABASES, "--json"]
    result = CliRunner().invoke(explain_command, args)
    plan = json.loads(result.output)
    assert [s["database"] for s in plan["statements"]] == ["a", "b"]


def test_refusal_is_printed() -> None:
    """A refused statement prints the refusal and exits 0."""
    result = CliRunner().invoke(explain_command, [f"{TARGET}:refused", *DATABASES])
    assert result.exit_code == 0 and "REFUSED" in result.output


def test_target_without_colon_is_a_usage_error() -> None:
    """A target that is not module:function exits 2 naming the form."""
    result = CliRunner().invoke(explain_command, ["tests.test_cli_explain"])
    assert result.exit_code == 2 and "module:function" in result.output


def test_missing_function_is_a_usage_error() -> None:
    """A function the module lacks exits 2 naming it."""
    result = CliRunner().invoke(explain_command, [f"{TARGET}:nothing_here"])
    assert result.exit_code == 2 and "nothing_here" in result.output


def test_non_statement_is_an_error() -> None:
    """A function returning no statement exits 1 saying what it returned."""
    result = CliRunner().invoke(explain_command, [f"{TARGET}:not_a_statement"])
    assert result.exit_code == 1 and "returned int" in result.output


def test_bad_database_option_is_a_usage_error() -> None:
    """--database without KEY=URL exits 2."""
    result = CliRunner().invoke(explain_command, [f"{TARGET}:recent_orders", "--database", "a"])
    assert result.exit_code == 2 and "KEY=URL" in result.output
