"""What the ``snowshard`` command's test modules share: an isolated directory, runners."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from snowshard.cli import main

__all__ = ["ROOT", "isolated", "run", "run_without"]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every test in an empty directory with no layout variable and no debug mode."""
    monkeypatch.chdir(tmp_path)
    for name in ("SNOWSHARD_LAYOUT", "SNOWSHARD_DEBUG", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``snowshard ARGS...`` in-process: exit code, stdout, stderr."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def run_without(blocked: str, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where importing ``blocked`` fails."""
    prelude = f"import sys\nsys.modules[{blocked!r}] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
