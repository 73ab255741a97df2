"""A backend's registrations, built from the table its generated ``register_ops.py`` declares.

A generated ``register_ops.py`` holds one :class:`DeclaredBackend` (the backend as ops.yaml
declares it: ids, kind, default priority, what makes it available; its run-time hooks are the
package's ``BACKEND``, :class:`vllm_fl.dispatch.backend.Backend`) and one :class:`Impl`
row per op the backend implements in ops.yaml;
:class:`Registrations` builds from them what its ``register(registry)`` registers:

- a plain row registers the impl function itself: a dispatched call reaches it with no frame in
  between;
- a row with an ``eager`` variant registers an adapter that runs the variant (in place, as vLLM's
  own kernels do) outside a torch.compile trace, and the functional impl under one;
- a row with a ``custom_op`` (an opaque backend) registers an adapter that calls the impl (or its
  eager variant) directly outside a trace, where the dispatcher's round trip would only add
  latency, and under one the ``torch.library`` custom op ``vllm_fl::<backend>_<op>``, so Dynamo
  and CUDA graphs see one node instead of tracing into a kernel launcher. The custom op takes the
  layer attributes the impl reads as explicit arguments (:func:`attrs` rebuilds the ``self`` the
  impl reads them from), returns ``list[Tensor]`` where the op returns a tuple (custom ops cannot
  return None or unions: :func:`flatten` drops trailing Nones and the adapter restores the op's
  return form from the list's length), runs the reference impl as its fake and is defined once
  per process, on the first registration (:func:`define`).

Adapters and the custom ops' kernels and fakes are compiled from source with the op's exact
parameters, as ``dataclasses`` builds ``__init__``: an adapter is one frame around the impl call,
the dispatch's trampoline (which mirrors the signature of what it calls) stays exact, and a
custom op's schema comes from its kernel's annotations. An adapter is named after its op, belongs
to the register_ops module (``register_ops.<op>``, as ``explain`` names it) and carries the impl
as ``.functional`` and the in-place variant as ``.eager``.

The table was checked when it was generated; the checks here are the cheap ones that keep a
hand-made or stale table from compiling into something else than it says.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import keyword
import linecache
import operator
import threading
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable

from vllm_fl.dispatch import BackendImplKind, OpImpl, Probe

if TYPE_CHECKING:
    import torch

    from vllm_fl.dispatch import OpRegistry

__all__ = [
    "NO_DEFAULT",
    "Arg",
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

#: the default of an :class:`Arg` that has none
NO_DEFAULT: Any = inspect.Parameter.empty
#: the base types of ops.yaml's signatures; ``?`` after one: it may be None
TYPES = ("Tensor", "int", "float", "bool", "str")
#: names the compiled code uses itself besides its ``_``-prefixed ones
_RESERVED = frozenset({"self", "torch", "out"})


def _check_name(name: object, what: str) -> None:
    if (
        not isinstance(name, str)
        or not name.isidentifier()
        or keyword.iskeyword(name)
        or name.startswith("_")
        or name in _RESERVED
    ):
        raise ValueError(
            f"registration: invalid {what} name {name!r}; expected an identifier that is no "
            f"keyword, does not start with _ and is none of {', '.join(sorted(_RESERVED))}"
        )


def _check_type(type_: object) -> None:
    if not isinstance(type_, str) or type_.removesuffix("?") not in TYPES:
        raise ValueError(
            f"registration: invalid type {type_!r}; expected one of {', '.join(TYPES)}, "
            "optionally followed by ?"
        )


def _annotation(type_: str) -> Any:
    """``"Tensor?"`` -> ``torch.Tensor | None``: the annotation the generated code had."""
    import torch

    base = type_.removesuffix("?")
    python = {"Tensor": torch.Tensor, "int": int, "float": float, "bool": bool, "str": str}[base]
    return python | None if type_.endswith("?") else python


def _form_types(form: str) -> tuple[bool, tuple[str, ...]]:
    """A return form as ops.yaml writes it -> (is a tuple, element types): ``"Tensor"`` ->
    ``(False, ("Tensor",))``, ``"(Tensor, Tensor?)"`` -> ``(True, ("Tensor", "Tensor?"))``,
    ``"None"`` -> ``(False, ())``."""
    if form == "None":
        return False, ()
    if isinstance(form, str) and form.startswith("(") and form.endswith(")"):
        types = tuple(part.strip() for part in form[1:-1].split(","))
        is_tuple = True
    else:
        types, is_tuple = (form,), False
    for type_ in types:
        _check_type(type_)
    return is_tuple, types


def _return_annotation(forms: tuple[str, ...]) -> Any:
    parts = []
    for form in forms:
        is_tuple, types = _form_types(form)
        if not types:
            parts.append(None)
        elif is_tuple:
            parts.append(tuple[tuple(_annotation(t) for t in types)])  # type: ignore[misc]
        else:
            parts.append(_annotation(types[0]))
    return functools.reduce(operator.or_, parts)


def _decoding(forms: tuple[str, ...]) -> str:
    """The Python expression over ``out``, a custom op's tensor list, that gives the op's return.

    Each possible list length must identify one form (the generator refuses other manifests):
    a form's trailing optional elements may be None and are then missing from the list."""
    by_length: dict[int, str] = {}
    for form in forms:
        is_tuple, types = _form_types(form)
        n = len(types)
        required = n
        while required and types[required - 1].endswith("?"):
            required -= 1
        for length in range(required, n + 1):
            if is_tuple:
                parts = [f"out[{i}]" if i < length else "None" for i in range(n)]
                expr = "(" + ", ".join(parts) + ("," if n == 1 else "") + ")"
            else:
                expr = "out[0]" if length else "None"
            if by_length.setdefault(length, expr) != expr:
                raise ValueError(
                    f"registration: return forms {' | '.join(forms)} flatten to {length} "
                    "tensor(s) in two ways; a custom op result cannot tell them apart"
                )
    lengths = sorted(by_length)
    expr = by_length[lengths[-1]]
    for length in reversed(lengths[:-1]):
        expr = f"{by_length[length]} if len(out) == {length} else {expr}"
    return expr


@dataclass(frozen=True)
class Arg:
    """An argument of an op, or a layer attribute its impls read: name, type as in ops.yaml
    (``Tensor``, ``int``, ``float``, ``bool``, ``str``, ``?`` after one when it may be None) and
    default (:data:`NO_DEFAULT`: none)."""

    name: str
    type: str
    default: Any = NO_DEFAULT

    def __post_init__(self) -> None:
        _check_name(self.name, "argument")
        _check_type(self.type)


@dataclass(frozen=True)
class CustomOp:
    """How an opaque backend runs a row's impl under a trace: as custom op
    ``vllm_fl::<backend>_<op>``, whose fake is ``fake`` (the reference impl) and which takes the
    layer attributes ``reads`` after the op's arguments."""

    fake: Callable[..., Any]
    reads: tuple[Arg, ...] = ()


@dataclass(frozen=True)
class Impl:
    """One row: op ``op`` implemented by ``fn``, with the backend's priority unless ``priority``
    says otherwise, available when the backend is and every module in ``requires`` imports.

    ``layer`` (the impl receives the calling layer as ``self``), ``args`` and ``returns`` (the
    return forms as ops.yaml writes them) are the op's signature: a row with an ``eager``
    variant or a ``custom_op`` is registered as an adapter built from them."""

    op: str
    fn: Callable[..., Any]
    priority: int | None = None
    requires: tuple[str, ...] = ()
    layer: bool = False
    args: tuple[Arg, ...] = ()
    returns: tuple[str, ...] = ("Tensor",)
    eager: Callable[..., Any] | None = None
    custom_op: CustomOp | None = None

    def __post_init__(self) -> None:
        _check_name(self.op, "op")
        if not self.has_adapter:
            return
        reads = self.custom_op.reads if self.custom_op is not None else ()
        names = [a.name for a in (*self.args, *reads)]
        if len(set(names)) != len(names):
            raise ValueError(f"registration: op {self.op!r} names an argument twice: {names}")
        for form in self.returns:
            is_tuple, types = _form_types(form)
            if self.custom_op is not None and (
                not types or any(t.removesuffix("?") != "Tensor" for t in types)
            ):
                raise ValueError(
                    f"registration: op {self.op!r} returns {form}; a custom op returns tensors"
                )
        if self.custom_op is not None:
            _decoding(self.returns)

    @property
    def has_adapter(self) -> bool:
        return self.eager is not None or self.custom_op is not None

    @property
    def single_tensor(self) -> bool:
        """Whether the op returns exactly one tensor: its custom op returns it as is."""
        return self.returns == ("Tensor",)


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


def _row_availability(
    backend: Callable[[], bool] | None, requires: tuple[str, ...]
) -> Callable[[], bool] | None:
    if not requires:
        return backend
    extra = Probe(requires=requires)
    return extra if backend is None else Probe.all(backend, extra)


class Registrations:
    """A backend's table, its adapters and its custom ops' kernels and fakes, built once per
    process (when the register_ops module that declares the table is imported)."""

    def __init__(self, module: str, backend: DeclaredBackend, impls: tuple[Impl, ...]) -> None:
        self.module = module
        self.backend = backend
        self.impls = tuple(impls)
        ops = [row.op for row in self.impls]
        if len(set(ops)) != len(ops):
            raise ValueError(f"registration: backend {backend.name!r} lists an op twice: {ops}")
        self._adapters: dict[str, Callable[..., Any]] = {}
        self._custom_ops: dict[str, tuple[str, Callable[..., Any], Callable[..., Any]]] = {}
        for row in self.impls:
            if row.custom_op is not None:
                self._custom_ops[row.op] = (
                    f"vllm_fl::{backend.name}_{row.op}",
                    _kernel(module, row, row.fn, f"_{row.op}_kernel"),
                    _kernel(module, row, row.custom_op.fake, f"_{row.op}_fake"),
                )
            if row.has_adapter:
                self._adapters[row.op] = _adapter(module, backend, row)

    def adapter(self, op: str) -> Callable[..., Any]:
        """The adapter registered for ``op``; an AttributeError when its row has none (this is
        the register_ops module's ``__getattr__``)."""
        try:
            return self._adapters[op]
        except KeyError:
            raise AttributeError(f"module {self.module!r} has no attribute {op!r}") from None

    def register(self, registry: OpRegistry) -> None:
        """Register one ``OpImpl`` per row, in table order, each row's custom op defined first."""
        backend = self.backend
        available = backend.availability()
        for row in self.impls:
            custom_op = self._custom_ops.get(row.op)
            if custom_op is not None:
                define(*custom_op)
            registry.register_impl(
                OpImpl(
                    row.op,
                    backend.impl_id,
                    backend.kind,
                    self._adapters.get(row.op, row.fn),
                    vendor=backend.vendor,
                    priority=backend.priority if row.priority is None else row.priority,
                    available=_row_availability(available, row.requires),
                )
            )


# -- compiled functions ------------------------------------------------------------------------

_ADAPTER = """\
def {name}({params}):
    if not _is_compiling():
        return _direct({call})
{traced}"""


def _compile(module: str, name: str, source: str, namespace: dict[str, Any]) -> Any:
    """Function ``name`` defined by ``source`` over ``namespace``, reported as ``module``'s; its
    lines show in tracebacks.

    The scope has no ``__name__``: Dynamo reads the globals of a function whose scope names a
    module as attributes of that module, and these live in the scope only."""
    filename = f"<{module}.{name}>"
    scope = {"__builtins__": builtins, **namespace}
    exec(compile(source, filename, "exec"), scope)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    fn = scope[name]
    fn.__module__ = module
    return fn


def _adapter(module: str, backend: DeclaredBackend, row: Impl) -> Callable[..., Any]:
    import torch

    params, call, namespace = ["self"] if row.layer else [], ["self"] if row.layer else [], {}
    for index, arg in enumerate(row.args):
        call.append(arg.name)
        if arg.default is NO_DEFAULT:
            params.append(arg.name)
        else:
            namespace[f"_d{index}"] = arg.default
            params.append(f"{arg.name}=_d{index}")
    namespace.update(_is_compiling=torch.compiler.is_compiling, _direct=row.eager or row.fn)
    if row.custom_op is None:
        # eager variant outside a trace, the functional impl under one
        namespace["_functional"] = row.fn
        traced = f"    return _functional({', '.join(call)})\n"
        doc = f"``{row.op}``: the in-place eager variant, or the functional impl under Dynamo."
    else:
        custom = f"{backend.name}_{row.op}"
        values = [a.name for a in row.args] + [f"self.{a.name}" for a in row.custom_op.reads]
        result = f"torch.ops.vllm_fl.{custom}({', '.join(values)})"
        namespace["torch"] = torch
        if row.single_tensor:
            traced = f"    return {result}\n"
        else:
            traced = f"    out = {result}\n    return {_decoding(row.returns)}\n"
        way = "the in-place eager variant" if row.eager is not None else "a direct call"
        doc = f"``{row.op}``: {way}, or custom op ``vllm_fl::{custom}`` under Dynamo."
    source = _ADAPTER.format(
        name=row.op, params=", ".join(params), call=", ".join(call), traced=traced
    )
    fn = _compile(module, row.op, source, namespace)
    fn.__doc__ = doc
    fn.__annotations__ = {a.name: _annotation(a.type) for a in row.args}
    fn.__annotations__["return"] = _return_annotation(row.returns)
    if row.eager is not None:
        fn.eager = row.eager
    fn.functional = row.fn
    return fn


def _kernel(module: str, row: Impl, impl: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The function a custom op runs (``impl`` the backend's impl) or fakes (the reference):
    the op's arguments, then the layer attributes, in and a tensor or a tensor list out."""
    import torch

    assert row.custom_op is not None
    reads = row.custom_op.reads
    params = [a.name for a in (*row.args, *reads)]
    args = [a.name for a in row.args]
    if row.layer:
        args.insert(0, "_attrs(" + ", ".join(f"{a.name}={a.name}" for a in reads) + ")")
    call = f"_impl({', '.join(args)})"
    if not row.single_tensor:
        call = f"_flatten({call})"
    source = f"def {name}({', '.join(params)}):\n    return {call}\n"
    fn = _compile(module, name, source, {"_impl": impl, "_attrs": attrs, "_flatten": flatten})
    fn.__annotations__ = {a.name: _annotation(a.type) for a in (*row.args, *reads)}
    fn.__annotations__["return"] = torch.Tensor if row.single_tensor else list[torch.Tensor]
    return fn


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
