"""The package type-checks: mypy, as ``[tool.mypy]`` in pyproject.toml configures it
(strict, the whole ``snowshard`` package), reports no error against the newest releases
of its dependencies."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _annotated_dependencies() -> bool:
    """Whether the installed SQLAlchemy and click carry the annotations the package is
    checked against: the newest releases (the floors' click decorators and redis-py
    methods are untyped, which strict mode reports)."""
    return Version(importlib.metadata.version("sqlalchemy")) >= Version("2.1") and Version(
        importlib.metadata.version("click")
    ) >= Version("8.2")


@pytest.mark.skipif(
    not _annotated_dependencies(),
    reason="type-checked against the newest releases only (the CI leg that installs them)",
)
def test_the_package_is_mypy_clean(tmp_path: Path) -> None:
    """``python -m mypy`` finds no error in the package."""
    found = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert found.returncode == 0, found.stdout[-4000:] + found.stderr[-2000:]
