"""The package's import graph: no circle between its modules, and no import from a lower layer
to a higher one (imports inside functions count; imports only for type checking do not); and
the dispatch's way in: a module outside it imports ``vllm_fl.dispatch``, never its sub-modules.

The layers, lowest first: a module may import its own layer and those below it. The dispatch
is a runtime that imports no backend and no model-level module; backends sit above the
model-level pieces they use (attention, functions); the vLLM integration above those.
"""

from __future__ import annotations

import ast
from pathlib import Path

import vllm_fl

ROOT = Path(vllm_fl.__file__).parent
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("vllm_fl.compat", "vllm_fl.kernels"),
    ("vllm_fl.dispatch",),
    ("vllm_fl.ops", "vllm_fl.reload"),
    ("vllm_fl.functions", "vllm_fl.gdn"),
    ("vllm_fl.attention",),
    ("vllm_fl.backends",),
    ("vllm_fl.distributed",),
    (
        "vllm_fl.platform",
        "vllm_fl.moe",
        "vllm_fl.grouped_routing",
        "vllm_fl.mamba",
        "vllm_fl.linear",
    ),
    ("vllm_fl.quant",),
    ("vllm_fl.registration",),
    ("vllm_fl.testing",),
    ("vllm_fl.verify", "vllm_fl.coverage"),
    ("vllm_fl.worker", "vllm_fl.cli"),
    ("vllm_fl",),
)


def _module_name(path: Path) -> str:
    parts = ["vllm_fl", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, known: set[str], type_checking: bool = False) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):  # `if TYPE_CHECKING:` blocks, unless asked for
        if (
            not type_checking
            and isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test)
        ):
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


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    known = set(paths)
    graph = {name: _imports(path, name, known) for name, path in paths.items()}
    # Importing a module imports its packages first: an edge to an enclosing package (a
    # re-export, `from vllm_fl import compat`) is not a dependency of the module on it.
    return {name: {t for t in deps if not name.startswith(t + ".")} for name, deps in graph.items()}


def _layer(module: str) -> int:
    best, layer = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, layer = len(prefix), index
    return layer


def test_no_import_circle_in_the_package():
    graph = _graph()
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


def test_every_module_has_a_layer():
    assert [name for name in sorted(_graph()) if _layer(name) < 0] == []


def test_no_import_runs_up_a_layer():
    upward = sorted(
        f"{name} -> {dep}"
        for name, deps in _graph().items()
        for dep in deps
        if _layer(dep) > _layer(name)
    )
    assert upward == [], "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_the_dispatch_imports_nothing_of_the_plugin_outside_it():
    outside = sorted(
        f"{name} -> {dep}"
        for name, deps in _graph().items()
        if name.startswith("vllm_fl.dispatch")
        for dep in deps
        if not dep.startswith("vllm_fl.dispatch")
    )
    assert outside == []


def test_outside_the_dispatch_only_its_package_is_imported():
    """``vllm_fl.dispatch`` re-exports what the rest of the plugin, the benchmarks and the
    generated ``register_ops.py`` files need; its sub-modules are its internals, imported by no
    module outside it (imports inside functions and for type checking count)."""
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    internals = {name for name in paths if name.startswith("vllm_fl.dispatch.")}
    paths |= {
        ".".join(("benchmarks", *p.relative_to(BENCHMARKS).with_suffix("").parts)): p
        for p in BENCHMARKS.rglob("*.py")
    }
    inward = sorted(
        f"{name} -> {dep}"
        for name, path in paths.items()
        if name != "vllm_fl.dispatch" and not name.startswith("vllm_fl.dispatch.")
        for dep in _imports(path, name, internals, type_checking=True)
    )
    assert inward == [], "imports of the dispatch's sub-modules; import vllm_fl.dispatch:\n" + (
        "\n".join(inward)
    )


def test_no_code_is_compiled_from_strings():
    """What runs is what the generator wrote and a reader can open: no module of the plugin
    calls ``exec``, ``eval`` or the builtin ``compile`` (the dispatch trampolines are generated,
    ``vllm_fl/dispatch/trampolines.py``)."""
    found = sorted(
        f"{path.relative_to(ROOT.parent)}:{node.lineno}: {node.func.id}(...)"
        for path in ROOT.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("exec", "eval", "compile")
    )
    assert found == []


def test_the_generated_trampolines_import_nothing_of_the_plugin():
    """``vllm_fl.dispatch.trampolines`` is plain code over closure cells: it imports only
    ``typing`` and ``torch.compiler`` (the runtime imports it lazily, so importing the dispatch
    still imports no torch)."""
    path = ROOT / "dispatch" / "trampolines.py"
    imported = {
        alias.name if isinstance(node, ast.Import) else node.module
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert imported == {"typing", "torch.compiler"}
