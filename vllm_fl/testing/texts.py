"""Real English text that nobody here wrote, shipped with CPython: passages to measure a real
model's perplexity on and to build a cloze task from.

- ``zen``: the Zen of Python, the text ``import this`` prints. The module ``this`` holds it
  rot13-encoded in its variable ``s``; it is read from the module's source (``ast``) rather
  than imported, because importing ``this`` prints it.
- ``history`` and ``psf-license``: from the PSF license file, ``LICENSE.txt`` in the standard
  library's folder (where ``license()`` reads it too): the opening paragraphs of its history of
  the software, and clauses 3 to 8 of the PSF License Agreement. Both are the same from one
  Python release to the next (clause 2 lists the copyright years, and the history goes on
  with a table of releases; neither is taken).
- ``python-docs``: chapters of the Python language reference (the execution model, exceptions,
  assignment, the import system) as ``pydoc_data.topics`` ships them for ``help()``: about 7000
  tokens of prose, so that a perplexity has enough tokens to tell a 1% change from noise. Its
  wording may differ between Python releases: compare runs of one Python only.

A Python without its license file (Debian's python3 keeps it elsewhere) raises
`TextUnavailable`, naming where it looked.
"""

from __future__ import annotations

import ast
import codecs
import importlib.util
import sysconfig
from pathlib import Path

#: the passages' names, in the order `passages` returns them
NAMES = ("zen", "history", "psf-license", "python-docs")
#: chapters of the Python language reference that CPython ships as pydoc's topics
DOC_TOPICS = ("execmodel", "exceptions", "assignment", "import")


class TextUnavailable(RuntimeError):
    """A passage's source is not part of this Python installation."""


def zen_of_python() -> str:
    """The Zen of Python, decoded from the source of the module ``this`` without running it."""
    spec = importlib.util.find_spec("this")
    if spec is None or spec.origin is None:
        raise TextUnavailable("the standard library's module `this` is missing")
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["s"]:
            return codecs.decode(ast.literal_eval(node.value), "rot13").strip()
    raise TextUnavailable(f"{spec.origin} has no variable `s` (the encoded Zen of Python)")


def license_candidates() -> list[Path]:
    """Where CPython's license file may be: the standard library's folder and its parent (the
    places `site` gives ``license()``)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [stdlib / "LICENSE.txt", stdlib.parent / "LICENSE.txt", stdlib / "LICENSE"]


def license_text() -> str:
    """The text of CPython's license file."""
    for path in license_candidates():
        if path.is_file():
            return path.read_text(encoding="utf-8")
    looked = ", ".join(str(p) for p in license_candidates())
    raise TextUnavailable(
        f"CPython's license file is not in this installation (looked at {looked})"
    )


def between(text: str, start: str, end: str) -> str:
    """The part of `text` from the first `start` (included) to the next `end` (excluded),
    stripped; TextUnavailable when either is missing."""
    first = text.find(start)
    last = text.find(end, first + 1) if first >= 0 else -1
    if first < 0 or last < 0:
        raise TextUnavailable(f"the license file has no passage from {start!r} to {end!r}")
    return text[first:last].strip()


def passages() -> dict[str, str]:
    """The passages by name (`NAMES`)."""
    license = license_text()
    return {
        "zen": zen_of_python(),
        "history": between(license, "Python was created", "\n\n    Release"),
        "psf-license": between(license, "3. In the event Licensee", "\n\n\nBEOPEN.COM"),
        "python-docs": language_reference(),
    }


def language_reference() -> str:
    """Chapters of the Python language reference (`DOC_TOPICS`), as CPython ships them for
    ``help()`` in ``pydoc_data.topics``: several thousand tokens of English prose."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:
        raise TextUnavailable(f"the standard library's pydoc_data is missing ({exc})") from None
    missing = [name for name in DOC_TOPICS if name not in topics]
    if missing:
        raise TextUnavailable(f"pydoc_data.topics has no topic {', '.join(missing)}")
    return "\n\n".join(topics[name].strip() for name in DOC_TOPICS)
