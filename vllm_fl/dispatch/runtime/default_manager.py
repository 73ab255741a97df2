"""The process-wide default manager, and the ways to call an op through it or any manager.

Hot path: each op has one trampoline (``trampoline``) installed by its ``Binding`` (``binding``);
``dispatch_method`` puts it on the layer class as a plain function, so ``layer.forward_oot(x)``
costs one extra Python frame over calling the impl directly, and none while nothing can fall back
from the selected impl (the class then holds the impl itself, see ``binding``). A policy or
registry change puts the resolver back in the trampoline (and the trampoline back on the class),
so the next call re-resolves, also for layers whose ``forward_oot`` (or vLLM's
``_forward_method``) already holds it.
"""

from __future__ import annotations

import threading
from types import MethodType
from typing import Any, Callable

from .. import sync
from ..policy.current import get_config, get_policy
from ..policy.name_checks import warn_unknown_names
from ..registry import OpRegistry
from .binding import BindingTable
from .manager import OpManager

__all__ = [
    "dispatch_method",
    "get_default_manager",
    "reset_default_manager",
    "call_op",
    "resolve_op",
    "call_method_op",
    "used_impls",
]

# --------------------------------------------------------------------------- default manager

# Held while the default manager is built, i.e. while built-in backends and plugins register.
_DEFAULT_LOCK = threading.RLock()
_DEFAULT: OpManager | None = None


def _reinit_default_lock() -> None:
    # A thread of the parent may have been building the default manager: the child (where
    # _DEFAULT is still None then) builds its own.
    global _DEFAULT_LOCK
    _DEFAULT_LOCK = threading.RLock()


sync.after_fork_in_child(_reinit_default_lock)


def get_default_manager() -> OpManager:
    """The process-wide manager: built-in backends and plugins registered on first use."""
    m = _DEFAULT
    if m is not None:
        return m
    return _build_default_manager()


def _build_default_manager() -> OpManager:
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            from ..builtin import register_builtins
            from ..discovery import load_plugins

            cfg = get_config()
            registry = OpRegistry()
            errors: list[tuple[str, str]] = []
            register_builtins(registry, errors)
            load_plugins(registry, cfg.plugin_modules, errors)
            warn_unknown_names(get_policy(), registry)
            _DEFAULT = OpManager(registry, bindings=_DEFAULT_BINDINGS, load_errors=errors)
        return _DEFAULT


# The default manager's trampolines: layer classes hold them, so they outlive any one manager.
_DEFAULT_BINDINGS = BindingTable(get_default_manager)
_BY_OP = _DEFAULT_BINDINGS.by_op


def reset_default_manager() -> None:
    """Drop the default manager; the next use builds a fresh one (re-registering everything)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        old, _DEFAULT = _DEFAULT, None
        with sync.LOCK:
            if old is not None:
                old.close()
            sync.bump_generation()  # a fallback of the old manager must not install its impl
            for b in _DEFAULT_BINDINGS:
                b.invalidate(registry_changed=True)
                b.forget_use()


def call_op(op_name: str, *args: Any, **kwargs: Any) -> Any:
    """Call the selected implementation of ``op_name`` (default manager)."""
    b = _BY_OP.get(op_name)
    if b is None:
        b = _DEFAULT_BINDINGS.get(op_name)
    return b.fn(*args, **kwargs)


def call_method_op(op_name: str, instance: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the selected implementation of ``op_name`` with ``self`` = ``instance``."""
    b = _BY_OP.get(op_name)
    if b is None:
        b = _DEFAULT_BINDINGS.get(op_name)
    return b.fn(instance, *args, **kwargs)


def resolve_op(op_name: str) -> Callable[..., Any]:
    """The selected implementation function of ``op_name`` (default manager)."""
    return get_default_manager().resolve(op_name)


def used_impls(traced: bool = False) -> dict[str, str]:
    """op -> impl id selected for eager calls (default manager), or for calls traced by
    torch.compile."""
    return get_default_manager().used_impls(traced)


# --------------------------------------------------------------------------- dispatch_method


class dispatch_method:  # noqa: N801 - reads like a decorator: forward_oot = dispatch_method("op")
    """``forward_oot = dispatch_method("rms_norm")``: ``layer.forward_oot(x, residual)`` calls the
    selected impl of the op with ``self`` bound to the layer.

    When the class is created the descriptor replaces itself in the class with the op's trampoline
    (a plain function), so calls are ordinary method calls. Nothing is resolved then: the first
    call (or ``resolve_all()``) resolves.
    """

    def __init__(self, op_name: str, *, manager: OpManager | None = None) -> None:
        if not isinstance(op_name, str) or not op_name:
            raise ValueError(f"dispatch_method: invalid op name {op_name!r}")
        self.op_name = op_name
        self.manager = manager
        self._owner: type | None = None
        self._name: str | None = None

    def __set_name__(self, owner: type, name: str) -> None:
        # Replace ourselves by the op's trampoline right away: attribute access is then plain
        # (also inside a torch.compile trace), and no layer ever binds the descriptor.
        self._owner, self._name = owner, name
        if self.manager is None:
            _DEFAULT_BINDINGS.get(self.op_name).add_site(owner, name)
        else:
            self.manager.binding(self.op_name).add_site(owner, name)

    def function(self) -> Callable[..., Any]:
        if self.manager is None:
            return _DEFAULT_BINDINGS.get(self.op_name).fn
        return self.manager.binding(self.op_name).fn

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        fn = self.function()
        cls = self._owner
        if cls is not None and cls.__dict__.get(self._name) is self:
            setattr(cls, self._name, fn)
        if instance is None:
            return fn
        return MethodType(fn, instance)

    def __repr__(self) -> str:
        return f"dispatch_method({self.op_name!r})"
