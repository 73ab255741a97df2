"""``OpManager``: the candidates of an op under the current policy (cached), over one registry,
minus the implementations that failed; it owns its bindings (one trampoline per op) and its
failure log. After installing a selection it calls the selection listeners of the backends
of its registry (``Backend.selection_listeners``).

Concurrency: state changes happen under ``sync.LOCK`` only; availability checks, plugins and
implementations run outside it, and ``sync``'s generation counter keeps a change of policy ahead of
any resolution or fallback that started before it.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from typing import Any, Callable, Collection, Sequence

from .. import sync
from ..config.selection import SelectionPolicy
from ..logger_manager import get_logger
from ..policy.current import add_policy_listener, get_config, get_policy
from ..registry import OpRegistry
from ..types import DispatchError, OpImpl
from .binding import (
    Binding,
    BindingTable,
    SelectionWrapper,
    quiet_resolution,
    set_selection_wrapper,
)
from .failures import FailureLog

__all__ = ["OpManager", "wrap_selections"]

logger = get_logger()

_MANAGERS: "weakref.WeakSet[OpManager]" = weakref.WeakSet()


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


def wrap_selections(wrapper: SelectionWrapper | None) -> SelectionWrapper | None:
    """Give every op's eager calls what ``wrapper`` makes of its selected impl (None: the impl
    itself again), from now on: every manager re-selects the ops in use. Returns the previous
    wrapper. ``vllm_fl.verify`` uses it for bring-up mode.

    ``wrapper(op, impl, registry)`` gets the op, its selected ``OpImpl`` and the ``OpRegistry``
    it came from (to find the op's other impls) and returns the function the op's eager calls
    get, one that calls ``impl.fn``, or None for ``impl.fn`` itself. The dispatch marks that
    function with the impl it calls, so a failure is still blamed on the impl and falls back as
    the impl's own would; calls traced by torch.compile get the impl itself."""
    old = set_selection_wrapper(wrapper)
    _on_policy_change()
    return old


def _forgetting(cache: dict[tuple[str, bool], tuple[OpImpl, ...]]) -> Callable[[str | None], None]:
    def forget(op: str | None) -> None:
        """Drop the cached candidates of ``op`` (every op: None) for both modes."""
        if op is None:
            cache.clear()
        else:
            cache.pop((op, False), None)
            cache.pop((op, True), None)

    return forget


class OpManager:
    """Dispatches over exactly the implementations in ``registry``.

    ``bindings``: the table of trampolines to drive (default: a table of its own); the default
    manager passes the process-wide one, which outlives it. ``load_errors``: (what, error) of the
    backends and plugins that failed to register into ``registry``, for ``explain``.
    """

    def __init__(
        self,
        registry: OpRegistry | None = None,
        *,
        bindings: BindingTable | None = None,
        load_errors: Sequence[tuple[str, str]] = (),
    ) -> None:
        if registry is not None and not isinstance(registry, OpRegistry):
            raise TypeError(f"OpManager: registry must be an OpRegistry, got {registry!r}")
        self._registry = registry if registry is not None else OpRegistry()
        self._cache: dict[tuple[str, bool], tuple[OpImpl, ...]] = {}
        # The log drops the cached candidates of an op whose failures change; it holds the cache,
        # not the manager, so a manager nobody uses is freed at once (and stops hearing policy
        # changes).
        self.failures = FailureLog(_forgetting(self._cache))
        if bindings is None:
            ref = weakref.ref(self)
            bindings = BindingTable(ref)  # type: ignore[arg-type]
        self.bindings = bindings
        self.resolution_count = 0
        self.load_errors: list[tuple[str, str]] = list(load_errors)
        self._registry.add_listener(self._on_registry_change)
        self._on_registry_change()  # a table that outlives its manager forgets the old one's
        _MANAGERS.add(self)

    @property
    def registry(self) -> OpRegistry:
        return self._registry

    # -- resolution --------------------------------------------------------------------------

    def evaluate(
        self, op_name: str, policy: SelectionPolicy | None = None, traced: bool = False
    ) -> tuple[list[OpImpl], list[tuple[OpImpl, str]]]:
        """(candidates in order, [(impl, why not a candidate)]) under ``policy`` (default: the
        current one), for eager calls or calls traced by torch.compile. Pure: no caching, no
        logging of selections."""
        policy = policy if policy is not None else get_policy()
        failed = self.failures.ids(op_name)
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
        if debug or logger.isEnabledFor(logging.DEBUG):
            logger.log(
                logging.INFO if debug else logging.DEBUG,
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

    def resolve_all(self, log: bool = True) -> dict[str, str | None]:
        """Resolve and install every registered op now (before torch.compile traces, say);
        op -> selected impl id, or None where no implementation can run here. Without ``log``
        the selections are not logged (``log_selections`` logs those of the ops in use)."""
        out: dict[str, str | None] = {}
        with quiet_resolution() if not log else contextlib.nullcontext():
            for op in self._registry.list_operators():
                try:
                    impl, _ = self.bindings.get(op).select()
                except DispatchError as exc:
                    logger.info("%s", exc)
                    out[op] = None
                    continue
                out[op] = impl.impl_id
        return out

    def log_selections(self, ops: Collection[str]) -> None:
        """Log the selection of each op of ``ops`` that is resolved ("Op 'x' using ..."), in the
        registry's order."""
        for op in self._registry.list_operators():
            if op in ops:
                self.bindings.get(op).log_use()

    # -- calling -----------------------------------------------------------------------------

    def binding(self, op_name: str) -> Binding:
        """The binding (trampoline) of ``op_name``."""
        return self.bindings.get(op_name)

    def call(self, op_name: str, *args: Any, **kwargs: Any) -> Any:
        b = self.bindings.by_op.get(op_name) or self.bindings.get(op_name)
        return b.fn(*args, **kwargs)

    def call_as_method(self, op_name: str, instance: Any, *args: Any, **kwargs: Any) -> Any:
        b = self.bindings.by_op.get(op_name) or self.bindings.get(op_name)
        return b.fn(instance, *args, **kwargs)

    # -- state -------------------------------------------------------------------------------

    def selection_installed(self) -> None:
        """A binding installed a selection (``sync.LOCK`` held): call the selection listeners of
        the registry's backends. A listener that raises is a WARNING, never a failed call."""
        for backend in self._registry.backends():
            for callback in backend.selection_listeners:
                try:
                    callback(self)
                except Exception:  # noqa: BLE001 - a listener never breaks a call
                    logger.warning(
                        "selection listener %r of backend %s failed",
                        callback,
                        backend.name,
                        exc_info=True,
                    )

    def impls_in_use(self) -> list[OpImpl]:
        """The implementations selected now, for eager calls or for calls traced by
        torch.compile (each once)."""
        with sync.LOCK:
            used = [i for b in self.bindings for i in (b.used, b.used_traced) if i is not None]
        return list(dict.fromkeys(used))

    def used_impls(self, traced: bool = False) -> dict[str, str]:
        """op -> impl id most recently selected for eager calls through this manager, or for
        calls traced by torch.compile."""
        with sync.LOCK:
            pairs = [(b.op, b.used_traced if traced else b.used) for b in self.bindings]
        return {op: impl.impl_id for op, impl in pairs if impl is not None}

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
        bindings = list(self.bindings)
        in_use = [b for b in bindings if b.in_use]
        for b in bindings:
            b.invalidate()
        return in_use

    def _on_registry_change(self) -> None:
        with sync.LOCK:
            sync.bump_generation()
            self._cache.clear()
            for b in self.bindings:
                b.invalidate(registry_changed=True)

    def close(self) -> None:
        """Stop driving ``bindings`` (a table that outlives this manager, see
        ``reset_default_manager``) and stop hearing policy changes."""
        with sync.LOCK:
            _MANAGERS.discard(self)
            self.bindings = BindingTable(weakref.ref(self))  # type: ignore[arg-type]

    def clear_failed_impls(self, op_name: str | None = None) -> None:
        """Let implementations that failed (in non-strict mode) be tried again."""
        self.failures.clear(op_name)
        self.invalidate()

    def failed_impls(self) -> dict[str, list[str]]:
        """op -> ids of the implementations excluded after failing (non-strict mode)."""
        return self.failures.snapshot()
