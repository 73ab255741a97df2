"""Run-time dispatch of operators between FlagGems (``flagos``), vendor kernels (``vendor``) and a
PyTorch reference (``reference``). Importing this package imports neither vLLM, FlagGems nor
torch_npu.

Its parts, one job each, lower layers first:

- ``types``: ``OpImpl`` (one implementation of one op), its kinds and priorities, the errors;
- ``registry``: ``OpRegistry``, op -> implementations, the backend each belongs to and where it
  came from; ``signatures``: the one rule an impl's signature follows, checked at registration;
- ``config/``: everything settings are: the settings table (the one reader of the
  environment), value parsers, the hardened YAML/JSON reader, the loader, the typed values
  ``DispatchConfig`` and ``SelectionPolicy`` (with the list rules), the generated docs, the
  platform YAMLs;
- ``policy/``: the policy in force: the process-wide configuration and policy, its context
  managers, and the names in a policy that the registry does not know;
- ``sync``: the one lock of every dispatch state change, the generation counter, fork safety;
- ``runtime/``: trampolines, bindings, failures, ``OpManager``, the default manager, and
  ``registration`` (a generated ``register_ops`` table into ``OpImpl``s and custom ops);
- ``backend``: the ``Backend`` object (declared hooks); ``availability``: probes (``Probe``);
  ``builtin``: registration of the built-in backends, loaded by name from the generated
  ``builtin_backends`` (the packages themselves live in ``vllm_fl.backends``, above the
  dispatch); ``discovery``: plugins (entry points, ``VLLM_FL_PLUGIN_MODULES``);
- ``explain`` (``python -m vllm_fl.dispatch explain``): what would be selected, and why;
  ``stubs``: recognising scaffolded impl stubs for it;
- ``spec``: the generated contract of every op; ``checks``: the generated table bring-up mode
  compares with (arguments, mutated ones, tolerances); ``shapes``: argument shape checks;
- ``logger_manager``: the plugin's loggers and their stderr handler.
"""

from .availability import Probe
from .config.loader import DispatchConfig, load_config
from .config.selection import SelectionPolicy
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
from .registry import OpRegistry
from .runtime.default_manager import (
    call_method_op,
    call_op,
    dispatch_method,
    get_default_manager,
    reset_default_manager,
    resolve_op,
    used_impls,
)
from .runtime.manager import OpManager
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
