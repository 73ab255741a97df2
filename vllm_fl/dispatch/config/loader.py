"""Where settings come from, and which source wins.

Precedence (highest first): the ``VLLM_FL_CONFIG`` file (a complete override of every selection
setting; a missing, empty or invalid file is an error) > individual environment variables > the
platform YAML (``config/<platform>.yaml``) > built-in defaults. Process settings come from the
environment only. An environment list replaces the list below it, it never merges; a whitelist
and the blacklist of its family count as one setting (``lists``), so a whitelist from the
environment also replaces a blacklist from the platform file.

Every value is parsed once, by its row's parser (``settings``), where it is read; the
``SelectionPolicy`` and the ``DispatchConfig`` built from them take them as they are.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from ..logger_manager import get_logger
from ..types import ConfigError
from . import lists, values
from .files import read_yaml_mapping
from .selection import POLICY_FIELDS, SelectionPolicy
from .settings import (
    BY_FILE_KEY,
    FILE_KEYS,
    PROCESS_SETTINGS,
    SELECTION_ENV,
    SETTINGS,
    env_value,
    parse_env,
)

__all__ = ["DispatchConfig", "load_config", "detect_platform"]

logger = get_logger()


@dataclass(frozen=True)
class DispatchConfig:
    """Everything the environment and config files say, resolved and validated: ``policy`` (the
    selection settings), one field per process setting of ``settings.PROCESS_SETTINGS``, in
    table order (the module refuses to import when they differ), and ``platform_file``,
    ``op_config_file`` (the files read), ``sources`` (setting -> where its value came from) and
    ``overridden_env`` (the variables a ``VLLM_FL_CONFIG`` file overrode)."""

    policy: SelectionPolicy
    # -- process settings ------------------------------------------------------------------------
    config_file: str | None
    platform: str  # auto-detected when unset or `auto`
    log_level: int  # INFO, or DEBUG with `debug`, when unset
    debug: bool
    plugin_modules: tuple[str, ...]
    flaggems_enable_oplist_path: str
    flagcx_path: str | None
    moe_warm_up: bool
    verify: bool | frozenset[str]
    verify_steps: int
    verify_every: int
    verify_report: str | None
    # -- where they came from ----------------------------------------------------------------------
    platform_file: str | None
    op_config_file: str | None
    sources: Mapping[str, str]
    overridden_env: tuple[str, ...] = ()


_FIELDS = [f.name for f in dataclasses.fields(DispatchConfig)]
_PROCESS_FIELDS = _FIELDS[_FIELDS.index("policy") + 1 : _FIELDS.index("platform_file")]
if _PROCESS_FIELDS != [s.name for s in PROCESS_SETTINGS]:
    raise AssertionError(
        f"DispatchConfig fields {_PROCESS_FIELDS} and the settings table's process settings "
        f"{[s.name for s in PROCESS_SETTINGS]} differ"
    )


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


class _SourceSettings:
    """The settings one source gives (the environment, one YAML file): ``values``, parsed, and
    ``sources``, each one's source as ``explain`` shows it."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def set(self, name: str, value: Any, source: str) -> None:
        self.values[name] = value
        self.sources[name] = source


def _from_file(data: Mapping[str, Any], path: Path, label: str) -> _SourceSettings:
    unknown = [k for k in data if k not in BY_FILE_KEY]
    if unknown:
        raise ConfigError(f"{path}:{unknown[0]}: unknown key; allowed keys: {', '.join(FILE_KEYS)}")
    lists.check_exclusive(data.__contains__, f"{path}: ")
    out = _SourceSettings()
    for key, value in data.items():
        setting = BY_FILE_KEY[key]
        out.set(setting.name, setting.parse(value, f"{path}:{key}"), f"{label} {path}")
    return out


def _from_env(env: Mapping[str, str]) -> _SourceSettings:
    out = _SourceSettings()
    raws: dict[str, tuple[str, str]] = {}  # setting -> (variable, raw value)
    for setting in SETTINGS:
        if setting.scope != "selection":
            continue
        present = [(e, raw) for e in setting.env if (raw := env_value(env, e.name)) is not None]
        if not present:
            continue
        var, raw = present[0]  # the table lists a setting's variables by precedence
        for other, other_raw in present[1:]:
            logger.warning(
                "%s=%r is overridden by %s (higher precedence)", other.name, other_raw, var.name
            )
        raws[setting.name] = (var.name, raw)
    lists.check_exclusive(
        raws.__contains__, label=lambda name: f"{raws[name][0]}={raws[name][1]!r}"
    )
    for setting in SETTINGS:
        if setting.name in raws:
            name, raw = raws[setting.name]
            var = next(e for e in setting.env if e.name == name)
            out.set(setting.name, parse_env(name, raw), var.label(raw))
    if "prefer" in out.values and "compile_prefer" not in out.values:
        # A preference chosen in the environment means that backend, compiled or not; a
        # platform file's compile_prefer must not quietly override it under torch.compile.
        out.set("compile_prefer", None, out.sources["prefer"])
    return out


def _merge(by_precedence: Sequence[_SourceSettings]) -> tuple[dict[str, Any], dict[str, str]]:
    """(values, sources) of the settings of ``by_precedence``, highest precedence first."""
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for given in reversed(by_precedence):  # lowest first, higher ones replace
        for name in lists.displaced(given.values):
            merged.pop(name, None)
            sources.pop(name, None)
        merged.update(given.values)
        sources.update(given.sources)
    return merged, sources


def _process_settings(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    out: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for setting in SETTINGS:
        if setting.scope != "process":
            continue
        (var,) = setting.env  # a process setting has one variable
        raw = env_value(env, var.name)
        out[setting.name] = setting.default if raw is None else parse_env(var.name, raw)
        sources[setting.name] = "default" if raw is None else var.label(raw)
    if out["log_level"] is None:
        out["log_level"] = logging.DEBUG if out["debug"] else logging.INFO
        sources["log_level"] = "env VLLM_FL_DISPATCH_DEBUG" if out["debug"] else "default"
    if out["platform"] is None:  # unset or "auto"
        out["platform"] = detect_platform()
        sources["platform"] = "auto-detected"
    return out, sources


def load_config(environ: Mapping[str, str] | None = None) -> DispatchConfig:
    """Read the environment and config files; raise ``ConfigError`` on any invalid value."""
    env = os.environ if environ is None else environ
    proc, proc_sources = _process_settings(env)
    config_path = proc["config_file"]
    overridden: tuple[str, ...] = ()
    platform_file = None
    if config_path is not None:
        path = Path(config_path)
        data = read_yaml_mapping(path, "VLLM_FL_CONFIG", allow_empty=False)
        per_source = [_from_file(data, path, "config file")]
        overridden = tuple(v for v in SELECTION_ENV if env_value(env, v) is not None)
        if overridden:
            logger.warning(
                "VLLM_FL_CONFIG=%s overrides every selection setting; ignoring %s",
                config_path,
                ", ".join(overridden),
            )
    else:
        per_source = [_from_env(env)]
        pf = values.CONFIG_DIR / f"{proc['platform']}.yaml"
        if pf.is_file():
            platform_file = str(pf)
            data = read_yaml_mapping(pf, "platform YAML", allow_empty=True)
            per_source.append(_from_file(data, pf, "platform YAML"))
    merged, sources = _merge(per_source)
    merged["enabled"] = proc["enabled"]
    sources["enabled"] = proc_sources["enabled"]
    names = list(POLICY_FIELDS)
    all_sources = {name: sources.get(name, "default") for name in names}
    policy = SelectionPolicy(**merged, sources=all_sources, source="configuration")
    op_config = env_value(env, "VLLM_FL_OP_CONFIG")
    return DispatchConfig(
        policy=policy,
        **{s.name: proc[s.name] for s in PROCESS_SETTINGS},
        platform_file=platform_file,
        op_config_file=op_config.strip() if op_config else None,
        sources=MappingProxyType({**proc_sources, **all_sources}),
        overridden_env=overridden,
    )
