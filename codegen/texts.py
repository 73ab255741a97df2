"""Manifest text that generated code carries verbatim: docs and signatures, inside docstrings.

The ``pystr`` filter escapes backslashes and triple quotes; what no escaping in a docstring can
carry is refused here, with the line: control characters (NUL makes a module unparsable), lone
surrogates (not encodable as UTF-8, so the file could not even be written) and other
non-printable characters such as U+2028.
"""

from __future__ import annotations

from . import model as m
from .errors import ManifestError

#: whitespace a doc may contain (the loader folds it when wrapping)
_ALLOWED = frozenset("\n\t")


def check(manifest: m.Manifest) -> None:
    for op in manifest.ops:
        _printable(manifest, op.doc, f"doc of op {op.name!r}", op.line)
        _printable(manifest, str(op.schema), f"signature of op {op.name!r}", op.line)


def _printable(manifest: m.Manifest, text: str, what: str, line: int) -> None:
    for index, char in enumerate(text):
        if not char.isprintable() and char not in _ALLOWED:
            raise ManifestError(
                manifest.file,
                line,
                f"{what} contains the non-printable character U+{ord(char):04X} at offset {index}",
                "printable text (spaces, tabs and line breaks are fine)",
            )
