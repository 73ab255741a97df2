"""Value parsers: one function per kind of setting value, shared by every source.

Each parser takes the raw value (an environment string, a YAML/JSON value or a Python object
given to ``SelectionPolicy``) and the name of its source, and returns the normalised value or
raises ``ConfigError`` naming the source, the value and what is allowed. The settings table
(``settings``) gives each setting its parser; the environment, the config files,
``SelectionPolicy(...)``, the ``with_*`` helpers and ``vllm_fl.register_platform`` all go through
it, so a value means the same thing wherever it is written.

Each parser of a ``SelectionPolicy`` setting has a check, ``is_*``: whether a value already is
what the parser returns. It parses nothing, so a policy made of parsed values (the configuration
loader's) takes them as they are.

This module imports neither torch nor vLLM: ``vllm_fl.register_platform`` uses it while vLLM is
still choosing its platform.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from ..types import BackendImplKind, ConfigError

__all__ = [
    "PREFER_CHOICES",
    "TOKEN_FORMS",
    "BOOL_SPELLINGS",
    "CONFIG_DIR",
    "available_platforms",
    "parse_bool",
    "is_bool",
    "parse_prefer",
    "is_prefer",
    "parse_optional_prefer",
    "is_optional_prefer",
    "parse_token",
    "parse_name_set",
    "is_name_set",
    "parse_optional_name_set",
    "is_optional_name_set",
    "name_set_parser",
    "parse_op_backends",
    "is_op_backends",
    "split_per_op_string",
    "parse_platform",
    "parse_module_list",
    "split_list",
    "parse_output_file",
    "parse_existing_dir",
    "parse_input_file",
    "LOG_LEVELS",
    "parse_log_level",
    "parse_verify",
    "parse_count",
    "parse_output_dir",
]

PREFER_CHOICES = ("flagos", "vendor", "reference")
TOKEN_FORMS = "flagos, reference, vendor, vendor:<name>, impl:<impl_id>"
# The platform YAML files; their names are the platforms the dispatch knows.
CONFIG_DIR = Path(__file__).parent

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
BOOL_SPELLINGS = "1/0, true/false, yes/no, on/off (any case)"
_NAME_RE = re.compile(r"^[a-z0-9_][a-z0-9_.\-]*$")
_TOKEN_RE = re.compile(r"flagos|reference|vendor|(?:vendor|impl):[a-z0-9_][a-z0-9_.\-]*")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def parse_bool(value: Any, source: str) -> bool:
    """A switch: a bool, 0/1, or one of the spellings of ``BOOL_SPELLINGS``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    raise ConfigError(f"{source}={value!r}: invalid boolean; allowed: {BOOL_SPELLINGS}")


def is_bool(value: Any) -> bool:
    return type(value) is bool


def parse_prefer(value: Any, source: str) -> str:
    """A preference: ``flagos``, ``vendor`` or ``reference`` (any case) or a BackendImplKind."""
    if isinstance(value, BackendImplKind):
        return value.value
    if isinstance(value, str) and value.strip().lower() in PREFER_CHOICES:
        return value.strip().lower()
    raise ConfigError(
        f"{source}={value!r}: invalid preference; allowed: {', '.join(PREFER_CHOICES)}"
    )


def is_prefer(value: Any) -> bool:
    return type(value) is str and value in PREFER_CHOICES


def parse_optional_prefer(value: Any, source: str) -> str | None:
    """A preference, or None for "not set" (``compile_prefer``: then ``prefer`` applies)."""
    return None if value is None else parse_prefer(value, source)


def is_optional_prefer(value: Any) -> bool:
    return value is None or is_prefer(value)


def parse_token(token: Any, source: str) -> str:
    """One selection token, lower-cased: ``flagos``, ``reference``, ``vendor``,
    ``vendor:<name>`` or ``impl:<impl_id>``."""
    if not isinstance(token, str) or not token.strip():
        raise ConfigError(f"{source}: invalid token {token!r}; allowed: {TOKEN_FORMS}")
    tok = token.strip().lower()
    if tok in PREFER_CHOICES:
        return tok
    head, sep, tail = tok.partition(":")
    tail = tail.strip()
    if sep and head.strip() == "vendor" and _NAME_RE.match(tail):
        return f"vendor:{tail}"
    if sep and head.strip() == "impl" and _NAME_RE.match(tail):
        return f"impl:{tail}"
    raise ConfigError(f"{source}: invalid token {token!r}; allowed: {TOKEN_FORMS}")


def split_list(value: str, source: str, sep: str = ",") -> list[str]:
    """Split a ``sep``-separated string. Empty items between separators are dropped, but a
    value made of separators only is an error: it would otherwise read as "no list"."""
    items = [item.strip() for item in value.split(sep)]
    if value.strip() and not any(items):
        raise ConfigError(
            f"{source}={value!r}: no names, only separators; unset the variable for no list"
        )
    return [item for item in items if item]


def parse_name_set(value: Any, source: str, what: str = "vendor") -> frozenset[str]:
    """Vendor or op names, lower-cased: a list/set, or a comma-separated string. None is the
    empty set."""
    if value is None:
        return frozenset()
    items = split_list(value, source) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise ConfigError(
            f"{source}={value!r}: expected a list of {what} names or a comma-separated string"
        )
    out = set()
    for item in items:
        if not isinstance(item, str) or not _NAME_RE.match(item.strip().lower()):
            raise ConfigError(
                f"{source}: invalid {what} name {item!r} in {value!r}; names are letters, digits, "
                "'_', '.', '-'"
            )
        out.add(item.strip().lower())
    return frozenset(out)


def is_name_set(value: Any) -> bool:
    return type(value) is frozenset and all(
        type(name) is str and _NAME_RE.fullmatch(name) for name in value
    )


def parse_optional_name_set(value: Any, source: str, what: str = "vendor") -> frozenset[str] | None:
    """A whitelist: None means "no whitelist"; an empty list allows nothing."""
    return None if value is None else parse_name_set(value, source, what)


def is_optional_name_set(value: Any) -> bool:
    return value is None or is_name_set(value)


def name_set_parser(what: str, optional: bool = False) -> Callable[[Any, str], Any]:
    """The parser of a list of ``what`` names (``optional``: a whitelist, None = no list)."""
    if optional:
        return lambda value, source: parse_optional_name_set(value, source, what)
    return lambda value, source: parse_name_set(value, source, what)


def parse_op_backends(value: Any, source: str) -> dict[str, tuple[str, ...]]:
    """Per-op token lists: a mapping op -> list of tokens (or one ``|``-separated string)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}={value!r}: expected a mapping op -> list of tokens")
    out: dict[str, tuple[str, ...]] = {}
    for op, tokens in value.items():
        where = f"{source}.{op}"
        if not isinstance(op, str) or not op.strip():
            raise ConfigError(f"{source}: invalid op name {op!r}")
        if isinstance(tokens, str):
            tokens = tokens.split("|")
        if not isinstance(tokens, (list, tuple)) or not tokens:
            raise ConfigError(
                f"{where}={tokens!r}: expected a non-empty list of tokens ({TOKEN_FORMS})"
            )
        parsed = tuple(parse_token(t, where) for t in tokens)
        if len(set(parsed)) != len(parsed):
            raise ConfigError(f"{where}={list(tokens)!r}: a token is listed twice")
        if op.strip() in out:
            raise ConfigError(f"{source}: op {op.strip()!r} is listed twice")
        out[op.strip()] = parsed
    return out


def is_op_backends(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        type(op) is str
        and op != ""
        and op == op.strip()
        and type(tokens) is tuple
        and len(tokens) > 0
        and len(set(tokens)) == len(tokens)
        and all(type(tok) is str and _TOKEN_RE.fullmatch(tok) for tok in tokens)
        for op, tokens in value.items()
    )


def split_per_op_string(value: str, source: str) -> dict[str, list[str]]:
    """The ``VLLM_FL_PER_OP`` syntax, ``op1=a|b|c;op2=x|y``, into the mapping
    ``parse_op_backends`` takes (op -> its tokens, not yet parsed)."""
    out: dict[str, list[str]] = {}
    for item in value.split(";"):
        if not item.strip():
            continue
        op, sep, rhs = item.partition("=")
        op = op.strip()
        if not sep or not op or not rhs.strip():
            raise ConfigError(
                f"{source}={value!r}: malformed entry {item.strip()!r}; expected "
                "'op1=tok|tok;op2=tok' with tokens " + TOKEN_FORMS
            )
        if op in out:
            raise ConfigError(f"{source}={value!r}: op {op!r} is listed twice")
        out[op] = rhs.split("|")
    if not out:
        raise ConfigError(f"{source}={value!r}: no 'op=tokens' entry")
    return out


def available_platforms() -> tuple[str, ...]:
    """The platforms with a configuration file, sorted."""
    return tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))


def parse_platform(value: Any, source: str) -> str | None:
    """A platform name (lower-cased) that has a configuration file, or None for ``auto``."""
    platforms = available_platforms()
    if isinstance(value, str):
        name = value.strip().lower()
        if name == "auto":
            return None
        if name in platforms:
            return name
    raise ConfigError(
        f"{source}={value!r}: unknown platform; allowed: auto, {', '.join(platforms)}"
    )


def parse_module_list(value: Any, source: str) -> tuple[str, ...]:
    """Dotted module names: a comma-separated string or a list."""
    items = split_list(value, source) if isinstance(value, str) else list(value or ())
    for mod in items:
        if not isinstance(mod, str) or not _MODULE_RE.match(mod):
            raise ConfigError(
                f"{source}={value!r}: {mod!r} is not a module name; expected comma-separated "
                "dotted module names"
            )
    return tuple(items)


def parse_output_file(value: Any, source: str) -> str:
    """A file the dispatch writes: its directory must exist and the path must not be a
    directory (the file itself need not exist)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{source}={value!r}: expected a file path")
    path = Path(value.strip()).expanduser()
    if path.is_dir():
        raise ConfigError(f"{source}={value!r}: is a directory; expected a file path")
    if not path.parent.is_dir():
        raise ConfigError(
            f"{source}={value!r}: directory {str(path.parent)!r} does not exist; expected a file "
            "path in an existing directory"
        )
    return str(path)


def parse_existing_dir(value: Any, source: str) -> str:
    """A directory that exists."""
    if not isinstance(value, str) or not Path(value.strip()).expanduser().is_dir():
        raise ConfigError(f"{source}={value!r}: not an existing directory")
    return str(Path(value.strip()).expanduser())


def parse_input_file(value: Any, source: str) -> str:
    """A file the dispatch reads; whether it exists is checked when it is read."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{source}={value!r}: expected a file path")
    return str(Path(value.strip()).expanduser())


def parse_log_level(value: Any, source: str) -> int:
    """A log level name (any case; ``WARN`` is ``WARNING``) -> its ``logging`` number."""
    name = value.strip().upper() if isinstance(value, str) else None
    if name == "WARN":
        name = "WARNING"
    if name not in LOG_LEVELS:
        raise ConfigError(
            f"{source}={value!r}: invalid log level; allowed: {', '.join(LOG_LEVELS)}"
        )
    return getattr(logging, name)


def parse_verify(value: Any, source: str) -> bool | frozenset[str]:
    """What ``VLLM_FL_VERIFY`` checks: a switch (``on``: every op, ``off``: none) or op names,
    comma-separated (lower-cased)."""
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE + ("all",):
        return value.strip().lower() in _TRUE + ("all",)
    if isinstance(value, bool):
        return value
    names = parse_name_set(value, source, "op")
    if not names:
        raise ConfigError(f"{source}={value!r}: expected on, off or op names, comma-separated")
    return names


def parse_count(value: Any, source: str) -> int:
    """A whole number, 0 or more."""
    try:
        number = int(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        number = -1
    if isinstance(value, bool) or number < 0:
        raise ConfigError(f"{source}={value!r}: expected a whole number, 0 or more")
    return number


def parse_output_dir(value: Any, source: str) -> str:
    """A directory the process writes files into: it exists or its parent does (it is created
    when written), and it is no file."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{source}={value!r}: expected a directory path")
    path = Path(value.strip()).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{source}={value!r}: is a file; expected a directory path")
    if not path.exists() and not path.parent.is_dir():
        raise ConfigError(
            f"{source}={value!r}: neither it nor its parent directory {str(path.parent)!r} "
            "exists; expected a directory in an existing directory"
        )
    return str(path)
