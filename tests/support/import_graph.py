"""The repository's import graph, read from the sources with ast (nothing is imported, no side effects).

`python tests/support/import_graph.py [CHECKOUT]` prints lines per package, modules over 250 lines, import circles and arrows that
run against LAYERS; tests/unit/test_import_layering.py fails on any circle or upward arrow. Every import counts:
function-local ones (a circle kept alive by a late import is still a circle), those under `if TYPE_CHECKING:`
(the design still leans on the other module), and the packages an import runs on the way (`import a.b.c` runs
a/__init__ and a/b/__init__; counted only from outside that package).
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("fedmpi", "jobs", "tools", "bench", "tests")

# Who may import whom: a module of a group may import its own group and the groups listed for it, nothing else of
# this repository. fedmpi is the library (analysis over logs included); jobs launches it (Slurm, mpirun); tools are
# user commands over it (export, evaluate, packers); bench measures it (launching through jobs); tests test all.
LAYERS = {
    "fedmpi": (),
    "jobs": ("fedmpi",),
    "tools": ("fedmpi",),
    "bench": ("fedmpi", "jobs"),
    "tests": ("fedmpi", "jobs", "tools", "bench"),
}
# Inside fedmpi: the neutral core and what it builds on know neither setting (silo parties, cross-device clients)
# nor FV; the rules and the aggregators know no roles and no config (the config reads their registries to check
# a run, core/build.py makes them); the config describes and checks, building nothing; the store knows nothing of
# moving a run between layouts (relayout/ reads and writes checkpoints through it). The two settings are
# independent: what both need (evaluation/, core/) sits below them, so a newcomer reads one without the other.
SETTINGS = ("fedmpi.silo", "fedmpi.crossdevice", "fedmpi.fv")
NOT_IMPORTED_BY = {
    "fedmpi.silo": ("fedmpi.crossdevice",),
    "fedmpi.crossdevice": ("fedmpi.silo",),
    "fedmpi.core": SETTINGS,
    "fedmpi.evaluation": SETTINGS,
    "fedmpi.aggregation": (*SETTINGS, "fedmpi.core", "fedmpi.config"),
    "fedmpi.algorithms": (*SETTINGS, "fedmpi.core", "fedmpi.config"),
    "fedmpi.config": (*SETTINGS, "fedmpi.core", "fedmpi.models", "fedmpi.data", "fedmpi.store", "fedmpi.comm"),
    "fedmpi.store": (*SETTINGS, "fedmpi.core", "fedmpi.relayout"),
}
# The MPI floor imports nothing of fedmpi but itself and the error classes at the bottom.
ONLY_IMPORTS = {
    "fedmpi.comm": ("fedmpi.comm", "fedmpi.errors"),
}
# The rules do arithmetic; the roles communicate (the silo hands a part the collectives it needs).
ARITHMETIC_ONLY = {"fedmpi.algorithms": ("torch.distributed", "mpi4py", "fedmpi.comm")}
LONG_MODULE = 250
LONG_FUNCTION = 60
TEST_FOLDERS = ("unit", "mpi", "cluster", "support")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(roots=TOP_LEVEL) -> dict[str, Path]:
    files = {}
    for root in roots:
        folder = ROOT / root
        if folder.is_dir():
            for path in sorted(folder.rglob("*.py")):
                if ".venv" not in path.parts:
                    files[module_name(path)] = path
    return files


def _imports(tree: ast.AST):
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _test_module_name(name: str) -> str:
    """The name a test module or helper is imported by: tests.support.mpi_scripts.ckpt_common -> mpi_scripts.ckpt_common."""
    parts = name.split(".")[1:]
    return ".".join(parts[1:] if parts and parts[0] in TEST_FOLDERS else parts)


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """{module: modules of this repository it imports}; `from pkg import mod` counts as importing pkg.mod.

    Tests and their helpers import each other as top-level modules (each folder of tests/ is on sys.path), so
    `import shared_runs` means tests.support.shared_runs."""
    known = set(files)
    test_helpers = {_test_module_name(name): name for name in known if name.startswith("tests.")}

    def local(name: str) -> str | None:
        if name in known:
            return name
        if name in test_helpers:
            return test_helpers[name]
        return None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        targets: set[str] = set()
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = _resolve(node, module, path.name == "__init__.py")
                names = [f"{base}.{alias.name}" if local(f"{base}.{alias.name}") else base for alias in node.names]
            for name in names:
                while name and local(name) is None:
                    name = name.rpartition(".")[0]
                if not name:
                    continue
                targets.add(local(name))
                parent = name.rpartition(".")[0]
                while parent:
                    if local(parent) and not module.startswith(parent + "."):
                        targets.add(local(parent))
                    parent = parent.rpartition(".")[0]
        targets.discard(module)
        graph[module] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def group_of(module: str) -> str:
    return module.split(".", 1)[0]


def upward_arrows(graph: dict[str, set[str]], layers=LAYERS) -> list[tuple[str, str]]:
    """Imports from a group to one it may not import (LAYERS); a package run on the way to one of its modules
    is not listed again."""
    bad = []
    for module, targets in sorted(graph.items()):
        mine = group_of(module)
        for target in sorted(targets):
            if any(other.startswith(target + ".") for other in targets):
                continue
            theirs = group_of(target)
            if theirs != mine and theirs not in layers.get(mine, ()):
                bad.append((module, target))
    return bad


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _arrows_against(graph: dict[str, set[str]], rules: dict, breaks) -> list[tuple[str, str]]:
    """The imports of a module inside a package of `rules` for which breaks(target, the package's entry) holds."""
    bad = []
    for module, targets in sorted(graph.items()):
        for package, entry in rules.items():
            if _inside(module, package):
                bad += [(module, t) for t in sorted(targets) if breaks(t, entry)]
    return bad


def inner_arrows(graph: dict[str, set[str]], rules=None) -> list[tuple[str, str]]:
    """Imports inside fedmpi against NOT_IMPORTED_BY."""
    return _arrows_against(graph, NOT_IMPORTED_BY if rules is None else rules,
                           lambda t, forbidden: any(_inside(t, f) for f in forbidden))


def reaching_out(graph: dict[str, set[str]], rules=None) -> list[tuple[str, str]]:
    """Imports from a package of ONLY_IMPORTS to a module of fedmpi outside what it may import."""
    return _arrows_against(graph, ONLY_IMPORTS if rules is None else rules,
                           lambda t, allowed: _inside(t, "fedmpi") and t != "fedmpi"
                           and not any(_inside(t, a) for a in allowed))


def communicating(files: dict[str, Path], rules=None) -> list[tuple[str, str]]:
    """(module, what) for each import in an arithmetic-only package (ARITHMETIC_ONLY) of a communication library,
    or of a private name (a leading underscore) of another package."""
    bad = []
    for package, banned in (ARITHMETIC_ONLY if rules is None else rules).items():
        for module, path in files.items():
            if not _inside(module, package):
                continue
            for node in _imports(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                bad += [(module, name) for name in names if any(_inside(name, b) for b in banned)]
                if isinstance(node, ast.ImportFrom) and node.level == 0 and not _inside(node.module or "", package):
                    bad += [(module, f"{node.module}.{a.name}") for a in node.names if a.name.startswith("_")]
    return sorted(bad)


def lines_per_package(files: dict[str, Path]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0] or module
        totals[package] += len(path.read_text().splitlines())
    return dict(sorted(totals.items()))


def long_modules(files: dict[str, Path], limit=LONG_MODULE) -> list[tuple[str, int]]:
    sized = ((module, len(path.read_text().splitlines())) for module, path in files.items())
    return sorted(((m, n) for m, n in sized if n > limit), key=lambda item: -item[1])


def long_functions(files: dict[str, Path], limit=LONG_FUNCTION) -> list[tuple[str, int]]:
    """(module.function, lines) of every function or method longer than `limit` lines, its def line to its last."""
    found = []
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append((f"{module}.{node.name}", lines))
    return sorted(found, key=lambda item: -item[1])


def main() -> int:
    global ROOT
    if len(sys.argv) > 1:
        ROOT = Path(sys.argv[1]).resolve()
    files = source_files()
    graph = import_graph(files)
    print("lines per package:")
    for package, lines in lines_per_package(files).items():
        print(f"  {package:32s} {lines:6d}")
    print(f"  {'total':32s} {sum(len(p.read_text().splitlines()) for p in files.values()):6d}")
    print(f"modules over {LONG_MODULE} lines:")
    for module, lines in long_modules(files):
        print(f"  {module:40s} {lines:6d}")
    found = circles(graph)
    print(f"import circles: {len(found)}")
    for component in found:
        print("  " + " <-> ".join(component))
    arrows = upward_arrows(graph) + inner_arrows(graph) + reaching_out(graph)
    print(f"upward arrows: {len(arrows)}")
    for source, target in arrows:
        print(f"  {source} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
