"""Every script in examples/ runs to the end (its inline asserts included), and the demo too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from snowshard import demo

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _run(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(p, id=p.stem, marks=(pytest.mark.postgres,) if "postgres" in p.stem else ())
        for p in EXAMPLES
    ],
)
def test_example_runs(script: Path, request: pytest.FixtureRequest) -> None:
    """The example exits with status 0 and prints its report."""
    env = {}
    if "postgres" in script.stem:
        env["SNOWSHARD_TEST_POSTGRES_URL"] = request.getfixturevalue("postgres_url")
    done = _run(script, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip()


def test_examples_are_found() -> None:
    """The four sharding examples exist (SQLite, PostgreSQL, time range, async)."""
    names = {p.stem for p in EXAMPLES}
    assert {"sharded_sqlite", "sharded_postgres", "time_range_report", "sharded_async"} <= names


def test_demo_output_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of the demo print the same text, naming the tables each query read."""
    demo.main()
    first = capsys.readouterr().out
    demo.main()
    assert capsys.readouterr().out == first
    assert "orders_00 .. orders_15" in first
    assert "read: orders_12" in first
    assert "read: 1 statement over 16 tables (UNION ALL)" in first
