"""Every dispatch setting, one row each: its environment variable(s), its key in the config
files, its parser, its default and its scope (like vLLM's ``envs.py``).

Scopes:

- ``selection``: the environment, the ``VLLM_FL_CONFIG`` file and the platform YAML set it (the
  file overrides every such variable); it is a ``SelectionPolicy`` field.
- ``process``: the environment only; it belongs to the process (``DispatchConfig``), except
  ``enabled`` which the policy carries too, so that ``explain`` and the OOT registration read
  one object.

Every source of a value goes through its row's parser: ``parse_env`` for the environment (the
configuration loader and ``read_env``), the file keys for the YAML files, the policy fields for
``SelectionPolicy``. ``vllm_fl/__init__.py`` reads ``VLLM_FL_PREFER_ENABLED`` and
``VLLM_FL_PLATFORM`` through ``read_env`` before vLLM has chosen a platform: this module imports
neither torch nor vLLM.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from . import values as v
from ..types import ConfigError

__all__ = [
    "EnvVar",
    "Setting",
    "SETTINGS",
    "BY_NAME",
    "BY_ENV",
    "BY_FILE_KEY",
    "FILE_KEYS",
    "ENV_VARS",
    "SELECTION_ENV",
    "LIST_FAMILIES",
    "DEFAULT_OPLIST_PATH",
    "env_value",
    "parse_env",
    "read_env",
]

DEFAULT_OPLIST_PATH = "/tmp/flaggems_enable_oplist.txt"
Parser = Callable[[Any, str], Any]


@dataclass(frozen=True)
class EnvVar:
    """An environment variable of a setting. ``read`` turns its text into what the setting's
    parser takes (a file's content, another syntax); None passes the text itself.
    ``names_file``: the value is a path, shown in the setting's source."""

    name: str
    read: Callable[[str, str], Any] | None = None
    names_file: bool = False

    def label(self, raw: str) -> str:
        return f"env {self.name} ({raw.strip()})" if self.names_file else f"env {self.name}"


@dataclass(frozen=True)
class Setting:
    """One setting. ``family``: the whitelist and the blacklist of one family (listed in that
    order) are mutually exclusive and count as one setting when sources are layered (see
    ``name_lists``)."""

    name: str
    parse: Parser
    default: Any
    scope: str
    doc: str
    env: tuple[EnvVar, ...] = ()
    file_key: str | None = None
    family: str | None = None


def _names(what: str, optional: bool = False) -> Parser:
    if optional:
        return lambda value, source: v.parse_optional_name_set(value, source, what)
    return lambda value, source: v.parse_name_set(value, source, what)


def _read_op_config(raw: str, source: str) -> Any:
    from .files import read_json

    path = Path(raw.strip()).expanduser()
    data = read_json(path, source)
    if not isinstance(data, dict) or set(data) != {"op_backends"}:
        raise ConfigError(
            f"{source}={raw!r}: expected a JSON object with exactly the key 'op_backends' "
            f"(op -> list of tokens), got "
            f"{sorted(data) if isinstance(data, dict) else type(data).__name__}"
        )
    return data["op_backends"]


_SEL, _PROC = "selection", "process"

# fmt: off
SETTINGS: tuple[Setting, ...] = (
    # -- process: environment only ------------------------------------------------------------
    Setting("enabled", v.parse_bool, True, _PROC,
            "global switch; false: no FlagGems impl, no OOT class, no vLLM platform of ours",
            (EnvVar("VLLM_FL_PREFER_ENABLED"),)),
    Setting("config_file", v.parse_input_file, None, _PROC,
            "YAML file replacing every selection setting",
            (EnvVar("VLLM_FL_CONFIG"),)),
    Setting("platform", v.parse_platform, None, _PROC,
            "platform: auto (None) or a name with a config/<name>.yaml",
            (EnvVar("VLLM_FL_PLATFORM"),)),
    Setting("log_level", v.parse_log_level, None, _PROC,
            "dispatch log level (default INFO, DEBUG with VLLM_FL_DISPATCH_DEBUG)",
            (EnvVar("VLLM_FL_LOG_LEVEL"),)),
    Setting("debug", v.parse_bool, False, _PROC,
            "log every resolution with its candidates and reasons",
            (EnvVar("VLLM_FL_DISPATCH_DEBUG"),)),
    Setting("plugin_modules", v.parse_module_list, (), _PROC,
            "modules exposing register(registry)",
            (EnvVar("VLLM_FL_PLUGIN_MODULES"),)),
    Setting("flaggems_enable_oplist_path", v.parse_output_file, DEFAULT_OPLIST_PATH, _PROC,
            "file listing the ops that run a FlagGems impl",
            (EnvVar("FLAGGEMS_ENABLE_OPLIST_PATH"),)),
    Setting("flagcx_path", v.parse_existing_dir, None, _PROC,
            "FlagCX install directory",
            (EnvVar("FLAGCX_PATH"),)),
    Setting("moe_warm_up", v.parse_bool, True, _PROC,
            "compile the selected MoE backend's kernel variants before serving",
            (EnvVar("VLLM_FL_MOE_WARMUP"),)),
    # -- selection: environment, VLLM_FL_CONFIG file, platform YAML -----------------------------
    Setting("prefer", v.parse_prefer, "flagos", _SEL,
            "default order: flagos, vendor or reference first",
            (EnvVar("VLLM_FL_PREFER"),), "prefer"),
    Setting("compile_prefer", v.parse_optional_prefer, None, _SEL,
            "preference for ops traced by torch.compile (None: prefer)",
            (EnvVar("VLLM_FL_COMPILE_PREFER"),), "compile_prefer"),
    Setting("strict", v.parse_bool, False, _SEL,
            "true: the first failure raises; false: fall back to the next candidate",
            (EnvVar("VLLM_FL_STRICT"),), "strict"),
    # VLLM_FL_PER_OP comes first: it wins over VLLM_FL_OP_CONFIG.
    Setting("per_op_order", v.parse_op_backends, {}, _SEL,
            "per-op token lists; a listed op may use only the listed backends",
            (EnvVar("VLLM_FL_PER_OP", v.parse_per_op_string),
             EnvVar("VLLM_FL_OP_CONFIG", _read_op_config, names_file=True)), "op_backends"),
    Setting("allow_vendors", _names("vendor", optional=True), None, _SEL,
            "vendor whitelist (None: every vendor)",
            (EnvVar("VLLM_FL_ALLOW_VENDORS"),), "allow_vendors"),
    Setting("deny_vendors", _names("vendor"), frozenset(), _SEL,
            "vendor blacklist",
            (EnvVar("VLLM_FL_DENY_VENDORS"),), "deny_vendors"),
    Setting("use_flaggems", v.parse_bool, True, _SEL,
            "false leaves every FlagGems impl out",
            (EnvVar("USE_FLAGGEMS"),), "use_flaggems"),
    Setting("flagos_whitelist", _names("op", optional=True), None, _SEL,
            "ops that may use FlagGems",
            (EnvVar("VLLM_FL_FLAGOS_WHITELIST"),), "flagos_whitelist", "flagos"),
    Setting("flagos_blacklist", _names("op"), frozenset(), _SEL,
            "ops that must not use FlagGems",
            (EnvVar("VLLM_FL_FLAGOS_BLACKLIST"),), "flagos_blacklist", "flagos"),
    Setting("oot_enabled", v.parse_bool, True, _SEL,
            "register the OOT layer classes over vLLM's",
            (EnvVar("VLLM_FL_OOT_ENABLED"),), "oot_enabled"),
    Setting("oot_whitelist", _names("op", optional=True), None, _SEL,
            "in-tree class or op names to replace",
            (EnvVar("VLLM_FL_OOT_WHITELIST"),), "oot_whitelist", "oot"),
    Setting("oot_blacklist", _names("op"), frozenset(), _SEL,
            "in-tree class or op names to leave alone",
            (EnvVar("VLLM_FL_OOT_BLACKLIST"),), "oot_blacklist", "oot"),
)
# fmt: on

BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}
BY_ENV: Mapping[str, tuple[Setting, EnvVar]] = {e.name: (s, e) for s in SETTINGS for e in s.env}
BY_FILE_KEY: Mapping[str, Setting] = {s.file_key: s for s in SETTINGS if s.file_key}
FILE_KEYS: tuple[str, ...] = tuple(BY_FILE_KEY)
# Every environment variable and the setting it sets.
ENV_VARS: Mapping[str, str] = {name: s.name for name, (s, _) in BY_ENV.items()}
# The variables a VLLM_FL_CONFIG file overrides.
SELECTION_ENV: tuple[str, ...] = tuple(n for n, (s, _) in BY_ENV.items() if s.scope == _SEL)
# family -> (whitelist, blacklist), from the table's ``family`` column.
LIST_FAMILIES: Mapping[str, tuple[str, str]] = {
    family: tuple(s.name for s in SETTINGS if s.family == family)  # type: ignore[misc]
    for family in dict.fromkeys(s.family for s in SETTINGS if s.family)
}
assert all(len(pair) == 2 and BY_NAME[pair[0]].default is None for pair in LIST_FAMILIES.values())


def env_value(environ: Mapping[str, str], var: str) -> str | None:
    """The raw value of ``var``; unset and blank are the same (None)."""
    raw = environ.get(var)
    return raw if raw is not None and raw.strip() else None


def parse_env(var: str, raw: str) -> Any:
    """The value of environment variable ``var`` set to ``raw``: its ``EnvVar.read`` if any, then
    its setting's parser. Raises ``ConfigError`` naming the variable, the value and what is
    allowed."""
    setting, env = BY_ENV[var]
    value = env.read(raw, var) if env.read is not None else raw
    return setting.parse(value, var)


def read_env(var: str, environ: Mapping[str, str] | None = None) -> Any:
    """The parsed value of environment variable ``var`` (its setting's default when unset)."""
    raw = env_value(os.environ if environ is None else environ, var)
    return BY_ENV[var][0].default if raw is None else parse_env(var, raw)
