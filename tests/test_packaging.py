"""What the package declares is what CI installs and what a newcomer gets."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from tests.cli_support import run_without

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FLOORS_FILE = ROOT / ".ci" / "floors.txt"
FLOORED = {
    "sqlalchemy", "alembic", "psycopg", "pymysql", "redis", "aiosqlite", "aiomysql", "greenlet",
    "click", "rich", "tomli",
}
"""Packages whose lowest declared version the CI floor leg installs."""
BASE = {"sqlalchemy", "alembic"}
"""What ``pip install snowshard`` brings: the ORM, sharding and migration helpers."""
NOT_FOR_TESTS = {"bench", "docs"}
"""Extras the test suite does not need: benchmark rivals, the documentation site."""


def _declared() -> list[Requirement]:
    project = PYPROJECT["project"]
    found = [Requirement(text) for text in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        found.extend(Requirement(text) for text in extra)
    return found


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(text).name.lower() for text in requirements}


def _floors_file() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in FLOORS_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", line
            pins[requirement.name.lower()] = spec.version
    return pins


def test_floor_leg_pins_every_declared_floor() -> None:
    """.ci/floors.txt pins each floored package at exactly its lowest declared version."""
    pins = _floors_file()
    assert set(pins) >= FLOORED
    for requirement in _declared():
        name = requirement.name.lower()
        if name not in FLOORED:
            continue
        lows = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        assert lows == [Version(pins[name])], f"{requirement} declared, {pins[name]} pinned"


def test_floor_leg_uses_the_oldest_supported_python() -> None:
    """.ci/run's oldest Python is requires-python's floor."""
    script = (ROOT / ".ci" / "run").read_text()
    oldest = re.search(r"^OLDEST_PYTHON=(\S+)", script, re.MULTILINE)
    assert oldest is not None
    assert PYPROJECT["project"]["requires-python"] == f">={oldest.group(1)}"


def test_sqlalchemy_floor_is_a_2_0_release() -> None:
    """The declared SQLAlchemy floor is in the 2.0 series, which most users run."""
    assert _floors_file()["sqlalchemy"].startswith("2.0.")


def test_base_install_needs_no_extra_for_the_sync_api() -> None:
    """Without greenlet, the sync ORM runs and SQLAlchemy's asyncio module is never loaded."""
    done = run_without(
        "greenlet",
        """
        import contextlib, io
        from snowshard import demo
        with contextlib.redirect_stdout(io.StringIO()) as out:
            demo.main()
        assert "read: orders_12" in out.getvalue()
        assert "sqlalchemy.ext.asyncio" not in sys.modules
        print("ok")
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_async_names_without_greenlet_name_the_extra() -> None:
    """``from snowshard.sharding import AsyncShardedSession`` without greenlet names [async]."""
    done = run_without(
        "greenlet",
        """
        from snowshard import MissingExtra
        try:
            from snowshard.sharding import AsyncShardedSession
        except MissingExtra as error:
            print(error)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert 'pip install "snowshard[async]"' in done.stdout


def test_unknown_sharding_attribute_is_an_attribute_error() -> None:
    """The lazy loader of async names leaves other missing names an AttributeError."""
    import snowshard.sharding

    try:
        snowshard.sharding.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("no AttributeError")


def test_migrations_without_alembic_name_the_extra() -> None:
    """``import snowshard.migrations`` without Alembic names the [migrations] extra."""
    done = run_without(
        "alembic",
        """
        from snowshard import MissingExtra
        try:
            import snowshard.migrations
        except MissingExtra as error:
            print(error)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert 'pip install "snowshard[migrations]"' in done.stdout


def test_base_install_is_sqlalchemy_and_alembic_only() -> None:
    """The base dependencies are SQLAlchemy and Alembic; click, rich and tomli are [cli]'s."""
    assert _names(PYPROJECT["project"]["dependencies"]) == BASE


def test_cli_extra_has_the_commands_packages() -> None:
    """``snowshard[cli]`` installs click and rich everywhere, and tomli before Python 3.11."""
    cli = [Requirement(text) for text in PYPROJECT["project"]["optional-dependencies"]["cli"]]
    assert {r.name.lower() for r in cli} == {"click", "rich", "tomli"}
    (tomli,) = (r for r in cli if r.name == "tomli")
    assert tomli.marker is not None
    assert not tomli.marker.evaluate({"python_version": "3.11"})
    assert tomli.marker.evaluate({"python_version": "3.10"})


def test_test_extra_installs_every_other_extras_packages() -> None:
    """[test] holds each package of every extra the suite exercises, at the same floor."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    test = {Requirement(text).name.lower(): Requirement(text) for text in extras["test"]}
    missing = [
        f"[{extra}] {text}"
        for extra, texts in sorted(extras.items())
        if extra not in NOT_FOR_TESTS | {"test"}
        for text in texts
        if (r := Requirement(text)).name.lower() not in test
        or test[r.name.lower()].specifier != r.specifier
        or test[r.name.lower()].marker != r.marker
    ]
    assert missing == []


def test_readme_names_every_extra() -> None:
    """README's "Supported versions" section names each extra as ``[name]``."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    assert sorted(e for e in extras if f"[{e}]" not in section) == []
