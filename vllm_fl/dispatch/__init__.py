"""Run-time dispatch of operators between FlagGems (``flagos``), vendor kernels (``vendor``) and a
PyTorch reference (``reference``). Importing this package imports neither vLLM, FlagGems nor
torch_npu."""

from .availability import Probe
from .manager import (
    OpManager,
    call_method_op,
    call_op,
    dispatch_method,
    get_default_manager,
    reset_default_manager,
    resolve_op,
    used_impls,
)
from .policy import (
    DispatchConfig,
    SelectionPolicy,
    get_config,
    get_policy,
    load_config,
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
