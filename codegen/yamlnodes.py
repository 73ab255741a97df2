"""The manifest's YAML: located nodes from the one hardened reader the dispatch uses for its
settings files (``vllm_fl.dispatch.config.files``), with the manifest's limits, and
:class:`Fields`, through which the loader (``codegen.manifest``) pops keys one by one and rejects
whatever is left over.

Every mapping, key, sequence and scalar keeps its line. The reader bounds the work a hostile file
can cause before composing (anchors and aliases, deep nesting, long scalars, tags other than
YAML's plain ones) and refuses duplicate and merge keys and numbers that are not finite or do not
fit in 64 bits; each refusal is a :class:`~codegen.errors.ManifestError` naming the line.
"""

from __future__ import annotations

from vllm_fl.dispatch.config.files import (
    MANIFEST_LIMITS,
    Entry,
    Map,
    Node,
    Scalar,
    Seq,
    YAMLRejected,
    clip,
    describe,
    load_nodes,
)

from .errors import ManifestError

__all__ = ["Entry", "Map", "Node", "Scalar", "Seq", "Fields", "clip", "describe", "load"]


def load(text: str, file: str) -> Node | None:
    """Parse ``text`` into located nodes; ``None`` for an empty document."""
    try:
        return load_nodes(text, file, MANIFEST_LIMITS)
    except YAMLRejected as exc:
        raise ManifestError(exc.file, exc.line, exc.problem, exc.expected) from None


class Fields:
    """Pop the keys of one mapping; :meth:`done` rejects the keys nobody asked for."""

    def __init__(self, node: Map, what: str, file: str, allowed: tuple[str, ...]):
        self.node = node
        self.what = what
        self.file = file
        self.allowed = allowed
        self._left = dict(node.entries)
        for entry in node.entries.values():  # a misspelt key says more than the missing one
            if entry.key not in allowed:
                raise ManifestError(
                    file,
                    entry.key_line,
                    f"unknown key {entry.key!r} in {what}",
                    "one of " + ", ".join(allowed),
                )

    def pop(self, key: str) -> Entry | None:
        assert key in self.allowed, key
        return self._left.pop(key, None)

    def require(self, key: str, expected: str) -> Entry:
        entry = self.pop(key)
        if entry is None:
            raise ManifestError(
                self.file, self.node.line, f"{self.what} has no {key!r}", f"{key}: {expected}"
            )
        return entry

    def done(self) -> None:
        """All keys were read (unknown ones were rejected on construction)."""
        assert not self._left, f"generator bug: {sorted(self._left)} of {self.what} never read"
