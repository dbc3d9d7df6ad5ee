"""The project's layering, read from the source: the module import graph has no cycle, and no
library imports a layer above it (or ROS).

Layers: the libraries (egomimic_data, egomimic_hw, egomimic_safety, egomimic_policy) sit below the
ROS layer (egomimic_nodes, egomimic_bringup, egomimic_launch) and never import it or ROS itself:
they are tested without DDS and reused outside the graph. Among them, egomimic_data is lowest
(from egomimic_hw it takes only the dependency-free `description`), and neither egomimic_hw nor
egomimic_safety imports the policy.

The graph is built with `ast` from every .py file of the project's packages, so it sees every
import, including lazy ones inside functions (and `importlib.import_module("...")` with a literal
name): a lazy import is still a dependency, it only moves the failure to run time.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {
    "egomimic_hw": REPO / "egomimic_hw",
    "egomimic_safety": REPO / "egomimic_safety",
    "egomimic_policy": REPO / "egomimic_policy",
    "egomimic_data": REPO / "egomimic_data",
    "egomimic_launch": REPO / "launch" / "egomimic_launch",
    "egomimic_nodes": REPO / "ros2_ws" / "src" / "egomimic_nodes" / "egomimic_nodes",
    "egomimic_bringup": REPO / "ros2_ws" / "src" / "egomimic_bringup" / "egomimic_bringup",
}
"""Where each package's source is (pyproject.toml's package-dir)."""

ROS_LAYER = ("egomimic_nodes", "egomimic_bringup", "egomimic_launch")
LIBRARIES = ("egomimic_hw", "egomimic_safety", "egomimic_policy", "egomimic_data")
FORBIDDEN_PACKAGES = {
    "egomimic_hw": ("egomimic_policy", *ROS_LAYER),
    "egomimic_safety": ("egomimic_policy", *ROS_LAYER),
    "egomimic_policy": ROS_LAYER,
    "egomimic_data": ("egomimic_safety", "egomimic_policy", *ROS_LAYER),
}
"""What each library must not import (its own layer and those below are allowed)."""
DATA_MAY_IMPORT_FROM_HW = frozenset({"egomimic_hw.description"})


@dataclass(frozen=True)
class Import:
    target: str
    """The imported module: a project module (dotted), or the top-level name of an external one."""
    path: Path
    line: int
    lazy: bool
    """Inside a function (runs when called, not when the module is imported)."""

    def where(self) -> str:
        rel = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return f"{rel}:{self.line}{' (lazy)' if self.lazy else ''}"


def find_modules(package_dirs: dict[str, Path]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is_package) for every .py file under the packages."""
    modules = {}
    for top, root in package_dirs.items():
        for path in sorted(root.rglob("*.py")):
            parts = [top, *path.relative_to(root).with_suffix("").parts]
            is_package = parts[-1] == "__init__"
            modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def _project_module(name: str, modules) -> str | None:
    """The project module `name` refers to: itself, or the package it is an attribute of."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imported_names(node: ast.AST, package: str) -> list[str]:
    """Candidate dotted names one import statement (or import_module call) loads."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        # `from pkg import name`: a submodule when pkg.name is one, else an attribute of pkg.
        return [f"{base}.{alias.name}" for alias in node.names] + [base]
    if (
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            or (isinstance(node.func, ast.Name) and node.func.id == "import_module")
        )
    ):
        return [node.args[0].value]
    return []


def imports_of(module: str, path: Path, is_package: bool, modules) -> list[Import]:
    """Every import in one file: project modules by dotted name, external ones by top-level name."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if is_package else module.rpartition(".")[0]
    project_tops = {name.split(".")[0] for name in modules}
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        names = _imported_names(node, package)
        if isinstance(node, ast.ImportFrom):  # the submodules named, and the module for any other name
            submodules = [n for n in names[:-1] if n in modules]
            names = submodules + (names[-1:] if len(submodules) < len(names) - 1 else [])
        for name in names:
            top = name.split(".")[0]
            target = _project_module(name, modules) if top in project_tops else top
            found.append(Import(target or top, path, node.lineno, lazy))
        inside = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return [i for i in found if i.target != module]


def import_graph(package_dirs: dict[str, Path]) -> tuple[dict[str, list[Import]], set[str]]:
    modules = find_modules(package_dirs)
    graph = {m: imports_of(m, path, is_pkg, modules) for m, (path, is_pkg) in modules.items()}
    return graph, set(modules)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a closed path a -> ... -> a) per strongly connected component of more than
    one module (Tarjan), so a report names every tangle once."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, ()):
                components.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return [_cycle_within(component, edges) for component in components]


def _cycle_within(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A closed path through the component's first module (breadth first: the shortest)."""
    inside, start = set(component), component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, ())):
                if w not in inside:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {component}")  # cannot happen in an SCC


def _is_ros(top_level: str) -> bool:
    """rclpy, rosidl and every ROS interface package (`*_msgs`, `*_srvs`, `*_interfaces`)."""
    return (
        top_level == "rclpy" or top_level.startswith("rosidl") or top_level.endswith(("_msgs", "_srvs", "_interfaces"))
    )


@pytest.fixture(scope="module")
def graph():
    return import_graph(PACKAGE_DIRS)


def edges_of(graph_and_modules) -> dict[str, set[str]]:
    graph, modules = graph_and_modules
    return {m: {i.target for i in imports if i.target in modules} for m, imports in graph.items()}


def describe(cycle: list[str], graph) -> str:
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        where = ", ".join(i.where() for i in graph[a] if i.target == b)
        steps.append(f"  {a} -> {b}  [{where}]")
    return "\n".join(steps)


# -- the rules ----------------------------------------------------------------------------------
def test_every_package_has_modules(graph):
    """A moved package must not turn the other tests vacuous."""
    _, modules = graph
    for top, root in PACKAGE_DIRS.items():
        assert (root / "__init__.py").is_file(), f"{top}: no package at {root}"
        assert sum(m.split(".")[0] == top for m in modules) > 1, f"{top}: no modules under {root}"


def test_no_import_cycle(graph):
    found = cycles(edges_of(graph))
    assert not found, "import cycles:\n" + "\n\n".join(describe(c, graph[0]) for c in found)


def offending_imports(graph, library: str, forbidden) -> list[str]:
    """`library`'s imports whose top-level package `forbidden(package)` refuses, with where."""
    imports, _ = graph
    return [
        f"{m} imports {i.target} at {i.where()}"
        for m, found in imports.items()
        if m.split(".")[0] == library
        for i in found
        if forbidden(i.target.split(".")[0])
    ]


@pytest.mark.parametrize("library", LIBRARIES)
def test_library_imports_no_layer_above_it(graph, library):
    bad = offending_imports(graph, library, lambda top: top in FORBIDDEN_PACKAGES[library])
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("library", LIBRARIES)
def test_library_is_ros_free(graph, library):
    bad = offending_imports(graph, library, _is_ros)
    assert not bad, "\n".join(bad)


def test_data_takes_only_the_description_from_hw(graph):
    imports, _ = graph
    bad = [
        f"{m} imports {i.target} at {i.where()}"
        for m, found in imports.items()
        if m.split(".")[0] == "egomimic_data"
        for i in found
        if i.target.split(".")[0] == "egomimic_hw" and i.target not in DATA_MAY_IMPORT_FROM_HW
    ]
    assert not bad, "\n".join(bad)


# -- the graph reader itself, on a package made for it ------------------------------------------
def test_reader_sees_lazy_relative_and_dynamic_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .leaf import VALUE\n")
    (pkg / "sub" / "leaf.py").write_text("VALUE = 1\n")
    (pkg / "top.py").write_text(
        "import numpy as np\n"
        "from pkg import sub\n"
        "from pkg.sub import leaf, VALUE\n"
        "def later():\n"
        "    from .sub.leaf import VALUE\n"
        "    import rclpy.node\n"
        "    import importlib\n"
        "    return importlib.import_module('pkg.other')\n"
    )
    (pkg / "other.py").write_text("from pkg.sub import leaf\nfrom pkg.top import later\n")
    imports, modules = import_graph({"pkg": pkg})
    assert modules == {"pkg", "pkg.sub", "pkg.sub.leaf", "pkg.top", "pkg.other"}
    seen = {(i.target, i.lazy) for i in imports["pkg.top"]}
    assert seen == {
        ("numpy", False),
        ("pkg.sub", False),
        ("pkg.sub.leaf", False),
        ("pkg.sub.leaf", True),
        ("rclpy", True),
        ("importlib", True),
        ("pkg.other", True),
    }
    assert {i.line for i in imports["pkg.top"] if i.target == "pkg.sub"} == {2, 3}  # line 3: a submodule and a name
    assert {i.target for i in imports["pkg.sub"]} == {"pkg.sub.leaf"}
    assert cycles(edges_of((imports, modules))) == [["pkg.other", "pkg.top", "pkg.other"]]


def test_cycle_report_names_the_shortest_loop():
    edges = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "a"]]
    assert cycles({"x": {"y"}, "y": set()}) == []
