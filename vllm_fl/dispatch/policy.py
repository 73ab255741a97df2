"""The selection policy's public names, gathered from the modules that implement them.

- ``values``: one parser per kind of value (booleans, preferences, tokens, name lists, paths);
- ``settings``: the table of every setting (environment variables, file key, parser, scope);
- ``selection``: ``SelectionPolicy``, validated whatever the entry point;
- ``config_files``: hardened reading of the YAML and JSON files;
- ``config_loader``: the sources of settings and their precedence (``load_config``);
- ``policy_state``: the process-wide configuration, current policy and ``with_*`` helpers;
- ``name_checks``: op, impl and vendor names the registry does not know.
"""

from __future__ import annotations

from .config_loader import DispatchConfig, detect_platform, load_config
from .values import available_platforms
from .policy_state import (
    add_policy_listener,
    get_config,
    get_policy,
    oot_allowed,
    policy_context,
    reset_global_policy,
    set_global_policy,
    with_allowed_vendors,
    with_denied_vendors,
    with_preference,
    with_strict_mode,
)
from .selection import DEFAULT_ORDERS, SelectionPolicy, token_matches
from .settings import DEFAULT_OPLIST_PATH, ENV_VARS, FILE_KEYS
from .values import PREFER_CHOICES, TOKEN_FORMS, parse_token

__all__ = [
    "PREFER_CHOICES",
    "DEFAULT_ORDERS",
    "DEFAULT_OPLIST_PATH",
    "FILE_KEYS",
    "ENV_VARS",
    "TOKEN_FORMS",
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
    "token_matches",
    "detect_platform",
    "available_platforms",
]
