"""The README stays true: its quick start is what CI runs, and every code block in it runs.

Every fenced block names its language:

* ``python``: run as a script (``sys.executable -W error``) in a subprocess whose working
  directory is a fresh tmp dir, so a block must hold its own imports and setup and use
  SQLite (in memory or a file in the working directory), never a server.
* ``bash`` (also ``sh``, ``console`` with ``$`` prompts): run line by line in a tmp dir that
  holds a copy of ``migrations/``, like a checkout; only ``snowshard`` and ``alembic``
  commands may appear (taken from the interpreter's ``bin`` directory). The quick start
  block is the exception: the tests just above check it, and CI runs it.
* ``text`` (and other data such as ``toml``): diagrams and program output, not run.

A marker on the line right before the opening fence changes that:

* ``<!-- not-run: REASON; tested in tests/test_x.py -->``: the block is not run here; the
  named test file must exist. ``<!-- not-run: library bug: ... -->`` needs no test file.
* ``<!-- needs: redis; NOTE -->``: the block runs with ``REDIS_URL`` set to the test suite's
  Redis (the ``redis_url`` fixture of tests/backends.py: an environment URL or a container,
  else skipped, or failed under ``SNOWSHARD_REQUIRE_BACKENDS=1``).

Test ids name the README section and line of each block, e.g. ``sharded-models-L176``.

README line 1 promises the demo on a base install (no extras). The ``slow`` tests under
"base install" keep that promise in the suite itself: they ``pip install`` a copy of the
checkout, without extras, into a new venv and run the demo and ``.ci/base_install_check.py``
there. That needs the package index (PyPI, or the one pip is configured with).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.markdown_blocks import Fence, fences

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TIMEOUT = 120

PYTHON = {"python"}
SHELL = {"bash", "sh", "shell", "console"}
NOT_CODE = {"text", "toml", "ini", "json", "yaml"}
COMMANDS = {"snowshard", "alembic"}
QUICK_START = "Quick start"

#: backend named in ``<!-- needs: ... -->`` -> (fixture giving its URL, variable for the block)
BACKENDS = {"redis": ("redis_url", "REDIS_URL")}


def quick_start_lines() -> list[str]:
    text = README.read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_quick_start_has_exactly_two_command_lines() -> None:
    """The quick start block holds exactly two commands: demo, then tests."""
    lines = quick_start_lines()
    assert len(lines) == 2
    assert "demo" in lines[0]
    assert "pytest" in lines[1] and ".[test]" in lines[1]


@pytest.mark.parametrize("variable, line", [("DEMO_COMMAND", 0), ("TEST_COMMAND", 1)])
def test_ci_runs_the_readme_commands(variable: str, line: int) -> None:
    """.ci/run's DEMO_COMMAND/TEST_COMMAND are README lines 1/2, character for character."""
    script = (ROOT / ".ci" / "run").read_text()
    match = re.search(rf"^{variable}='(.*)'$", script, re.MULTILINE)
    assert match is not None
    assert match.group(1) == quick_start_lines()[line]
    assert f'bash -c "${variable}"' in script  # and runs it


def test_ci_runs_each_readme_line_in_a_new_venv() -> None:
    """Line 1 runs in a copy without any venv; .venv is removed before line 2."""
    script = (ROOT / ".ci" / "run").read_text()
    demo, tests = script.index('bash -c "$DEMO_COMMAND"'), script.index('bash -c "$TEST_COMMAND"')
    assert "--exclude '.venv*'" in script[:demo]
    assert "rm -rf .venv\n" in script[demo:tests]


def test_demo_module_runs() -> None:
    """The demo the first line runs exits 0 and prints which table each row went to."""
    result = subprocess.run(
        [sys.executable, "-m", demo_module()],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "table" in result.stdout


# --------------------------------------------------------------------------- base install

#: Copied into the throw-away checkout: what ``pip install .`` needs, nothing built or local.
CHECKOUT_IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", "__pycache__", "build", "*.egg-info", ".*_cache", ".hypothesis", "tests"
)
#: Packages of the extras (and of the test venv) that a base install must not bring.
NOT_IN_BASE = ("psycopg", "pymysql", "redis", "aiosqlite", "aiomysql", "pytest", "hypothesis")
INSTALL_TIMEOUT = 600


def demo_module() -> str:
    """The module README line 1 runs (``snowshard.demo``)."""
    return quick_start_lines()[0].rsplit("-m ", 1)[1].split()[0]


def base_env() -> dict[str, str]:
    """This environment without SNOWSHARD_* settings or PYTHONPATH: the checkout stays out."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SNOWSHARD_") and k not in ("PYTHONPATH", "PYTHONHOME")
    }


def pip_targets_other_pythons() -> bool:
    """True when this interpreter's pip has ``--python`` (pip 22.3 and later)."""
    major, minor = (int(part) for part in version("pip").split(".")[:2])
    return (major, minor) >= (22, 3)


@pytest.fixture(scope="module")
def base_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python of a new venv holding ``pip install <checkout>`` without extras.

    The venv has no system site-packages. This interpreter's pip installs into it
    (``pip --python``; the venv is then made ``--without-pip``, which skips ensurepip's
    seconds), from a copy of the checkout, so the build leaves the checkout alone, and
    with ``--no-compile`` (the demo runs once; byte-compiling would cost more than it
    saves). Dependencies come from the configured index, through pip's cache (the test
    venv's own install has filled it).
    """
    root = tmp_path_factory.mktemp("base-install")
    checkout, venv, elsewhere = root / "checkout", root / "venv", root / "cwd"
    shutil.copytree(ROOT, checkout, ignore=CHECKOUT_IGNORE)
    elsewhere.mkdir()
    targets = pip_targets_other_pythons()
    subprocess.run(
        [sys.executable, "-m", "venv", *(["--without-pip"] if targets else []), str(venv)],
        check=True,
        timeout=300,
        env=base_env(),
    )
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    pip = [sys.executable, "-m", "pip", "--python", str(python)] if targets else [
        str(python), "-m", "pip"
    ]
    done = subprocess.run(
        [*pip, "install", "--quiet", "--no-compile", str(checkout)],
        cwd=elsewhere,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, fail_message(f"pip install {checkout} (no extras)", done)
    return python


def run_in(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python *args`` from a directory outside the checkout, without PYTHONPATH."""
    return subprocess.run(
        [str(python), *args],
        cwd=python.parent.parent.parent / "cwd",
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.slow
def test_base_install_is_only_the_base(base_python: Path) -> None:
    """The venv imports snowshard from its own site-packages and has no extra's package."""
    probe = (
        "import importlib.util, json, snowshard; "
        f"print(json.dumps([snowshard.__file__, [m for m in {NOT_IN_BASE!r} "
        "if importlib.util.find_spec(m) is not None]]))"
    )
    done = run_in(base_python, "-c", probe)
    assert done.returncode == 0, fail_message("the import probe", done)
    where, extras = json.loads(done.stdout)
    assert Path(where).is_relative_to(base_python.parent.parent)
    assert extras == []


@pytest.mark.slow
def test_demo_runs_on_a_base_install(base_python: Path) -> None:
    """README line 1's demo, on the base install, prints what it prints in the test venv."""
    done = run_in(base_python, "-m", demo_module())
    assert done.returncode == 0, fail_message(f"{demo_module()} on the base install", done)
    here = subprocess.run(
        [sys.executable, "-m", demo_module()],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=ROOT,
        check=True,
    )
    assert done.stdout == here.stdout
    assert "read: orders_12" in done.stdout


@pytest.mark.slow
def test_base_install_keeps_its_promises(base_python: Path) -> None:
    """.ci/base_install_check.py passes: sync ORM, CLI, migrations; async names its extra."""
    done = run_in(base_python, str(ROOT / ".ci" / "base_install_check.py"))
    assert done.returncode == 0, fail_message(".ci/base_install_check.py", done)
    assert "FAIL" not in done.stdout
    assert "ok   sync sharded ORM on SQLite" in done.stdout


# --------------------------------------------------------------------------- code blocks


@dataclass(frozen=True)
class Block(Fence):
    """One fenced block of the README (tests/markdown_blocks.py parses it)."""

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.section.split("(")[0].lower()).strip("-")
        return f"{slug or 'top'}-L{self.line}"

    @property
    def is_quick_start(self) -> bool:
        return self.section == QUICK_START

    @property
    def runs(self) -> bool:
        """Run by this module (python and shell blocks, unless marked not-run)."""
        return self.lang in PYTHON | SHELL and not self.is_quick_start and not self.not_run


def parse_blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, in order."""
    return [Block(**vars(fence)) for fence in fences(text, "README.md")]


BLOCKS = parse_blocks(README.read_text())


def shell_commands(block: Block) -> list[tuple[int, list[str]]]:
    """(README line, argv) of every command of a shell block; comments and output dropped."""
    commands = []
    for offset, line in enumerate(block.body.splitlines(), start=1):
        if block.lang == "console":
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        argv = shlex.split(line, comments=True)
        if argv:
            commands.append((block.line + offset, argv))
    return commands


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without SNOWSHARD_* settings (a reader has none), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWSHARD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}


def executable(name: str) -> list[str]:
    """The venv's console script ``name``, else ``python -m name``."""
    script = Path(sys.executable).parent / name
    return [str(script)] if script.exists() else [sys.executable, "-m", name]


def block_params(langs: set[str]) -> list[object]:
    params: list[object] = []
    for block in BLOCKS:
        if block.lang in langs and block.runs:
            needs = block.needs
            marks = [getattr(pytest.mark, needs["backend"])] if needs else []
            params.append(pytest.param(block, id=block.id, marks=marks))
    return params


def backend_env(block: Block, request: pytest.FixtureRequest) -> dict[str, str]:
    """The variables a ``needs:`` block reads, pointed at the test suite's servers."""
    needs = block.needs
    if needs is None:
        return {}
    fixture, variable = BACKENDS[needs["backend"]]
    url: str = request.getfixturevalue(fixture)
    return {variable: url}


def fail_message(where: str, done: subprocess.CompletedProcess[str]) -> str:
    return (
        f"{where} exited {done.returncode}\n"
        f"--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )


@pytest.mark.parametrize("block", block_params(PYTHON))
def test_python_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The README's python block, pasted into a file of its own, runs to exit status 0."""
    env = clean_env(**backend_env(block, request))
    script = tmp_path / f"readme_L{block.line}.py"
    script.write_text(block.body)
    redis_before = redis_keys(env) if block.needs and block.needs["backend"] == "redis" else None
    try:
        done = subprocess.run(
            [sys.executable, "-W", "error", str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    finally:
        if redis_before is not None:
            delete_new_redis_keys(env, redis_before)
    assert done.returncode == 0, fail_message(f"README.md block at line {block.line}", done)


@pytest.mark.parametrize("block", block_params(SHELL))
def test_shell_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Each command of the README's shell block exits 0, run in order in a checkout-like dir."""
    env = clean_env(**backend_env(block, request))
    shutil.copytree(
        ROOT / "migrations",
        tmp_path / "migrations",
        ignore=shutil.ignore_patterns("__pycache__", "*.sqlite3", "*.sql"),
    )
    commands = shell_commands(block)
    assert commands, f"README.md block at line {block.line} holds no command"
    for line, argv in commands:
        assert argv[0] in COMMANDS, f"README.md line {line}: {argv[0]} is not run by this test"
        done = subprocess.run(
            executable(argv[0]) + argv[1:],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        where = f"README.md line {line}: {shlex.join(argv)}"
        assert done.returncode == 0, fail_message(where, done)


def redis_keys(env: dict[str, str]) -> set[bytes]:
    """Keys under the worker leases' default prefix on the test Redis."""
    import redis

    from snowshard.workers.redis_lease import DEFAULT_KEY_PREFIX

    client = redis.Redis.from_url(env["REDIS_URL"])
    try:
        return set(client.scan_iter(f"{DEFAULT_KEY_PREFIX}:*"))
    finally:
        client.close()


def delete_new_redis_keys(env: dict[str, str], before: set[bytes]) -> None:
    """Remove what a README block left under the default prefix (keys there before stay)."""
    import redis

    new = redis_keys(env) - before
    if new:
        client = redis.Redis.from_url(env["REDIS_URL"])
        try:
            client.delete(*new)
        finally:
            client.close()


def test_every_block_names_a_known_language() -> None:
    """Every fence says what it holds, so no code block escapes these tests untagged."""
    unknown = [
        f"line {b.line}: {b.lang or '(none)'}"
        for b in BLOCKS
        if b.lang not in PYTHON | SHELL | NOT_CODE
    ]
    assert not unknown, f"README.md fences need python, bash, console or text: {unknown}"


def test_every_code_block_is_run_or_marked() -> None:
    """Each python and shell block is run above, is the quick start, or carries a not-run marker."""
    assert any(b.is_quick_start for b in BLOCKS)
    for block in BLOCKS:
        if block.lang not in PYTHON | SHELL or block.is_quick_start or block.not_run:
            continue
        assert block.runs
        if block.lang in SHELL:
            for line, argv in shell_commands(block):
                assert argv[0] in COMMANDS, (
                    f"README.md line {line}: only {sorted(COMMANDS)} commands run; mark the "
                    "block <!-- not-run: REASON; tested in tests/... --> otherwise"
                )


def test_markers_are_well_formed_and_name_existing_tests() -> None:
    """Every README marker sits right above a fence, parses, and names a test file that exists."""
    text = README.read_text()
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if "not-run" in line or "<!-- needs" in line:
            following = lines[number] if number < len(lines) else ""
            assert following.startswith("```"), f"README.md line {number}: marker not above a fence"
    for block in BLOCKS:
        if not block.marker:
            continue
        assert block.not_run or block.needs, f"README.md line {block.line - 1}: {block.marker!r}"
        if block.needs:
            assert block.needs["backend"] in BACKENDS, block.marker
            assert block.lang in PYTHON | SHELL, block.marker
        elif block.not_run:
            reason, test = block.not_run["reason"], block.not_run["test"]
            assert reason.strip()
            if test is None:
                assert reason.startswith("library bug:"), (
                    f"README.md line {block.line - 1}: say '; tested in tests/...'"
                )
            else:
                assert (ROOT / test).is_file(), f"README.md line {block.line - 1}: no {test}"


def test_marker_syntax_is_understood() -> None:
    """The parser reads sections, languages, and both markers as the module docstring says."""
    sample = "\n".join(  # noqa: FLY002 - one item per Markdown line
        [
            "# Title",
            "## Worker IDs (`snowshard.workers`)",
            "<!-- not-run: needs two hosts; tested in tests/test_workers_redis.py -->",
            "```python",
            "raise SystemExit(1)",
            "```",
            "<!-- needs: redis; REDIS_URL -->",
            "```python",
            "print(1)",
            "```",
            "<!-- not-run: library bug: get() reads every table -->",
            "```bash",
            "snowshard demo",
            "```",
            "```text",
            "output",
            "```",
        ]
    )
    skipped, redis_block, bug, output = parse_blocks(sample)
    assert skipped.id == "worker-ids-L4" and not skipped.runs
    assert skipped.not_run is not None and skipped.not_run["test"] == "tests/test_workers_redis.py"
    assert redis_block.runs and redis_block.needs is not None
    assert redis_block.needs["backend"] == "redis" and redis_block.body == "print(1)\n"
    assert bug.not_run is not None and bug.not_run["test"] is None and not bug.runs
    assert output.lang == "text" and not output.runs and output.marker == ""
