"""YAML with a line number on every mapping, key, sequence and scalar.

The manifest is composed (not constructed) with PyYAML so that each node keeps its position;
scalars are then typed by PyYAML's safe constructor. The loader (``codegen.manifest``) reads these
nodes through :class:`Fields`, which pops keys one by one and rejects whatever is left over.

Before composing, one streaming pass over the parser's events bounds the work a hostile file can
cause: anchors and aliases (alias bombs, cycles), nesting deeper than ``MAX_DEPTH`` (the composer
recurses, in C, and overflows the stack), scalars longer than ``MAX_SCALAR`` and tags other than
YAML's plain ones are errors naming the line. Numbers must be finite and fit in 64 bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Union

import yaml

from codegen.errors import ManifestError

try:  # libyaml is much faster; fall back to the pure-Python composer
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader

_MERGE_TAG = "tag:yaml.org,2002:merge"
_CORE = "tag:yaml.org,2002:"
#: explicit tags a manifest may carry: YAML's plain types ("!" forces a string)
_ALLOWED_TAGS = frozenset(
    ["!"] + [_CORE + t for t in ("str", "int", "float", "bool", "null", "map", "seq")]
)
#: ops.yaml nests about 9 levels; 32 leaves room and keeps every recursion shallow
MAX_DEPTH = 32
#: the longest scalar (a doc paragraph is far shorter); bounds memory and error messages
MAX_SCALAR = 64 * 1024
#: integers are priorities, sizes and literals: a 64-bit range is plenty
MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class Scalar:
    value: object  # str, int, float, bool or None, typed by YAML's safe rules
    line: int
    end_line: int  # the last line of the scalar's text

    def describe(self) -> str:
        return describe(self)


@dataclass(frozen=True)
class Seq:
    items: tuple["Node", ...]
    line: int
    flow: bool
    end_line: int  # the last line holding part of the list


@dataclass(frozen=True)
class Entry:
    key: str
    key_line: int
    value: "Node"


@dataclass(frozen=True)
class Map:
    entries: dict[str, Entry] = field(hash=False)
    line: int
    end_line: int  # the last line holding part of the mapping (comments after it excluded)
    flow: bool
    column: int  # the column of its keys


Node = Union[Scalar, Seq, Map]


def describe(node: Node) -> str:
    """A short name of a node's type for error messages ("a string 'x'", "a mapping", ...)."""
    if isinstance(node, Map):
        return "a mapping"
    if isinstance(node, Seq):
        return "a list"
    value = node.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value!r}"
    return f"the string {clip(str(value))!r}"


def clip(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters for an error message (a hostile value can be huge)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load(text: str, file: str) -> Node | None:
    """Parse ``text`` into located nodes; ``None`` for an empty document."""
    try:
        _check_events(text, file)
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(filter(None, [exc.context, exc.problem]))
        raise ManifestError(file, line, f"invalid YAML: {problem}", "well-formed YAML") from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        problem = f"invalid YAML: character {exc.character!r} is not allowed"
        raise ManifestError(file, line, problem, "printable text") from None
    except yaml.YAMLError as exc:
        raise ManifestError(file, None, f"invalid YAML: {exc}", "well-formed YAML") from None
    if root is None:
        return None
    return _convert(root, file, yaml.constructor.SafeConstructor())


def _check_events(text: str, file: str) -> None:
    """Reject what would make composing unbounded or unsafe, in one pass over parser events."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            raise ManifestError(
                file,
                line,
                f"alias *{clip(str(event.anchor))} is not supported",
                "every value written out (no anchors or aliases)",
            )
        if not isinstance(event, yaml.NodeEvent):
            if isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            continue
        if event.anchor is not None:
            raise ManifestError(
                file,
                line,
                f"anchor &{clip(str(event.anchor))} is not supported",
                "every value written out (no anchors or aliases)",
            )
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _ALLOWED_TAGS:
            raise ManifestError(
                file,
                line,
                f"unknown tag {clip(tag.replace(_CORE, '!!'))}",
                "plain YAML values without tags",
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ManifestError(
                    file, line, f"nesting deeper than {MAX_DEPTH} levels", "a shallower manifest"
                )
        elif isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_SCALAR:
            raise ManifestError(
                file,
                line,
                f"a scalar of {len(event.value)} characters",
                f"at most {MAX_SCALAR} characters",
            )


def _convert(node: yaml.Node, file: str, constructor: yaml.constructor.SafeConstructor) -> Node:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode):
        try:
            value = constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise ManifestError(file, line, f"invalid scalar: {problem}", "a plain value") from None
        except (ValueError, OverflowError):  # e.g. an integer of more than 4300 digits
            raise ManifestError(
                file,
                line,
                f"number {clip(node.value)} is out of range",
                f"an integer within +-{MAX_INT} or a finite number",
            ) from None
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ManifestError(
                file,
                line,
                f"integer {clip(node.value)} is out of range",
                f"an integer within +-{MAX_INT}",
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ManifestError(
                file, line, f"number {clip(node.value)} is not finite", "a finite number"
            )
        if not isinstance(value, (str, int, float, bool, type(None))):
            raise ManifestError(
                file,
                line,
                f"unsupported YAML value of type {type(value).__name__}",
                "a string, number, boolean or null",
            )
        return Scalar(value, line, _last_line(node))
    if isinstance(node, yaml.SequenceNode):
        items = tuple(_convert(item, file, constructor) for item in node.value)
        flow = bool(node.flow_style)
        end = _last_line(node) if flow or not items else items[-1].end_line
        return Seq(items, line, flow, end)
    if isinstance(node, yaml.MappingNode):
        entries: dict[str, Entry] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE_TAG:
                raise ManifestError(
                    file, key_line, "merge keys (<<) are not supported", "every key written out"
                )
            key = _convert(key_node, file, constructor)
            if not isinstance(key, Scalar) or not isinstance(key.value, str):
                raise ManifestError(
                    file, key_line, f"mapping key is {describe(key)}", "a string key"
                )
            if key.value in entries:
                first = entries[key.value].key_line
                raise ManifestError(
                    file,
                    key_line,
                    f"duplicate key {key.value!r} (first at line " f"{first})",
                    "each key once",
                )
            entries[key.value] = Entry(key.value, key_line, _convert(value_node, file, constructor))
        flow = bool(node.flow_style)
        if flow or not entries:
            end_line = _last_line(node)
        else:
            end_line = list(entries.values())[-1].value.end_line
        return Map(entries, line, end_line, flow, node.start_mark.column)
    raise ManifestError(file, line, "unsupported YAML node", "a mapping, list or scalar")


def _last_line(node: yaml.Node) -> int:
    """1-based last line of a node whose end mark is exact (scalars, flow collections)."""
    end = node.end_mark
    if end.column == 0 and end.line > node.start_mark.line:
        return end.line  # ended with a line break: the content's last line is the one before
    return end.line + 1


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
