"""The dispatch's modules import each other without a circle (imports inside functions count;
imports only for type checking do not)."""

from __future__ import annotations

import ast
from pathlib import Path

import vllm_fl.dispatch

ROOT = Path(vllm_fl.dispatch.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["vllm_fl", "dispatch", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):  # `if TYPE_CHECKING:` blocks
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


def test_no_import_circle_in_the_dispatch():
    paths = {
        _module_name(p): p
        for p in ROOT.rglob("*.py")
        if "impl" not in p.relative_to(ROOT).parts  # hand-written kernels, not the dispatch
    }
    known = set(paths)
    graph = {name: _imports(path, name, known) for name, path in paths.items()}
    # A package's __init__ re-exporting its modules is not a dependency of those modules.
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
