"""Every setting of the plugin, one row each: its environment variable(s), its key in the
config files, its parser, its default, its scope and its documentation (like vLLM's ``envs.py``).
``explain`` and the configuration table of the docs (``docs``) are derived from these rows; the
two typed objects that hold the values, ``SelectionPolicy`` (``selection``) and
``DispatchConfig`` (``loader``), are written out, one field per row, and refuse to import when
they and the table differ. Adding a setting is adding a row and its field.

Scopes:

- ``selection``: the environment, the ``VLLM_FL_CONFIG`` file and the platform YAML set it (the
  file overrides every such variable); it is a ``SelectionPolicy`` field.
- ``process``: the environment only; it belongs to the process (a ``DispatchConfig`` field),
  except ``enabled`` (``policy=True``) which the policy carries instead, so that ``explain``
  and the OOT registration read one object.

This module is the one reader of the environment: ``parse_env`` turns a variable's text into its
value through the row's parser, once; the configuration loader, ``read_env`` and ``env_text``
(the text as written, for a message that quotes it) all go through it, and the code outside the
dispatch reads its variables with ``read_env`` too (``vllm_fl/__init__.py`` reads
``VLLM_FL_PREFER_ENABLED`` and ``VLLM_FL_PLATFORM`` before vLLM has chosen a platform). It
imports neither torch nor vLLM.
"""

from __future__ import annotations

import os
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from ..types import ConfigError
from . import values as v

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
    "POLICY_SETTINGS",
    "PROCESS_SETTINGS",
    "DEFAULT_OPLIST_PATH",
    "env_value",
    "env_text",
    "parse_env",
    "read_env",
]

DEFAULT_OPLIST_PATH = "/tmp/flaggems_enable_oplist.txt"
Parser = Callable[[Any, str], Any]
SELECTION, PROCESS = "selection", "process"


@dataclass(frozen=True)
class EnvVar:
    """An environment variable of a setting. ``read`` turns its text into what the setting's
    parser takes (a file's content, another syntax); None passes the text itself.
    ``names_file``: the value is a path, shown in the setting's source. ``doc``: what the
    docs say of a setting's second variable (the setting's ``doc`` describes the first)."""

    name: str
    read: Callable[[str, str], Any] | None = None
    names_file: bool = False
    doc: str | None = None

    def label(self, raw: str) -> str:
        return f"env {self.name} ({raw.strip()})" if self.names_file else f"env {self.name}"


@dataclass(frozen=True)
class Setting:
    """One setting.

    ``doc``: what it means (the docs' table); ``parse``: its parser (``values``), which every
    source goes through; ``default``: its value when no source sets it; ``holds``: for a setting
    of the policy, whether a value already is what ``parse`` returns (``values.is_*``);
    ``policy``: a process setting that ``SelectionPolicy`` carries (``enabled``);
    ``default_doc``: how the docs spell the default when the value alone does not say it;
    ``show``: how ``explain`` prints the value; ``reserved``: accepted and validated for
    compatibility, but nothing reads it.
    """

    name: str
    scope: str
    doc: str
    env: tuple[EnvVar, ...] = ()
    file_key: str | None = None
    _: KW_ONLY
    parse: Parser
    default: Any
    holds: Callable[[Any], bool] | None = None
    policy: bool = False
    default_doc: str | None = None
    show: Callable[[Any], str] = str
    reserved: bool = False

    def __post_init__(self) -> None:
        if self.scope not in (SELECTION, PROCESS):
            raise ValueError(f"setting {self.name}: invalid scope {self.scope!r}")
        if self.in_policy and self.holds is None:
            raise ValueError(f"setting {self.name}: a policy setting needs its check, holds")

    @property
    def in_policy(self) -> bool:
        """Whether ``SelectionPolicy`` carries it: every selection setting, and ``policy``."""
        return self.scope == SELECTION or self.policy


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


def _level_name(level: int) -> str:
    import logging

    return logging.getLevelName(level)


def _modules(mods: tuple[str, ...]) -> str:
    return ", ".join(mods) or "(none)"


def _verified(value: bool | frozenset[str]) -> str:
    if isinstance(value, bool):
        return "on (every op)" if value else "off"
    return ", ".join(sorted(value))


def _every(k: int) -> str:
    return "every call" if k <= 1 else f"one call in {k}"


def _steps(n: int) -> str:
    return "every step" if n == 0 else f"the first {n} step(s)"


# fmt: off
SETTINGS: tuple[Setting, ...] = (
    # -- process: environment only ------------------------------------------------------------
    Setting("enabled", PROCESS,
            "global switch; `false` leaves FlagGems impls out, registers no OOT class and no "
            "vLLM platform",
            (EnvVar("VLLM_FL_PREFER_ENABLED"),),
            parse=v.parse_bool, holds=v.is_bool, default=True, policy=True),
    Setting("config_file", PROCESS, "YAML file, complete override of every file key",
            (EnvVar("VLLM_FL_CONFIG"),), parse=v.parse_input_file, default=None),
    Setting("platform", PROCESS,
            "`auto` or a name with a platform YAML (`cuda`, `ascend`, `cpu`); also selects the "
            "vLLM platform",
            (EnvVar("VLLM_FL_PLATFORM"),), parse=v.parse_platform, default=None,
            default_doc="`auto`"),
    # -- selection: environment, VLLM_FL_CONFIG file, platform YAML -----------------------------
    Setting("prefer", SELECTION, "`flagos`, `vendor` or `reference`: the default order",
            (EnvVar("VLLM_FL_PREFER"),), "prefer",
            parse=v.parse_prefer, holds=v.is_prefer, default="flagos"),
    Setting("compile_prefer", SELECTION,
            "preference for ops traced by `torch.compile`; the CUDA platform file sets "
            "`reference`, as vLLM lets Inductor compile these ops",
            (EnvVar("VLLM_FL_COMPILE_PREFER"),), "compile_prefer",
            parse=v.parse_optional_prefer, holds=v.is_optional_prefer, default=None,
            default_doc="unset: as `prefer`"),
    Setting("strict", SELECTION,
            "on: the first failure raises the original exception; off: log it once (WARNING, "
            "traceback) and try the next candidate",
            (EnvVar("VLLM_FL_STRICT"),), "strict",
            parse=v.parse_bool, holds=v.is_bool, default=False),
    # VLLM_FL_PER_OP comes first: it wins over VLLM_FL_OP_CONFIG.
    Setting("per_op_order", SELECTION,
            "per-op token lists, `rms_norm=vendor|flagos;silu_and_mul=flagos` (file: op -> "
            "list); a listed op may use only the listed backends",
            (EnvVar("VLLM_FL_PER_OP", v.split_per_op_string),
             EnvVar("VLLM_FL_OP_CONFIG", _read_op_config, names_file=True,
                    doc="JSON file `{\"op_backends\": {op: [tokens]}}`; `VLLM_FL_PER_OP` wins "
                        "over it")), "op_backends",
            parse=v.parse_op_backends, holds=v.is_op_backends, default=MappingProxyType({}),
            default_doc="unset: every op takes the default order"),
    Setting("allow_vendors", SELECTION, "vendor whitelist, comma-separated",
            (EnvVar("VLLM_FL_ALLOW_VENDORS"),), "allow_vendors",
            parse=v.name_set_parser("vendor", optional=True), holds=v.is_optional_name_set,
            default=None, default_doc="unset: every vendor"),
    Setting("deny_vendors", SELECTION, "vendor blacklist, comma-separated",
            (EnvVar("VLLM_FL_DENY_VENDORS"),), "deny_vendors",
            parse=v.name_set_parser("vendor"), holds=v.is_name_set, default=frozenset()),
    Setting("use_flaggems", SELECTION, "`false` leaves every FlagGems impl out",
            (EnvVar("USE_FLAGGEMS"),), "use_flaggems",
            parse=v.parse_bool, holds=v.is_bool, default=True),
    Setting("flagos_whitelist", SELECTION, "ops that may use FlagGems",
            (EnvVar("VLLM_FL_FLAGOS_WHITELIST"),), "flagos_whitelist",
            parse=v.name_set_parser("op", optional=True), holds=v.is_optional_name_set,
            default=None, default_doc="unset: every op"),
    Setting("flagos_blacklist", SELECTION, "ops that must not use FlagGems",
            (EnvVar("VLLM_FL_FLAGOS_BLACKLIST"),), "flagos_blacklist",
            parse=v.name_set_parser("op"), holds=v.is_name_set, default=frozenset()),
    Setting("oot_enabled", SELECTION, "register the OOT classes over vLLM's",
            (EnvVar("VLLM_FL_OOT_ENABLED"),), "oot_enabled",
            parse=v.parse_bool, holds=v.is_bool, default=True),
    Setting("oot_whitelist", SELECTION,
            "in-tree class names, or vLLM's or ops.yaml's op names, to replace",
            (EnvVar("VLLM_FL_OOT_WHITELIST"),), "oot_whitelist",
            parse=v.name_set_parser("op", optional=True), holds=v.is_optional_name_set,
            default=None, default_doc="unset: every class"),
    Setting("oot_blacklist", SELECTION,
            "in-tree class names, or vLLM's or ops.yaml's op names, to leave alone",
            (EnvVar("VLLM_FL_OOT_BLACKLIST"),), "oot_blacklist",
            parse=v.name_set_parser("op"), holds=v.is_name_set, default=frozenset()),
    # -- process, continued ----------------------------------------------------------------------
    Setting("log_level", PROCESS,
            "`DEBUG`, `INFO`, `WARNING` (`WARN`), `ERROR`, `CRITICAL`",
            (EnvVar("VLLM_FL_LOG_LEVEL"),), parse=v.parse_log_level, default=None,
            default_doc="`INFO` (`DEBUG` with `VLLM_FL_DISPATCH_DEBUG`)", show=_level_name),
    Setting("debug", PROCESS,
            "log every resolution with its candidates and reasons (and default the level to "
            "`DEBUG`)",
            (EnvVar("VLLM_FL_DISPATCH_DEBUG"),), parse=v.parse_bool, default=False),
    Setting("plugin_modules", PROCESS,
            "comma-separated modules exposing `register(registry)` (entry-point group "
            "`vllm_fl.plugin` too)",
            (EnvVar("VLLM_FL_PLUGIN_MODULES"),), parse=v.parse_module_list, default=(),
            show=_modules),
    Setting("flaggems_enable_oplist_path", PROCESS,
            "FlagGems backend: file listing the ops that currently run a FlagGems impl, one per "
            "line, rewritten whenever that set of ops changes; never written while no op runs "
            "FlagGems",
            (EnvVar("FLAGGEMS_ENABLE_OPLIST_PATH"),), parse=v.parse_output_file,
            default=DEFAULT_OPLIST_PATH),
    Setting("flagcx_path", PROCESS,
            "FlagCX library directory (holding lib/libflagcx.so, as scripts/build_flagcx.sh "
            "builds it): enables the `vendor:flagcx` backend of the collectives, preferred over "
            "vLLM's own CUDA communicator",
            (EnvVar("FLAGCX_PATH"),), parse=v.parse_existing_dir, default=None),
    Setting("moe_warm_up", PROCESS,
            "before serving, the GPU worker lets the selected `fused_experts` backend compile "
            "its kernel variants; `false` skips it (a faster cold start, compilation on first "
            "use)",
            (EnvVar("VLLM_FL_MOE_WARMUP"),), parse=v.parse_bool, default=True),
    # -- bring-up mode (vllm_fl.verify) --------------------------------------------------------
    Setting("verify", PROCESS,
            "bring-up mode: every call of a dispatched op (or of the ops listed, "
            "comma-separated) also runs the op's reference on copies of its inputs and records "
            "the difference; the model keeps the selected impl's result (docs/verify.md)",
            (EnvVar("VLLM_FL_VERIFY"),), parse=v.parse_verify, default=False, show=_verified),
    Setting("verify_steps", PROCESS,
            "verify only during the first N engine steps (model forwards after vLLM's "
            "warm-up); `0`: every step",
            (EnvVar("VLLM_FL_VERIFY_STEPS"),), parse=v.parse_count, default=0, show=_steps),
    Setting("verify_every", PROCESS,
            "verify every K-th call of each op (`1`, `0`: every call)",
            (EnvVar("VLLM_FL_VERIFY_EVERY"),), parse=v.parse_count, default=1, show=_every),
    Setting("verify_report", PROCESS,
            "directory where each verifying process writes its report as "
            "`verify-<pid>.json` when it exits; `python -m vllm_fl.verify` merges them",
            (EnvVar("VLLM_FL_VERIFY_REPORT"),), parse=v.parse_output_dir, default=None),
)
# fmt: on

BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}
BY_ENV: Mapping[str, tuple[Setting, EnvVar]] = {e.name: (s, e) for s in SETTINGS for e in s.env}
BY_FILE_KEY: Mapping[str, Setting] = {s.file_key: s for s in SETTINGS if s.file_key}
FILE_KEYS: tuple[str, ...] = tuple(BY_FILE_KEY)
# Every environment variable and the setting it sets.
ENV_VARS: Mapping[str, str] = {name: s.name for name, (s, _) in BY_ENV.items()}
# The variables a VLLM_FL_CONFIG file overrides.
SELECTION_ENV: tuple[str, ...] = tuple(n for n, (s, _) in BY_ENV.items() if s.scope == SELECTION)
# The settings of the policy (``SelectionPolicy`` fields) and of the process (``DispatchConfig``
# fields), in table order.
POLICY_SETTINGS: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.in_policy)
PROCESS_SETTINGS: tuple[Setting, ...] = tuple(s for s in SETTINGS if not s.in_policy)


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


def env_text(var: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The text of environment variable ``var`` as written, stripped (None when unset or blank),
    for a message that quotes it; its value is ``read_env``'s."""
    if var not in BY_ENV:
        raise KeyError(f"{var} is no variable of the settings table")
    raw = env_value(os.environ if environ is None else environ, var)
    return None if raw is None else raw.strip()
