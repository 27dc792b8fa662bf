"""Without the ``cli`` extra (click, rich) the command says which extra to install.

Each test runs a fresh interpreter in which importing click or rich fails, as on a base
install (``pip install snowshard``).
"""

from __future__ import annotations

from tests.cli_support import run_without

EXTRA = 'pip install "snowshard[cli]"'


def _one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error: "), stderr
    return lines[0]


def test_console_script_without_click_prints_one_line_and_exits_1() -> None:
    """The ``snowshard`` console script names the extra on one line and exits 1."""
    done = run_without(
        "click",
        """
        from importlib.metadata import entry_points
        (script,) = entry_points(group="console_scripts", name="snowshard")
        sys.argv = ["snowshard", "route", "1820"]
        script.load()()
        """,
    )
    assert done.returncode == 1
    assert EXTRA in _one_error_line(done.stderr)
    assert done.stdout == ""


def test_python_dash_m_without_rich_prints_one_line_and_exits_1() -> None:
    """``python -m snowshard`` without rich names the extra on one line and exits 1."""
    done = run_without(
        "rich",
        """
        import runpy
        sys.argv = ["snowshard", "inspect", "1"]
        runpy.run_module("snowshard", run_name="__main__", alter_sys=True)
        """,
    )
    assert done.returncode == 1
    assert EXTRA in _one_error_line(done.stderr)


def test_main_without_click_returns_1() -> None:
    """``snowshard.cli.main`` returns exit code 1 instead of raising."""
    done = run_without(
        "click",
        """
        from snowshard.cli import main
        print(main(["layout"]))
        """,
    )
    assert done.stdout.strip() == "1", done.stderr
    assert EXTRA in _one_error_line(done.stderr)


def test_require_cli_raises_missing_extra() -> None:
    """The error is snowshard's MissingExtra (an ImportError) naming the missing package."""
    done = run_without(
        "rich",
        """
        from snowshard.cli import require_cli
        from snowshard.errors import MissingExtra
        try:
            require_cli()
        except MissingExtra as error:
            print(isinstance(error, ImportError), "rich" in str(error), EXTRA in str(error))
        """.replace("EXTRA", repr(EXTRA)),
    )
    assert done.stdout.split() == ["True", "True", "True"], done.stderr


def test_importing_the_cli_package_loads_neither_click_nor_rich() -> None:
    """``import snowshard.cli`` works without the extra, so the script can report it."""
    done = run_without(
        "rich",  # importing rich would raise; click is installed, so importing it would show
        """
        import snowshard.cli, snowshard.__main__
        print("click" in sys.modules)
        """,
    )
    assert done.stdout.strip() == "False", done.stderr
