"""The pipeline: load the manifest, check names and output paths, check impls, render everything
in memory; the FileManager finds stale files from its record of what it wrote before."""

from __future__ import annotations

from pathlib import Path

from . import backend_checks, dest, layout, names, texts
from .dest import docs
from .files import FileManager
from .impls import check_and_scaffold
from .manifest import load_manifest
from .model import Manifest
from .sources import read_text


def manifest_label(manifest_path: Path, root: Path) -> str:
    """How errors name the manifest: relative to the root when inside it (``ops.yaml``)."""
    try:
        return str(manifest_path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(manifest_path)


def read_manifest(manifest_path: Path, root: Path) -> Manifest:
    label = manifest_label(manifest_path, root)
    return load_manifest(read_text(manifest_path, label), label)


def build(manifest: Manifest, root: Path) -> FileManager:
    """Render every output of ``manifest`` for the tree at ``root``; raises on any error."""
    names.check(manifest)
    texts.check(manifest)
    layout.check(manifest, root)
    files = FileManager(root, may_own=layout.may_own)
    backend_checks.check_probes(manifest, root)
    backend_checks.check_renamed_packages(manifest, root, files.recorded())
    for path, text in check_and_scaffold(manifest, root).items():
        files.add(path, text, owned=False)  # stubs and package inits: the user's from now on
    for path, text in dest.emit_all(manifest, root).items():
        files.add(path, text, owned=path != docs.README)  # the README is only partly generated
    return files
