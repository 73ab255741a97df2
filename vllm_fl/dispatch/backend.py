"""``Backend``: what the dispatch calls on a backend besides its implementations, declared by the
backend's package as ``BACKEND`` and called explicitly.

A built-in backend's package (``vllm_fl.dispatch.builtin_backends.BUILTIN_BACKENDS``) defines
``BACKEND = Backend(...)``; ``builtin.register_builtins`` registers the package's implementations
on behalf of that object, so the registry knows which backend each implementation belongs to
(``OpRegistry.backend_of``). Plugins keep their contract (``register(registry)``): their
implementations belong to no backend object and have no hooks.

The hooks:

- ``prepare``: called once, before the availability check of any of the backend's
  implementations imports its libraries: what must be loaded before them (an import-order need).
  The registry makes it part of each implementation's ``available`` check (``guard``), so every
  caller of ``impl.available()`` (a manager, ``explain``, the parity tests) runs it first;
- ``warm_up``: op name -> the function that compiles, before serving, what the backend's
  implementation of that op would otherwise compile on a served step (``vllm_fl.moe.warm_up``);
- ``selection_listeners``: called with the manager after every selection it installs, for a
  backend that must tell its library which ops it runs (``sync.LOCK`` held: they must not
  dispatch);
- ``communicator_setup``: called with a new ``vllm_fl.distributed.CommunicatorFL`` on every rank
  of its group, before any collective runs on it, when a collective of the group selected one of
  the backend's implementations: what the backend's collectives need per group (a communicator
  of its library, made collectively). What it returns is ``communicator.backend_state[name]``.
  It raises ``CommunicatorUnsupported`` where the communicator cannot carry the backend's
  collectives at all (another platform's, or a test's stand-in group).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .types import OpImpl

__all__ = [
    "Backend",
    "CommunicatorSetup",
    "CommunicatorUnsupported",
    "SelectionListener",
    "PreparedCheck",
]

#: called with the manager (an ``OpManager``) after it installed a selection
SelectionListener = Callable[[Any], None]
#: called with a new communicator on every rank; returns the backend's state for that group
CommunicatorSetup = Callable[[Any], object]


class CommunicatorUnsupported(TypeError):
    """Raised by a ``communicator_setup`` hook given a communicator its collectives cannot run
    on (a class of another platform): the backend is unavailable on that group, which is not a
    failure of its collectives."""


@dataclass(frozen=True, eq=False)
class Backend:
    """One backend's declared hooks (see the module docstring); ``name`` is its package's last
    component or its vendor name, for messages."""

    name: str
    prepare: Callable[[], object] | None = None
    warm_up: Mapping[str, Callable[..., int]] = field(default_factory=dict)
    selection_listeners: tuple[SelectionListener, ...] = ()
    communicator_setup: CommunicatorSetup | None = None
    _prepared: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    def prepare_once(self) -> None:
        """Run ``prepare`` the first time any of the backend's implementations is checked."""
        if self.prepare is None or self._prepared.is_set():
            return
        try:
            self.prepare()
        finally:
            self._prepared.set()

    def guard(self, impl: OpImpl) -> OpImpl:
        """``impl`` whose availability check runs ``prepare`` first (``impl`` itself when the
        backend has no ``prepare``)."""
        if self.prepare is None:
            return impl
        return dataclasses.replace(impl, available=PreparedCheck(self, impl.available))

    def warm_up_hook(self, op_name: str) -> Callable[..., int] | None:
        """The backend's warm-up of op ``op_name``, if it declares one."""
        return self.warm_up.get(op_name)


class PreparedCheck:
    """An implementation's availability check behind its backend's ``prepare``: unavailable,
    with the reason, when ``prepare`` raises; otherwise the check itself (None: available)."""

    def __init__(self, backend: Backend, check: Callable[[], bool] | None) -> None:
        self.backend = backend
        self.check = check
        self._failure: str | None = None

    def _prepare(self) -> bool:
        try:
            self.backend.prepare_once()
        except Exception as exc:  # noqa: BLE001 - availability must never break dispatch
            self._failure = (
                f"backend {self.backend.name!r} prepare() raised {type(exc).__name__}: {exc}"
            )
        return self._failure is None

    def __call__(self) -> bool:
        if not self._prepare():
            return False
        return True if self.check is None else bool(self.check())

    @property
    def reason(self) -> str | None:
        if self._failure is not None:
            return self._failure
        return getattr(self.check, "reason", None)

    def __repr__(self) -> str:
        return f"PreparedCheck({self.backend.name!r}, {self.check!r})"
