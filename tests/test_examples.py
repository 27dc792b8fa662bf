"""Every script in examples/ runs to the end (its inline asserts included), and the demo too.

Each example's docstring names the extra it needs, and without that extra's packages the
example exits with a one-line install hint, never a traceback.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

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


#: (example, a package of its extra, the extra)
NEEDS_EXTRA = [
    ("sharded_async", "aiosqlite", "async"),
    ("sharded_async", "greenlet", "async"),
    ("sharded_postgres", "psycopg", "postgres"),
]
INSTALL = re.compile(r'pip install -e (?:\.|"\.\[(?P<extra>\w+)\]")')


@pytest.mark.parametrize("script", [pytest.param(p, id=p.stem) for p in EXAMPLES])
def test_example_docstring_names_its_extra(script: Path) -> None:
    """The docstring gives the install command: ``pip install -e .`` or with a known extra."""
    docstring = ast.get_docstring(ast.parse(script.read_text())) or ""
    match = INSTALL.search(docstring)
    assert match, f"{script.name}: say which extra it needs, e.g. pip install -e \".[async]\""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    extra = match["extra"]
    assert extra is None or extra in extras, f"{script.name}: pyproject.toml has no {extra!r}"
    needed = {needs for stem, _, needs in NEEDS_EXTRA if stem == script.stem}
    assert needed <= {extra}, f"{script.name} needs the extra {needed}, its docstring says {extra}"


@pytest.mark.parametrize(
    ("stem", "module", "extra"),
    [pytest.param(*row, id=f"{row[0]}-without-{row[1]}") for row in NEEDS_EXTRA],
)
def test_example_without_its_extra_exits_with_a_hint(stem: str, module: str, extra: str) -> None:
    """With a package of its extra blocked, the example exits 1 with one hint line, no traceback."""
    path = f"examples/{stem}.py"
    code = (
        f"import sys; sys.modules[{module!r}] = None; "
        f"import runpy; runpy.run_path({path!r}, run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        f'{path} needs the {extra} extra (cannot import {module}): pip install -e ".[{extra}]"'
    ]
    assert done.stdout == ""
