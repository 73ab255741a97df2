"""A backend's registrations, built from the table its generated ``register_ops.py`` declares.

A generated ``register_ops.py`` holds one :class:`DeclaredBackend` (the backend as ops.yaml
declares it: ids, kind, default priority, what makes it available; its run-time hooks are the
package's ``BACKEND``, :class:`vllm_fl.dispatch.backend.Backend`), the adapters and custom-op
functions its rows need, written out as plain Python, and one :class:`Impl` row per op the
backend implements in ops.yaml; :class:`Registrations` registers them:

- a plain row registers the impl function itself: a dispatched call reaches it with no frame in
  between;
- a row with an ``eager`` variant registers its adapter, which runs the variant (in place, as
  vLLM's own kernels do) outside a torch.compile trace, and the functional impl under one;
- a row with a ``custom_op`` (an opaque backend) registers its adapter, which calls the impl (or
  its eager variant) directly outside a trace, where the dispatcher's round trip would only add
  latency, and under one the ``torch.library`` custom op ``vllm_fl::<backend>_<op>``, so Dynamo
  and CUDA graphs see one node instead of tracing into a kernel launcher. The custom op runs the
  row's kernel function, which takes the layer attributes the impl reads as explicit arguments
  (:func:`attrs` rebuilds the ``self`` the impl reads them from) and returns ``list[Tensor]``
  where the op returns a tuple (custom ops cannot return None or unions: :func:`flatten` drops
  trailing Nones and the adapter restores the op's return form from the list's length); its fake
  runs the reference impl; it is defined once per process, on the first registration
  (:func:`define`), with the schema of the kernel function's annotations.

Registering an adapter gives it the impl it calls as ``.functional`` and the in-place variant as
``.eager``, so tests and ``explain`` reach the hand-written functions.

The generator wrote and checked the table; the checks here are the cheap ones that keep a
hand-made or stale table from registering something else than it says.
"""

from __future__ import annotations

import keyword
import threading
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..availability import Probe
from ..types import BackendImplKind, OpImpl

if TYPE_CHECKING:
    import torch

    from ..registry import OpRegistry

__all__ = [
    "DeclaredBackend",
    "CustomOp",
    "Impl",
    "Registrations",
    "attrs",
    "flatten",
    "define",
    "defined",
    "definition",
]


@dataclass(frozen=True)
class DeclaredBackend:
    """A backend as ops.yaml declares it: ``name`` (its custom ops are ``vllm_fl::<name>_<op>``),
    the ``OpImpl`` fields its rows share, and what makes it available: every module in
    ``requires`` imports, a ``device`` of that type exists, ``probe`` (a zero-argument callable,
    e.g. a ``Probe``) returns True."""

    name: str
    impl_id: str
    kind: BackendImplKind
    priority: int
    vendor: str | None = None
    requires: tuple[str, ...] = ()
    device: str | None = None
    probe: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or keyword.iskeyword(self.name):
            raise ValueError(f"registration: invalid backend name {self.name!r}")

    def availability(self) -> Callable[[], bool] | None:
        """A fresh availability check, None when always available. Probes cache their answer:
        each registration builds its own, so a new registry asks again."""
        checks: list[Callable[[], bool]] = []
        if self.requires or self.device:
            checks.append(Probe(requires=self.requires, device=self.device))
        if self.probe is not None:
            checks.append(self.probe)
        if not checks:
            return None
        return checks[0] if len(checks) == 1 else Probe.all(*checks)


@dataclass(frozen=True)
class CustomOp:
    """How an opaque backend runs a row under a trace: as custom op ``vllm_fl::<backend>_<op>``,
    running ``kernel`` (whose annotations are its schema) and ``fake`` on fake tensors."""

    kernel: Callable[..., Any]
    fake: Callable[..., Any]


@dataclass(frozen=True)
class Impl:
    """One row: op ``op`` implemented by ``fn``, with the backend's priority unless ``priority``
    says otherwise, available when the backend is and every module in ``requires`` imports.

    ``adapter``: what is registered instead of ``fn``, for a row with an ``eager`` variant (the
    in-place function it runs outside a trace) or a ``custom_op``."""

    op: str
    fn: Callable[..., Any]
    priority: int | None = None
    requires: tuple[str, ...] = ()
    eager: Callable[..., Any] | None = None
    adapter: Callable[..., Any] | None = None
    custom_op: CustomOp | None = None
    #: argument -> the values the impl serves (ops.yaml's ``supports:``), see ``OpImpl``
    supports: Mapping[str, tuple[Any, ...]] | None = None

    def __post_init__(self) -> None:
        if not self.op.isidentifier() or keyword.iskeyword(self.op):
            raise ValueError(f"registration: invalid op name {self.op!r}")
        if (self.eager is not None or self.custom_op is not None) and self.adapter is None:
            raise ValueError(
                f"registration: op {self.op!r} has an eager variant or a custom op but no adapter"
            )


def _row_availability(
    backend: Callable[[], bool] | None, requires: tuple[str, ...]
) -> Callable[[], bool] | None:
    if not requires:
        return backend
    extra = Probe(requires=requires)
    return extra if backend is None else Probe.all(backend, extra)


class Registrations:
    """A backend's table, checked once per process (when the register_ops module that declares it
    is imported); its adapters get ``.functional`` and ``.eager``."""

    def __init__(self, module: str, backend: DeclaredBackend, impls: tuple[Impl, ...]) -> None:
        self.module = module
        self.backend = backend
        self.impls = tuple(impls)
        ops = [row.op for row in self.impls]
        if len(set(ops)) != len(ops):
            raise ValueError(f"registration: backend {backend.name!r} lists an op twice: {ops}")
        for row in self.impls:
            if row.adapter is not None:
                row.adapter.functional = row.fn
                if row.eager is not None:
                    row.adapter.eager = row.eager

    def register(self, registry: OpRegistry) -> None:
        """Register one ``OpImpl`` per row, in table order, each row's custom op defined first."""
        backend = self.backend
        available = backend.availability()
        for row in self.impls:
            if row.custom_op is not None:
                define(
                    f"vllm_fl::{backend.name}_{row.op}", row.custom_op.kernel, row.custom_op.fake
                )
            registry.register_impl(
                OpImpl(
                    row.op,
                    backend.impl_id,
                    backend.kind,
                    row.fn if row.adapter is None else row.adapter,
                    vendor=backend.vendor,
                    priority=backend.priority if row.priority is None else row.priority,
                    available=_row_availability(available, row.requires),
                    supports=row.supports,
                )
            )


# -- custom ops --------------------------------------------------------------------------------

_LOCK = threading.Lock()
_DEFINED: dict[str, Any] = {}


def attrs(**values: object) -> SimpleNamespace:
    """The object an impl receives as ``self`` inside a custom op: the layer attributes it reads."""
    return SimpleNamespace(**values)


def flatten(result: torch.Tensor | tuple | list | None) -> list[torch.Tensor]:
    """``t`` -> ``[t]``; ``(a, b, None)`` -> ``[a, b]``; only trailing Nones may be dropped."""
    import torch

    if result is None:
        return []
    if isinstance(result, torch.Tensor):
        return [result]
    items = list(result)
    while items and items[-1] is None:
        items.pop()
    if any(item is None for item in items):
        raise TypeError(
            f"an opaque kernel returned None before a tensor ({_shape(result)}); only trailing "
            "elements of a tuple return may be None"
        )
    return items


def _shape(result: object) -> str:
    return "(" + ", ".join("None" if r is None else type(r).__name__ for r in result) + ")"


def define(qualname: str, kernel: Callable[..., Any], fake: Callable[..., Any]) -> None:
    """Define custom op ``qualname`` (``"vllm_fl::<backend>_<op>"``) unless already defined.

    ``kernel``'s annotations give the schema; ``fake`` (running the reference impl on fake
    tensors) gives shapes to Dynamo. Safe to call from several threads and registrations.
    """
    if qualname in _DEFINED:
        return
    import torch

    with _LOCK:
        if qualname in _DEFINED:
            return
        op = torch.library.custom_op(qualname, kernel, mutates_args=())
        op.register_fake(fake)
        _DEFINED[qualname] = op


def defined() -> tuple[str, ...]:
    """The custom ops defined in this process so far (for tests and ``explain``)."""
    return tuple(_DEFINED)


def definition(qualname: str) -> Any:
    """The ``torch.library`` definition (``CustomOpDef``) of custom op ``qualname``, defined in
    this process by :func:`define`; a KeyError for any other name."""
    return _DEFINED[qualname]
