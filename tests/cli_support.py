"""What the ``snowshard`` command's test modules share: an isolated directory, a runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from snowshard.cli import main

__all__ = ["isolated", "run"]


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
