"""Synchronisation of the dispatch state: one lock, a generation counter, and what a forked child
needs to find them usable.

``LOCK`` guards every change of selection state (caches, installed impls, failure marks). It is
held around state changes only, never while an implementation, an availability check or a plugin
runs, so it is always released within microseconds.

``generation()`` counts the changes that make an in-flight selection stale: a policy change, a
registry change, an implementation newly marked failed. A resolution or fallback reads the
generation before it looks at the policy and installs its result only if the generation is
unchanged when it takes ``LOCK`` again; otherwise the newer change wins and the result serves only
the call that computed it.

Fork: ``os.fork()`` copies locks in whatever state other threads left them, and those threads do
not exist in the child. ``LOCK`` is taken by the forking thread just before the fork and released
on both sides after, so no state change is half done in the child. Objects whose locks may be held
across slow work (availability probes) are registered with ``reinit_after_fork`` and
get fresh locks in the child.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Callable, Protocol

__all__ = ["LOCK", "generation", "bump_generation", "reinit_after_fork", "after_fork_in_child"]

LOCK = threading.RLock()
_generation = 0


def generation() -> int:
    """The current generation; compare with ``LOCK`` held to decide whether to install."""
    return _generation


def bump_generation() -> int:
    """Mark every in-flight selection stale. Call with ``LOCK`` held."""
    global _generation
    _generation += 1
    return _generation


class _ForkReinit(Protocol):
    def _reinit_after_fork(self) -> None: ...


_objects: "weakref.WeakSet[_ForkReinit]" = weakref.WeakSet()
_callbacks: list[Callable[[], None]] = []


def reinit_after_fork(obj: _ForkReinit) -> None:
    """Call ``obj._reinit_after_fork()`` in every forked child (held weakly)."""
    _objects.add(obj)


def after_fork_in_child(callback: Callable[[], None]) -> None:
    """Call ``callback()`` in every forked child, after the dispatch lock is usable again."""
    _callbacks.append(callback)


def _before_fork() -> None:
    LOCK.acquire()


def _after_fork_in_parent() -> None:
    LOCK.release()


def _after_fork_in_child() -> None:
    # The forking thread owns LOCK in the child too (same thread ident), so releasing it keeps any
    # outer acquisition of that thread balanced.
    LOCK.release()
    for obj in list(_objects):
        obj._reinit_after_fork()
    for cb in list(_callbacks):
        cb()


if hasattr(os, "register_at_fork"):  # POSIX only; elsewhere there is no fork to survive
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
