"""The documentation site stays true: its code runs, its errors page and API reference are complete.

The pages are ``docs/**/*.md``, built by ``mkdocs.yml``. Every fenced block names its
language, and what happens to it follows from that:

* ``python``: run as a script (``sys.executable -W error``) in a subprocess whose working
  directory is a fresh tmp dir holding the page's file blocks (below), so a block holds its
  own imports and uses SQLite (in memory or a file in the working directory) unless marked.
* ``console``: each ``$ snowshard ...`` line is run (the venv's console script, 100 columns
  wide) in a fresh tmp dir holding the page's file blocks; the lines after it, up to the
  next ``$`` line, are its standard output, compared line by line (trailing spaces
  ignored; ``...`` in a line stands for any text, a line of just ``...`` for any lines).
  Only ``snowshard`` commands may appear.
* ``bash``/``sh``: commands for the reader's own shell (``pip install``, ``alembic`` in a
  project), not run here; ``alembic`` in a user's project is run by
  tests/test_migrations_user_project.py from the files of docs/migrations.md.
* ``text`` (and data: ``ini``, ``toml``, ...): diagrams and output, not run.

A marker on the line right before the opening fence changes that (the syntax of
tests/test_readme.py, plus ``file:``):

* ``<!-- not-run: REASON; tested in tests/test_x.py -->``: not run here; the named test file
  must exist.
* ``<!-- needs: postgres -->`` (or ``mysql``, ``redis``; ``; NOTE`` may follow): the block runs
  with ``POSTGRES_URL`` and ``POSTGRES_URL_2`` set to two brand-new databases (``MYSQL_URL``,
  ``MYSQL_URL_2``), or ``REDIS_URL`` set to the test Redis, from the servers of
  tests/backends.py (``SNOWSHARD_TEST_*_URL``; skipped when none is reachable, failed under
  ``SNOWSHARD_REQUIRE_BACKENDS=1``).
* ``<!-- file: NAME -->``: the block is the file ``NAME`` (``shop.py``, a ``pyproject.toml``,
  an ``env.py``...), written into the working directory of every python and console block of
  its page, which may import or read it; not run by itself. tests/test_migrations_user_project.py reads the files of
  docs/migrations.md the same way.

Test ids name the page and the line of each block, e.g. ``queries-L42``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import snowshard
from snowshard.errors import SnowshardError
from tests.markdown_blocks import Fence, fences

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"
ERRORS_PAGE = DOCS / "errors.md"
API = DOCS / "api"
TIMEOUT = 120
REQUIRE_DOCS_ENV = "SNOWSHARD_REQUIRE_DOCS"

PYTHON = {"python"}
CONSOLE = {"console"}
READER_SHELL = {"bash", "sh"}
NOT_CODE = {"text", "ini", "toml", "json", "yaml"}
COMMANDS = {"snowshard"}

FILE = re.compile(r"<!-- file: (?P<name>[\w./-]+) -->")
SQL_BACKENDS = {"postgres": ("postgresql", "POSTGRES_URL"), "mysql": ("mysql", "MYSQL_URL")}
#: backend named in ``<!-- needs: ... -->`` -> the pytest marker of its tests
MARKS = {"postgres": "postgres", "mysql": "mysql", "redis": "redis"}
#: where the Redis examples leave keys: the default prefixes of RedisLease and RedisIssuer
REDIS_PREFIXES = ("snowshard:workers:", "snowshard:seq:")

#: The command line's own modules are its implementation: the ``snowshard`` command is
#: documented on the operations page and by ``snowshard COMMAND --help``, and its Python
#: entry point on the page of ``snowshard.cli``.
API_EXEMPT_PACKAGES = ("snowshard.cli.",)


# --------------------------------------------------------------------------- pages and blocks


@dataclass(frozen=True)
class Block(Fence):
    """One fenced block of a docs page (tests/markdown_blocks.py parses it)."""

    page: str  # path under docs/, e.g. "concepts/ids.md"

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.page.removesuffix(".md").lower()).strip("-")
        return f"{slug}-L{self.line}"

    @property
    def where(self) -> str:
        return f"docs/{self.page} line {self.line}"

    @property
    def file(self) -> re.Match[str] | None:
        return FILE.fullmatch(self.marker)

    @property
    def runs(self) -> bool:
        """Run by this module: python and console blocks that are neither files nor not-run."""
        return self.lang in PYTHON | CONSOLE and not self.not_run and not self.file


def parse_blocks(page: str, text: str) -> list[Block]:
    """The fenced blocks of one page's Markdown, in order."""
    return [Block(page=page, **vars(fence)) for fence in fences(text, f"docs/{page}")]


def pages() -> list[str]:
    """Every page under docs/, as a path relative to it."""
    return sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))


BLOCKS = [block for page in pages() for block in parse_blocks(page, (DOCS / page).read_text())]


def page_files(page: str) -> dict[str, str]:
    """The ``<!-- file: NAME -->`` blocks of a page: NAME -> content."""
    return {b.file["name"]: b.body for b in BLOCKS if b.page == page and b.file}


def block_params(langs: set[str]) -> list[object]:
    params: list[object] = []
    for block in BLOCKS:
        if block.lang in langs and block.runs:
            needs = block.needs
            marks = [getattr(pytest.mark, MARKS[needs["backend"]])] if needs else []
            params.append(pytest.param(block, id=block.id, marks=marks))
    return params


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without SNOWSHARD_* settings (a reader has none), 100 columns wide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWSHARD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, "COLUMNS": "100", **extra}


def backend_env(block: Block, request: pytest.FixtureRequest) -> dict[str, str]:
    """The variables a ``needs:`` block reads, pointed at the test suite's servers."""
    needs = block.needs
    if needs is None:
        return {}
    backend = needs["backend"]
    if backend == "redis":
        url: str = request.getfixturevalue("redis_url")
        return {"REDIS_URL": url}
    kind, variable = SQL_BACKENDS[backend]
    first, second = request.getfixturevalue("database_factory")(kind, 2)
    return {variable: first, f"{variable}_2": second}


def fail_message(where: str, done: subprocess.CompletedProcess[str]) -> str:
    return (
        f"{where} exited {done.returncode}\n"
        f"--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )


# --------------------------------------------------------------------------- running blocks


def write_page_files(page: str, directory: Path) -> None:
    """Put the page's ``<!-- file: NAME -->`` blocks into ``directory``."""
    for name, content in page_files(page).items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)


@pytest.mark.parametrize("block", block_params(PYTHON))
def test_python_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The page's python block, next to the page's file blocks, runs to exit status 0."""
    env = clean_env(**backend_env(block, request))
    write_page_files(block.page, tmp_path)
    script = tmp_path / f"docs_block_L{block.line}.py"
    script.write_text(block.body)
    with redis_cleanup(env if block.needs and block.needs["backend"] == "redis" else None):
        done = subprocess.run(
            [sys.executable, "-W", "error", str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    assert done.returncode == 0, fail_message(block.where, done)


def console_steps(block: Block) -> list[tuple[int, list[str], list[str]]]:
    """(page line, argv, expected stdout lines) of each ``$`` command of a console block."""
    steps: list[tuple[int, list[str], list[str]]] = []
    for offset, line in enumerate(block.body.splitlines(), start=1):
        if line.startswith("$ "):
            steps.append((block.line + offset, shlex.split(line[2:], comments=True), []))
        else:
            assert steps, f"{block.where}: a console block starts with a '$ ' command"
            steps[-1][2].append(line.rstrip())
    return steps


def executable(name: str) -> list[str]:
    """The venv's console script ``name``, else ``python -m name``."""
    script = Path(sys.executable).parent / name
    return [str(script)] if script.exists() else [sys.executable, "-m", name]


def output_pattern(expected: list[str]) -> re.Pattern[str]:
    """A regex for the shown output: ``...`` stands for any text, a ``...`` line for any lines."""
    parts = []
    for line in expected:
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*".join(re.escape(piece) for piece in line.split("...")) + r"\n")
    return re.compile("".join(parts))


@pytest.mark.parametrize("block", block_params(CONSOLE))
def test_console_block_prints_what_it_shows(block: Block, tmp_path: Path) -> None:
    """Each command of the console block exits 0 and prints the lines shown under it."""
    steps = console_steps(block)
    assert steps, f"{block.where}: no command"
    write_page_files(block.page, tmp_path)
    for line, argv, expected in steps:
        assert argv and argv[0] in COMMANDS, f"docs/{block.page} line {line}: not a snowshard command"
        done = subprocess.run(
            executable(argv[0]) + argv[1:],
            cwd=tmp_path,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        where = f"docs/{block.page} line {line}: {shlex.join(argv)}"
        assert done.returncode == 0, fail_message(where, done)
        printed = "".join(f"{out.rstrip()}\n" for out in done.stdout.splitlines())
        if expected:
            assert output_pattern(expected).fullmatch(printed), f"{where} printed:\n{printed}"


def redis_keys(client: Any) -> set[bytes]:
    return {key for prefix in REDIS_PREFIXES for key in client.scan_iter(f"{prefix}*")}


@contextmanager
def redis_cleanup(env: dict[str, str] | None) -> Iterator[None]:
    """Delete the keys a block left under the default prefixes (keys there before stay)."""
    if env is None:
        yield
        return
    import redis

    client = redis.Redis.from_url(env["REDIS_URL"])
    try:
        before = redis_keys(client)
        yield
        new = redis_keys(client) - before
        if new:
            client.delete(*new)
    finally:
        client.close()


# --------------------------------------------------------------------------- block rules


def test_every_block_names_a_known_language() -> None:
    """Every fence says what it holds, so no code escapes these tests untagged."""
    known = PYTHON | CONSOLE | READER_SHELL | NOT_CODE
    unknown = [f"{b.where}: {b.lang or '(none)'}" for b in BLOCKS if b.lang not in known]
    assert not unknown, f"fences need python, console, bash, sh or text: {unknown}"


def test_every_python_and_console_block_is_run_or_marked() -> None:
    """Each python and console block is run above, is a file block, or is marked not-run."""
    code = [b for b in BLOCKS if b.lang in PYTHON | CONSOLE]
    assert code, "the docs hold no code block"
    silent = [b.where for b in code if not (b.runs or b.file or b.not_run)]
    assert not silent


def test_markers_are_well_formed_and_name_existing_tests() -> None:
    """Every marker sits right above a fence, parses, and names a test file that exists."""
    for page in pages():
        lines = (DOCS / page).read_text().splitlines()
        for number, line in enumerate(lines, start=1):
            if re.match(r"\s*<!-- (not-run|needs|file):", line):
                following = lines[number] if number < len(lines) else ""
                assert following.startswith("```"), f"docs/{page} line {number}: not above a fence"
    for block in BLOCKS:
        if not block.marker:
            continue
        assert block.not_run or block.needs or block.file, f"{block.where}: {block.marker!r}"
        if block.needs:
            assert block.needs["backend"] in MARKS, block.marker
            assert block.lang in PYTHON, f"{block.where}: only python blocks use servers"
        if block.not_run:
            test = block.not_run["test"]
            assert test is not None, f"{block.where}: say '; tested in tests/...'"
            assert (ROOT / test).is_file(), f"{block.where}: no {test}"


def test_file_blocks_have_unique_names_per_page() -> None:
    """A page names each of its files once, so no block silently replaces another."""
    for page in pages():
        names = [b.file["name"] for b in BLOCKS if b.page == page and b.file]
        assert len(names) == len(set(names)), f"docs/{page}: a file name appears twice: {names}"


def test_python_file_blocks_compile() -> None:
    """A python file block is valid Python, even where no block of its page imports it."""
    for block in BLOCKS:
        if block.file and block.lang in PYTHON:
            compile(block.body, block.file["name"], "exec")


def test_parser_reads_markers_files_and_console_output() -> None:
    """The parser reads languages, the three markers and console steps as documented above."""
    sample = "\n".join(  # noqa: FLY002 - one item per Markdown line
        [
            "# Title",
            "<!-- file: shop.py -->",
            "```python",
            "X = 1",
            "```",
            "<!-- needs: postgres; two databases -->",
            "```python",
            "from shop import X",
            "```",
            "<!-- not-run: prints forever; tested in tests/test_cli.py -->",
            "```python",
            "while True: print(1)",
            "```",
            "```console",
            "$ snowshard route 1 --shards 2  # a comment",
            "1 -> shard 1 of 2",
            "```",
        ]
    )
    shop, server, forever, console = parse_blocks("guide/x.md", sample)
    assert shop.file is not None and shop.file["name"] == "shop.py" and not shop.runs
    assert server.runs and server.needs is not None and server.needs["backend"] == "postgres"
    assert server.id == "guide-x-L7" and server.body == "from shop import X\n"
    assert forever.not_run is not None and not forever.runs
    assert console_steps(console) == [
        (15, ["snowshard", "route", "1", "--shards", "2"], ["1 -> shard 1 of 2"])
    ]


def test_console_output_pattern_reads_ellipses() -> None:
    """``...`` matches any text within a line, and a ``...`` line any run of lines."""
    pattern = output_pattern(["Layout 41t (from ...)", "...", "genes 16"])
    assert pattern.fullmatch("Layout 41t (from /tmp/x/pyproject.toml)\na\nb\ngenes 16\n")
    assert pattern.fullmatch("Layout 41t (from here)\ngenes 16\n")
    assert not pattern.fullmatch("Layout 41t (from here)\ngenes 32\n")
    assert not output_pattern(["1 -> shard 1"]).fullmatch("1 -> shard 1\nextra\n")


# --------------------------------------------------------------------------- the errors page


def snowshard_modules() -> Iterator[ModuleType]:
    """Every snowshard module that imports here (one that needs a missing extra is left out)."""
    yield snowshard
    for info in pkgutil.walk_packages(snowshard.__path__, "snowshard."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # importing it runs the command
        try:
            yield importlib.import_module(info.name)
        except ImportError:
            continue  # an optional extra (greenlet, redis, ...) is not installed


def error_classes() -> dict[str, type[BaseException]]:
    """Every public error class of snowshard: SnowshardError and its subclasses, by name.

    A class whose name starts with ``_`` is an implementation detail raised in the place of
    its public base (e.g. to pass SQLAlchemy's ``DontWrapMixin`` through), so it has no row.
    """
    for _ in snowshard_modules():
        pass
    found: dict[str, type[BaseException]] = {}
    stack: list[type[BaseException]] = [SnowshardError]
    while stack:
        cls = stack.pop()
        private = cls.__name__.startswith("_")  # raised as its public base; not listed
        if not private and (cls.__module__ == "snowshard" or cls.__module__.startswith("snowshard.")):
            assert found.setdefault(cls.__name__, cls) is cls, f"two errors named {cls.__name__}"
        stack.extend(cls.__subclasses__())
    return found


@dataclass(frozen=True)
class ErrorRow:
    """One row of an errors table: name, base classes, module and when it is raised."""

    name: str
    bases: tuple[str, ...]
    module: str
    when: str


ERROR_ROW = re.compile(
    r"^\| `(?P<name>\w+)` \| (?P<bases>[^|]+?) \| `(?P<module>[\w.]+)` \| (?P<when>[^|]+?) \|$"
)


def error_rows() -> list[ErrorRow]:
    """The rows of every table on the errors page whose first cell is a class name."""
    rows = []
    for line in ERRORS_PAGE.read_text().splitlines():
        if not line.startswith("| `"):
            continue
        match = ERROR_ROW.match(line)
        assert match is not None, f"docs/errors.md: a row that does not parse: {line}"
        bases = tuple(re.findall(r"`([\w.]+)`", match["bases"]))
        rows.append(ErrorRow(match["name"], bases, match["module"], match["when"]))
    return rows


def test_errors_page_lists_every_error_class() -> None:
    """Each subclass of SnowshardError (and itself) has a row on the errors page."""
    listed = {row.name for row in error_rows()}
    missing = sorted(set(error_classes()) - listed)
    assert not missing, f"docs/errors.md lacks rows for {missing}"


def test_errors_page_names_only_existing_errors() -> None:
    """Each row names, once, a SnowshardError class that its module column exports."""
    rows = error_rows()
    names = [row.name for row in rows]
    assert len(names) == len(set(names)), "docs/errors.md: a class is listed twice"
    for row in rows:
        cls = getattr(importlib.import_module(row.module), row.name, None)
        assert inspect.isclass(cls) and issubclass(cls, SnowshardError), (
            f"docs/errors.md: {row.module} has no error {row.name}"
        )
        assert row.when.strip(), f"docs/errors.md: say when {row.name} is raised"


def test_errors_page_gives_the_real_base_classes() -> None:
    """Each row's base classes are the class's own, in order."""
    for row in error_rows():
        cls = getattr(importlib.import_module(row.module), row.name)
        actual = tuple(base.__name__ for base in cls.__bases__)
        assert row.bases == actual, f"docs/errors.md: {row.name} derives from {actual}"


# --------------------------------------------------------------------------- API reference


def public_modules() -> list[str]:
    """Names of the modules the API reference documents: no ``_`` part, no ``__main__``."""
    names = ["snowshard"]
    for info in pkgutil.walk_packages(snowshard.__path__, "snowshard."):
        parts = info.name.split(".")
        if any(part.startswith("_") for part in parts):
            continue
        if info.name.startswith(API_EXEMPT_PACKAGES):
            continue
        names.append(info.name)
    return sorted(names)


def api_pages() -> dict[str, str]:
    """docs/api/*.md other than the index: page name -> content."""
    return {p.stem: p.read_text() for p in sorted(API.glob("*.md")) if p.stem != "index"}


def test_every_public_module_has_an_api_page() -> None:
    """docs/api/<module>.md renders each public module with ``::: <module>``."""
    pages_ = api_pages()
    missing = [
        name
        for name in public_modules()
        if not re.search(rf"^::: {re.escape(name)}$", pages_.get(name, ""), re.MULTILINE)
    ]
    assert not missing, (
        f"add docs/api/<name>.md pages holding '::: <name>' for {missing}, and list them "
        "in mkdocs.yml's nav"
    )


def test_every_api_page_documents_a_module_that_exists() -> None:
    """No API page is left behind for a module that was removed or renamed."""
    stale = sorted(set(api_pages()) - set(public_modules()))
    assert not stale, f"docs/api pages for modules that are not public (any more): {stale}"


def nav_pages() -> list[str]:
    """The pages mkdocs.yml's nav lists (``- Title: page.md`` or ``- page.md``)."""
    return re.findall(r"^\s*- (?:[^\n]*?: )?([\w./-]+\.md)\s*$", MKDOCS_YML.read_text(), re.MULTILINE)


def test_nav_lists_every_page_once() -> None:
    """Every page under docs/ is in the nav, once, and the nav names no missing page."""
    listed = nav_pages()
    assert len(listed) == len(set(listed)), "mkdocs.yml: a page is in the nav twice"
    assert sorted(listed) == pages()


# --------------------------------------------------------------------------- the build


def docs_tools_missing() -> list[str]:
    return [m for m in ("mkdocs", "material", "mkdocstrings_handlers.python") if not _found(m)]


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@dataclass(frozen=True)
class Build:
    """The outcome of ``mkdocs build --strict``, and the site it wrote."""

    done: subprocess.CompletedProcess[str]
    site: Path


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The site, built once per test run (skipped without the ``docs`` extra, unless required)."""
    missing = docs_tools_missing()
    if missing:
        if os.environ.get(REQUIRE_DOCS_ENV, "").strip().lower() in {"1", "true", "yes", "on"}:
            pytest.fail(f"{missing} not installed (and {REQUIRE_DOCS_ENV} is set): pip install -e '.[docs]'")
        pytest.skip(f"{missing} not installed: pip install -e '.[docs]' to build the docs")
    site = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(MKDOCS_YML), "-d", str(site)],
        cwd=ROOT,
        env={**clean_env(), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return Build(done, site)


@pytest.mark.slow
def test_mkdocs_build_strict_passes(build: Build) -> None:
    """``mkdocs build --strict`` succeeds (no warning) and writes every page of the nav."""
    assert build.done.returncode == 0, fail_message("mkdocs build --strict", build.done)
    assert "WARNING" not in build.done.stderr, build.done.stderr
    for page in nav_pages():
        assert built_page(build.site, page).is_file(), f"mkdocs built no page for {page}"


@pytest.mark.slow
def test_api_reference_turns_sphinx_roles_into_links(build: Build) -> None:
    """No ``:class:`...``` is left in the built pages; a role naming a documented class links it."""
    assert build.done.returncode == 0, fail_message("mkdocs build --strict", build.done)
    leftovers = [
        str(path.relative_to(build.site))
        for path in build.site.rglob("*.html")
        if re.search(r":(?:class|func|meth|mod|attr|data|exc):`", path.read_text())
    ]
    assert not leftovers
    generator = built_page(build.site, "api/snowshard.generator.md").read_text()
    assert 'href="#snowshard.generator.Snowflake"><code>Snowflake</code></a>' in generator


def built_page(site: Path, page: str) -> Path:
    """Where mkdocs writes ``page`` (directory URLs): a/b.md -> a/b/index.html."""
    stem = page.removesuffix(".md")
    if stem == "index" or stem.endswith("/index"):
        return site / stem.removesuffix("index") / "index.html"
    return site / stem / "index.html"
