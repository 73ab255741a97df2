"""``FailureLog``: the implementations excluded from an op's candidates after they raised
(non-strict mode), owned by one manager.

A newly excluded implementation bumps the dispatch generation (``sync``): a selection computed
before the failure must not install it.
"""

from __future__ import annotations

from typing import Callable, Iterable

from .. import sync
from ..logger_manager import get_logger
from ..types import OpImpl

__all__ = ["FailureLog"]

logger = get_logger()


class FailureLog:
    """op -> ids of the implementations that failed; each failure logged once, at WARNING, with
    its traceback. ``on_change(op)`` is told of every change (the manager drops its cache)."""

    def __init__(self, on_change: Callable[[str | None], None]) -> None:
        self._failed: dict[str, set[str]] = {}
        self._warned: set[tuple[str, str]] = set()
        self._on_change = on_change

    def ids(self, op: str) -> frozenset[str]:
        with sync.LOCK:
            return frozenset(self._failed.get(op, ()))

    def mark(self, op: str, impl: OpImpl, exc: BaseException) -> bool:
        """Exclude ``impl`` from ``op``'s candidates after it raised ``exc``. True when it was not
        excluded before."""
        with sync.LOCK:
            key = (op, impl.impl_id)
            warn = key not in self._warned
            self._warned.add(key)
            ids = self._failed.setdefault(op, set())
            new = impl.impl_id not in ids
            ids.add(impl.impl_id)
            if new:
                sync.bump_generation()
            self._on_change(op)
        if warn:
            logger.warning(
                "Implementation '%s' failed for op '%s': %s: %s",
                impl.impl_id,
                op,
                type(exc).__name__,
                exc,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        return new

    def unmark(self, op: str, impl_ids: Iterable[str]) -> None:
        """Let ``impl_ids`` of ``op`` be candidates again."""
        impl_ids = set(impl_ids)
        with sync.LOCK:
            ids = self._failed.get(op)
            if ids and impl_ids:
                ids.difference_update(impl_ids)
                sync.bump_generation()
            self._on_change(op)

    def clear(self, op: str | None = None) -> None:
        """Forget the failures of ``op`` (every op: None)."""
        with sync.LOCK:
            if op is None:
                self._failed.clear()
            else:
                self._failed.pop(op, None)
            sync.bump_generation()
            self._on_change(op)

    def snapshot(self) -> dict[str, list[str]]:
        """op -> sorted ids of its excluded implementations."""
        with sync.LOCK:
            return {op: sorted(ids) for op, ids in self._failed.items() if ids}
