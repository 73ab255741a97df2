"""The one hardened reader of YAML and JSON files that a user (or anyone who can set an
environment variable) controls: the ``VLLM_FL_CONFIG`` YAML, the platform YAML files and the
``VLLM_FL_OP_CONFIG`` JSON here, and the generator's manifest (``codegen.yamlnodes``).

YAML is composed into located nodes (``Scalar``, ``Seq``, ``Map``: each knows its line), typed
by PyYAML's safe constructor. Before composing, one streaming pass over the parser's events
bounds the work a hostile file can cause, so it fails fast with a ``file:line`` error instead of
exhausting memory or the stack: anchors and aliases (alias bombs, cycles), explicit tags other
than YAML's plain types (``!!python/...``), nesting deeper than ``Limits.max_depth`` (the composer
recurses) and scalars longer than ``Limits.max_scalar``; then duplicate and merge keys (which
YAML would otherwise resolve silently), numbers that are not finite or do not fit in 64 bits.
Files over ``Limits.max_bytes`` and bytes that are not UTF-8 are refused before parsing.

Failures are ``YAMLRejected`` (file, line, problem, what was expected); the settings readers
turn them into ``ConfigError``, the generator into its ``ManifestError``. This module imports
neither torch nor vLLM.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from ..types import ConfigError

__all__ = [
    "Limits",
    "SETTINGS_LIMITS",
    "MANIFEST_LIMITS",
    "YAMLRejected",
    "Scalar",
    "Seq",
    "Entry",
    "Map",
    "Node",
    "describe",
    "clip",
    "load_nodes",
    "to_python",
    "read_text",
    "read_yaml_mapping",
    "read_json",
]

try:  # libyaml is much faster; fall back to the pure-Python parser
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader

_MERGE_TAG = "tag:yaml.org,2002:merge"
_CORE = "tag:yaml.org,2002:"
#: explicit tags a file may carry: YAML's plain types ("!" forces a string)
_ALLOWED_TAGS = frozenset(
    ["!"] + [_CORE + t for t in ("str", "int", "float", "bool", "null", "map", "seq")]
)
#: integers are priorities, sizes and literals: a 64-bit range is plenty
MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class Limits:
    """What a file may hold: bytes, nesting levels, characters per scalar."""

    max_bytes: int
    max_depth: int
    max_scalar: int


#: settings files: small, shallow, short values
SETTINGS_LIMITS = Limits(max_bytes=1 << 20, max_depth=16, max_scalar=1024)
#: the manifest nests about 9 levels and holds doc paragraphs
MANIFEST_LIMITS = Limits(max_bytes=16 << 20, max_depth=32, max_scalar=64 * 1024)


class YAMLRejected(ValueError):
    """A file refused: ``file:line`` (line None: the whole file), the problem, what was
    expected."""

    def __init__(self, file: str, line: int | None, problem: str, expected: str) -> None:
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where}: {problem}, expected {expected}")
        self.file = file
        self.line = line
        self.problem = problem
        self.expected = expected


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


# --------------------------------------------------------------------------- YAML to nodes


def load_nodes(text: str, file: str, limits: Limits) -> Node | None:
    """Parse ``text`` into located nodes; ``None`` for an empty document."""
    try:
        _check_events(text, file, limits)
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(filter(None, [exc.context, exc.problem]))
        raise YAMLRejected(file, line, f"invalid YAML: {problem}", "well-formed YAML") from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        problem = f"invalid YAML: character {exc.character!r} is not allowed"
        raise YAMLRejected(file, line, problem, "printable text") from None
    except yaml.YAMLError as exc:
        raise YAMLRejected(file, None, f"invalid YAML: {exc}", "well-formed YAML") from None
    if root is None:
        return None
    return _convert(root, file, yaml.constructor.SafeConstructor())


def _check_events(text: str, file: str, limits: Limits) -> None:
    """Reject what would make composing unbounded or unsafe, in one pass over parser events."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            raise YAMLRejected(
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
            raise YAMLRejected(
                file,
                line,
                f"anchor &{clip(str(event.anchor))} is not supported",
                "every value written out (no anchors or aliases)",
            )
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _ALLOWED_TAGS:
            raise YAMLRejected(
                file,
                line,
                f"unknown tag {clip(tag.replace(_CORE, '!!'))}",
                "plain YAML values without tags",
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > limits.max_depth:
                raise YAMLRejected(
                    file,
                    line,
                    f"nesting deeper than {limits.max_depth} levels",
                    "a shallower file",
                )
        elif isinstance(event, yaml.ScalarEvent) and len(event.value) > limits.max_scalar:
            raise YAMLRejected(
                file,
                line,
                f"a scalar of {len(event.value)} characters",
                f"at most {limits.max_scalar} characters",
            )


def _convert(node: yaml.Node, file: str, constructor: yaml.constructor.SafeConstructor) -> Node:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode):
        try:
            value = constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise YAMLRejected(file, line, f"invalid scalar: {problem}", "a plain value") from None
        except (ValueError, OverflowError):  # e.g. an integer of more than 4300 digits
            raise YAMLRejected(
                file,
                line,
                f"number {clip(node.value)} is out of range",
                f"an integer within +-{MAX_INT} or a finite number",
            ) from None
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise YAMLRejected(
                file,
                line,
                f"integer {clip(node.value)} is out of range",
                f"an integer within +-{MAX_INT}",
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise YAMLRejected(
                file, line, f"number {clip(node.value)} is not finite", "a finite number"
            )
        if not isinstance(value, (str, int, float, bool, type(None))):
            raise YAMLRejected(
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
                raise YAMLRejected(
                    file, key_line, "merge keys (<<) are not supported", "every key written out"
                )
            key = _convert(key_node, file, constructor)
            if not isinstance(key, Scalar) or not isinstance(key.value, str):
                raise YAMLRejected(
                    file, key_line, f"mapping key is {describe(key)}", "a string key"
                )
            if key.value in entries:
                first = entries[key.value].key_line
                raise YAMLRejected(
                    file,
                    key_line,
                    f"duplicate key {key.value!r} (first at line {first})",
                    "each key once",
                )
            entries[key.value] = Entry(key.value, key_line, _convert(value_node, file, constructor))
        flow = bool(node.flow_style)
        if flow or not entries:
            end_line = _last_line(node)
        else:
            end_line = list(entries.values())[-1].value.end_line
        return Map(entries, line, end_line, flow, node.start_mark.column)
    raise YAMLRejected(file, line, "unsupported YAML node", "a mapping, list or scalar")


def _last_line(node: yaml.Node) -> int:
    """1-based last line of a node whose end mark is exact (scalars, flow collections)."""
    end = node.end_mark
    if end.column == 0 and end.line > node.start_mark.line:
        return end.line  # ended with a line break: the content's last line is the one before
    return end.line + 1


def to_python(node: Node | None) -> Any:
    """The plain value of a node: dicts, lists, scalars."""
    if node is None:
        return None
    if isinstance(node, Scalar):
        return node.value
    if isinstance(node, Seq):
        return [to_python(item) for item in node.items]
    return {key: to_python(entry.value) for key, entry in node.entries.items()}


# --------------------------------------------------------------------------- settings files


def read_text(path: Path, what: str, limits: Limits = SETTINGS_LIMITS) -> str:
    """The file's text; every failure is a ``ConfigError`` naming ``what`` and the file."""
    try:
        with open(path, "rb") as f:
            data = f.read(limits.max_bytes + 1)
    except FileNotFoundError:
        raise ConfigError(f"{what}={str(path)!r}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{what}={str(path)!r}: cannot read: {exc}") from exc
    if len(data) > limits.max_bytes:
        raise ConfigError(f"{what}={str(path)!r}: file larger than {limits.max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{what}={str(path)!r}: line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} "
            f"at offset {exc.start})"
        ) from None


def read_yaml_mapping(path: Path, what: str, *, allow_empty: bool) -> dict[str, Any]:
    """The top-level mapping of a YAML settings file.

    ``allow_empty``: whether a file with no document (empty, or only comments) reads as no
    settings; otherwise it is an error, because it would silently replace everything.
    """
    text = read_text(path, what)
    try:
        root = load_nodes(text, str(path), SETTINGS_LIMITS)
    except YAMLRejected as exc:
        raise ConfigError(str(exc)) from None
    if root is None or isinstance(root, Scalar) and root.value is None:  # "---" alone is empty
        if allow_empty:
            return {}
        raise ConfigError(
            f"{what}={str(path)!r}: the file has no settings (empty or only comments); as a "
            "complete override it would drop every other setting, the platform YAML included. "
            "Write the settings, or '{}' for the built-in defaults"
        )
    if not isinstance(root, Map):
        kind = "list" if isinstance(root, Seq) else type(root.value).__name__
        raise ConfigError(f"{path}: expected a mapping of settings, got {kind}")
    return to_python(root)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def read_json(path: Path, what: str) -> Any:
    """A JSON document, with the limits of settings files (size, UTF-8, depth, duplicate
    keys)."""
    text = read_text(path, what)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ConfigError(f"{what}={str(path)!r}: nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what}={str(path)!r}: invalid JSON: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{what}={str(path)!r}: {exc}") from None
