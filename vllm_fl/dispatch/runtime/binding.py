"""One op's trampoline and what it currently calls: resolution, installation and fallback.

A binding asks its manager (a ``Resolver``: the candidates, the failure log, what to tell once a
selection is installed) and knows nothing else of it, so the manager owns bindings and failures and
the binding only changes its own trampoline.

Every state change happens under ``sync.LOCK`` and nothing else does: availability checks and
implementations run outside it. A selection computed outside the lock is installed only when the
dispatch generation has not moved since it started (see ``sync``), so a policy or registry change
always wins over a resolution or fallback that began before it.

A selection wrapper (``set_selection_wrapper``; ``vllm_fl.verify`` sets one in bring-up mode) may
give the eager calls of an op another function than the impl's own, one that calls the impl; the
trampoline then splits, so calls traced by torch.compile get the impl itself. With no wrapper set
(the default) nothing of this runs: it is looked at when a selection is installed, never per call.

An impl that declares ``supports`` (ops.yaml) serves only calls whose arguments have the values it
lists. When the selected impl declares it, the trampoline calls the binding's gate instead
(``_supported_call``): per call it gives the arguments to the first candidate that serves them.
Ops whose selected impl declares nothing keep the plain trampoline: the check costs them nothing.

Direct binding: a selection that nothing can fall back from (strict mode, or one candidate for
eager and traced calls alike), with no gate, no split and no selection wrapper, puts the impl's
function itself on the classes that hold the op (``add_site``: ``layer.forward_oot(x)`` is then
one call of the impl, no trampoline frame); every change of selection (``invalidate``) puts the
trampoline back first, so the next call resolves again. Module attributes (``vllm_fl.functions``)
keep the trampoline: a later ``from module import fn`` would keep whatever it found. A method
bound from the class while it holds the impl keeps calling that impl, unless its holder is
registered with ``follow_bound_method`` (vLLM's ``_forward_method``, see
``vllm_fl.registration``): those are re-bound with every change of what the class holds.
"""

from __future__ import annotations

import inspect
import types
import weakref
from typing import Any, Callable, Iterator, Protocol, Sequence

from .. import sync
from ..logger_manager import get_logger
from ..policy.current import get_policy
from ..registry import OpRegistry
from ..types import DispatchError, OpImpl
from .failures import FailureLog
from .trampoline import build, same_key, signature_key, tracing_now

__all__ = [
    "Binding",
    "BindingTable",
    "Resolver",
    "all_failed_error",
    "follow_bound_method",
    "set_selection_wrapper",
]

logger = get_logger()


class _Quiet:
    """While ``active``, resolving an op does not log its selection (``quiet_resolution``)."""

    active = False


_QUIET = _Quiet()


class quiet_resolution:
    """Context manager: ops resolved inside it do not log "Op 'x' using ..."; their selection is
    logged later, for the ops a model uses (``OpManager.log_selections``). A fallback is logged
    always."""

    def __enter__(self) -> None:
        self._was = _QUIET.active
        _QUIET.active = True

    def __exit__(self, *exc: object) -> None:
        _QUIET.active = self._was


#: (op, selected impl, the registry it came from) -> the function eager calls get instead of
#: the impl's, or None for the impl's own. The binding marks that function with the impl's
#: (``IMPL_ATTR``), so a failure is blamed on the impl and the resolver calls the function.
SelectionWrapper = Callable[[str, OpImpl, OpRegistry], "Callable[..., Any] | None"]
IMPL_ATTR = "__vllm_fl_impl__"
_WRAPPER: SelectionWrapper | None = None


def set_selection_wrapper(wrapper: SelectionWrapper | None) -> SelectionWrapper | None:
    """Install ``wrapper`` for the selections installed from now on (None: none); returns the
    previous one. The caller re-selects (``OpManager`` does, see ``manager.wrap_selections``)."""
    global _WRAPPER
    with sync.LOCK:
        old, _WRAPPER = _WRAPPER, wrapper
    return old


def _eager_fn(op: str, impl: OpImpl, registry: OpRegistry) -> Callable[..., Any]:
    wrapper = _WRAPPER
    if wrapper is None:
        return impl.fn
    fn = wrapper(op, impl, registry)
    if fn is None or fn is impl.fn:
        return impl.fn
    try:
        setattr(fn, IMPL_ATTR, impl.fn)
    except (AttributeError, TypeError):
        raise TypeError(
            f"the selection wrapper {wrapper!r} gave op {op!r} {fn!r}, which takes no "
            "attributes; it must return a function (or None for the impl itself)"
        ) from None
    return fn


#: class -> {attribute -> the binding whose function (trampoline or impl) the attribute holds}
_CLASS_SITES: "weakref.WeakKeyDictionary[type, dict[str, Binding]]" = weakref.WeakKeyDictionary()


def follow_bound_method(instance: Any, attr: str, name: str) -> bool:
    """``instance.attr`` holds (or is about to hold) ``instance.name`` bound to ``instance``,
    where ``name`` is an op's site on the instance's class: re-bind it whenever the op's binding
    changes what the class holds (the trampoline or, with no fallback possible, the impl itself).
    False (nothing followed) where the class got ``name`` from no binding."""
    for cls in type(instance).__mro__:
        if name in cls.__dict__:
            binding = _CLASS_SITES.get(cls, {}).get(name)
            if binding is None:
                return False
            binding.follow(instance, attr)
            return True
    return False


def _direct_fn(
    impl: OpImpl,
    eager_fn: Callable[..., Any],
    candidates: Sequence[OpImpl],
    traced_candidates: Sequence[OpImpl],
    strict: bool,
) -> Callable[..., Any] | None:
    """The function class sites may hold instead of the trampoline: the impl's own, when every
    call (eager or traced) goes to it and nothing can fall back from it; None otherwise.

    Only a plain Python function binds ``self`` as a method does (a builtin or a callable object
    on a class would be called without the layer)."""
    if eager_fn is not impl.fn or impl.supports or type(impl.fn) is not types.FunctionType:
        return None
    if traced_candidates[0] is not impl or traced_candidates[0].supports:
        return None
    if strict or (len(candidates) == 1 and len(traced_candidates) == 1):
        return impl.fn
    return None


class Resolver(Protocol):
    """What a binding needs of its manager."""

    @property
    def registry(self) -> OpRegistry: ...

    @property
    def failures(self) -> FailureLog: ...

    def resolve_candidates(self, op_name: str, traced: bool = False) -> list[OpImpl]: ...

    def selection_installed(self) -> None: ...


class Binding:
    """The trampoline of one op of one manager, and what it currently calls."""

    def __init__(self, op_name: str, get_manager: Callable[[], Resolver]) -> None:
        self.op = op_name
        self._get_manager = get_manager
        self.active: OpImpl | None = None
        self.active_traced: OpImpl | None = None
        # The selections installed last (kept when a change puts the resolver back).
        self.used: OpImpl | None = None
        self.used_traced: OpImpl | None = None
        # Whether the op had a selection since the last registry change: a policy change
        # re-selects those ops right away, so a compiled graph never traces a resolution.
        self.in_use = False
        self._key: tuple | None = None
        self._split = False
        # (candidate, the function its calls get), best first, for the gates of an impl with
        # ``supports``, eager and traced; set with the selection that installs the gate
        self._gate: tuple[tuple[OpImpl, Callable[..., Any]], ...] = ()
        self._gate_traced: tuple[tuple[OpImpl, Callable[..., Any]], ...] = ()
        self._refusals_logged: set[tuple[str, str]] = set()
        self.sites: list[tuple[weakref.ref, str]] = []
        # The impl's function the class sites hold instead of the trampoline (direct binding)
        self.direct: Callable[..., Any] | None = None
        # Every function class sites held (trampolines and impls): a bound method of one of them
        # that ``follow`` keeps is this binding's to re-bind
        self._held: "weakref.WeakSet[Callable[..., Any]]" = weakref.WeakSet()
        # id(instance) -> (instance, attribute) holding a method bound from a class site
        self._followed: dict[int, tuple[weakref.ref, str]] = {}
        self.fn = build(op_name, None)
        self._cells = dict(zip(self.fn.__code__.co_freevars, self.fn.__closure__))
        self._set("_impl", self._resolve_and_call)
        self._set("_traced", self._resolve_and_call)
        self._set("_fallback", self._fallback)
        self.fn.__qualname__ = f"dispatch[{op_name}]"
        self.fn.__doc__ = f"Dispatch trampoline of op '{op_name}'."

    def _set(self, name: str, value: Any) -> None:
        self._cells[name].cell_contents = value

    # -- state changes (under sync.LOCK) -----------------------------------------------------

    def invalidate(self, registry_changed: bool = False) -> None:
        """Put the resolver back. After a registry change the next selection may take other
        arguments, so the classes get the generic trampoline back too."""
        with sync.LOCK:
            self.active = self.active_traced = None
            self._set("_impl", self._resolve_and_call)
            self._set("_traced", self._resolve_and_call)
            self._set_direct(None)
            if registry_changed:
                self.in_use = False
                if self._key is not None or self._split:
                    self._install_code(None, False)

    def _specialise(self, candidates: Sequence[OpImpl], split: bool) -> None:
        keys = [signature_key(c.fn) for c in candidates]
        key = keys[0] if keys and all(k is not None for k in keys) else None
        if key is not None and not all(same_key(key, k) for k in keys[1:]):
            key = None
        if split == self._split:
            if key is None and self._key is None:
                return
            if key is not None and self._key is not None and same_key(key, self._key):
                return
        self._install_code(key, split)

    def _install_code(self, key: tuple | None, split: bool) -> None:
        """A new trampoline for ``key`` sharing this one's cells; the code of a function never
        changes (a frame being traced by Dynamo keeps valid code), and functions already bound
        elsewhere (vLLM's ``_forward_method``) keep working through the shared cells."""
        old = self.fn
        new = build(self.op, key, split, old.__closure__)
        new.__qualname__, new.__doc__ = old.__qualname__, old.__doc__
        self.fn = new
        self._key = key
        self._split = split
        self._put_sites(old, self.direct)

    def _set_direct(self, fn: Callable[..., Any] | None) -> None:
        """Class sites hold ``fn`` (None: the trampoline) from now on."""
        if fn is not self.direct:
            old, self.direct = self.direct, fn
            self._put_sites(self.fn, old)

    def _site_fn(self, owner: Any) -> Callable[..., Any]:
        return self.direct if self.direct is not None and isinstance(owner, type) else self.fn

    def _put_sites(self, old_fn: Callable[..., Any], old_direct: Callable[..., Any] | None) -> None:
        """Give every site what it holds now, where it still holds what this binding gave it
        (``old_fn``, the trampoline, or ``old_direct`` for a class); re-bind the methods
        ``follow`` keeps."""
        for ref, name in self.sites:
            owner = ref()
            if owner is None:
                continue
            was = old_direct if old_direct is not None and isinstance(owner, type) else old_fn
            new = self._site_fn(owner)
            if new is not was and owner.__dict__.get(name) is was:
                setattr(owner, name, new)
                if isinstance(owner, type):
                    self._held.add(new)
        for key, (ref, attr) in list(self._followed.items()):
            instance = ref()
            if instance is not None:
                self._rebind(instance, attr)

    def _rebind(self, instance: Any, attr: str) -> None:
        method = instance.__dict__.get(attr)
        if type(method) is not types.MethodType or method.__self__ is not instance:
            return
        new = self._site_fn(type(instance))
        if method.__func__ is not new and method.__func__ in self._held:
            instance.__dict__[attr] = types.MethodType(new, instance)

    def add_site(self, owner: type, name: str) -> None:
        """``owner.name`` holds this op's trampoline (or, for a class, the impl itself while no
        fallback is possible); keep it the current one."""
        with sync.LOCK:
            self.sites.append((weakref.ref(owner), name))
            fn = self._site_fn(owner)
            setattr(owner, name, fn)
            if isinstance(owner, type):
                self._held.add(fn)
                _CLASS_SITES.setdefault(owner, {})[name] = self

    def follow(self, instance: Any, attr: str) -> None:
        """Keep ``instance.attr``, a method bound from a class site, bound to what the class holds
        (``follow_bound_method``)."""
        key = id(instance)

        def forget(ref: weakref.ref, key: int = key) -> None:
            if self._followed.get(key, (None,))[0] is ref:
                self._followed.pop(key, None)

        with sync.LOCK:
            self._followed[key] = (weakref.ref(instance, forget), attr)
            self._rebind(instance, attr)

    # -- resolution --------------------------------------------------------------------------

    def select(self, traced: bool = False) -> tuple[OpImpl, bool]:
        """(the impl for an eager call, or one traced by torch.compile; strict mode).

        Installs the selection unless the dispatch state changed while it was being resolved;
        then the result serves only this call and the next call resolves again.
        """
        manager = self._get_manager()  # outside the lock: may build the default manager
        with sync.LOCK:
            if self.active is not None and self.active_traced is not None:
                return (self.active_traced if traced else self.active), self._strict_now()
            gen = sync.generation()
        policy = get_policy()  # read after the generation: a newer policy bumps it
        candidates = manager.resolve_candidates(self.op)
        traced_cands = (
            manager.resolve_candidates(self.op, traced=True) if policy.splits_traced else candidates
        )
        impl, traced_impl = candidates[0], traced_cands[0]
        eager_fn = _eager_fn(self.op, impl, manager.registry)  # outside the lock: may import
        gate = self._gate_pairs(candidates, manager.registry) if impl.supports else ()
        gate_traced = (
            self._gate_pairs(traced_cands, manager.registry, traced=True)
            if traced_impl.supports
            else ()
        )
        with sync.LOCK:
            if sync.generation() == gen and (self.active is None or self.active_traced is None):
                split = traced_impl is not impl
                self._specialise(
                    candidates + traced_cands if split else candidates,
                    split or eager_fn is not impl.fn,
                )
                self._set("_strict", policy.strict)
                self._gate, self._gate_traced = gate, gate_traced
                self._set("_impl", self._supported_call if gate else eager_fn)
                self._set("_traced", self._supported_call_traced if gate_traced else traced_impl.fn)
                self._set_direct(
                    None
                    if gate or gate_traced or split
                    else _direct_fn(impl, eager_fn, candidates, traced_cands, policy.strict)
                )
                self.active, self.active_traced = impl, traced_impl
                self.in_use = True
                self._record_use(impl, fallback=False)
                self._record_use(traced_impl, fallback=False, traced=True, log=split)
                manager.selection_installed()
        return (traced_impl if traced else impl), policy.strict

    def _record_use(
        self, impl: OpImpl, fallback: bool, traced: bool = False, log: bool = True
    ) -> None:
        prev = self.used_traced if traced else self.used
        if traced:
            self.used_traced = impl
        else:
            self.used = impl
        if fallback or (
            log and not _QUIET.active and (prev is None or prev.impl_id != impl.impl_id)
        ):
            self._log_use(impl, fallback, traced)

    def _log_use(self, impl: OpImpl, fallback: bool, traced: bool) -> None:
        logger.info(
            "Op '%s' %s '%s'%s (kind=%s, vendor=%s)",
            self.op,
            "fallback to" if fallback else "using",
            impl.impl_id,
            " under torch.compile" if traced else "",
            impl.kind.value,
            impl.vendor,
        )

    def log_use(self) -> None:
        """Log the installed selection as resolving it does ("Op 'x' using ..."; a second line
        for calls traced by torch.compile where those select another impl); nothing before the
        op is resolved."""
        used, traced = self.used, self.used_traced
        if used is not None:
            self._log_use(used, fallback=False, traced=False)
        if traced is not None and (used is None or traced.impl_id != used.impl_id):
            self._log_use(traced, fallback=False, traced=True)

    def forget_use(self) -> None:
        """Forget the selections installed last (their manager is gone)."""
        with sync.LOCK:
            self.used = self.used_traced = None

    def _strict_now(self) -> bool:
        return bool(self._cells["_strict"].cell_contents)

    # -- the slow paths the trampoline jumps to ----------------------------------------------

    def _gate_pairs(
        self, candidates: Sequence[OpImpl], registry: OpRegistry, traced: bool = False
    ) -> tuple[tuple[OpImpl, Callable[..., Any]], ...]:
        """(candidate, the function its calls get): for traced calls the impl itself, for eager
        ones what a selection wrapper gives it."""
        if traced:
            return tuple((c, c.fn) for c in candidates)
        return tuple((c, _eager_fn(self.op, c, registry)) for c in candidates)

    def _supported_call(self, *args: Any, **kwargs: Any) -> Any:
        """The eager trampoline's function when the selected impl declares ``supports``."""
        return self._call_served(self._gate, args, kwargs, False)

    def _supported_call_traced(self, *args: Any, **kwargs: Any) -> Any:
        """The same for calls traced by torch.compile."""
        return self._call_served(self._gate_traced, args, kwargs, True)

    def _call_served(
        self,
        pairs: Sequence[tuple[OpImpl, Callable[..., Any]]],
        args: tuple,
        kwargs: dict,
        traced: bool,
    ) -> Any:
        """Call the first of ``pairs`` whose impl serves these arguments; a failure falls back as
        the trampoline's would (this is a method of the binding, so the trampoline's handler
        leaves the error to it)."""
        reasons: list[str] = []
        for impl, fn in pairs:
            why = impl.refusal(args, kwargs)
            if why is None:
                break
            reasons.append(f"'{impl.impl_id}' does not serve {why}")
            self._log_refusal(impl, why)
        else:
            raise DispatchError(
                f"Op '{self.op}': no implementation serves this call: " + "; ".join(reasons)
            )
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if self._strict_now():
                raise
            return self._recover(exc, impl, args, kwargs, traced and self._split)

    def _log_refusal(self, impl: OpImpl, why: str) -> None:
        key = (impl.impl_id, why)
        if key not in self._refusals_logged:
            self._refusals_logged.add(key)
            logger.info(
                "Op '%s': '%s' does not serve %s; such calls go to the next candidate",
                self.op,
                impl.impl_id,
                why,
            )

    def _resolve_and_call(self, *args: Any, **kwargs: Any) -> Any:
        traced = tracing_now()
        impl, strict = self.select(traced)
        if impl.supports:
            manager = self._get_manager()
            candidates = manager.resolve_candidates(self.op, traced=traced and self._split)
            return self._call_served(
                self._gate_pairs(candidates, manager.registry), args, kwargs, traced
            )
        fn = impl.fn
        if not traced:  # what the selection installed for eager calls (a wrapper's function)
            installed = self._cells["_impl"].cell_contents
            if getattr(installed, IMPL_ATTR, None) is fn:
                fn = installed
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if strict:
                raise
            return self._recover(exc, impl, args, kwargs, traced and self._split)

    def _fallback(
        self, exc: Exception, called: Callable[..., Any], args: tuple, kwargs: dict, _traced: Any
    ) -> Any:
        """The trampoline's handler: ``called`` raised ``exc`` (strict mode off)."""
        if getattr(called, "__self__", None) is self:
            raise exc  # the resolver: it handled an impl's failure itself, or resolution failed
        traced = self._split and tracing_now()
        return self._recover(exc, self._impl_of(called), args, kwargs, traced)

    def _impl_of(self, fn: Callable[..., Any]) -> OpImpl | None:
        """The implementation whose function is ``fn``: blame goes to what actually ran."""
        fn = getattr(fn, IMPL_ATTR, fn)  # a selection wrapper's function: the impl it calls
        for impl in (self.active, self.active_traced):
            if impl is not None and impl.fn is fn:
                return impl
        for impl in self._get_manager().registry.get_implementations(self.op):
            if impl.fn is fn:
                return impl
        return None  # unregistered meanwhile: nothing to mark, the candidates are still tried

    def _recover(
        self, exc: Exception, failed: OpImpl | None, args: tuple, kwargs: dict, traced: bool
    ) -> Any:
        """``failed`` raised ``exc``: mark it, try the next candidates in order, install the first
        that works (unless the dispatch state changed meanwhile)."""
        if (
            failed is not None
            and isinstance(exc, TypeError)
            and not _accepts(failed.fn, args, kwargs)
        ):
            # The call does not fit the impl's parameters: the caller's error, as the generated
            # trampolines raise it before any impl runs. The generic (*args, **kwargs) one only
            # finds out here, on the exception path, so its calls cost no check.
            raise exc
        manager = self._get_manager()
        op = self.op
        errors: list[tuple[str, Exception]] = []
        newly_failed: list[str] = []
        tried: set[str] = set()
        if failed is not None:
            errors.append((failed.impl_id, exc))
            tried.add(failed.impl_id)
            if manager.failures.mark(op, failed, exc):
                newly_failed.append(failed.impl_id)
        while True:
            with sync.LOCK:
                gen = sync.generation()
            try:
                candidates = manager.resolve_candidates(op, traced=traced)
            except DispatchError:
                candidates = []
            nxt = next(
                (
                    c
                    for c in candidates
                    if c.impl_id not in tried and c.refusal(args, kwargs) is None
                ),
                None,
            )
            if nxt is None:
                break
            try:
                out = nxt.fn(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - every impl gets its chance
                errors.append((nxt.impl_id, err))
                tried.add(nxt.impl_id)
                if manager.failures.mark(op, nxt, err):
                    newly_failed.append(nxt.impl_id)
                continue
            self._install_fallback(manager, nxt, candidates, traced, gen)
            return out
        # Every candidate failed on these inputs: that says more about the inputs than about the
        # backends, so none of them is excluded from later calls.
        with sync.LOCK:
            manager.failures.unmark(op, newly_failed)
            self.invalidate()
        if not errors:
            raise exc
        raise all_failed_error(op, errors)

    def _install_fallback(
        self,
        manager: Resolver,
        nxt: OpImpl,
        candidates: Sequence[OpImpl],
        traced: bool,
        gen: int,
    ) -> None:
        eager_fn = nxt.fn if traced else _eager_fn(self.op, nxt, manager.registry)
        with sync.LOCK:
            if sync.generation() != gen:
                return  # a policy/registry change or another failure since: its selection wins
            ordered = list(candidates)
            other = (self.active if traced else self.active_traced) if self._split else None
            self._specialise(ordered + ([other] if other else []), self._split)
            # one selection for both modes: no split, or a split made by a selection wrapper only
            same = self.active is not None and self.active is self.active_traced
            # an impl with ``supports`` gets the gate over the candidates from it on
            rest = ordered[ordered.index(nxt) :] if nxt in ordered else [nxt]
            if not traced:
                self._gate = self._gate_pairs(rest, manager.registry) if nxt.supports else ()
                self._set("_impl", self._supported_call if self._gate else eager_fn)
                self.active = nxt
            if traced or not self._split or same:
                self._gate_traced = (
                    self._gate_pairs(rest, manager.registry, traced=True) if nxt.supports else ()
                )
                self._set("_traced", self._supported_call_traced if self._gate_traced else nxt.fn)
                self.active_traced = nxt
            policy = get_policy()
            # nothing left to fall back to (the failed ones are excluded): the impl itself
            alone = not self._split and not policy.splits_traced
            self._set_direct(
                _direct_fn(nxt, eager_fn, candidates, candidates, policy.strict) if alone else None
            )
            self.in_use = True
            self._set("_strict", policy.strict)
            self._record_use(nxt, fallback=True, traced=traced)
            manager.selection_installed()


def _accepts(fn: Callable[..., Any], args: tuple, kwargs: dict) -> bool:
    """Whether ``fn``'s parameters take these arguments (True where it has no signature)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


class BindingTable:
    """op -> ``Binding`` of one manager, created on first use. The default manager's table
    outlives the manager (``reset_default_manager``): layer classes hold its trampolines."""

    def __init__(self, get_manager: Callable[[], Resolver]) -> None:
        self._get_manager = get_manager
        #: op -> binding; read without the lock on the hot path (a dict lookup is atomic)
        self.by_op: dict[str, Binding] = {}

    def get(self, op_name: str) -> Binding:
        b = self.by_op.get(op_name)
        if b is None:
            with sync.LOCK:
                b = self.by_op.get(op_name)
                if b is None:
                    b = self.by_op[op_name] = Binding(op_name, self._get_manager)
        return b

    def __iter__(self) -> Iterator[Binding]:
        with sync.LOCK:
            return iter(list(self.by_op.values()))


def all_failed_error(op: str, errors: Sequence[tuple[str, Exception]]) -> Exception:
    """What the caller gets when every candidate of ``op`` raised (strict mode off).

    When every implementation raised the same exception type, the failure is the call's, not a
    backend's (a bad argument, an out-of-memory error): the caller gets the first of those
    exceptions itself, the one strict mode would have raised, with a note naming every
    implementation tried. Otherwise a ``DispatchError`` naming each implementation and its error,
    chained to the last one.
    """
    summary = "; ".join(f"'{impl_id}': {type(e).__name__}: {e}" for impl_id, e in errors)
    first = errors[0][1]
    if all(type(e) is type(first) for _, e in errors):
        note = (
            f"vllm_fl: every implementation of op '{op}' raised {type(first).__name__}: {summary}"
        )
        if note not in getattr(first, "__notes__", ()):
            first.add_note(note)
        return first
    last = errors[-1][1]
    err = DispatchError(
        f"Op '{op}': every implementation failed: tried "
        + ", ".join(repr(impl_id) for impl_id, _ in errors)
        + f"; errors: {summary}"
    )
    err.__cause__ = last
    return err
