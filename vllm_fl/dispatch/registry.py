"""Thread-safe registry of operator implementations, and the backend each belongs to."""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from . import sync
from .types import OpImpl

if TYPE_CHECKING:
    from .backend import Backend

__all__ = ["OpRegistry", "BUILT_IN", "DIRECT"]

#: the origin of the built-in backends' implementations
BUILT_IN = "built-in"
#: the origin of an implementation registered outside any plugin hook (user code, tests)
DIRECT = "registered directly"

# The backend whose package is registering now (``OpRegistry.registering_for``).
_registering_for: contextvars.ContextVar["Backend | None"] = contextvars.ContextVar(
    "vllm_fl_registering_for", default=None
)

# Where the implementations registered now come from (``OpRegistry.registering_from``).
_registering_from: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "vllm_fl_registering_from", default=None
)


class OpRegistry:
    """op name -> implementations, in registration order; ``(op_name, impl_id)`` is unique.

    Its state changes under ``sync.LOCK``, the lock of every dispatch state change (held around
    dictionary updates only)."""

    def __init__(self) -> None:
        self._impls: dict[str, dict[str, OpImpl]] = {}
        self._backend_of: dict[tuple[str, str], "Backend"] = {}
        self._origin: dict[tuple[str, str], str] = {}
        self._listeners: list[weakref.WeakMethod | Callable[[], None]] = []
        self.generation = 0
        # Bumped by clear(): plugin loading (discovery) registers into a cleared registry again.
        self.epoch = 0

    def _check(self, impl: OpImpl, pending: dict[tuple[str, str], OpImpl]) -> None:
        if not isinstance(impl, OpImpl):
            raise TypeError(f"OpRegistry: expected OpImpl, got {type(impl).__name__}: {impl!r}")
        key = (impl.op_name, impl.impl_id)
        old = self._impls.get(impl.op_name, {}).get(impl.impl_id) or pending.get(key)
        if old is not None:
            raise ValueError(
                f"duplicate implementation {impl.impl_id!r} for op {impl.op_name!r}: already "
                f"registered {old.describe()} fn={old.fn_name()}, new {impl.describe()} "
                f"fn={impl.fn_name()}"
            )
        pending[key] = impl

    @contextlib.contextmanager
    def registering_for(self, backend: "Backend") -> Iterator[None]:
        """Inside the block, implementations registered (by this thread) belong to ``backend``,
        their availability checks behind its ``prepare`` (``Backend.guard``)."""
        token = _registering_for.set(backend)
        try:
            yield
        finally:
            _registering_for.reset(token)

    @contextlib.contextmanager
    def registering_from(self, origin: str) -> Iterator[None]:
        """Inside the block, implementations registered (by this thread) come from ``origin``
        (``BUILT_IN``, ``entry point 'name' (target)``, ``module 'name'``), which ``explain``
        shows."""
        token = _registering_from.set(origin)
        try:
            yield
        finally:
            _registering_from.reset(token)

    def register_impl(self, impl: OpImpl) -> None:
        self.register_many((impl,))

    def register_many(self, impls: Iterable[OpImpl]) -> None:
        """Register all or nothing: every entry is checked before any is added."""
        impls = list(impls)
        backend = _registering_for.get()
        origin = _registering_from.get()
        # a plugin's hook: its signatures are checked once, here (the built-ins' are checked by
        # the generator and their tests)
        if origin is not None and origin != BUILT_IN:
            impls = _matching_signatures(impls, origin)
        origin = origin or DIRECT
        with sync.LOCK:
            pending: dict[tuple[str, str], OpImpl] = {}
            for impl in impls:
                self._check(impl, pending)
            for impl in impls:
                if backend is not None:
                    impl = backend.guard(impl)
                    self._backend_of[(impl.op_name, impl.impl_id)] = backend
                self._impls.setdefault(impl.op_name, {})[impl.impl_id] = impl
                self._origin[(impl.op_name, impl.impl_id)] = origin
            if impls:
                self.generation += 1
        if impls:
            self._notify()

    def unregister(self, op_name: str, impl_id: str) -> OpImpl:
        with sync.LOCK:
            try:
                impl = self._impls[op_name].pop(impl_id)
            except KeyError:
                raise KeyError(f"no implementation {impl_id!r} registered for op {op_name!r}")
            if not self._impls[op_name]:
                del self._impls[op_name]
            self._backend_of.pop((op_name, impl_id), None)
            self._origin.pop((op_name, impl_id), None)
            self.generation += 1
        self._notify()
        return impl

    def clear(self) -> None:
        """Remove every implementation (managers over this registry re-resolve on the next call).

        Plugins loaded into this registry earlier are registered again by the next
        ``discovery.load_plugins``."""
        with sync.LOCK:
            self._impls.clear()
            self._backend_of.clear()
            self._origin.clear()
            self.generation += 1
            self.epoch += 1
        self._notify()

    def get_implementations(self, op_name: str) -> list[OpImpl]:
        with sync.LOCK:
            return list(self._impls.get(op_name, {}).values())

    def get_impl(self, op_name: str, impl_id: str) -> OpImpl | None:
        with sync.LOCK:
            return self._impls.get(op_name, {}).get(impl_id)

    def backend_of(self, impl: OpImpl) -> "Backend | None":
        """The backend object ``impl`` was registered for (None: a plugin's, or registered
        directly)."""
        with sync.LOCK:
            return self._backend_of.get((impl.op_name, impl.impl_id))

    def origin_of(self, impl: OpImpl) -> str:
        """Where ``impl`` came from: ``BUILT_IN``, the plugin that registered it (``entry point
        'name' (target)``, ``module 'name'``) or ``DIRECT``."""
        with sync.LOCK:
            return self._origin.get((impl.op_name, impl.impl_id), DIRECT)

    def backends(self) -> list["Backend"]:
        """The backend objects of the registered implementations, in registration order."""
        with sync.LOCK:
            return list(dict.fromkeys(self._backend_of.values()))

    def list_operators(self) -> list[str]:
        with sync.LOCK:
            return sorted(self._impls)

    def __contains__(self, op_name: object) -> bool:
        with sync.LOCK:
            return op_name in self._impls

    def __len__(self) -> int:
        with sync.LOCK:
            return sum(len(v) for v in self._impls.values())

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every change; bound methods are held weakly."""
        ref = weakref.WeakMethod(callback) if hasattr(callback, "__self__") else callback
        with sync.LOCK:
            self._listeners.append(ref)

    def _notify(self) -> None:
        with sync.LOCK:
            listeners = list(self._listeners)
        for ref in listeners:
            cb = ref() if isinstance(ref, weakref.WeakMethod) else ref
            if cb is not None:
                cb()


def _not_strict() -> bool:
    return False


#: whether the policy in force is strict; ``policy.current`` installs its reader on import
strict_mode: Callable[[], bool] = _not_strict


def _matching_signatures(impls: list[OpImpl], origin: str) -> list[OpImpl]:
    """``impls`` whose functions take their op's parameters (``signatures``). A mismatch raises
    ``ImplSignatureError`` in strict mode; otherwise it is a WARNING and the implementation is
    not registered, so it is never a candidate that fails at its first call."""
    from .logger_manager import get_logger
    from .signatures import ImplSignatureError, mismatch

    kept = []
    for impl in impls:
        problem = mismatch(impl.op_name, impl.fn) if isinstance(impl, OpImpl) else None
        if problem is None:
            kept.append(impl)
            continue
        message = (
            f"implementation {impl.impl_id!r} of op {impl.op_name!r} (from {origin}): {problem}"
        )
        if strict_mode():
            raise ImplSignatureError(message)
        get_logger().warning("%s; it is not registered", message)
    return kept
