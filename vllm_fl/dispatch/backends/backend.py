"""``Backend``: what the dispatch calls on a backend besides its implementations, declared by the
backend's package as ``BACKEND`` and called explicitly.

A built-in backend's package (``vllm_fl.dispatch.backends.BUILTIN_BACKENDS``) defines
``BACKEND = Backend(...)``; ``builtin.register_builtins`` registers the package's implementations
on behalf of that object, so the registry knows which backend each implementation belongs to
(``OpRegistry.backend_of``). Plugins keep their contract (``register(registry)``): their
implementations belong to no backend object and have no hooks.

The hooks:

- ``prepare``: called once, before the availability check of any of the backend's
  implementations imports its libraries: what must be loaded before them (an import-order need);
- ``warm_up``: op name -> the function that compiles, before serving, what the backend's
  implementation of that op would otherwise compile on a served step (``vllm_fl.moe.warm_up``);
- ``selection_listeners``: called with the manager after every selection it installs, for a
  backend that must tell its library which ops it runs (``sync.LOCK`` held: they must not
  dispatch).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["Backend", "SelectionListener"]

#: called with the manager (an ``OpManager``) after it installed a selection
SelectionListener = Callable[[Any], None]


@dataclass(frozen=True, eq=False)
class Backend:
    """One backend's declared hooks (see the module docstring); ``name`` is its package's last
    component or its vendor name, for messages."""

    name: str
    prepare: Callable[[], object] | None = None
    warm_up: Mapping[str, Callable[..., int]] = field(default_factory=dict)
    selection_listeners: tuple[SelectionListener, ...] = ()
    _prepared: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    def prepare_once(self) -> None:
        """Run ``prepare`` the first time any of the backend's implementations is checked."""
        if self.prepare is None or self._prepared.is_set():
            return
        try:
            self.prepare()
        finally:
            self._prepared.set()

    def warm_up_hook(self, op_name: str) -> Callable[..., int] | None:
        """The backend's warm-up of op ``op_name``, if it declares one."""
        return self.warm_up.get(op_name)
