"""Typed readers of located YAML nodes: each returns a checked value or raises a ManifestError
naming the file, the node's line, what was found and what was expected.

Every section reader of the manifest builds on one :class:`Reader`, which carries the file name
so that no section has to thread it through its own functions.
"""

from __future__ import annotations

import keyword
import re

from ..errors import ManifestError
from ..signature import SignatureError, Type
from ..yamlnodes import Entry, Fields, Map, Node, Scalar, Seq, describe

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
IMPL_REF = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)\Z")
TYPE_EXPECTED = "a type (Tensor, int, float, bool, str, optionally with ?)"


def is_identifier(name: str) -> bool:
    """A Python identifier that is not a keyword (so it can name a function, module, argument)."""
    return bool(IDENT.match(name)) and not keyword.iskeyword(name)


def is_dotted(name: str) -> bool:
    """Dot-separated identifiers, like ``package.module``."""
    return all(is_identifier(part) for part in name.split("."))


class Reader:
    """Reads nodes of one manifest file; every error names that file and the node's line."""

    def __init__(self, file: str):
        self.file = file

    def error(self, line: int | None, problem: str, expected: str | None) -> ManifestError:
        return ManifestError(self.file, line, problem, expected)

    def fields(self, node: Node, what: str, expected: str, allowed: tuple[str, ...]) -> Fields:
        """The keys of the mapping ``node``, to be popped one by one (unknown keys refused)."""
        return Fields(self.map(node, what, expected), what, self.file, allowed)

    def map(self, node: Node, what: str, expected: str = "a mapping") -> Map:
        if not isinstance(node, Map):
            raise self.error(node.line, f"{what} is {describe(node)}", expected)
        return node

    def seq(self, node: Node, what: str, expected: str) -> Seq:
        if not isinstance(node, Seq):
            raise self.error(node.line, f"{what} is {describe(node)}", expected)
        return node

    def scalar(self, node: Node, what: str, types: tuple[type, ...], expected: str) -> object:
        if not isinstance(node, Scalar) or not isinstance(node.value, types):
            raise self.error(node.line, f"{what} is {describe(node)}", expected)
        if bool not in types and isinstance(node.value, bool):
            raise self.error(node.line, f"{what} is {describe(node)}", expected)
        return node.value

    def string(self, node: Node, what: str, expected: str = "a string") -> str:
        value = self.scalar(node, what, (str,), expected)
        assert isinstance(value, str)
        if not value.strip():
            raise self.error(node.line, f"{what} is empty", expected)
        return value

    def ident(self, node: Node, what: str) -> str:
        expected = "an identifier matching [A-Za-z_][A-Za-z0-9_]* (no Python keyword)"
        value = self.scalar(node, what, (str,), expected)
        if not is_identifier(str(value)):
            raise self.error(node.line, f"{what} {value!r} is not an identifier", expected)
        return str(value)

    def key_ident(self, entry: Entry, what: str) -> str:
        if not is_identifier(entry.key):
            raise self.error(
                entry.key_line,
                f"{what} {entry.key!r} is not an identifier",
                "an identifier matching [A-Za-z_][A-Za-z0-9_]*",
            )
        return entry.key

    def dotted(self, node: Node, what: str) -> str:
        expected = "a dotted Python name like package.module"
        value = self.scalar(node, what, (str,), expected)
        if not is_dotted(str(value)):
            raise self.error(node.line, f"{what} {value!r} is not a dotted Python name", expected)
        return str(value)

    def import_path(self, node: Node, what: str, example: str) -> tuple[str, str]:
        """A dotted ``module.name`` (a vLLM class or function): (module, name)."""
        path = self.dotted(node, what)
        if "." not in path:
            raise self.error(
                node.line, f"{what} {path!r} has no module", f"an import path like {example}"
            )
        module, name = path.rsplit(".", 1)
        return module, name

    def fn_ref(self, node: Node, what: str, expected: str) -> tuple[str, str]:
        """``module.function`` under a backend's ``impl/`` package: (module, function)."""
        ref = self.scalar(node, what, (str,), expected)
        match = IMPL_REF.match(str(ref))
        if match is None or not is_dotted(str(ref)):
            raise self.error(node.line, f"{what} is {str(ref)!r}", expected)
        return match.group(1), match.group(2)

    def integer(self, node: Node, what: str) -> int:
        value = self.scalar(node, what, (int,), "an integer")
        assert isinstance(value, int)
        return value

    def number(self, node: Node, what: str) -> float:
        value = self.scalar(node, what, (int, float), "a number")
        assert isinstance(value, (int, float))
        if value < 0 or value != value:
            raise self.error(node.line, f"{what} is {value!r}", "a non-negative number")
        return float(value)

    def boolean(self, node: Node, what: str) -> bool:
        value = self.scalar(node, what, (bool,), "true or false")
        assert isinstance(value, bool)
        return value

    def literal(self, node: Node, what: str) -> object:
        return self.scalar(
            node,
            what,
            (str, int, float, bool, type(None)),
            "a string, number, boolean, null or $dtype",
        )

    def modules(self, node: Node, what: str) -> tuple[str, ...]:
        items = self.seq(node, what, "a list of module names like [flag_gems]")
        return tuple(self.dotted(item, f"module in {what}") for item in items.items)

    def type_(self, node: Node, what: str) -> Type:
        text = self.string(node, what, TYPE_EXPECTED)
        try:
            return Type.parse(text)
        except SignatureError as exc:
            raise self.error(node.line, f"{what} {text!r}: {exc}", TYPE_EXPECTED) from None
