"""The verifying callable: what an op's eager calls get in bring-up mode instead of the impl.

``Verifier.wrap`` is the dispatch's selection wrapper (``vllm_fl.dispatch.wrap_selections``):
for an op it verifies whose selected impl is not the reference, it returns a function that, on a
call due for verification,

1. copies the call's arguments (``vllm_fl.verify.arguments``: never the weights nor the KV
   cache; a cache-writing op's slots are gathered instead);
2. calls the selected impl on the real arguments: its result is what the model gets, unchanged;
3. calls the op's reference impl on the copies, in the call's dtype and in a wider one, maps the
   results to what is compared (the arguments written, a cache's slots, the op's canonical form)
   and measures the impl against both (``vllm_fl.verify.compare``: the rule that tells a wrong
   kernel from rounding); an argument the impl must not write that changed is noted too. The
   numbers stay on the device until the recorder reads many calls back at once.

A call that could not be verified (the reference raising, say) is counted as not verified, with
its reason, and logged once; it never counts as over tolerance, and the call still returns the
selected impl's result. Calls traced by torch.compile,
calls while a CUDA graph is captured and calls made by a reference impl are not verified.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch

from vllm_fl.dispatch import CHECKS, BackendImplKind, OpImpl, get_logger

from .arguments import CallCopy, named_arguments, with_rounded_bounds
from .check import Check
from .compare import WIDER, Measure, measure, unit_roundoff
from .record import CallKey, Recorder
from .replay import Replays
from .sites import Sites

__all__ = ["Check", "Verifier"]

logger = get_logger()


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


@dataclass(frozen=True)
class _Spec:
    """What one verified call's check depends on besides its tensors."""

    check: Check
    ref_fn: Callable[..., Any]
    dtype: str

    @functools.cached_property
    def wide_dtype(self) -> torch.dtype | None:
        return WIDER.get(getattr(torch, self.dtype, None))

    @functools.cached_property
    def tolerance(self) -> tuple[float, float]:
        return self.check.tolerance(self.dtype)

    @functools.cached_property
    def unit(self) -> float:
        return unit_roundoff(getattr(torch, self.dtype)) if self.wide_dtype is not None else 0.0

    @functools.cached_property
    def written(self) -> set[str]:
        check = self.check
        return set(check.mutates) | set(check.inplace) | set(check.cache) | {check.slots}

    @property
    def constants(self) -> tuple:
        return (id(self.check), id(self.ref_fn), self.dtype)


def _shape(value: torch.Tensor) -> str:
    return "x".join(str(d) for d in value.shape) or "scalar"


class Verifier:
    """Verifies the ops ``ops`` selects (True: every op), one call in ``every`` of each op, during
    the first ``steps`` engine steps (0: every step; ``step`` counts them)."""

    def __init__(
        self,
        ops: bool | frozenset[str] = True,
        every: int = 1,
        steps: int = 0,
        replay: bool = True,
    ) -> None:
        self.ops = ops
        self.every = max(every, 1)
        self.steps = steps
        self.step = 0
        #: while True no call is verified (the command times a generation without it)
        self.paused = False
        self.recorder = Recorder()
        self.sites = Sites()
        self._calls: dict[str, int] = {}
        self._local = threading.local()
        self._warned: set[str] = set()
        self.checks = {op: Check(**entry) for op, entry in CHECKS.items()}
        #: checks replayed as CUDA graphs (``replay=False`` or no CUDA: every check eagerly)
        self.replays = Replays() if replay and torch.cuda.is_available() else None

    # -- the dispatch's selection wrapper ---------------------------------------------------

    def wants(self, op: str) -> bool:
        return self.ops is True or (isinstance(self.ops, frozenset) and op in self.ops)

    def wrap(self, op: str, impl: OpImpl, registry: Any) -> Callable[..., Any]:
        """The verifying function for ``op``'s selected ``impl``; where there is nothing to
        verify (an op not asked for, the reference selected, no reference registered) one that
        only counts the calls, so the report lists the op with none verified."""
        fn, impl_id = impl.fn, impl.impl_id
        check = self.checks.get(op)
        reference = next(
            (i for i in registry.get_implementations(op) if i.kind is BackendImplKind.REFERENCE),
            None,
        )
        if (
            check is None
            or reference is None
            or not self.wants(op)
            or impl.kind is BackendImplKind.REFERENCE
        ):
            return self._counting(op, impl_id, fn)
        ref_fn = reference.fn
        due, run = self._due, self._verify

        def verified(*args: Any, **kwargs: Any) -> Any:
            if not due(op, impl_id):
                return fn(*args, **kwargs)
            return run(op, impl_id, fn, ref_fn, check, args, kwargs)

        verified.__qualname__ = f"verified[{op}:{impl_id}]"
        return verified

    def _counting(self, op: str, impl_id: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        seen, local = self.recorder.seen, self._local

        def counted(*args: Any, **kwargs: Any) -> Any:
            if not self.paused and not getattr(local, "in_reference", False):
                seen(op, impl_id)
            return fn(*args, **kwargs)

        counted.__qualname__ = f"counted[{op}:{impl_id}]"
        return counted

    def _due(self, op: str, impl_id: str) -> bool:
        if self.paused or getattr(self._local, "in_reference", False):
            return False
        self.recorder.seen(op, impl_id)
        n = self._calls.get(op, 0)
        self._calls[op] = n + 1
        if n % self.every:
            return False
        if self.steps and self.step > self.steps:
            return False
        return not torch.compiler.is_compiling() and not _capturing()

    # -- one verified call ------------------------------------------------------------------

    def _verify(
        self,
        op: str,
        impl_id: str,
        fn: Callable[..., Any],
        ref_fn: Callable[..., Any],
        check: Check,
        args: tuple,
        kwargs: dict,
    ) -> Any:
        try:
            before = CallCopy.before(check, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - verification never breaks the call
            self._not_verified(op, impl_id, check, args, exc)
            return fn(*args, **kwargs)
        out = fn(*args, **kwargs)  # what the model gets, whatever happens below
        try:
            self._compare(op, impl_id, ref_fn, check, before, args, kwargs, out)
        except Exception as exc:  # noqa: BLE001 - verification never breaks the call
            self._not_verified(op, impl_id, check, args, exc)
        return out

    def _not_verified(self, op, impl_id, check, args, exc: Exception) -> None:
        if op not in self._warned:
            self._warned.add(op)
            logger.warning("vllm_fl verify: op '%s' could not be verified", op, exc_info=True)
        reason = f"{type(exc).__name__}: {exc}"
        self.recorder.not_verified(op, impl_id, self._site(check, args), reason)

    def _site(self, check: Check, args: tuple) -> str:
        if check.layer and args:
            return self.sites.of_layer(args[0])
        return self.sites.current(args)

    def _compare(self, op, impl_id, ref_fn, check, before: CallCopy, args, kwargs, out):
        real = named_arguments(check, args, kwargs)
        dtype = self._dtype(check, real, out)
        spec = _Spec(check, ref_fn, dtype)
        result = self._measure(op, spec, before, real, out)
        shapes = " ".join(
            f"{name}={_shape(value)}"
            for name, value in real.items()
            if isinstance(value, torch.Tensor) and name not in check.mutates
        )
        key = CallKey(op, impl_id, self._site(check, args), shapes, dtype, *spec.tolerance)
        self.recorder.pend(key, result, self._calls.get(op, 0), self.step)

    def _measure(self, op: str, spec: _Spec, before: CallCopy, real: dict, out: Any) -> Measure:
        """The call's check: replayed as a CUDA graph where it can be (``Replays``), the
        references and the comparison together or, when the references cannot be recorded,
        the comparison alone; else run eagerly. The same code computes all three."""
        replays = self.replays
        if replays is None:
            expected, wide, wide_out = self._references(spec, before)
            return self._compared(spec, before, real, out, expected, wide, wide_out)
        caches = {id(real[name]) for name in spec.check.cache if name in real}

        def keep(value: torch.Tensor) -> bool:
            return isinstance(value, torch.nn.Parameter) or id(value) in caches

        # the comparison reads only the real tensors: a bound as the references get it, so
        # that the recorded check repeats while the sequences grow (its value is in the key)
        real = with_rounded_bounds(spec.check, real)
        state = (*before.parts(), real, out)
        check = functools.partial(self._checked, spec, before.shared)
        result = replays.run(op, "check", check, state, keep, spec.constants)
        if result is not None:
            return result
        expected, wide, wide_out = self._references(spec, before)
        if (op, "check") in replays.refused:
            compared = functools.partial(self._compared_parts, spec, before.shared)
            wide_parts = wide.parts() if wide is not None else None
            result = replays.run(
                op,
                "comparison",
                compared,
                (*state, expected, wide_parts, wide_out),
                keep,
                spec.constants,
            )
            if result is not None:
                return result
        return self._compared(spec, before, real, out, expected, wide, wide_out)

    def _references(self, spec: _Spec, before: CallCopy) -> tuple[Any, CallCopy | None, Any]:
        """The reference's results in the call's dtype and in the wider one (with the wide
        arguments; None where the reference cannot run there)."""
        # the wide copies are made before the reference in dtype writes into its copies
        wide = before.widened(spec.wide_dtype) if spec.wide_dtype is not None else None
        self._local.in_reference = True
        try:
            expected = spec.ref_fn(*before.args, **before.kwargs)
            wide_out = None
            if wide is not None:
                try:
                    wide_out = spec.ref_fn(*wide.args, **wide.kwargs)
                except Exception:  # noqa: BLE001 - the parity rule alone then
                    wide = None
        finally:
            self._local.in_reference = False
        return expected, wide, wide_out

    def _checked(self, spec: _Spec, shared: tuple, *state: Any) -> Measure:
        """References and comparison of a call given as ``CallCopy.parts``, the real arguments
        and the impl's result (what ``Replays`` records)."""
        *parts, real, out = state
        before = CallCopy.from_parts(spec.check, shared, *parts)
        expected, wide, wide_out = self._references(spec, before)
        return self._compared(spec, before, real, out, expected, wide, wide_out)

    def _compared_parts(self, spec: _Spec, shared: tuple, *state: Any) -> Measure:
        """The comparison alone, the references' results given (what ``Replays`` records for an
        op whose references cannot be recorded)."""
        *parts, real, out, expected, wide_parts, wide_out = state
        before = CallCopy.from_parts(spec.check, shared, *parts)
        wide = CallCopy.from_parts(spec.check, shared, *wide_parts) if wide_parts else None
        return self._compared(spec, before, real, out, expected, wide, wide_out)

    @staticmethod
    def _compared(spec, before: CallCopy, real, out, expected, wide, wide_out) -> Measure:
        check = spec.check
        copies = before.named()
        actual_form = before.form(out, real, real=True)
        expected_form = before.form(expected, copies)
        wide_form = wide.form(wide_out, wide.named()) if wide is not None else None
        unit = spec.unit if wide is not None else 0.0
        result = measure(actual_form, expected_form, wide_form, *spec.tolerance, unit)
        # the reference wrote only into its copies of ``mutates``; any other copy still holds
        # the argument as it was before the call
        # (and a cache writer's references got a renumbered slot mapping: no copy to compare)
        for name, value in real.items():
            if name in spec.written or not isinstance(value, torch.Tensor):
                continue
            was = copies.get(name)
            if isinstance(was, torch.Tensor) and was is not value:
                result.flags.append(
                    ((was != value).any(), f"the impl wrote into its input '{name}'")
                )
        return result

    @staticmethod
    def _dtype(check: Check, named: dict[str, Any], out: Any) -> str:
        for name in check.dtype_from:
            value = named.get(name)
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return str(value.dtype).removeprefix("torch.")
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        for value in outputs:
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return str(value.dtype).removeprefix("torch.")
        return "float32"
