"""FileManager: everything is rendered into memory first, then written only where it changed.

A file is added once (adding the same path twice is a bug in the generator or a manifest whose
outputs collide); ``plan()`` compares with the disk; ``write()`` commits the changes.

The generator owns some files outright (it rewrites and deletes them) and only scaffolds others
(impl stubs, package ``__init__`` files, the README table region), which then belong to the user.
The owned ones are listed in a record file (``RECORD``), written by the generator itself: a file
is deleted only when the record lists it and the manifest no longer produces it — never because
of what its text says.

A generation is committed so that an interrupted one is detected and repaired by the next run:

1. every new content goes to a temporary file ``.NAME.xxxxxxxx.tmp`` next to its target;
2. the record is widened to the old and the new owned files (so whatever the next steps create
   is known to be the generator's);
3. the temporary files are renamed over their targets, stale owned files are deleted;
4. the record is narrowed to the new owned files: the commit point.

Killed anywhere in between, the tree differs from what the manifest renders (``--check`` fails
and names the files) and may hold orphan temporary files (``--check`` names them; a rerun
deletes them and rewrites whatever is stale).
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import CodegenError
from .render import MARKER

#: the record of the files the generator owns, relative to the root
RECORD = ".codegen-outputs"
_RECORD_HEAD = (
    f"# {MARKER} by `make codegen`: the files it owns, one per line. It deletes one of them\n"
    "# when ops.yaml stops producing it, and never deletes a file this list does not name.\n"
)
#: what ``tempfile.mkstemp(prefix=".NAME.", suffix=".tmp")`` makes of a target NAME
_TEMP = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp\Z")


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
    def __init__(self, root: Path, may_own: Callable[[str], bool] = lambda path: True):
        """``may_own(path)``: whether the generator could ever own ``path`` (the record is
        checked against it, so a hand-edited record cannot make the generator delete, say,
        ops.yaml)."""
        self.root = root
        self.may_own = may_own
        self._files: dict[str, str | None] = {}
        self._owned: set[str] = set()
        self._recorded: list[str] | None = None

    def add(self, path: str, text: str, owned: bool = True) -> None:
        if path in self._files or path == RECORD:
            raise CodegenError(
                path,
                None,
                "two outputs of the manifest map to this file",
                "distinct backend packages, impl modules and vLLM layer modules",
            )
        self._files[path] = text
        if owned:
            self._owned.add(path)

    def override(self, path: str, text: str) -> None:
        """Replace what the generator produced for ``path`` (vendor scaffolding's own files)."""
        self._files[path] = text

    def __contains__(self, path: str) -> bool:
        return path in self._files

    def __len__(self) -> int:
        return len(self._files)

    # -- the record ----------------------------------------------------------------------------

    def recorded(self) -> list[str]:
        """The owned files of the last generation, as its record lists them (checked)."""
        if self._recorded is None:
            self._recorded = self._read_record()
        return self._recorded

    def _read_record(self) -> list[str]:
        target = self.root / RECORD
        if not target.exists():
            return []
        paths = []
        text = target.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            pure = PurePosixPath(line)
            if (
                pure.is_absolute()
                or ".." in pure.parts
                or str(pure) != line
                or not self.may_own(line)
            ):
                raise CodegenError(
                    RECORD,
                    number,
                    f"lists {line[:200]!r}, which the generator never writes",
                    f"only generated files; delete {RECORD} and run `make codegen` to rebuild it",
                )
            paths.append(line)
        return paths

    def _settle(self) -> None:
        """Add the record and the deletions of owned files the manifest no longer produces."""
        if RECORD in self._files:
            return
        for path in self.recorded():
            if path not in self._files and (self.root / path).is_file():
                self._files[path] = None
        self._files[RECORD] = _record_text(self._owned)

    # -- plan and write ------------------------------------------------------------------------

    def plan(self) -> list[Change]:
        self._settle()
        changes = []
        for path in sorted(self._files):
            new = self._files[path]
            target = self._target(path)
            if not target.exists():
                if new is not None:
                    changes.append(Change(path, None, new))
                continue
            data = target.read_bytes()  # compared as bytes: a stray byte is a change, no error
            if new is None or data != new.encode("utf-8"):
                changes.append(Change(path, data.decode("utf-8", errors="replace"), new))
        return changes

    def orphans(self) -> list[str]:
        """Temporary files an interrupted generation left next to the files it writes."""
        self._settle()
        by_dir: dict[Path, set[str]] = {}
        for path in set(self._files) | set(self.recorded()):
            pure = PurePosixPath(path)
            by_dir.setdefault(self.root / pure.parent, set()).add(pure.name)
        found = []
        for folder, names in by_dir.items():
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                match = _TEMP.match(entry.name)
                if match and match.group("name") in names and entry.is_file():
                    found.append(str(entry.relative_to(self.root)))
        return sorted(found)

    def write(self, changes: list[Change]) -> list[str]:
        """Commit ``changes`` as described in the module docstring; returns the orphan
        temporary files of an earlier interrupted run that it deleted."""
        orphans = self.orphans()
        for orphan in orphans:
            (self.root / orphan).unlink(missing_ok=True)
        record = next((c for c in changes if c.path == RECORD), None)
        others = [c for c in changes if c.path != RECORD]
        staged = self._stage([c for c in others if c.new is not None])
        if others:
            widened = set(self.recorded()) | self._owned
            self._replace(self._stage_one(RECORD, _record_text(widened)))
        for tmp, target in staged:
            os.replace(tmp, target)
        for change in others:
            if change.new is None:
                self._target(change.path).unlink(missing_ok=True)
        if record is not None or others:
            self._replace(self._stage_one(RECORD, self._files[RECORD] or ""))
        return orphans

    def _target(self, path: str) -> Path:
        """``root/path``, refused when a symbolic link would take it outside the root."""
        target = self.root / path
        root = self.root.resolve()
        if not target.parent.resolve().is_relative_to(root):
            raise CodegenError(
                path,
                None,
                f"the folder resolves to {target.parent.resolve()}, outside {root}",
                "generated files inside the repository (no symbolic link leading out)",
            )
        return target

    def _stage(self, changes: list[Change]) -> list[tuple[str, Path]]:
        """Write every new content to a temporary file next to its target; on any failure
        (disk full, permissions) remove them all, so no target has changed."""
        staged: list[tuple[str, Path]] = []
        try:
            for change in changes:
                assert change.new is not None
                staged.append(self._stage_one(change.path, change.new))
        except BaseException:
            for tmp, _ in staged:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            raise
        return staged

    def _stage_one(self, path: str, text: str) -> tuple[str, Path]:
        target = self._target(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
            os.chmod(tmp, mode)
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp, target

    @staticmethod
    def _replace(staged: tuple[str, Path]) -> None:
        os.replace(*staged)


def _record_text(paths: set[str]) -> str:
    return _RECORD_HEAD + "".join(f"{path}\n" for path in sorted(paths))
