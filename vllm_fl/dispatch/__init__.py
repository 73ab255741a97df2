"""Run-time dispatch of operators between FlagGems (``flagos``), vendor kernels (``vendor``) and a
PyTorch reference (``reference``). Importing this package imports neither vLLM, FlagGems nor
torch_npu.

The modules, one job each, in the order a call meets them:

- ``types``: ``OpImpl`` (one implementation of one op), its kinds and priorities, the errors;
- ``registry``: ``OpRegistry``, op -> implementations; ``availability``: ``Probe`` checks;
- ``builtin_backends`` and ``discovery``: the built-in backends and the plugins registering;
- ``values``: one parser per kind of setting value; ``settings``: the table of every setting;
- ``config_files``: hardened YAML/JSON reading; ``config_loader``: the sources of settings and
  their precedence (``load_config``); ``name_lists``: the white/black list rules;
- ``selection``: ``SelectionPolicy``, what may run and in which order;
- ``policy``: the process-wide configuration and current policy, ``policy_context`` and the
  ``with_*`` helpers; ``name_checks``: names in the policy the registry does not know;
- ``op_manager``: ``OpManager``, an op's candidates (cached) and failed implementations;
- ``trampoline``: the code of an op's dispatch function; ``binding``: one op's trampoline and
  what it calls (resolution, installation, fallback); ``sync``: the lock and the generation;
- ``default_manager``: the process-wide manager, ``call_op`` and ``dispatch_method``;
- ``explain`` (``python -m vllm_fl.dispatch explain``): what would be selected, and why;
- ``opaque``: runtime helpers of the generated ``register_ops`` of opaque backends;
- ``logger_manager``: the plugin's loggers and their stderr handler.
"""

from .backends.availability import Probe
from .config.loader import DispatchConfig, load_config
from .runtime.default_manager import (
    call_method_op,
    call_op,
    dispatch_method,
    get_default_manager,
    reset_default_manager,
    resolve_op,
    used_impls,
)
from .policy.current import (
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
from .runtime.manager import OpManager
from .registry import OpRegistry
from .policy.selection import SelectionPolicy
from .types import BackendImplKind, BackendPriority, ConfigError, DispatchError, OpImpl

__all__ = [
    "BackendImplKind",
    "BackendPriority",
    "ConfigError",
    "DispatchConfig",
    "DispatchError",
    "OpImpl",
    "OpManager",
    "OpRegistry",
    "Probe",
    "SelectionPolicy",
    "call_method_op",
    "call_op",
    "dispatch_method",
    "get_config",
    "get_default_manager",
    "get_policy",
    "load_config",
    "oot_allowed",
    "policy_context",
    "reset_default_manager",
    "reset_global_policy",
    "resolve_op",
    "set_global_policy",
    "used_impls",
    "with_allowed_vendors",
    "with_denied_vendors",
    "with_preference",
    "with_strict_mode",
]
