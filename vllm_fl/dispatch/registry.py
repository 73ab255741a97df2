"""Thread-safe registry of operator implementations."""

from __future__ import annotations

import threading
import weakref
from typing import Callable, Iterable

from . import sync
from .types import OpImpl

__all__ = ["OpRegistry"]


class OpRegistry:
    """op name -> implementations, in registration order; ``(op_name, impl_id)`` is unique."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._impls: dict[str, dict[str, OpImpl]] = {}
        self._listeners: list[weakref.WeakMethod | Callable[[], None]] = []
        self.generation = 0
        # Bumped by clear(): plugin loading (discovery) registers into a cleared registry again.
        self.epoch = 0
        sync.reinit_after_fork(self)

    def _reinit_after_fork(self) -> None:
        self._lock = threading.RLock()

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

    def register_impl(self, impl: OpImpl) -> None:
        self.register_many((impl,))

    def register_many(self, impls: Iterable[OpImpl]) -> None:
        """Register all or nothing: every entry is checked before any is added."""
        impls = list(impls)
        with self._lock:
            pending: dict[tuple[str, str], OpImpl] = {}
            for impl in impls:
                self._check(impl, pending)
            for impl in impls:
                self._impls.setdefault(impl.op_name, {})[impl.impl_id] = impl
            if impls:
                self.generation += 1
        if impls:
            self._notify()

    def unregister(self, op_name: str, impl_id: str) -> OpImpl:
        with self._lock:
            try:
                impl = self._impls[op_name].pop(impl_id)
            except KeyError:
                raise KeyError(f"no implementation {impl_id!r} registered for op {op_name!r}")
            if not self._impls[op_name]:
                del self._impls[op_name]
            self.generation += 1
        self._notify()
        return impl

    def clear(self) -> None:
        """Remove every implementation (managers over this registry re-resolve on the next call).

        Plugins loaded into this registry earlier are registered again by the next
        ``discovery.load_plugins``."""
        with self._lock:
            self._impls.clear()
            self.generation += 1
            self.epoch += 1
        self._notify()

    def get_implementations(self, op_name: str) -> list[OpImpl]:
        with self._lock:
            return list(self._impls.get(op_name, {}).values())

    def get_impl(self, op_name: str, impl_id: str) -> OpImpl | None:
        with self._lock:
            return self._impls.get(op_name, {}).get(impl_id)

    def list_operators(self) -> list[str]:
        with self._lock:
            return sorted(self._impls)

    def __contains__(self, op_name: object) -> bool:
        with self._lock:
            return op_name in self._impls

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._impls.values())

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every change; bound methods are held weakly."""
        ref = weakref.WeakMethod(callback) if hasattr(callback, "__self__") else callback
        with self._lock:
            self._listeners.append(ref)

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for ref in listeners:
            cb = ref() if isinstance(ref, weakref.WeakMethod) else ref
            if cb is not None:
                cb()
