"""The import structure of core/ (the package ``rammer``), read with ``ast`` without importing it.

* no cycle among the module-level imports of core's modules (importing ``a.b.c`` runs the packages
  ``a`` and ``a.b`` too, so those count as imported), except the cycles listed in
  tests/known_failures/core_imports.txt;
* an import inside a function either defers a heavy optional dependency, with a one-line
  ``# deferred: reason`` comment on its line or the line above, or is listed in that file (a list
  that only shrinks: a listed import that is gone fails too, so the entry gets removed);
* core never imports a backend (``rammer.backends``), at module level or in a function.
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORE = ROOT / "core"
ALLOW_LIST = ROOT / "tests" / "known_failures" / "core_imports.txt"

#: Optional dependencies heavy enough that core imports them only where they are used.
HEAVY_OPTIONAL = frozenset({"torch", "onnxruntime", "ray", "pyopencl", "cupy", "sklearn", "skl2onnx", "matplotlib",
                            "transformers", "tflite", "tflite_runtime", "tensorflow", "onnx2torch", "poptorch",
                            "unicorn", "hummingbird", "xgboost", "lightgbm"})


@dataclass(frozen=True)
class ImportSite:
    module: str      # the importing module, e.g. rammer.backend
    target: str      # the imported module, e.g. rammer.plugins or matplotlib.pyplot
    line: int
    in_function: bool
    deferred: bool   # carries a "# deferred: reason" comment


def module_name(path: pathlib.Path) -> str:
    parts = ["rammer", *path.relative_to(CORE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(CORE.rglob("*.py"))}


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module if is_package else module.rsplit(".", 1)[0]
        for _ in range(node.level - 1):
            base = base.rsplit(".", 1)[0]
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module or ""
    # "from pkg import name" imports the module pkg.name when there is one
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]


def import_sites(module: str) -> list[ImportSite]:
    path = MODULES[module]
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    is_package = path.name == "__init__.py"
    sites: list[ImportSite] = []

    def deferred(line: int) -> bool:
        here = lines[line - 1]
        above = lines[line - 2].strip() if line >= 2 else ""
        return "# deferred:" in here or above.startswith("# deferred:")

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                sites.extend(ImportSite(module, t, child.lineno, in_function, deferred(child.lineno))
                             for t in _targets(module, is_package, child))
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # annotations only: never runs
            else:
                walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(text, str(path)), False)
    return sites


ALL_SITES = [site for module in MODULES for site in import_sites(module)]


def _core_module(target: str) -> str | None:
    """The module of core that importing ``target`` names (a name in a module counts as the module)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def module_level_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for site in ALL_SITES:
        target = _core_module(site.target) if site.target.startswith("rammer") else None
        if site.in_function or target is None:
            continue
        parts = target.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            step = ".".join(parts[:i])
            if step in MODULES and step != site.module and not site.module.startswith(step + "."):
                graph[site.module].add(step)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
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
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _allow_list() -> tuple[set[tuple[str, ...]], set[tuple[str, str]]]:
    known_cycles: set[tuple[str, ...]] = set()
    known_imports: set[tuple[str, str]] = set()
    for raw in ALLOW_LIST.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        if kind == "cycle":
            known_cycles.add(tuple(sorted(rest.split())))
        elif kind == "import":
            module, _, target = rest.partition("->")
            known_imports.add((module.strip(), target.strip()))
        else:
            raise AssertionError(f"{ALLOW_LIST}: cannot read line {raw!r} (want 'cycle A B ...' or 'import A -> B')")
    return known_cycles, known_imports


def _top(target: str) -> str:
    return target.split(".", 1)[0]


def test_the_parser_sees_relative_and_function_level_imports():
    sites = {(s.module, s.target, s.in_function) for s in ALL_SITES}
    assert ("rammer.plugin_host", "rammer.hookspecs", False) in sites  # "from . import hookspecs"
    assert ("rammer.passes.cse", "rammer.passes.pipeline", False) in sites  # "from .pipeline import Pass"
    assert ("rammer.passes.pipeline", "rammer.ir", False) in sites  # "from ..ir import Graph"
    assert any(s.in_function for s in ALL_SITES)
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b", "c")]


def test_core_has_no_import_cycle_but_the_listed_ones():
    found = set(cycles(module_level_graph()))
    known, _ = _allow_list()
    new, gone = sorted(found - known), sorted(known - found)
    assert not new, f"import cycle(s) among core's modules: {new}; break them (a lower module for the shared part)"
    assert not gone, f"listed cycle(s) no longer exist: {gone}; remove them from {ALLOW_LIST.name}"


def test_imports_inside_functions_defer_a_heavy_dependency_or_are_listed():
    _, known = _allow_list()
    unexplained, seen = [], set()
    for site in ALL_SITES:
        if not site.in_function:
            continue
        key = (site.module, site.target)
        seen.add(key)
        if _top(site.target) in HEAVY_OPTIONAL and site.deferred:
            continue
        if key not in known:
            unexplained.append(f"{MODULES[site.module].relative_to(ROOT)}:{site.line} imports {site.target}")
    assert not unexplained, (
        "imports inside functions of core/ that neither defer a heavy optional dependency (with a "
        "'# deferred: reason' comment) nor are listed: " + "; ".join(unexplained)
        + ". Import at module level; a cycle this would make means the shared part belongs in a lower module.")
    gone = sorted(known - seen)
    assert not gone, f"listed function-level imports no longer exist: {gone}; remove them from {ALLOW_LIST.name}"


def test_a_deferred_comment_is_for_heavy_optional_dependencies_only():
    misused = [f"{MODULES[s.module].relative_to(ROOT)}:{s.line} {s.target}" for s in ALL_SITES
               if s.deferred and _top(s.target) not in HEAVY_OPTIONAL]
    assert not misused, f"'# deferred:' on imports of light or own modules: {misused}"


def test_core_never_imports_a_backend():
    offenders = [f"{MODULES[s.module].relative_to(ROOT)}:{s.line} imports {s.target}" for s in ALL_SITES
                 if s.target == "rammer.backends" or s.target.startswith("rammer.backends.")]
    assert not offenders, f"core/ imports a backend: {offenders}; make it a capability or a plugin hook"
