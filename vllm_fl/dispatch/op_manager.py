"""``OpManager``: the candidates of an op under the current policy (cached), which implementations
failed, and one ``Binding`` (trampoline) per op. Selection listeners hear of every selection
installed (the FlagGems backend's op list listens to the default manager's).

Concurrency: state changes happen under ``sync.LOCK`` only; availability checks, plugins and
implementations run outside it, and ``sync``'s generation counter keeps a change of policy ahead of
any resolution or fallback that started before it.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Sequence

from . import sync
from .binding import Binding
from .logger_manager import get_logger
from .policy import add_policy_listener, get_config, get_policy
from .registry import OpRegistry
from .types import DispatchError, OpImpl

__all__ = ["OpManager", "SelectionListener"]

logger = get_logger()

_MANAGERS: "weakref.WeakSet[OpManager]" = weakref.WeakSet()
# Called with the manager after it installed a selection (``sync.LOCK`` held).
SelectionListener = Callable[["OpManager"], None]


def _on_policy_change() -> None:
    """Every manager re-selects now for the ops in use (so a compiled graph never has to trace a
    resolution), and lazily for the others. The re-selection runs outside the lock: it may run
    availability checks."""
    with sync.LOCK:
        sync.bump_generation()
        in_use = [b for m in list(_MANAGERS) for b in m._invalidate_locked()]
    _reselect(in_use)


def _reselect(bindings: Sequence[Binding]) -> None:
    for b in bindings:
        try:
            b.select()
        except Exception as exc:  # noqa: BLE001 - the next call reports it
            logger.debug("re-selection of op '%s' deferred: %s", b.op, exc)


add_policy_listener(_on_policy_change)


class OpManager:
    """Dispatches over exactly the implementations in ``registry``."""

    def __init__(self, registry: OpRegistry | None = None) -> None:
        if registry is not None and not isinstance(registry, OpRegistry):
            raise TypeError(f"OpManager: registry must be an OpRegistry, got {registry!r}")
        self._registry = registry if registry is not None else OpRegistry()
        self._cache: dict[tuple[str, bool], tuple[OpImpl, ...]] = {}
        self._failed: dict[str, set[str]] = {}
        self._warned: set[tuple[str, str]] = set()
        self._used: dict[str, OpImpl] = {}
        self._used_traced: dict[str, OpImpl] = {}
        self._bindings: dict[str, Binding] = {}
        self._get_self: Callable[[], OpManager] = weakref.ref(self)  # type: ignore[assignment]
        self._selection_listeners: list[SelectionListener] = []
        self.resolution_count = 0
        self.load_errors: list[tuple[str, str]] = []
        self._registry.add_listener(self._on_registry_change)
        _MANAGERS.add(self)

    @property
    def registry(self) -> OpRegistry:
        return self._registry

    # -- resolution --------------------------------------------------------------------------

    def evaluate(
        self, op_name: str, policy=None, traced: bool = False
    ) -> tuple[list[OpImpl], list[tuple[OpImpl, str]]]:
        """(candidates in order, [(impl, why not a candidate)]) under ``policy`` (default: the
        current one), for eager calls or calls traced by torch.compile. Pure: no caching, no
        logging of selections."""
        policy = policy if policy is not None else get_policy()
        failed = self._failed.get(op_name, set())
        allowed: list[OpImpl] = []
        rejected: list[tuple[OpImpl, str]] = []
        for impl in self._registry.get_implementations(op_name):
            reason = policy.exclusion_reason(impl)
            if reason is not None:
                rejected.append((impl, f"excluded: {reason}"))
                continue
            if impl.impl_id in failed:
                rejected.append((impl, "failed earlier (clear_failed_impls() retries it)"))
                continue
            ok, why = impl.check_available()
            if not ok:
                rejected.append((impl, f"unavailable: {why}"))
                continue
            allowed.append(impl)
        ordered = policy.order(op_name, allowed, traced)
        if len(ordered) != len(allowed):
            tokens, _ = policy.order_for(op_name, traced)
            src = policy.sources.get("per_op_order", "default")
            for impl in allowed:
                if impl not in ordered:
                    rejected.append(
                        (
                            impl,
                            f"excluded: not in op_backends[{op_name}]={'|'.join(tokens)} ({src})",
                        )
                    )
        return ordered, rejected

    def resolve_candidates(self, op_name: str, traced: bool = False) -> list[OpImpl]:
        """The implementations that may run for ``op_name``, best first (cached); ``traced``:
        for calls traced by torch.compile (``compile_prefer``)."""
        cached = self._cache.get((op_name, traced))
        if cached is not None:
            return list(cached)
        if op_name not in self._registry:
            raise DispatchError(
                f"no implementation registered for op '{op_name}'; registered ops: "
                f"{', '.join(self._registry.list_operators()) or '(none)'}"
            )
        with sync.LOCK:
            gen = sync.generation()
        # Outside the lock: availability checks may import libraries or probe devices.
        policy = get_policy()
        ordered, rejected = self.evaluate(op_name, policy, traced)
        debug = get_config().debug
        if debug or logger.isEnabledFor(10):
            logger.log(
                20 if debug else 10,
                "Op '%s' resolved%s: candidates [%s]; not candidates: %s",
                op_name,
                " under torch.compile" if traced else "",
                ", ".join(i.impl_id for i in ordered),
                "; ".join(f"'{i.impl_id}' {why}" for i, why in rejected) or "none",
            )
        if not ordered:
            raise DispatchError(
                f"Op '{op_name}': no implementation can run: "
                + "; ".join(f"'{i.impl_id}' {why}" for i, why in rejected)
            )
        with sync.LOCK:
            self.resolution_count += 1
            if sync.generation() == gen:  # else a newer policy/registry/failure state exists
                self._cache[(op_name, traced)] = tuple(ordered)
        return ordered

    def resolve(self, op_name: str) -> Callable[..., Any]:
        """The selected implementation function of ``op_name``."""
        return self.resolve_candidates(op_name)[0].fn

    def get_selected_impl_id(self, op_name: str) -> str:
        return self.resolve_candidates(op_name)[0].impl_id

    def resolve_all(self) -> dict[str, str | None]:
        """Resolve and install every registered op now (before torch.compile traces, say);
        op -> selected impl id, or None where no implementation can run here."""
        out: dict[str, str | None] = {}
        for op in self._registry.list_operators():
            try:
                impl, _ = self._binding(op).select()
            except DispatchError as exc:
                logger.info("%s", exc)
                out[op] = None
                continue
            out[op] = impl.impl_id
        return out

    # -- calling -----------------------------------------------------------------------------

    def _binding(self, op_name: str) -> Binding:
        b = self._bindings.get(op_name)
        if b is None:
            with sync.LOCK:
                b = self._bindings.get(op_name)
                if b is None:
                    b = self._bindings[op_name] = Binding(op_name, self._get_self)
        return b

    def call(self, op_name: str, *args: Any, **kwargs: Any) -> Any:
        b = self._bindings.get(op_name) or self._binding(op_name)
        return b.fn(*args, **kwargs)

    def call_as_method(self, op_name: str, instance: Any, *args: Any, **kwargs: Any) -> Any:
        b = self._bindings.get(op_name) or self._binding(op_name)
        return b.fn(instance, *args, **kwargs)

    # -- state -------------------------------------------------------------------------------

    def add_selection_listener(self, callback: SelectionListener) -> None:
        """Call ``callback(manager)`` after every selection this manager installs (first use,
        re-selection, fallback), with ``sync.LOCK`` held: it must not dispatch."""
        with sync.LOCK:
            if callback not in self._selection_listeners:
                self._selection_listeners.append(callback)

    def impls_in_use(self) -> list[OpImpl]:
        """The implementations selected now, for eager calls or for calls traced by
        torch.compile (each once)."""
        with sync.LOCK:
            return list(dict.fromkeys([*self._used.values(), *self._used_traced.values()]))

    def used_impls(self, traced: bool = False) -> dict[str, str]:
        """op -> impl id most recently selected for eager calls through this manager, or for
        calls traced by torch.compile."""
        with sync.LOCK:
            used = self._used_traced if traced else self._used
            return {op: impl.impl_id for op, impl in used.items()}

    def invalidate(self, reselect: bool = False) -> None:
        """Forget every selection; the next call of each op resolves again. With ``reselect``,
        ops in use get their new selection now (errors leave them to the next call)."""
        with sync.LOCK:
            sync.bump_generation()
            in_use = self._invalidate_locked()
        if reselect:
            _reselect(in_use)

    def _invalidate_locked(self) -> list[Binding]:
        """Drop caches and selections (``sync.LOCK`` held); returns the bindings in use."""
        self._cache.clear()
        in_use = [b for b in self._bindings.values() if b.in_use]
        for b in self._bindings.values():
            b.invalidate()
        return in_use

    def _on_registry_change(self) -> None:
        with sync.LOCK:
            sync.bump_generation()
            self._cache.clear()
            for b in self._bindings.values():
                b.invalidate(registry_changed=True)

    def clear_failed_impls(self, op_name: str | None = None) -> None:
        """Let implementations that failed (in non-strict mode) be tried again."""
        with sync.LOCK:
            if op_name is None:
                self._failed.clear()
            else:
                self._failed.pop(op_name, None)
            self.invalidate()

    def failed_impls(self) -> dict[str, list[str]]:
        """op -> ids of the implementations excluded after failing (non-strict mode)."""
        with sync.LOCK:
            return {op: sorted(ids) for op, ids in self._failed.items() if ids}

    def _record_use(
        self, op: str, impl: OpImpl, fallback: bool, traced: bool = False, log: bool = True
    ) -> None:
        used = self._used_traced if traced else self._used
        prev = used.get(op)
        used[op] = impl
        if log and (fallback or prev is None or prev.impl_id != impl.impl_id):
            logger.info(
                "Op '%s' %s '%s'%s (kind=%s, vendor=%s)",
                op,
                "fallback to" if fallback else "using",
                impl.impl_id,
                " under torch.compile" if traced else "",
                impl.kind.value,
                impl.vendor,
            )
        for callback in list(self._selection_listeners):
            try:
                callback(self)
            except Exception:  # noqa: BLE001 - a listener never breaks a call
                logger.warning("selection listener %r failed", callback, exc_info=True)

    def _mark_failed(self, op: str, impl: OpImpl, exc: BaseException) -> bool:
        """Exclude ``impl`` from ``op``'s candidates after it raised ``exc``; logs a WARNING with
        the traceback the first time. True when it was not excluded before."""
        with sync.LOCK:
            key = (op, impl.impl_id)
            warn = key not in self._warned
            self._warned.add(key)
            ids = self._failed.setdefault(op, set())
            new = impl.impl_id not in ids
            ids.add(impl.impl_id)
            if new:  # a selection computed before this must not install the failed impl
                sync.bump_generation()
            self._forget(op)
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

    def _forget(self, op: str) -> None:
        """Drop the cached candidates of ``op`` for both modes."""
        self._cache.pop((op, False), None)
        self._cache.pop((op, True), None)

    def _unmark_failed(self, op: str, impl_ids: Sequence[str]) -> None:
        with sync.LOCK:
            ids = self._failed.get(op)
            if ids and impl_ids:
                ids.difference_update(impl_ids)
                sync.bump_generation()
            self._forget(op)
