"""The pipeline: load the manifest, check impls, render everything in memory, find stale files."""

from __future__ import annotations

from pathlib import Path

from codegen import emit
from codegen.files import FileManager
from codegen.impls import check_and_scaffold
from codegen.manifest import load_manifest
from codegen.model import Manifest
from codegen.render import MARKER


def manifest_label(manifest_path: Path, root: Path) -> str:
    """How errors name the manifest: relative to the root when inside it (``ops.yaml``)."""
    try:
        return str(manifest_path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(manifest_path)


def read_manifest(manifest_path: Path, root: Path) -> Manifest:
    return load_manifest(manifest_path.read_text(), manifest_label(manifest_path, root))


def build(manifest: Manifest, root: Path) -> FileManager:
    """Render every output of ``manifest`` for the tree at ``root``; raises on any error."""
    files = FileManager(root)
    for path, text in check_and_scaffold(manifest, root).items():
        files.add(path, text)
    for path, text in emit.emit_all(manifest, root).items():
        files.add(path, text)
    for path in stale_generated(root, manifest):
        if path not in files:
            files.delete(path)
    return files


def _is_generated(path: Path) -> bool:
    try:
        with path.open() as handle:
            return MARKER in handle.readline()
    except (OSError, UnicodeDecodeError):
        return False


def stale_generated(root: Path, manifest: Manifest) -> list[str]:
    """Generated files (by their header) in generated locations; the caller drops current ones."""
    candidates: list[Path] = []
    for folder in (emit.OOT_DIR, emit.TESTS_DIR):
        candidates += sorted((root / folder).glob("*.py"))
    backends_dir = root / "vllm_fl/dispatch/backends"
    if backends_dir.exists():
        candidates += sorted(backends_dir.rglob("register_ops.py"))
    return [str(p.relative_to(root)) for p in candidates if _is_generated(p)]
