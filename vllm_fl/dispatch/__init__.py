"""Run-time dispatch of operators between FlagGems (``flagos``), vendor kernels (``vendor``) and a
PyTorch reference (``reference``). Importing this package imports neither vLLM, FlagGems,
torch_npu nor torch.

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
- ``spec``: the generated contract of every op; ``trampolines``: every op's generated dispatch
  trampolines (imported by ``runtime.trampoline`` on first use: they import torch);
  ``checks``: the generated table bring-up mode compares with (arguments, mutated ones,
  tolerances); ``shapes``: argument shape checks;
- ``logger_manager``: the plugin's loggers and their stderr handler.

The rest of the plugin, its benchmarks and the generated ``register_ops.py`` files come in
through this package's names only (``tests/test_structure.py`` holds them to it); its
sub-modules are its internals. The names outside the policy and the calls:

- the settings table's reader (``read_env``, and ``env_text`` for a message quoting the value)
  and the plugin's logger (``get_logger``, ``configure_logger``);
- what a backend package declares: its ``Backend`` hooks, the registration table of its
  generated ``register_ops.py`` (``DeclaredBackend``, ``Impl``, ``CustomOp``, ``Registrations``,
  ``attrs``, ``flatten``) and ``check_shape`` for its impls;
- the generated contract: ``FLBackendBase`` (``spec``) and ``CHECKS`` (``checks``);
- ``wrap_selections``, the hook bring-up mode (``vllm_fl.verify``) gives every op's eager calls
  its verifying function by;
- ``follow_bound_method``, how the vLLM integration keeps a layer's ``_forward_method`` (a
  method vLLM bound from ``forward_oot``) current when the dispatch changes what the class holds;
- ``explain_ops``, what ``explain`` reports as data: per op under a given policy, the candidates
  in order, those that are not and why, the selection (``vllm-fl coverage`` reads it).

Importing the package imports the policy, the managers, the settings table and the logger; a
name whose module imports torch or is needed only by a backend or the verifier (the backend
hooks, the registration table, ``check_shape``, ``FLBackendBase``, ``CHECKS``) is imported on
first use (``_LAZY``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .availability import Probe
from .config.loader import DispatchConfig, load_config
from .config.selection import SelectionPolicy
from .config.settings import env_text, read_env
from .logger_manager import configure_logger, get_logger
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
from .runtime.binding import follow_bound_method
from .runtime.manager import OpManager, wrap_selections
from .types import BackendImplKind, BackendPriority, ConfigError, DispatchError, OpImpl

if TYPE_CHECKING:
    from .backend import Backend, CommunicatorUnsupported
    from .checks import CHECKS
    from .explain import explain_ops
    from .runtime.registration import (
        CustomOp,
        DeclaredBackend,
        Impl,
        Registrations,
        attrs,
        flatten,
    )
    from .shapes import check_shape
    from .spec import FLBackendBase

#: name -> the module defining it, imported on first use: the modules that import torch
#: (``shapes``, ``spec``), the generated table of checks, and what only a backend's registration
#: needs. Importing the package imports none of them.
_LAZY = {
    "Backend": ".backend",
    "CHECKS": ".checks",
    "CommunicatorUnsupported": ".backend",
    "CustomOp": ".runtime.registration",
    "DeclaredBackend": ".runtime.registration",
    "FLBackendBase": ".spec",
    "explain_ops": ".explain",
    "Impl": ".runtime.registration",
    "Registrations": ".runtime.registration",
    "attrs": ".runtime.registration",
    "check_shape": ".shapes",
    "flatten": ".runtime.registration",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Backend",
    "BackendImplKind",
    "BackendPriority",
    "CHECKS",
    "CommunicatorUnsupported",
    "ConfigError",
    "CustomOp",
    "DeclaredBackend",
    "DispatchConfig",
    "DispatchError",
    "FLBackendBase",
    "Impl",
    "OpImpl",
    "OpManager",
    "OpRegistry",
    "Probe",
    "Registrations",
    "SelectionPolicy",
    "attrs",
    "call_method_op",
    "call_op",
    "check_shape",
    "configure_logger",
    "dispatch_method",
    "env_text",
    "explain_ops",
    "flatten",
    "follow_bound_method",
    "get_config",
    "get_default_manager",
    "get_logger",
    "get_policy",
    "load_config",
    "oot_allowed",
    "policy_context",
    "read_env",
    "reset_default_manager",
    "reset_global_policy",
    "resolve_op",
    "set_global_policy",
    "used_impls",
    "with_allowed_vendors",
    "with_denied_vendors",
    "with_preference",
    "with_strict_mode",
    "wrap_selections",
]
