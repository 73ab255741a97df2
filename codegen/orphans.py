"""Impl code that no op uses any more: warnings, never deletions.

When an op is removed from a backend in ops.yaml, its generated registration goes with it, but
the hand-written impl function stays in the backend's ``impl/`` package (the generator never
touches the user's code). ``find_orphans`` names each such function, one line with its file and
line, so that it can be deleted or listed again on purpose; a module none of whose functions is
used gets one line naming the module and its functions.

A public top-level function of a backend's ``impl/`` package is used when ops.yaml names it for
that backend (an impl or its ``eager`` variant, or a reference function a parity test calls as
``canonical``), or when any impl module of any backend refers to its name (a helper another
impl calls). Modules and functions whose names start with ``_`` are private helpers, never
reported. Files are read with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from . import model as m


@dataclass(frozen=True)
class Orphan:
    path: str  # relative to the repository root
    line: int | None  # None: the whole module
    backend: str
    functions: tuple[str, ...]
    manifest: str = "ops.yaml"  # how the manifest is named in messages

    def __str__(self) -> str:
        if self.line is None:
            return (
                f"{self.path}: no function of this module ({', '.join(self.functions)}) is used "
                f"by an op of backend {self.backend!r} in {self.manifest} or called by another impl "
                "(left in place)"
            )
        return (
            f"{self.path}:{self.line}: {self.functions[0]} is not used by any op of backend "
            f"{self.backend!r} in {self.manifest}, nor called by another impl (left in place)"
        )


def _used_by_manifest(manifest: m.Manifest, backend: m.Backend) -> set[tuple[str, str]]:
    used: set[tuple[str, str]] = set()
    for op, impl in manifest.backend_ops(backend.name):
        used.add((impl.module, impl.function))
        if impl.eager is not None:
            used.add(impl.eager)
        if backend.kind == "reference" and op.tests is not None:
            used.update(op.tests.reference_functions)
    return used


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, UnicodeDecodeError):
        return None  # not ours to judge: only modules ops.yaml names must parse


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` in ``module`` (dotted) names."""
    if not node.level:
        return node.module or ""
    base = module.split(".")[: -node.level]
    return ".".join(base + ([node.module] if node.module else []))


def _references(module: str, tree: ast.Module, known: set[str]) -> set[tuple[str, str]]:
    """(impl module, function) pairs that ``module`` refers to: its own functions it calls by
    name, functions it imports from impl modules, and ``alias.function`` of impl modules it
    imports (``known``: the dotted names of every impl module)."""
    refs = {(module, n.id) for n in ast.walk(tree) if isinstance(n, ast.Name)}
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            for alias in node.names:
                if f"{source}.{alias.name}" in known:  # a module: from . import act
                    aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
                elif source in known:  # a function: from .act import silu_and_mul
                    refs.add((source, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = aliases.get(node.value.id)
            if target is not None:
                refs.add((target, node.attr))
    return refs


def _impl_modules(manifest: m.Manifest, root: Path) -> dict[str, tuple[m.Backend, ast.Module]]:
    """Dotted name -> (backend, syntax tree) of every readable impl module, ``__init__`` included
    (as the package's own name)."""
    modules: dict[str, tuple[m.Backend, ast.Module]] = {}
    for backend in manifest.backends:
        folder = root / backend.path / "impl"
        for path in sorted(folder.glob("*.py")) if folder.is_dir() else ():
            tree = _parse(path)
            if tree is not None:
                package = f"{backend.package}.impl"
                name = package if path.stem == "__init__" else f"{package}.{path.stem}"
                modules[name] = (backend, tree)
    return modules


def find_orphans(manifest: m.Manifest, root: Path) -> list[Orphan]:
    """The orphaned impl functions and modules of every backend of ``manifest`` under ``root``."""
    modules = _impl_modules(manifest, root)
    referred: set[tuple[str, str]] = set()
    for name, (backend, tree) in modules.items():
        # a package __init__ resolves relative imports from the package itself
        init = name == f"{backend.package}.impl"
        referred |= _references(f"{name}.__init__" if init else name, tree, set(modules))
    orphans: list[Orphan] = []
    for name, (backend, tree) in modules.items():
        stem = name.rsplit(".", 1)[-1]
        if name == f"{backend.package}.impl" or stem.startswith("_"):
            continue  # the package itself, or a private helper module
        used = _used_by_manifest(manifest, backend)
        functions = [
            node
            for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not node.name.startswith("_")
        ]
        unused = [
            fn
            for fn in functions
            if (stem, fn.name) not in used and (name, fn.name) not in referred
        ]
        rel = f"{backend.path}/impl/{stem}.py"
        if unused and len(unused) == len(functions):
            names = tuple(fn.name for fn in unused)
            orphans.append(Orphan(rel, None, backend.name, names, manifest.file))
        else:
            orphans += [
                Orphan(rel, fn.lineno, backend.name, (fn.name,), manifest.file) for fn in unused
            ]
    return orphans
