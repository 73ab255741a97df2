"""Selection policy: what may run and in which order, where each setting came from, and the
process-wide current policy.

Precedence (highest first): the ``VLLM_FL_CONFIG`` file (complete override of every file key) >
individual environment variables > the platform YAML (``config/<platform>.yaml``) > defaults.
An environment list replaces the list below it; it never merges.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from .logger_manager import configure_logging, get_logger, parse_log_level
from .types import BackendImplKind, ConfigError, OpImpl

__all__ = [
    "PREFER_CHOICES",
    "DEFAULT_ORDERS",
    "FILE_KEYS",
    "ENV_VARS",
    "SelectionPolicy",
    "DispatchConfig",
    "load_config",
    "get_config",
    "get_policy",
    "set_global_policy",
    "reset_global_policy",
    "policy_context",
    "with_strict_mode",
    "with_preference",
    "with_allowed_vendors",
    "with_denied_vendors",
    "oot_allowed",
    "add_policy_listener",
    "parse_token",
    "detect_platform",
    "available_platforms",
]

logger = get_logger()

PREFER_CHOICES = ("flagos", "vendor", "reference")
DEFAULT_ORDERS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "flagos": ("flagos", "vendor", "reference"),
        "vendor": ("vendor", "flagos", "reference"),
        "reference": ("reference", "flagos", "vendor"),
    }
)
TOKEN_FORMS = "flagos, reference, vendor, vendor:<name>, impl:<impl_id>"
CONFIG_DIR = Path(__file__).with_name("config")

# Keys of the VLLM_FL_CONFIG file and of the platform YAML files (identical sets).
FILE_KEYS = (
    "prefer",
    "compile_prefer",
    "strict",
    "allow_vendors",
    "deny_vendors",
    "op_backends",
    "use_flaggems",
    "flagos_whitelist",
    "flagos_blacklist",
    "oot_enabled",
    "oot_whitelist",
    "oot_blacklist",
)

# Every environment variable of the configuration reference, and what it sets.
ENV_VARS = {
    "VLLM_FL_PREFER_ENABLED": "enabled",
    "VLLM_FL_CONFIG": "config_path",
    "VLLM_FL_PLATFORM": "platform",
    "VLLM_FL_PREFER": "prefer",
    "VLLM_FL_COMPILE_PREFER": "compile_prefer",
    "VLLM_FL_STRICT": "strict",
    "VLLM_FL_PER_OP": "per_op_order",
    "VLLM_FL_ALLOW_VENDORS": "allow_vendors",
    "VLLM_FL_DENY_VENDORS": "deny_vendors",
    "USE_FLAGGEMS": "use_flaggems",
    "VLLM_FL_FLAGOS_WHITELIST": "flagos_whitelist",
    "VLLM_FL_FLAGOS_BLACKLIST": "flagos_blacklist",
    "VLLM_FL_OOT_ENABLED": "oot_enabled",
    "VLLM_FL_OOT_WHITELIST": "oot_whitelist",
    "VLLM_FL_OOT_BLACKLIST": "oot_blacklist",
    "VLLM_FL_LOG_LEVEL": "log_level",
    "VLLM_FL_DISPATCH_DEBUG": "debug",
    "VLLM_FL_PLUGIN_MODULES": "plugin_modules",
    "VLLM_FL_OP_CONFIG": "per_op_order",
    "FLAGGEMS_ENABLE_OPLIST_PATH": "flaggems_enable_oplist_path",
    "FLAGCX_PATH": "flagcx_path",
}
# Environment variables that a VLLM_FL_CONFIG file overrides (they set file keys).
_FILE_LEVEL_ENV = (
    "VLLM_FL_PREFER",
    "VLLM_FL_COMPILE_PREFER",
    "VLLM_FL_STRICT",
    "VLLM_FL_PER_OP",
    "VLLM_FL_OP_CONFIG",
    "VLLM_FL_ALLOW_VENDORS",
    "VLLM_FL_DENY_VENDORS",
    "USE_FLAGGEMS",
    "VLLM_FL_FLAGOS_WHITELIST",
    "VLLM_FL_FLAGOS_BLACKLIST",
    "VLLM_FL_OOT_ENABLED",
    "VLLM_FL_OOT_WHITELIST",
    "VLLM_FL_OOT_BLACKLIST",
)

_NAME_RE = re.compile(r"^[a-z0-9_][a-z0-9_.\-]*$")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
DEFAULT_OPLIST_PATH = "/tmp/flaggems_enable_oplist.txt"


# --------------------------------------------------------------------------- value parsing


def parse_token(token: Any, source: str) -> str:
    """Normalise one selection token (case-insensitive) or raise naming the source."""
    if not isinstance(token, str) or not token.strip():
        raise ConfigError(f"{source}: invalid token {token!r}; allowed: {TOKEN_FORMS}")
    tok = token.strip().lower()
    if tok in PREFER_CHOICES:
        return tok
    head, sep, tail = tok.partition(":")
    if sep and head == "vendor" and _NAME_RE.match(tail.strip()):
        return f"vendor:{tail.strip()}"
    if sep and head == "impl" and tail.strip():
        return f"impl:{tail.strip()}"
    raise ConfigError(f"{source}: invalid token {token!r}; allowed: {TOKEN_FORMS}")


def token_matches(token: str, impl: OpImpl) -> bool:
    if token == "flagos":
        return impl.kind is BackendImplKind.DEFAULT
    if token == "reference":
        return impl.kind is BackendImplKind.REFERENCE
    if token == "vendor":
        return impl.kind is BackendImplKind.VENDOR
    if token.startswith("vendor:"):
        return impl.kind is BackendImplKind.VENDOR and impl.vendor == token[7:]
    if token.startswith("impl:"):
        return impl.impl_id.lower() == token[5:]
    return False


def _parse_prefer(value: Any, source: str) -> str:
    if isinstance(value, BackendImplKind):
        return value.value
    if isinstance(value, str) and value.strip().lower() in PREFER_CHOICES:
        return value.strip().lower()
    raise ConfigError(
        f"{source}={value!r}: invalid preference; allowed: {', '.join(PREFER_CHOICES)}"
    )


def _parse_bool(value: Any, source: str, strict01: bool = False) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if strict01:
            if v in ("0", "1"):
                return v == "1"
            raise ConfigError(f"{source}={value!r}: invalid value; allowed: 0, 1")
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    allowed = "0, 1" if strict01 else "1/0, true/false, yes/no, on/off"
    raise ConfigError(f"{source}={value!r}: invalid boolean; allowed: {allowed}")


def _split_env_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _parse_names(value: Any, source: str, what: str) -> frozenset[str]:
    """A list of vendor or op names: YAML list (or null) or a comma-separated string."""
    if value is None:
        return frozenset()
    items = _split_env_list(value) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise ConfigError(f"{source}={value!r}: expected a list of {what} names")
    out = set()
    for item in items:
        if not isinstance(item, str) or not _NAME_RE.match(item.strip().lower()):
            raise ConfigError(
                f"{source}: invalid {what} name {item!r} in {value!r}; names are letters, digits, "
                "'_', '.', '-'"
            )
        out.add(item.strip().lower())
    return frozenset(out)


def _parse_op_backends(value: Any, source: str) -> dict[str, tuple[str, ...]]:
    """op -> tokens, from a mapping (YAML/JSON/dict) of lists or '|'-separated strings."""
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
        out[op.strip()] = parsed
    return out


def _parse_per_op_env(value: str, source: str) -> dict[str, tuple[str, ...]]:
    """``op1=a|b|c;op2=x|y``."""
    out: dict[str, tuple[str, ...]] = {}
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
        out.update(_parse_op_backends({op: rhs.split("|")}, source))
    if not out:
        raise ConfigError(f"{source}={value!r}: no 'op=tokens' entry")
    return out


# --------------------------------------------------------------------------- the policy


@dataclass(frozen=True, eq=True)
class SelectionPolicy:
    """What may run and in which order. Immutable; derive variants with ``replace``.

    ``compile_prefer`` is the preference while torch.compile traces an op (Dynamo, then
    Inductor); None means ``prefer``. vLLM makes the same split: under Inductor it lets the
    compiler generate its norms and activations from their PyTorch formulas, which it can fuse
    with their neighbours, and calls its CUDA kernels only in eager mode.
    """

    prefer: str = "flagos"
    compile_prefer: str | None = None
    strict: bool = False
    per_op_order: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    deny_vendors: frozenset[str] = frozenset()
    allow_vendors: frozenset[str] | None = None
    enabled: bool = True
    use_flaggems: bool = True
    flagos_whitelist: frozenset[str] | None = None
    flagos_blacklist: frozenset[str] = frozenset()
    oot_enabled: bool = True
    oot_whitelist: frozenset[str] | None = None
    oot_blacklist: frozenset[str] = frozenset()
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    __hash__ = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_op_order", MappingProxyType(dict(self.per_op_order)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    @classmethod
    def from_dict(
        cls,
        prefer: Any = "flagos",
        strict: Any = False,
        per_op_order: Mapping[str, Any] | None = None,
        deny_vendors: Iterable[str] | str | None = None,
        allow_vendors: Iterable[str] | str | None = None,
        *,
        source: str = "SelectionPolicy.from_dict",
        **others: Any,
    ) -> "SelectionPolicy":
        """Build a validated policy; unspecified settings take their built-in defaults.

        ``others`` accepts the remaining fields (``compile_prefer``, ``enabled``, ``use_flaggems``,
        ``flagos_whitelist``, ``flagos_blacklist``, ``oot_enabled``, ``oot_whitelist``,
        ``oot_blacklist``).
        """
        unknown = set(others) - {f.name for f in dataclasses.fields(cls)} - {"sources"}
        if unknown or "sources" in others:
            raise ConfigError(
                f"{source}: unknown setting(s) {sorted(unknown or {'sources'})}; allowed: "
                + ", ".join(f.name for f in dataclasses.fields(cls) if f.name != "sources")
            )
        kw: dict[str, Any] = {
            "prefer": _parse_prefer(prefer, f"{source}:prefer"),
            "strict": _parse_bool(strict, f"{source}:strict"),
            "per_op_order": _parse_op_backends(per_op_order, f"{source}:per_op_order"),
            "deny_vendors": _parse_names(deny_vendors, f"{source}:deny_vendors", "vendor"),
            "allow_vendors": _parse_names(allow_vendors, f"{source}:allow_vendors", "vendor")
            or None,
        }
        if others.get("compile_prefer") is not None:
            kw["compile_prefer"] = _parse_prefer(
                others["compile_prefer"], f"{source}:compile_prefer"
            )
        for name in ("enabled", "use_flaggems", "oot_enabled"):
            if name in others:
                kw[name] = _parse_bool(others[name], f"{source}:{name}")
        for kind in ("flagos", "oot"):
            wl, bl = others.get(f"{kind}_whitelist"), others.get(f"{kind}_blacklist")
            if wl is not None and bl is not None:
                raise ConfigError(
                    f"{source}: {kind}_whitelist and {kind}_blacklist are mutually exclusive"
                )
            if wl is not None:
                kw[f"{kind}_whitelist"] = _parse_names(wl, f"{source}:{kind}_whitelist", "op")
            if bl is not None:
                kw[f"{kind}_blacklist"] = _parse_names(bl, f"{source}:{kind}_blacklist", "op")
        kw["sources"] = {name: source for name in kw}
        return cls(**kw)

    def replace(self, source: str = "runtime", **changes: Any) -> "SelectionPolicy":
        """A copy with ``changes`` validated and applied; their source recorded as ``source``."""
        base = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        base.pop("sources")
        base["per_op_order"] = dict(base["per_op_order"])
        if self.flagos_whitelist is not None and "flagos_blacklist" in changes:
            base["flagos_whitelist"] = None
        if self.oot_whitelist is not None and "oot_blacklist" in changes:
            base["oot_whitelist"] = None
        base.update(changes)
        for kind in ("flagos", "oot"):
            if base.get(f"{kind}_whitelist") is not None:
                base.pop(f"{kind}_blacklist", None)
            elif not base.get(f"{kind}_blacklist"):
                base.pop(f"{kind}_blacklist", None)
            if base.get(f"{kind}_whitelist") is None:
                base.pop(f"{kind}_whitelist", None)
        new = SelectionPolicy.from_dict(source=source, **base)
        sources = dict(self.sources)
        sources.update({name: source for name in changes})
        return dataclasses.replace(new, sources=sources)

    # -- selection ---------------------------------------------------------------------------

    @property
    def splits_traced(self) -> bool:
        """Whether ops traced by torch.compile follow another preference than eager calls."""
        return self.compile_prefer is not None and self.compile_prefer != self.prefer

    def prefer_for(self, traced: bool = False) -> str:
        """The preference in force for eager calls, or for calls traced by torch.compile."""
        if traced and self.compile_prefer is not None:
            return self.compile_prefer
        return self.prefer

    def order_for(self, op_name: str, traced: bool = False) -> tuple[tuple[str, ...], bool]:
        """(tokens, restricted): the per-op list (restricts, in both modes) or the default order
        of the preference in force (``compile_prefer`` while traced, if set)."""
        tokens = self.per_op_order.get(op_name)
        if tokens is not None:
            return tokens, True
        return DEFAULT_ORDERS[self.prefer_for(traced)], False

    def exclusion_reason(self, impl: OpImpl) -> str | None:
        """Why ``impl`` may not run under this policy (None if it may)."""
        src = self.sources.get
        if impl.kind is BackendImplKind.VENDOR:
            if self.allow_vendors is not None and impl.vendor not in self.allow_vendors:
                return (
                    f"vendor '{impl.vendor}' not in allow_vendors {sorted(self.allow_vendors)} "
                    f"({src('allow_vendors', 'default')})"
                )
            if impl.vendor in self.deny_vendors:
                return f"vendor '{impl.vendor}' in deny_vendors ({src('deny_vendors', 'default')})"
        elif impl.kind is BackendImplKind.DEFAULT:
            op = impl.op_name.lower()
            if not self.enabled:
                return f"dispatch features disabled ({src('enabled', 'default')})"
            if not self.use_flaggems:
                return f"FlagGems disabled ({src('use_flaggems', 'default')})"
            if self.flagos_whitelist is not None and op not in self.flagos_whitelist:
                return f"op not in flagos_whitelist ({src('flagos_whitelist', 'default')})"
            if self.flagos_whitelist is None and op in self.flagos_blacklist:
                return f"op in flagos_blacklist ({src('flagos_blacklist', 'default')})"
        return None

    def order(self, op_name: str, impls: Sequence[OpImpl], traced: bool = False) -> list[OpImpl]:
        """Order ``impls`` (already filtered) by the op's tokens, then priority (stable)."""
        tokens, _ = self.order_for(op_name, traced)
        out: list[OpImpl] = []
        seen: set[str] = set()
        for tok in tokens:
            group = [i for i in impls if i.impl_id not in seen and token_matches(tok, i)]
            group.sort(key=lambda i: -i.priority)
            for i in group:
                seen.add(i.impl_id)
                out.append(i)
        return out

    # -- OOT layer registration --------------------------------------------------------------

    def oot_allowed(self, name: str, *aliases: str) -> bool:
        """Whether the out-of-tree replacement ``name`` (in-tree class name, e.g. "RMSNorm") may be
        registered. ``aliases`` (e.g. the op name "rms_norm") match the lists as well; matching is
        case-insensitive. Whitelist > blacklist; ``enabled`` and ``oot_enabled`` gate everything.
        """
        if not (self.enabled and self.oot_enabled):
            return False
        names = {n.lower() for n in (name, *aliases)}
        if self.oot_whitelist is not None:
            return bool(names & self.oot_whitelist)
        return not (names & self.oot_blacklist)


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class DispatchConfig:
    """Everything the environment and config files say, resolved and validated."""

    policy: SelectionPolicy
    platform: str
    platform_file: str | None
    config_file: str | None
    log_level: int
    debug: bool
    plugin_modules: tuple[str, ...]
    op_config_file: str | None
    flaggems_enable_oplist_path: str
    flagcx_path: str | None
    sources: Mapping[str, str]
    overridden_env: tuple[str, ...] = ()


def available_platforms() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))


def detect_platform() -> str:
    """cuda when torch sees a CUDA device, ascend when torch_npu sees an NPU, else cpu."""
    import importlib.util
    import sys

    try:
        import torch

        if torch.cuda.is_available():
            return "cuda"
        if "torch_npu" in sys.modules or importlib.util.find_spec("torch_npu") is not None:
            import torch_npu  # noqa: F401

            if torch.npu.is_available():
                return "ascend"
    except Exception as exc:  # noqa: BLE001 - detection must not break dispatch
        logger.warning(
            "platform auto-detection failed (%s: %s); using 'cpu'", type(exc).__name__, exc
        )
    return "cpu"


def _read_yaml(path: Path, what: str) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{what}={str(path)!r}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{what}={str(path)!r}: cannot read: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what}={str(path)!r}: invalid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    unknown = [k for k in data if k not in FILE_KEYS]
    if unknown:
        raise ConfigError(f"{path}:{unknown[0]}: unknown key; allowed keys: {', '.join(FILE_KEYS)}")
    return data


def _read_op_config(path_str: str) -> dict[str, tuple[str, ...]]:
    path = Path(path_str)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"VLLM_FL_OP_CONFIG={path_str!r}: file not found") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"VLLM_FL_OP_CONFIG={path_str!r}: cannot read JSON: {exc}") from exc
    if not isinstance(data, dict) or set(data) != {"op_backends"}:
        raise ConfigError(
            f"VLLM_FL_OP_CONFIG={path_str!r}: expected a JSON object with exactly the key "
            f"'op_backends' (op -> list of tokens), got keys "
            f"{sorted(data) if isinstance(data, dict) else type(data).__name__}"
        )
    return _parse_op_backends(data["op_backends"], f"{path}:op_backends")


class _Layer:
    """Settings from one source: ``values`` (already parsed) and each one's source."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def set(self, name: str, value: Any, source: str) -> None:
        self.values[name] = value
        self.sources[name] = source


def _file_layer(data: Mapping[str, Any], path: Path, label: str) -> _Layer:
    layer = _Layer()
    src = f"{label} {path}"
    for key, value in data.items():
        where = f"{path}:{key}"
        if key in ("prefer", "compile_prefer"):
            layer.set(key, _parse_prefer(value, where), src)
        elif key in ("strict", "use_flaggems", "oot_enabled"):
            layer.set(key, _parse_bool(value, where), src)
        elif key in ("allow_vendors", "deny_vendors"):
            layer.set(key, _parse_names(value, where, "vendor"), src)
        elif key == "op_backends":
            layer.set("per_op_order", _parse_op_backends(value, where), src)
        else:  # flagos_/oot_ white/black lists
            layer.set(key, _parse_names(value, where, "op"), src)
    for kind in ("flagos", "oot"):
        if f"{kind}_whitelist" in data and f"{kind}_blacklist" in data:
            raise ConfigError(
                f"{path}: {kind}_whitelist and {kind}_blacklist are mutually exclusive; keep one"
            )
    return layer


def _env_layer(env: Mapping[str, str]) -> _Layer:
    layer = _Layer()

    def get(name: str) -> str | None:
        value = env.get(name)
        return value if value is not None and value.strip() else None

    if (v := get("VLLM_FL_PREFER")) is not None:
        layer.set("prefer", _parse_prefer(v, "VLLM_FL_PREFER"), "env VLLM_FL_PREFER")
    if (v := get("VLLM_FL_COMPILE_PREFER")) is not None:
        layer.set(
            "compile_prefer",
            _parse_prefer(v, "VLLM_FL_COMPILE_PREFER"),
            "env VLLM_FL_COMPILE_PREFER",
        )
    elif "prefer" in layer.values:
        # A preference chosen in the environment means that backend, compiled or not; a
        # platform file's compile_prefer must not quietly override it under torch.compile.
        layer.set("compile_prefer", None, "env VLLM_FL_PREFER")
    if (v := get("VLLM_FL_STRICT")) is not None:
        layer.set("strict", _parse_bool(v, "VLLM_FL_STRICT", strict01=True), "env VLLM_FL_STRICT")
    if (v := get("USE_FLAGGEMS")) is not None:
        layer.set("use_flaggems", _parse_bool(v, "USE_FLAGGEMS"), "env USE_FLAGGEMS")
    if (v := get("VLLM_FL_OOT_ENABLED")) is not None:
        layer.set("oot_enabled", _parse_bool(v, "VLLM_FL_OOT_ENABLED"), "env VLLM_FL_OOT_ENABLED")
    for var, key in (
        ("VLLM_FL_ALLOW_VENDORS", "allow_vendors"),
        ("VLLM_FL_DENY_VENDORS", "deny_vendors"),
    ):
        if (v := get(var)) is not None:
            layer.set(key, _parse_names(v, var, "vendor"), f"env {var}")
    per_op, op_cfg = get("VLLM_FL_PER_OP"), get("VLLM_FL_OP_CONFIG")
    if per_op is not None:
        layer.set("per_op_order", _parse_per_op_env(per_op, "VLLM_FL_PER_OP"), "env VLLM_FL_PER_OP")
        if op_cfg is not None:
            logger.warning(
                "VLLM_FL_OP_CONFIG=%r is overridden by VLLM_FL_PER_OP (higher precedence)", op_cfg
            )
    elif op_cfg is not None:
        layer.set("per_op_order", _read_op_config(op_cfg), f"env VLLM_FL_OP_CONFIG ({op_cfg})")
    for kind in ("FLAGOS", "OOT"):
        wl_var, bl_var = f"VLLM_FL_{kind}_WHITELIST", f"VLLM_FL_{kind}_BLACKLIST"
        wl, bl = get(wl_var), get(bl_var)
        if wl is not None and bl is not None:
            raise ConfigError(
                f"{wl_var}={wl!r} and {bl_var}={bl!r} are mutually exclusive; set only one"
            )
        if wl is not None:
            layer.set(f"{kind.lower()}_whitelist", _parse_names(wl, wl_var, "op"), f"env {wl_var}")
        if bl is not None:
            layer.set(f"{kind.lower()}_blacklist", _parse_names(bl, bl_var, "op"), f"env {bl_var}")
    return layer


def _merge(layers: Sequence[_Layer]) -> tuple[dict[str, Any], dict[str, str]]:
    """Highest-precedence layer first. White/black lists of one family are one setting."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for layer in reversed(layers):  # lowest first, higher ones replace
        for kind in ("flagos", "oot"):
            if f"{kind}_whitelist" in layer.values or f"{kind}_blacklist" in layer.values:
                for k in (f"{kind}_whitelist", f"{kind}_blacklist"):
                    values.pop(k, None)
                    sources.pop(k, None)
        values.update(layer.values)
        sources.update(layer.sources)
    return values, sources


def load_config(environ: Mapping[str, str] | None = None) -> DispatchConfig:
    """Read the environment and config files; raise ``ConfigError`` on any invalid value."""
    env = os.environ if environ is None else environ

    def get(name: str) -> str | None:
        value = env.get(name)
        return value.strip() if value is not None and value.strip() else None

    # Process-level settings (environment only).
    proc_sources: dict[str, str] = {}

    def note(name: str, var: str, present: bool) -> None:
        proc_sources[name] = f"env {var}" if present else "default"

    enabled_raw = get("VLLM_FL_PREFER_ENABLED")
    enabled = True if enabled_raw is None else _parse_bool(enabled_raw, "VLLM_FL_PREFER_ENABLED")
    debug_raw = get("VLLM_FL_DISPATCH_DEBUG")
    debug = False if debug_raw is None else _parse_bool(debug_raw, "VLLM_FL_DISPATCH_DEBUG")
    level_raw = get("VLLM_FL_LOG_LEVEL")
    if level_raw is not None:
        log_level = parse_log_level(level_raw, "VLLM_FL_LOG_LEVEL")
    else:
        log_level = parse_log_level("DEBUG" if debug else "INFO", "default")
    note("enabled", "VLLM_FL_PREFER_ENABLED", enabled_raw is not None)
    note("debug", "VLLM_FL_DISPATCH_DEBUG", debug_raw is not None)
    proc_sources["log_level"] = (
        "env VLLM_FL_LOG_LEVEL"
        if level_raw is not None
        else ("env VLLM_FL_DISPATCH_DEBUG" if debug else "default")
    )
    plugins_raw = get("VLLM_FL_PLUGIN_MODULES")
    plugin_modules = tuple(_split_env_list(plugins_raw)) if plugins_raw else ()
    for mod in plugin_modules:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", mod):
            raise ConfigError(
                f"VLLM_FL_PLUGIN_MODULES={plugins_raw!r}: {mod!r} is not a module name; "
                "expected comma-separated dotted module names"
            )
    note("plugin_modules", "VLLM_FL_PLUGIN_MODULES", plugins_raw is not None)
    oplist = get("FLAGGEMS_ENABLE_OPLIST_PATH")
    if oplist is not None and not Path(oplist).parent.is_dir():
        raise ConfigError(
            f"FLAGGEMS_ENABLE_OPLIST_PATH={oplist!r}: directory {str(Path(oplist).parent)!r} "
            "does not exist; expected a file path in an existing directory"
        )
    note("flaggems_enable_oplist_path", "FLAGGEMS_ENABLE_OPLIST_PATH", oplist is not None)
    flagcx = get("FLAGCX_PATH")
    if flagcx is not None and not Path(flagcx).is_dir():
        raise ConfigError(
            f"FLAGCX_PATH={flagcx!r}: not an existing directory; expected the FlagCX install path"
        )
    note("flagcx_path", "FLAGCX_PATH", flagcx is not None)
    op_config = get("VLLM_FL_OP_CONFIG")

    # Platform.
    forced = get("VLLM_FL_PLATFORM")
    platforms = available_platforms()
    if forced is not None:
        platform = forced.lower()
        if platform not in platforms:
            raise ConfigError(
                f"VLLM_FL_PLATFORM={forced!r}: unknown platform; allowed: {', '.join(platforms)}"
            )
        proc_sources["platform"] = "env VLLM_FL_PLATFORM"
    else:
        platform = detect_platform()
        proc_sources["platform"] = "auto-detected"

    # Selection settings.
    config_path = get("VLLM_FL_CONFIG")
    overridden: tuple[str, ...] = ()
    platform_file = None
    if config_path is not None:
        path = Path(config_path).expanduser()
        data = _read_yaml(path, "VLLM_FL_CONFIG")
        layers = [_file_layer(data, path, "config file")]
        overridden = tuple(v for v in _FILE_LEVEL_ENV if get(v) is not None)
        if overridden:
            logger.warning(
                "VLLM_FL_CONFIG=%s overrides every selection setting; ignoring %s",
                config_path,
                ", ".join(overridden),
            )
        proc_sources["config_file"] = "env VLLM_FL_CONFIG"
    else:
        layers = [_env_layer(env)]
        pf = CONFIG_DIR / f"{platform}.yaml"
        if pf.is_file():
            platform_file = str(pf)
            layers.append(_file_layer(_read_yaml(pf, "platform YAML"), pf, "platform YAML"))
    values, sources = _merge(layers)
    values["enabled"] = enabled
    sources["enabled"] = proc_sources["enabled"]
    for key in ("allow_vendors", "flagos_whitelist", "oot_whitelist"):
        if key in values and not values[key]:  # an empty whitelist means "no whitelist"
            values[key] = None
    policy = SelectionPolicy(**values, sources={})
    all_sources = {
        f.name: sources.get(f.name, "default")
        for f in dataclasses.fields(SelectionPolicy)
        if f.name != "sources"
    }
    policy = dataclasses.replace(policy, sources=all_sources)
    return DispatchConfig(
        policy=policy,
        platform=platform,
        platform_file=platform_file,
        config_file=str(Path(config_path).expanduser()) if config_path else None,
        log_level=log_level,
        debug=debug,
        plugin_modules=plugin_modules,
        op_config_file=op_config,
        flaggems_enable_oplist_path=oplist or DEFAULT_OPLIST_PATH,
        flagcx_path=flagcx,
        sources=MappingProxyType({**proc_sources, **{k: v for k, v in all_sources.items()}}),
        overridden_env=overridden,
    )


# --------------------------------------------------------------------------- current policy

_lock = threading.RLock()
_config: DispatchConfig | None = None
_global_policy: SelectionPolicy | None = None
_overrides: list[SelectionPolicy] = []
_listeners: list[Callable[[], None]] = []


def add_policy_listener(callback: Callable[[], None]) -> None:
    """Call ``callback()`` after every change of the current policy."""
    with _lock:
        _listeners.append(callback)


def _notify() -> None:
    for cb in list(_listeners):
        cb()


def get_config() -> DispatchConfig:
    """The configuration read from the environment (read once; ``reset_global_policy`` re-reads)."""
    global _config, _global_policy
    cfg = _config
    if cfg is None:
        with _lock:
            if _config is None:
                cfg = load_config()
                configure_logging(cfg.log_level)
                _config = cfg
                if _global_policy is None:
                    _global_policy = cfg.policy
            cfg = _config
    return cfg


def get_policy() -> SelectionPolicy:
    """The policy in force: the innermost ``policy_context``, else the global policy."""
    if _overrides:
        return _overrides[-1]
    policy = _global_policy
    if policy is None:
        get_config()
        policy = _global_policy
    return policy  # type: ignore[return-value]


def set_global_policy(policy: SelectionPolicy) -> SelectionPolicy:
    """Replace the global policy; returns the previous one. Takes effect on the next call."""
    global _global_policy
    if not isinstance(policy, SelectionPolicy):
        raise TypeError(f"set_global_policy: expected SelectionPolicy, got {type(policy).__name__}")
    get_config()
    with _lock:
        old = _global_policy
        _global_policy = policy
    _notify()
    return old  # type: ignore[return-value]


def reset_global_policy() -> SelectionPolicy:
    """Re-read the environment and config files; returns the new global policy."""
    global _config, _global_policy
    with _lock:
        cfg = load_config()
        configure_logging(cfg.log_level)
        _config = cfg
        _global_policy = cfg.policy
    _notify()
    return cfg.policy


@contextlib.contextmanager
def policy_context(policy: SelectionPolicy) -> Iterator[SelectionPolicy]:
    """Use ``policy`` inside the block. Process-wide (like the global policy): every thread sees it,
    because the selected implementation is installed once for all callers."""
    if not isinstance(policy, SelectionPolicy):
        raise TypeError(f"policy_context: expected SelectionPolicy, got {type(policy).__name__}")
    with _lock:
        _overrides.append(policy)
    _notify()
    try:
        yield policy
    finally:
        with _lock:
            for i in range(len(_overrides) - 1, -1, -1):
                if _overrides[i] is policy:
                    del _overrides[i]
                    break
        _notify()


def with_strict_mode(strict: bool = True) -> contextlib.AbstractContextManager[SelectionPolicy]:
    return policy_context(get_policy().replace("with_strict_mode", strict=strict))


def with_preference(
    prefer: str, compile_prefer: str | None = None
) -> contextlib.AbstractContextManager[SelectionPolicy]:
    """Prefer ``prefer`` inside the block, also under torch.compile unless ``compile_prefer``."""
    return policy_context(
        get_policy().replace("with_preference", prefer=prefer, compile_prefer=compile_prefer)
    )


def with_allowed_vendors(*vendors: str) -> contextlib.AbstractContextManager[SelectionPolicy]:
    return policy_context(get_policy().replace("with_allowed_vendors", allow_vendors=list(vendors)))


def with_denied_vendors(*vendors: str) -> contextlib.AbstractContextManager[SelectionPolicy]:
    return policy_context(get_policy().replace("with_denied_vendors", deny_vendors=list(vendors)))


def oot_allowed(name: str, *aliases: str) -> bool:
    """Whether the OOT replacement of in-tree class ``name`` may be registered (current policy)."""
    return get_policy().oot_allowed(name, *aliases)
