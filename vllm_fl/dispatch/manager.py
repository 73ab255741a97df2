"""Selection and calling of operator implementations.

Hot path: each op has one *trampoline* function whose signature mirrors the impls' signature and
whose body is ``return _impl(<args>)`` inside a try/except. ``_impl`` lives in the trampoline's own
globals dict: before resolution it is a resolver, afterwards the selected impl itself. A policy or
registry change puts the resolver back, so the next call re-resolves — also for layers whose
``forward_oot`` (or vLLM's ``_forward_method``) already holds the trampoline. ``dispatch_method``
installs the trampoline as a plain class attribute, so ``layer.forward_oot(x)`` costs one extra
Python frame over calling the impl directly; the try/except costs nothing until an impl raises.

When the policy selects another impl for calls traced by torch.compile (``compile_prefer``), the
trampoline also holds ``_traced`` and branches on ``torch.compiler.is_compiling()``, which Dynamo
folds to a constant while tracing; ops whose two selections agree keep the branch-free code.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import keyword
import sys
import threading
import types
import weakref
from types import MethodType
from typing import Any, Callable, Sequence

from .logger_manager import get_logger
from .name_checks import warn_unknown_names
from .oplist import write_atomically
from .policy import add_policy_listener, get_config, get_policy
from .registry import OpRegistry
from .types import BackendImplKind, DispatchError, OpImpl

__all__ = [
    "OpManager",
    "dispatch_method",
    "get_default_manager",
    "reset_default_manager",
    "call_op",
    "resolve_op",
    "call_method_op",
    "used_impls",
]

logger = get_logger()

# One lock for all dispatch state changes (resolution, installation, invalidation); never held
# while an implementation runs.
_LOCK = threading.RLock()
_MANAGERS: "weakref.WeakSet[OpManager]" = weakref.WeakSet()
_RESERVED = {"_impl", "_traced", "_strict", "_fallback", "_exc", "_is_compiling"}


def _invalidate_all() -> None:
    """The policy changed: every manager re-selects now for the ops already in use (so a compiled
    graph never has to trace a resolution), and lazily for the others."""
    with _LOCK:
        for manager in list(_MANAGERS):
            manager.invalidate(reselect=True)


add_policy_listener(_invalidate_all)


# --------------------------------------------------------------------------- trampolines


@functools.lru_cache(maxsize=4096)
def _signature_key(fn: Callable[..., Any]) -> tuple | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    key = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            return None
        if not p.name.isidentifier() or keyword.iskeyword(p.name) or p.name in _RESERVED:
            return None
        key.append((p.name, p.kind, p.default))
    return tuple(key)


def _same_key(a: tuple, b: tuple) -> bool:
    if len(a) != len(b):
        return False
    for (n1, k1, d1), (n2, k2, d2) in zip(a, b):
        if n1 != n2 or k1 != k2:
            return False
        if d1 is not d2:
            try:
                if type(d1) is not type(d2) or not bool(d1 == d2):
                    return False
            except Exception:  # noqa: BLE001 - e.g. tensors as defaults
                return False
    return True


def _tracing_now() -> bool:
    """Whether torch.compile is tracing the caller (False when torch was never imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


_FACTORY = """
def _make(_impl, _traced, _strict, _fallback{dparams}):
{body}
    return {name}
"""

# Every variant names all four cells (the fallback gets ``_traced`` only for that reason), so
# that variants can share one closure.
_CALL = """\
            return _impl({call})
"""
_SPLIT_CALL = """\
            if _is_compiling():
                return _traced({call})
            return _impl({call})
"""
_BODY = """\
    def {name}({params}):
        try:
{call}\
        except Exception as _exc:
            if _strict:
                raise
            return _fallback(_exc, {args}, {kwargs}, _traced)
"""


def _body(name: str, key: tuple | None, split: bool, defaults: dict[str, Any]) -> str:
    if key is None:
        params, call, args, kwargs = "*args, **kwargs", "*args, **kwargs", "args", "kwargs"
    else:
        params, call, args, kwargs = _exact_parts(key, defaults)
    return _BODY.format(
        name=name,
        params=params,
        call=(_SPLIT_CALL if split else _CALL).format(call=call),
        args=args,
        kwargs=kwargs,
    )


def _exact_parts(key: tuple, defaults: dict[str, Any]) -> tuple[str, str, str, str]:
    params, pos, kws = [], [], []
    star_done = False
    last_posonly = max(
        (i for i, (_, kind, _) in enumerate(key) if kind is inspect.Parameter.POSITIONAL_ONLY),
        default=-1,
    )
    for i, (pname, kind, default) in enumerate(key):
        if kind is inspect.Parameter.KEYWORD_ONLY and not star_done:
            params.append("*")
            star_done = True
        text = pname
        if default is not inspect.Parameter.empty:
            dname = f"_d{i}"
            defaults[dname] = default
            text = f"{pname}={dname}"
        params.append(text)
        if i == last_posonly:
            params.append("/")
        if kind is inspect.Parameter.KEYWORD_ONLY:
            kws.append(pname)
        else:
            pos.append(pname)
    call = ", ".join(pos + [f"{k}={k}" for k in kws])
    args_tuple = "(" + "".join(f"{p}, " for p in pos) + ")"
    kwargs_dict = "{" + ", ".join(f"{k!r}: {k}" for k in kws) + "}"
    return ", ".join(params), call, args_tuple, kwargs_dict


def _build(
    name: str, key: tuple | None, split: bool = False, closure: tuple | None = None
) -> Callable[..., Any]:
    """A trampoline whose free variables ``_impl``, ``_traced``, ``_strict``, ``_fallback`` are
    closure cells (Dynamo guards on closure cells like on any closure). ``split``: calls traced
    by torch.compile go to ``_traced``."""
    defaults: dict[str, Any] = {}
    body = _body(name, key, split, defaults)
    ns: dict[str, Any] = {"__builtins__": builtins}
    if split:
        import torch

        ns["_is_compiling"] = torch.compiler.is_compiling
    exec(_FACTORY.format(name=name, body=body, dparams="".join(f", {d}" for d in defaults)), ns)
    fn = ns["_make"](None, None, False, None, *defaults.values())
    if closure is None:
        return fn
    # Same code, but sharing the closure cells of an existing trampoline: both see one `_impl`.
    assert fn.__code__.co_freevars == ("_fallback", "_impl", "_strict", "_traced")
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


class _Binding:
    """The trampoline of one op of one manager, and what it currently calls."""

    def __init__(self, op_name: str, get_manager: Callable[[], "OpManager"]) -> None:
        self.op = op_name
        self._get_manager = get_manager
        self.active: OpImpl | None = None
        self.active_traced: OpImpl | None = None
        self._key: tuple | None = None
        self._split = False
        self._fname = "op_" + "".join(c if c.isalnum() else "_" for c in op_name)
        self.sites: list[tuple[weakref.ref, str]] = []
        self.fn = _build(self._fname, None)
        self._cells = dict(zip(self.fn.__code__.co_freevars, self.fn.__closure__))
        self._set("_impl", self._resolve_and_call)
        self._set("_traced", self._resolve_and_call)
        self._set("_fallback", self._fallback)
        self.fn.__qualname__ = f"dispatch[{op_name}]"
        self.fn.__doc__ = f"Dispatch trampoline of op '{op_name}'."

    def _set(self, name: str, value: Any) -> None:
        self._cells[name].cell_contents = value

    def current(self, traced: bool = False) -> Callable[..., Any]:
        """What the trampoline calls now (eager, or traced by torch.compile): the selected impl,
        or the resolver."""
        return self._cells["_traced" if traced and self._split else "_impl"].cell_contents

    # -- state changes (under _LOCK) ---------------------------------------------------------

    def invalidate(self, registry_changed: bool = False) -> None:
        """Put the resolver back. After a registry change the next selection may take other
        arguments, so the classes get the generic trampoline back too."""
        with _LOCK:
            self.active = self.active_traced = None
            self._set("_impl", self._resolve_and_call)
            self._set("_traced", self._resolve_and_call)
            if registry_changed and (self._key is not None or self._split):
                self._install_code(None, False)

    def _specialise(self, candidates: Sequence[OpImpl], split: bool) -> None:
        keys = [_signature_key(c.fn) for c in candidates]
        key = keys[0] if keys and all(k is not None for k in keys) else None
        if key is not None and not all(_same_key(key, k) for k in keys[1:]):
            key = None
        if split == self._split:
            if key is None and self._key is None:
                return
            if key is not None and self._key is not None and _same_key(key, self._key):
                return
        self._install_code(key, split)

    def _install_code(self, key: tuple | None, split: bool) -> None:
        """A new trampoline for ``key`` sharing this one's cells; the code of a function never
        changes (a frame being traced by Dynamo keeps valid code), and functions already bound
        elsewhere (vLLM's ``_forward_method``) keep working through the shared cells."""
        old = self.fn
        new = _build(self._fname, key, split, old.__closure__)
        new.__qualname__, new.__doc__ = old.__qualname__, old.__doc__
        self.fn = new
        self._key = key
        self._split = split
        for ref, name in self.sites:
            owner = ref()
            if owner is not None and owner.__dict__.get(name) is old:
                setattr(owner, name, new)

    def add_site(self, owner: type, name: str) -> None:
        """``owner.name`` holds this op's trampoline; keep it the current one."""
        with _LOCK:
            self.sites.append((weakref.ref(owner), name))
            setattr(owner, name, self.fn)

    def activate(self) -> None:
        """Resolve (unless another thread just did) and install the selected impls."""
        manager = self._get_manager()  # outside _LOCK: may build the default manager
        with _LOCK:
            if self.active is not None:
                return
            policy = get_policy()
            candidates = manager.resolve_candidates(self.op)
            traced = (
                manager.resolve_candidates(self.op, traced=True)
                if policy.splits_traced
                else candidates
            )
            impl, traced_impl = candidates[0], traced[0]
            split = traced_impl is not impl
            self._specialise(candidates + traced if split else candidates, split)
            self._set("_strict", policy.strict)
            self._set("_impl", impl.fn)
            self._set("_traced", traced_impl.fn)
            self.active, self.active_traced = impl, traced_impl
            manager._record_use(self.op, impl, fallback=False)
            manager._record_use(self.op, traced_impl, fallback=False, traced=True, log=split)

    # -- the slow paths the trampoline jumps to ----------------------------------------------

    def _resolve_and_call(self, *args: Any, **kwargs: Any) -> Any:
        self.activate()
        return self.current(traced=_tracing_now())(*args, **kwargs)

    def _fallback(self, exc: Exception, args: tuple, kwargs: dict, _traced_cell: Any) -> Any:
        traced = self._split and _tracing_now()
        failed = self.active_traced if traced else self.active
        if failed is None:  # resolution itself failed: nothing to fall back from
            raise exc
        manager = self._get_manager()
        op = self.op
        tried = [failed.impl_id]
        newly_failed: list[str] = []
        last: BaseException = exc
        with _LOCK:
            if manager._mark_failed(op, failed, exc):
                newly_failed.append(failed.impl_id)
        while True:
            with _LOCK:
                try:
                    candidates = manager.resolve_candidates(op, traced=traced)
                except DispatchError:
                    candidates = []
            nxt = next((c for c in candidates if c.impl_id not in tried), None)
            if nxt is None:
                break
            try:
                out = nxt.fn(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - every impl gets its chance
                last = err
                tried.append(nxt.impl_id)
                with _LOCK:
                    if manager._mark_failed(op, nxt, err):
                        newly_failed.append(nxt.impl_id)
                continue
            with _LOCK:
                other = (self.active if traced else self.active_traced) if self._split else None
                self._specialise(candidates + ([other] if other else []), self._split)
                if not traced:
                    self._set("_impl", nxt.fn)
                    self.active = nxt
                if traced or not self._split:  # without a split one selection serves both modes
                    self._set("_traced", nxt.fn)
                    self.active_traced = nxt
                self._set("_strict", get_policy().strict)
                manager._record_use(op, nxt, fallback=True, traced=traced)
            return out
        # Every candidate failed on these inputs: that says more about the inputs than about the
        # backends, so none of them is excluded from later calls.
        with _LOCK:
            manager._unmark_failed(op, newly_failed)
            self.invalidate()
        raise DispatchError(
            f"Op '{op}': every implementation failed: tried "
            + ", ".join(repr(t) for t in tried)
            + f"; last error: {type(last).__name__}: {last}"
        ) from last


# --------------------------------------------------------------------------- the manager


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
        self._bindings: dict[str, _Binding] = {}
        self._get_self: Callable[[], OpManager] = weakref.ref(self)  # type: ignore[assignment]
        self._is_default = False
        self._oplist_written: tuple[str, ...] | None = None
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
        with _LOCK:
            cached = self._cache.get((op_name, traced))
            if cached is not None:
                return list(cached)
            if op_name not in self._registry:
                raise DispatchError(
                    f"no implementation registered for op '{op_name}'; registered ops: "
                    f"{', '.join(self._registry.list_operators()) or '(none)'}"
                )
            policy = get_policy()
            ordered, rejected = self.evaluate(op_name, policy, traced)
            self.resolution_count += 1
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
            binding = self._binding(op)
            try:
                binding.activate()
            except DispatchError as exc:
                logger.info("%s", exc)
                out[op] = None
                continue
            out[op] = binding.active.impl_id if binding.active is not None else None
        return out

    # -- calling -----------------------------------------------------------------------------

    def _binding(self, op_name: str) -> _Binding:
        b = self._bindings.get(op_name)
        if b is None:
            with _LOCK:
                b = self._bindings.get(op_name)
                if b is None:
                    b = self._bindings[op_name] = _Binding(op_name, self._get_self)
        return b

    def get_callable(self, op_name: str) -> Callable[..., Any]:
        """The op's trampoline: a stable function that always calls the current selection."""
        return self._binding(op_name).fn

    def call(self, op_name: str, *args: Any, **kwargs: Any) -> Any:
        b = self._bindings.get(op_name) or self._binding(op_name)
        return b.fn(*args, **kwargs)

    def call_as_method(self, op_name: str, instance: Any, *args: Any, **kwargs: Any) -> Any:
        b = self._bindings.get(op_name) or self._binding(op_name)
        return b.fn(instance, *args, **kwargs)

    # -- state -------------------------------------------------------------------------------

    def used_impls(self, traced: bool = False) -> dict[str, str]:
        """op -> impl id most recently selected for eager calls through this manager, or for
        calls traced by torch.compile."""
        with _LOCK:
            used = self._used_traced if traced else self._used
            return {op: impl.impl_id for op, impl in used.items()}

    def invalidate(self, reselect: bool = False) -> None:
        """Forget every selection; the next call of each op resolves again. With ``reselect``,
        ops that had a selection get their new one now (errors leave them to the next call)."""
        with _LOCK:
            self._cache.clear()
            active = [b for b in self._bindings.values() if b.active is not None]
            for b in self._bindings.values():
                b.invalidate()
            if reselect:
                for b in active:
                    try:
                        b.activate()
                    except Exception as exc:  # noqa: BLE001 - the next call reports it
                        logger.debug("re-selection of op '%s' deferred: %s", b.op, exc)

    def _on_registry_change(self) -> None:
        with _LOCK:
            self._cache.clear()
            for b in self._bindings.values():
                b.invalidate(registry_changed=True)

    def clear_failed_impls(self, op_name: str | None = None) -> None:
        """Let implementations that failed (in non-strict mode) be tried again."""
        with _LOCK:
            if op_name is None:
                self._failed.clear()
            else:
                self._failed.pop(op_name, None)
            self.invalidate()

    def failed_impls(self) -> dict[str, list[str]]:
        with _LOCK:
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
        if self._is_default:
            self._write_flagos_oplist()

    def _mark_failed(self, op: str, impl: OpImpl, exc: BaseException) -> bool:
        key = (op, impl.impl_id)
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(
                "Implementation '%s' failed for op '%s': %s: %s",
                impl.impl_id,
                op,
                type(exc).__name__,
                exc,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        ids = self._failed.setdefault(op, set())
        new = impl.impl_id not in ids
        ids.add(impl.impl_id)
        self._forget(op)
        return new

    def _forget(self, op: str) -> None:
        """Drop the cached candidates of ``op`` for both modes."""
        self._cache.pop((op, False), None)
        self._cache.pop((op, True), None)

    def _unmark_failed(self, op: str, impl_ids: Sequence[str]) -> None:
        ids = self._failed.get(op)
        if ids:
            ids.difference_update(impl_ids)
        self._forget(op)

    def _write_flagos_oplist(self) -> None:
        """FLAGGEMS_ENABLE_OPLIST_PATH: the ops currently running a FlagGems impl, one per line,
        rewritten whenever that set changes (never written while it stays empty)."""
        ops = tuple(
            sorted(
                {
                    op
                    for used in (self._used, self._used_traced)
                    for op, i in used.items()
                    if i.kind is BackendImplKind.DEFAULT
                }
            )
        )
        if ops == (self._oplist_written or ()):
            return
        path = get_config().flaggems_enable_oplist_path
        try:
            write_atomically(path, "".join(f"{op}\n" for op in ops))
        except OSError as exc:
            logger.warning("cannot write FLAGGEMS_ENABLE_OPLIST_PATH=%s: %s", path, exc)
        self._oplist_written = ops


# --------------------------------------------------------------------------- default manager

_DEFAULT_LOCK = threading.RLock()
_DEFAULT: OpManager | None = None
_DEFAULT_BINDINGS: dict[str, _Binding] = {}


def get_default_manager() -> OpManager:
    """The process-wide manager: built-in backends and plugins registered on first use."""
    global _DEFAULT
    m = _DEFAULT
    if m is not None:
        return m
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            from .builtin_ops import register_builtins
            from .discovery import load_plugins

            cfg = get_config()
            m = OpManager(OpRegistry())
            register_builtins(m.registry, m.load_errors)
            load_plugins(m.registry, cfg.plugin_modules, m.load_errors)
            warn_unknown_names(get_policy(), m.registry)
            with _LOCK:
                m._bindings = _DEFAULT_BINDINGS
                m._get_self = get_default_manager
                m._is_default = True
                m._on_registry_change()
            _DEFAULT = m
        return _DEFAULT


def reset_default_manager() -> None:
    """Drop the default manager; the next use builds a fresh one (re-registering everything)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        old, _DEFAULT = _DEFAULT, None
        with _LOCK:
            if old is not None:
                old._bindings = {}
                old._is_default = False
            for b in _DEFAULT_BINDINGS.values():
                b.invalidate(registry_changed=True)


def _default_binding(op_name: str) -> _Binding:
    b = _DEFAULT_BINDINGS.get(op_name)
    if b is None:
        with _LOCK:
            b = _DEFAULT_BINDINGS.get(op_name)
            if b is None:
                b = _DEFAULT_BINDINGS[op_name] = _Binding(op_name, get_default_manager)
    return b


def call_op(op_name: str, *args: Any, **kwargs: Any) -> Any:
    """Call the selected implementation of ``op_name`` (default manager)."""
    b = _DEFAULT_BINDINGS.get(op_name)
    if b is None:
        b = _default_binding(op_name)
    return b.fn(*args, **kwargs)


def call_method_op(op_name: str, instance: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the selected implementation of ``op_name`` with ``self`` = ``instance``."""
    b = _DEFAULT_BINDINGS.get(op_name)
    if b is None:
        b = _default_binding(op_name)
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
            _default_binding(self.op_name).add_site(owner, name)
        else:
            self.manager._binding(self.op_name).add_site(owner, name)

    def function(self) -> Callable[..., Any]:
        if self.manager is None:
            return _default_binding(self.op_name).fn
        return self.manager._binding(self.op_name).fn

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
