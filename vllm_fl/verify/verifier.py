"""The verifying callable: what an op's eager calls get in bring-up mode instead of the impl.

``Verifier.wrap`` is the dispatch's selection wrapper (``vllm_fl.dispatch.runtime.manager.
wrap_selections``): for an op it verifies whose selected impl is not the reference, it returns a
function that, on a call due for verification,

1. copies the call's tensor arguments (not the layer's nor the model's weights: no impl writes
   those), since an impl may write into its ``mutates`` arguments or, in its eager variant, its
   ``inplace`` ones;
2. calls the selected impl on the real arguments: its result is what the model gets, unchanged;
3. calls the op's reference impl on the copies, maps both results to the op's canonical form
   where it has one (``mutates`` ops: the arguments written), and records the difference with the
   tolerance of the call's dtype (``vllm_fl.dispatch.checks``); an argument the impl must not
   write that changed is noted too.

Anything that goes wrong while verifying (the reference raising, say) is recorded as a note and
logged once; the call still returns the selected impl's result. Calls traced by torch.compile,
calls while a CUDA graph is captured and calls made by a reference impl are not verified.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch

from vllm_fl.dispatch.checks import CHECKS
from vllm_fl.dispatch.logger_manager import get_logger
from vllm_fl.dispatch.runtime.binding import IMPL_ATTR
from vllm_fl.dispatch.types import BackendImplKind, OpImpl

from .compare import Diff, compare
from .record import Recorder
from .sites import Sites

__all__ = ["Check", "Verifier"]

logger = get_logger()


@dataclass(frozen=True)
class Check:
    """One op's entry of ``vllm_fl.dispatch.checks.CHECKS``."""

    args: tuple[str, ...]
    layer: bool
    mutates: tuple[str, ...]
    inplace: tuple[str, ...]
    dtype_from: tuple[str, ...]
    canonical: str | None
    tolerances: dict[str, tuple[float, float]]

    def tolerance(self, dtype: str) -> tuple[float, float]:
        """The tolerance of ``dtype`` (float64, which ops.yaml does not list: float32's)."""
        return self.tolerances.get(dtype) or self.tolerances.get("float32") or (0.0, 0.0)

    def canonical_fn(self) -> Callable[..., Any] | None:
        if self.canonical is None:
            return None
        module, _, function = self.canonical.partition(":")
        return getattr(importlib.import_module(module), function)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
        return value.clone()
    return value


def _shape(value: torch.Tensor) -> str:
    return "x".join(str(d) for d in value.shape) or "scalar"


class Verifier:
    """Verifies the ops ``ops`` selects (True: every op), one call in ``every`` of each op, during
    the first ``steps`` engine steps (0: every step; ``step`` counts them)."""

    def __init__(self, ops: bool | frozenset[str] = True, every: int = 1, steps: int = 0) -> None:
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
        setattr(verified, IMPL_ATTR, fn)
        return verified

    def _counting(self, op: str, impl_id: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        seen, local = self.recorder.seen, self._local

        def counted(*args: Any, **kwargs: Any) -> Any:
            if not self.paused and not getattr(local, "in_reference", False):
                seen(op, impl_id)
            return fn(*args, **kwargs)

        counted.__qualname__ = f"counted[{op}:{impl_id}]"
        setattr(counted, IMPL_ATTR, fn)
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
        copies_args = tuple(_copy(a) for a in args)
        copies_kwargs = {k: _copy(v) for k, v in kwargs.items()}
        out = fn(*args, **kwargs)  # what the model gets, whatever happens below
        try:
            self._compare(op, impl_id, ref_fn, check, args, kwargs, copies_args, copies_kwargs, out)
        except Exception as exc:  # noqa: BLE001 - verification never breaks the call
            if op not in self._warned:
                self._warned.add(op)
                logger.warning("vllm_fl verify: op '%s' could not be verified", op, exc_info=True)
            site = self._site(check, args)
            diff = Diff(notes=[f"not verified: {type(exc).__name__}: {exc}"])
            self.recorder.add(
                op, impl_id, site, "?", "?", (0.0, 0.0), diff, self._calls.get(op, 0), self.step
            )
        return out

    def _named(self, check: Check, args: tuple, kwargs: dict) -> dict[str, Any]:
        positional = args[1:] if check.layer else args
        named = dict(zip(check.args, positional))
        named.update(kwargs)
        return named

    def _site(self, check: Check, args: tuple) -> str:
        if check.layer and args:
            return self.sites.of_layer(args[0])
        return self.sites.current(args)

    def _compare(self, op, impl_id, ref_fn, check, args, kwargs, copies_args, copies_kwargs, out):
        self._local.in_reference = True
        try:
            expected = ref_fn(*copies_args, **copies_kwargs)
        finally:
            self._local.in_reference = False
        real = self._named(check, args, kwargs)
        before = self._named(check, copies_args, copies_kwargs)
        actual_form, expected_form = out, expected
        if check.mutates:
            actual_form = tuple(real[name] for name in check.mutates)
            expected_form = tuple(before[name] for name in check.mutates)
        canonical = check.canonical_fn()
        if canonical is not None:
            if check.mutates:
                actual_form = canonical(**real)
                expected_form = canonical(**before)
            else:
                actual_form = canonical(out, **real)
                expected_form = canonical(expected, **before)
        dtype = self._dtype(check, real, out)
        atol, rtol = check.tolerance(dtype)
        diff = compare(actual_form, expected_form, atol, rtol)
        # the reference wrote only into its copies of ``mutates``; any other copy still holds
        # the argument as it was before the call
        written = set(check.mutates) | set(check.inplace)
        for name, value in real.items():
            if name in written or not isinstance(value, torch.Tensor):
                continue
            was = before.get(name)
            if isinstance(was, torch.Tensor) and was is not value and not torch.equal(was, value):
                diff.notes.append(f"the impl wrote into its input '{name}'")
        shapes = " ".join(
            f"{name}={_shape(value)}"
            for name, value in real.items()
            if isinstance(value, torch.Tensor) and name not in check.mutates
        )
        self.recorder.add(
            op,
            impl_id,
            self._site(check, args),
            shapes,
            dtype,
            (atol, rtol),
            diff,
            self._calls.get(op, 0),
            self.step,
        )

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
