"""Reading configuration files that a user (or anyone who can set an environment variable)
controls: the ``VLLM_FL_CONFIG`` YAML, the platform YAML files and the ``VLLM_FL_OP_CONFIG`` JSON.

Both readers refuse what a settings file never needs, so hostile input fails in milliseconds
with a ``file:line`` error instead of exhausting memory or the stack: files over
``MAX_FILE_BYTES``, bytes that are not UTF-8, YAML anchors and aliases (alias bombs), explicit
tags other than YAML's plain types (``!!python/...``), nesting deeper than ``MAX_DEPTH``, scalars
longer than ``MAX_SCALAR_CHARS`` and duplicate mapping keys (which YAML and JSON parsers
otherwise resolve silently to the last one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from ..types import ConfigError

__all__ = ["MAX_FILE_BYTES", "MAX_DEPTH", "MAX_SCALAR_CHARS", "read_yaml_mapping", "read_json"]

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 16
MAX_SCALAR_CHARS = 1024
# Explicit tags a settings file may carry ("!" is the non-specific tag of quoted scalars).
_ALLOWED_TAGS = frozenset(
    {"!"}
    | {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")}
)


class _Rejected(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's pure-Python safe loader with the limits of this module.

    The composer is the only recursive stage of PyYAML (scanner and parser keep explicit
    stacks), so checking depth there bounds the recursion before it can grow.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Rejected(line, "YAML anchors and aliases are not allowed in a settings file")
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _ALLOWED_TAGS:
            raise _Rejected(
                line, f"tag {tag!r} not allowed; settings are plain strings, numbers, lists, maps"
            )
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_SCALAR_CHARS:
            raise _Rejected(line, f"scalar longer than {MAX_SCALAR_CHARS} characters")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Rejected(line, f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: let PyYAML report it
                continue
            if duplicate:
                raise _Rejected(key_node.start_mark.line + 1, f"duplicate key {key!r}")
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_yaml_map)


def _read_text(path: Path, what: str) -> str:
    """The file's text; every failure is a ``ConfigError`` naming ``what`` and the file."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{what}={str(path)!r}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{what}={str(path)!r}: cannot read: {exc}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{what}={str(path)!r}: file larger than {MAX_FILE_BYTES} bytes")
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
    text = _read_text(path, what)
    loader = _StrictLoader(text)
    try:
        data = loader.get_single_data()
    except _Rejected as exc:
        raise ConfigError(f"{path}:{exc.line}: {exc.message}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else f"{what}={str(path)!r}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    except (ValueError, RecursionError) as exc:  # e.g. an int too long to convert
        raise ConfigError(f"{what}={str(path)!r}: invalid YAML: {exc}") from None
    finally:
        loader.dispose()
    if data is None:
        if allow_empty:
            return {}
        raise ConfigError(
            f"{what}={str(path)!r}: the file has no settings (empty or only comments); as a "
            "complete override it would drop every other setting, the platform YAML included. "
            "Write the settings, or '{}' for the built-in defaults"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def read_json(path: Path, what: str) -> Any:
    """A JSON document, with the limits of this module (size, UTF-8, depth, duplicate keys)."""
    text = _read_text(path, what)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ConfigError(f"{what}={str(path)!r}: nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what}={str(path)!r}: invalid JSON: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{what}={str(path)!r}: {exc}") from None
