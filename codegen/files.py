"""FileManager: everything is rendered into memory first, then written only where it changed.

A file is added once (adding the same path twice is a bug in the generator); ``plan()`` compares
with the disk; ``write()`` replaces each changed file atomically (temp file + rename), after all
rendering and validation succeeded, so a failure never leaves a half-written tree.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from codegen.errors import CodegenError


@dataclass(frozen=True)
class Change:
    path: str
    old: str | None  # None: the file does not exist yet
    new: str | None  # None: the file is deleted

    @property
    def verb(self) -> str:
        if self.old is None:
            return "created"
        return "deleted" if self.new is None else "updated"

    def diff(self) -> str:
        old = [] if self.old is None else self.old.splitlines(keepends=True)
        new = [] if self.new is None else self.new.splitlines(keepends=True)
        lines = difflib.unified_diff(old, new, f"a/{self.path}", f"b/{self.path}")
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


class FileManager:
    def __init__(self, root: Path):
        self.root = root
        self._files: dict[str, str | None] = {}

    def add(self, path: str, text: str) -> None:
        if path in self._files:
            raise CodegenError(
                path,
                None,
                "two outputs of the manifest map to this file",
                "distinct backend packages, impl modules and vLLM layer modules",
            )
        self._files[path] = text

    def override(self, path: str, text: str) -> None:
        """Replace what the generator produced for ``path`` (vendor scaffolding's own files)."""
        self._files[path] = text

    def delete(self, path: str) -> None:
        if path in self._files:
            raise AssertionError(f"generator bug: {path} both produced and deleted")
        self._files[path] = None

    def __contains__(self, path: str) -> bool:
        return path in self._files

    def __len__(self) -> int:
        return len(self._files)

    def plan(self) -> list[Change]:
        changes = []
        for path in sorted(self._files):
            new = self._files[path]
            target = self.root / path
            old = target.read_text() if target.exists() else None
            if old != new:
                changes.append(Change(path, old, new))
        return changes

    def write(self, changes: list[Change]) -> None:
        """Write every change: all new contents go to temporary files first, then each is renamed
        over its target, so a failure while writing (disk full, permissions) leaves no target
        half-written and, before the renames, none changed at all."""
        staged: list[tuple[str, Path]] = []
        try:
            for change in changes:
                if change.new is None:
                    continue
                target = self.root / change.path
                target.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(
                    dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
                )
                staged.append((tmp, target))
                with os.fdopen(fd, "w") as handle:
                    handle.write(change.new)
                mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
                os.chmod(tmp, mode)
        except BaseException:
            for tmp, _ in staged:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            raise
        for tmp, target in staged:
            os.replace(tmp, target)
        for change in changes:
            if change.new is None:
                (self.root / change.path).unlink()
