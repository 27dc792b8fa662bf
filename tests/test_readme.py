"""The README's quick start stays true: two command lines, the second is what CI runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quick_start_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_quick_start_has_exactly_two_command_lines() -> None:
    """The quick start block holds exactly two commands: demo, then tests."""
    lines = quick_start_lines()
    assert len(lines) == 2
    assert "demo" in lines[0]
    assert "pytest" in lines[1] and ".[test]" in lines[1]


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run's TEST_COMMAND is the README's second line, character for character."""
    script = (ROOT / ".ci" / "run").read_text()
    match = re.search(r"^TEST_COMMAND='(.*)'$", script, re.MULTILINE)
    assert match is not None
    assert match.group(1) == quick_start_lines()[1]


def test_demo_module_runs() -> None:
    """The demo the first line runs exits 0 and prints which table each row went to."""
    demo = quick_start_lines()[0].rsplit("-m ", 1)[1].split()[0]
    result = subprocess.run(
        [sys.executable, "-m", demo], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert "table" in result.stdout
