"""Checks of what a backend's entry names in its package, before anything is rendered.

- ``probe:`` names a zero-argument callable of the backend package's ``__init__.py``: it must be
  defined there (read with ``ast``, importing nothing);
- a backend whose package does not exist while the previous generation wrote the registrations
  of a package no backend has now is a renamed or misspelt ``package:`` — generating would
  scaffold a new package and leave the old ``impl/`` behind, so it is an error naming both.
"""

from __future__ import annotations

import ast
from pathlib import Path, PurePosixPath

from . import model as m
from .dest import register_ops
from .errors import CodegenError, ManifestError
from .sources import read_text


def check_probes(manifest: m.Manifest, root: Path, only: str | None = None) -> None:
    for backend in manifest.backends:
        if backend.probe is None or (only is not None and backend.name != only):
            continue
        rel = f"{backend.path}/__init__.py"
        path = root / rel
        defined: list[str] = []
        if path.is_file():
            try:
                tree = ast.parse(read_text(path, rel), filename=rel)
            except SyntaxError as exc:
                raise CodegenError(
                    rel, exc.lineno, f"cannot parse: {exc.msg}", "valid Python"
                ) from None
            defined = _top_level_names(tree)
        if backend.probe not in defined:
            functions = ", ".join(defined) or "none"
            raise ManifestError(
                manifest.file,
                backend.line,
                f"probe {backend.probe!r} of backend {backend.name!r} is not defined in {rel} "
                f"(names defined there: {functions})",
                "the name of a zero-argument callable defined in the backend package",
            )


def _top_level_names(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [a.asname or a.name.split(".")[0] for a in node.names]
    return names


def check_renamed_packages(manifest: m.Manifest, root: Path, recorded: list[str]) -> None:
    """A backend package that does not exist, while a package the last generation wrote
    registrations into is no backend's now: a ``package:`` typo or rename."""
    produced = {register_ops.path_of(b) for b in manifest.backends}
    left = [
        path
        for path in recorded
        if PurePosixPath(path).name == register_ops.NAME
        and path not in produced
        and (root / path).parent.joinpath("impl").is_dir()
    ]
    if not left:
        return
    known = sorted(
        str(PurePosixPath(p).parent).replace("/", ".")
        for p in recorded
        if PurePosixPath(p).name == register_ops.NAME
    )
    for backend in manifest.backends:
        if not (root / backend.path / "__init__.py").is_file():
            old = str(PurePosixPath(left[0]).parent).replace("/", ".")
            raise ManifestError(
                manifest.file,
                backend.line,
                f"package {backend.package!r} of backend {backend.name!r} does not exist, and "
                f"package {old!r}, whose impl/ the last generation registered, is no backend's "
                "now (a typo? generating would start an empty package and leave that impl/ "
                "behind)",
                "one of the packages: " + ", ".join(known) + " (or move the folder first)",
            )
