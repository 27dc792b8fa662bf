"""The import graph: no cycles, and an ID core that needs only the standard library.

Read from the source (AST): every ``import`` and ``from ... import`` statement counts,
function-level ones included, except those under ``if TYPE_CHECKING:``. ``from pkg import
name`` is an edge to the submodule ``pkg.name`` when there is one, else to ``pkg``. A
module gets no edge to its parent package just by living in it. ``importlib.import_module``
calls are no statements, so lazy loaders stay lazy here too. The ID core is listed in
``.ci/core_modules.txt`` and its tests in ``.ci/core_tests.txt``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / ".ci"
CORE_MODULES_FILE = CI / "core_modules.txt"
CORE_TESTS_FILE = CI / "core_tests.txt"
CORE_CHECK = CI / "core_check.py"
TEST_TOOLS = {"pytest", "_pytest", "hypothesis"}
"""Third-party packages the core's tests may import: the core venv installs only these."""
STDLIB = set(sys.stdlib_module_names)


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line``."""

    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line})"


@dataclass
class Graph:
    """The modules under some roots, their edges to each other and their other imports."""

    paths: dict[str, Path]
    edges: dict[str, list[Edge]] = field(default_factory=dict)
    external: dict[str, list[Edge]] = field(default_factory=dict)  # target: top-level name


def _read_list(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def _modules(base: Path, roots: Iterable[str]) -> dict[str, Path]:
    """Module name -> file, for the packages ``roots`` (folders under ``base``)."""
    found: dict[str, Path] = {}
    for root in roots:
        for path in sorted((base / root).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, skipping ``if TYPE_CHECKING:`` bodies."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        children: Iterable[ast.AST] = node.orelse
    else:
        children = ast.iter_child_nodes(node)
    for child in children:
        yield from _import_nodes(child)


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: Mapping[str, Path]
) -> Iterator[str]:
    """The absolute names ``node`` imports, as modules of ``known`` where they are ones."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = ".".join(part for part in (package, node.module or "") if part)
    else:
        base = node.module or ""
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in known else base


def build_graph(base: Path, roots: Iterable[str]) -> Graph:
    """Read the imports of every module of the packages ``roots`` under ``base``."""
    roots = tuple(roots)
    graph = Graph(_modules(base, roots))
    for name, path in graph.paths.items():
        edges = graph.edges.setdefault(name, [])
        external = graph.external.setdefault(name, [])
        tree = ast.parse(path.read_text(), str(path))
        for node in _import_nodes(tree):
            for target in _targets(node, name, path.name == "__init__.py", graph.paths):
                top = target.partition(".")[0]
                if top not in roots:
                    external.append(Edge(name, top, node.lineno))
                    continue
                while target not in graph.paths and "." in target:
                    target = target.rpartition(".")[0]  # a name inside a module's package
                if target != name:
                    edges.append(Edge(name, target, node.lineno))
    return graph


def find_cycles(graph: Graph) -> list[list[Edge]]:
    """One cycle per strongly connected component that has one (Tarjan, then a search)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for edge in graph.edges.get(node, []):
            if edge.target not in index:
                visit(edge.target)
                low[node] = min(low[node], low[edge.target])
            elif edge.target in on_stack:
                low[node] = min(low[node], index[edge.target])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph.edges):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: Graph, component: set[str]) -> list[Edge]:
    """The shortest cycle through the component's first module (breadth-first)."""
    start = min(component)
    paths: dict[str, list[Edge]] = {start: []}
    queue = [start]
    for node in queue:
        for edge in graph.edges.get(node, []):
            if edge.target == start:
                return [*paths[node], edge]
            if edge.target in component and edge.target not in paths:
                paths[edge.target] = [*paths[node], edge]
                queue.append(edge.target)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - Tarjan found one


def collapse(graph: Graph, depth: int) -> Graph:
    """The graph between packages: each module counts as its first ``depth`` name parts."""

    def unit(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    packages = Graph({unit(name): path for name, path in graph.paths.items()})
    for name, edges in graph.edges.items():
        mine = packages.edges.setdefault(unit(name), [])
        mine.extend(Edge(unit(name), unit(e.target), e.line) for e in edges if unit(e.target) != unit(name))
    return packages


def runtime_closure(graph: Graph, starts: Iterable[str]) -> dict[str, list[str]]:
    """Every module importing ``starts`` executes, with the chain that brings it in.

    Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, so packages are
    followed here (unlike in the cycle check).
    """
    chains: dict[str, list[str]] = {}
    queue: list[str] = []

    def reach(name: str, chain: list[str]) -> None:
        for depth in range(1, name.count(".") + 2):
            module = ".".join(name.split(".")[:depth])
            if module in graph.paths and module not in chains:
                chains[module] = [*chain, module]
                queue.append(module)

    for start in starts:
        reach(start, [])
    for module in queue:
        for edge in graph.edges.get(module, []):
            reach(edge.target, chains[module])
    return chains


def _format_cycle(cycle: list[Edge]) -> str:
    return " -> ".join([cycle[0].source, *(f"{e.target} (line {e.line})" for e in cycle)])


@pytest.fixture(scope="module")
def package() -> Graph:
    """The graph of the snowshard package."""
    return build_graph(ROOT, ["snowshard"])


@pytest.fixture(scope="module")
def core() -> list[str]:
    """The ID core's modules, from .ci/core_modules.txt."""
    return _read_list(CORE_MODULES_FILE)


def _write(base: Path, files: Mapping[str, str]) -> None:
    for name, source in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))


# -- the checker on small packages -------------------------------------------------------


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    """a imports b at the top and b imports a inside a function: one cycle, both lines."""
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import os\nfrom pkg.b import thing\n",
        "pkg/b.py": "thing = 1\n\ndef later():\n    from pkg import a\n",
    })
    cycles = find_cycles(build_graph(tmp_path, ["pkg"]))
    assert [_format_cycle(c) for c in cycles] == ["pkg.a -> pkg.b (line 2) -> pkg.a (line 4)"]


def test_imports_under_type_checking_are_no_edges(tmp_path: Path) -> None:
    """An import under ``if TYPE_CHECKING:`` adds no edge; one in its ``else:`` does."""
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "import typing\nif typing.TYPE_CHECKING:\n    from pkg import a\n"
        "else:\n    from pkg import c\n",
        "pkg/c.py": "",
    })
    graph = build_graph(tmp_path, ["pkg"])
    assert [e.target for e in graph.edges["pkg.b"]] == ["pkg.c"]
    assert find_cycles(graph) == []


def test_from_package_import_names_the_submodule_or_the_package(tmp_path: Path) -> None:
    """``from pkg import sub`` points at pkg.sub, ``from . import NAME`` at the package."""
    _write(tmp_path, {
        "pkg/__init__.py": "NAME = 1\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/leaf.py": "from .. import NAME\nfrom pkg import sub\nfrom . import leaf2\n",
        "pkg/sub/leaf2.py": "",
    })
    graph = build_graph(tmp_path, ["pkg"])
    assert [e.target for e in graph.edges["pkg.sub.leaf"]] == ["pkg", "pkg.sub", "pkg.sub.leaf2"]


def test_a_module_has_no_edge_to_its_own_package(tmp_path: Path) -> None:
    """A package importing its submodule is no cycle: the submodule does not import it back."""
    _write(tmp_path, {"pkg/__init__.py": "from pkg.a import x\n", "pkg/a.py": "x = 1\n"})
    graph = build_graph(tmp_path, ["pkg"])
    assert graph.edges["pkg.a"] == []
    assert find_cycles(graph) == []


def test_external_imports_are_kept_by_top_level_name(tmp_path: Path) -> None:
    """``import sqlalchemy.orm`` inside a function is recorded as sqlalchemy."""
    _write(tmp_path, {"pkg/__init__.py": "def f():\n    import sqlalchemy.orm\n"})
    graph = build_graph(tmp_path, ["pkg"])
    assert [e.target for e in graph.external["pkg"]] == ["sqlalchemy"]


def test_runtime_closure_runs_parent_packages(tmp_path: Path) -> None:
    """Importing pkg.sub.leaf runs pkg/__init__ and pkg/sub/__init__, and what they import."""
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/heavy.py": "import sqlalchemy\n",
        "pkg/sub/__init__.py": "from pkg import heavy\n",
        "pkg/sub/leaf.py": "",
    })
    chains = runtime_closure(build_graph(tmp_path, ["pkg"]), ["pkg.sub.leaf"])
    assert chains["pkg.heavy"] == ["pkg.sub", "pkg.heavy"]


# -- snowshard ---------------------------------------------------------------------------


def test_snowshard_has_no_import_cycle(package: Graph) -> None:
    """No two snowshard modules import each other, directly or through others."""
    cycles = find_cycles(package)
    assert not cycles, "import cycles:\n" + "\n".join(_format_cycle(c) for c in cycles)


def test_snowshard_subpackages_have_no_import_cycle(package: Graph) -> None:
    """Between subpackages (workers, sharding, orm, cli, ...) dependencies point one way."""
    cycles = find_cycles(collapse(package, depth=2))
    assert not cycles, "cycles between subpackages:\n" + "\n".join(
        _format_cycle(c) for c in cycles
    )


def test_core_modules_exist(package: Graph, core: list[str]) -> None:
    """Every module .ci/core_modules.txt lists is a module of snowshard."""
    assert [name for name in core if name not in package.paths] == []


def test_core_imports_only_core_modules(package: Graph, core: list[str]) -> None:
    """Every snowshard module the core runs on import is listed in .ci/core_modules.txt."""
    chains = runtime_closure(package, core)
    assert [" -> ".join(chain) for name, chain in sorted(chains.items()) if name not in core] == []


def test_core_imports_only_the_standard_library(package: Graph, core: list[str]) -> None:
    """Nothing the core imports, at any depth and in any function, is a third-party module."""
    chains = runtime_closure(package, core)
    found = [
        f"{' -> '.join(chains[module])} imports {edge.target} (line {edge.line})"
        for module in sorted(chains)
        for edge in package.external[module]
        if edge.target not in STDLIB
    ]
    assert found == []


def test_core_loads_no_third_party_module_in_a_fresh_interpreter() -> None:
    """Importing every core module leaves only stdlib and snowshard modules in sys.modules."""
    done = subprocess.run(
        [sys.executable, str(CORE_CHECK)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok "), done.stdout


def test_core_tests_list_is_exactly_the_tests_of_the_core(core: list[str]) -> None:
    """.ci/core_tests.txt lists every test module that imports only the core, and no other."""
    tests = build_graph(ROOT, ["snowshard", "tests"])
    allowed = set(core)
    core_only: list[str] = []
    for module, path in sorted(tests.paths.items()):
        if not (module.startswith("tests.") and path.name.startswith("test_")):
            continue
        reached = runtime_closure(tests, [module])
        own = {name for name in reached if name.startswith("snowshard")}
        helpers = {name for name in reached if name.startswith("tests")}
        external = {e.target for name in helpers for e in tests.external[name]}
        if own <= allowed and external <= STDLIB | TEST_TOOLS:
            core_only.append(path.relative_to(ROOT).as_posix())
    assert sorted(_read_list(CORE_TESTS_FILE)) == core_only
