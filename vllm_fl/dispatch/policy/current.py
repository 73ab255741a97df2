"""The process-wide configuration and current policy, and the ways to change them at run time.

The current policy is the innermost ``policy_context`` if any, else the global policy (read
from the environment and files on first use). Both are process-wide, not per thread: the
selected implementation is installed once for all callers. Listeners (the dispatch managers)
are told after every change, so it takes effect on the next call.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

from .. import sync
from ..config.loader import DispatchConfig, load_config
from ..config.selection import SelectionPolicy
from ..config.values import parse_name_set
from .. import registry
from ..logger_manager import configure_logging

__all__ = [
    "add_policy_listener",
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
]

_lock = threading.RLock()
_config: DispatchConfig | None = None
_global_policy: SelectionPolicy | None = None
_overrides: list[SelectionPolicy] = []
_listeners: list[Callable[[], None]] = []


def _reinit_lock_after_fork() -> None:
    # _lock is held while the configuration is read (files, platform detection): a fork from
    # another thread in that window would leave the child's copy locked for good.
    global _lock
    _lock = threading.RLock()


sync.after_fork_in_child(_reinit_lock_after_fork)


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
def _scoped(policy: SelectionPolicy) -> Iterator[SelectionPolicy]:
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


def policy_context(
    policy: SelectionPolicy | None = None, /, **changes: Any
) -> contextlib.AbstractContextManager[SelectionPolicy]:
    """Use ``policy`` inside the block, or the current policy with ``changes`` (any policy
    setting, validated like every other source, e.g. ``policy_context(prefer="vendor")``).
    Process-wide (like the global policy): every thread sees it, because the selected
    implementation is installed once for all callers. Invalid changes raise ``ConfigError``
    here, before the block is entered."""
    if policy is not None and not isinstance(policy, SelectionPolicy):
        raise TypeError(f"policy_context: expected SelectionPolicy, got {type(policy).__name__}")
    if changes:
        policy = (policy or get_policy()).replace("policy_context", **changes)
    elif policy is None:
        policy = get_policy()
    return _scoped(policy)


def with_strict_mode(strict: Any = True) -> contextlib.AbstractContextManager[SelectionPolicy]:
    """Strict mode (no fallback) inside the block; ``strict`` is parsed like ``VLLM_FL_STRICT``."""
    return _scoped(get_policy().replace("with_strict_mode", strict=strict))


def with_preference(
    prefer: Any, compile_prefer: Any = None
) -> contextlib.AbstractContextManager[SelectionPolicy]:
    """Prefer ``prefer`` inside the block, also under torch.compile unless ``compile_prefer``."""
    return _scoped(
        get_policy().replace("with_preference", prefer=prefer, compile_prefer=compile_prefer)
    )


def with_allowed_vendors(*vendors: str) -> contextlib.AbstractContextManager[SelectionPolicy]:
    """Only ``vendors`` inside the block. Nested blocks narrow: the allowed vendors are those
    every enclosing block allows (possibly none)."""
    source = "with_allowed_vendors"
    allowed = parse_name_set(list(vendors), f"{source}:allow_vendors", "vendor")
    current = get_policy()
    if current.allow_vendors is not None:
        allowed = current.allow_vendors & allowed
    return _scoped(current.replace(source, allow_vendors=allowed))


def with_denied_vendors(*vendors: str) -> contextlib.AbstractContextManager[SelectionPolicy]:
    """Deny ``vendors`` inside the block, in addition to those already denied (nested blocks
    add up)."""
    source = "with_denied_vendors"
    denied = parse_name_set(list(vendors), f"{source}:deny_vendors", "vendor")
    current = get_policy()
    return _scoped(current.replace(source, deny_vendors=current.deny_vendors | denied))


def oot_allowed(name: str, *aliases: str) -> bool:
    """Whether the OOT replacement of in-tree class ``name`` may be registered (current policy)."""
    return get_policy().oot_allowed(name, *aliases)


def _strict() -> bool:
    return get_policy().strict


# The registry refuses a mismatched signature outright in strict mode; it sits below the policy,
# so the policy tells it how to ask.
registry.strict_mode = _strict
