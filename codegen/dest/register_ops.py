"""Every backend's ``register_ops.py``: the adapters the dispatch calls where a backend needs one
(an eager variant, a ``torch.library`` custom op) and the custom ops' kernels and fakes, written
out as plain Python functions, then a table with one row per op the backend implements (its
impl, priority, availability, adapter, custom op), which
``vllm_fl.dispatch.Registrations`` turns into ``OpImpl`` objects and custom ops."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Callable

from .. import model as m
from ..render import LINE_LENGTH, render_file
from ..signature import Returns

NAME = "register_ops.py"


def path_of(backend: m.Backend) -> str:
    return f"{backend.path}/{NAME}"


@dataclass(frozen=True)
class _Import:
    package: str
    module: str
    alias: str


@dataclass(frozen=True)
class _Row:
    """The arguments of one ``Impl(...)`` row, as Python source, and the functions (adapter,
    custom op kernel and fake) it names, as Python source."""

    fields: tuple[str, ...]
    functions: tuple[str, ...]
    custom_op: bool


def _alias(backend: m.Backend, module: str) -> str:
    return f"_{backend.name}_{module}"


def kernel_name(op: m.Op) -> str:
    """The module-level name of the function op ``op``'s custom op runs."""
    return f"_{op.name}_kernel"


def fake_name(op: m.Op) -> str:
    """The module-level name of the function op ``op``'s custom op runs on fake tensors."""
    return f"_{op.name}_fake"


def _tuple(items: list[str]) -> str:
    """A tuple display of source ``items``: ``(a,)``, ``(a, b)``."""
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _backend_fields(backend: m.Backend) -> tuple[str, ...]:
    fields = [
        repr(backend.name),
        repr(backend.impl_id),
        f"BackendImplKind.{backend.kind_member}",
        f"priority={backend.priority}",
    ]
    if backend.vendor:
        fields.append(f"vendor={backend.vendor!r}")
    if backend.requires:
        fields.append(f"requires={_tuple([repr(r) for r in backend.requires])}")
    if backend.device:
        fields.append(f"device={backend.device!r}")
    if backend.probe:
        fields.append("probe=_backend_probe")
    return tuple(fields)


def _decoding(returns: Returns) -> str:
    """The expression over ``out``, a custom op's tensor list, that gives the op's return: each
    list length identifies one form (the loader refuses other manifests)."""
    by_length = returns.tensor_list_decoding()
    expr = by_length[-1][1]
    for length, form in reversed(by_length[:-1]):
        expr = f"{form} if len(out) == {length} else {expr}"
    return expr


def _def(name: str, params: list[str], returns: str, doc: str | None, body: list[str]) -> str:
    lines = [f"def {name}({', '.join(params)}) -> {returns}:"]
    if doc is not None:
        wrapped = textwrap.wrap(doc, width=LINE_LENGTH - 10, break_on_hyphens=False)
        if len(wrapped) == 1:
            lines.append(f'    """{doc}"""')
        else:
            lines += (
                ['    """' + wrapped[0]] + [f"    {part}" for part in wrapped[1:]] + ['    """']
            )
    lines += [f"    {line}" for line in body]
    return "\n".join(lines) + "\n"


def _adapter(backend: m.Backend, op: m.Op, fn: str, eager: str | None, custom_op: bool) -> str:
    """The function registered for ``op`` instead of the impl ``fn``: outside a torch.compile
    trace the eager variant (or ``fn``) directly; under one the functional impl, or the custom
    op."""
    args = [a.name for a in op.schema.arguments]
    params = [a.python() for a in op.schema.arguments]
    if op.has_self:
        args.insert(0, "self")
        params.insert(0, "self")
    call = ", ".join(args)
    body = ["if not _is_compiling():", f"    return {eager or fn}({call})"]
    if not custom_op:
        doc = f"``{op.name}``: the in-place eager variant, or the functional impl under Dynamo."
        body.append(f"return {fn}({call})")
    else:
        custom = f"{backend.name}_{op.name}"
        values = [a.name for a in op.schema.arguments] + [f"self.{a.name}" for a in op.reads]
        result = f"torch.ops.vllm_fl.{custom}({', '.join(values)})"
        way = "the in-place eager variant" if eager is not None else "a direct call"
        doc = f"``{op.name}``: {way}, or custom op ``vllm_fl::{custom}`` under Dynamo."
        if op.schema.returns.is_single_tensor:
            body.append(f"return {result}")
        else:
            body += [f"out = {result}", f"return {_decoding(op.schema.returns)}"]
    return _def(op.name, params, op.schema.returns.python(), doc, body)


def _kernel(op: m.Op, name: str, impl: str) -> str:
    """A function a custom op runs (``impl``: the backend's impl, or the reference as its fake):
    the op's arguments, then the layer attributes the impl reads, in; a tensor or a tensor list
    out. Its annotations are the custom op's schema."""
    params = [f"{a.name}: {a.type.python()}" for a in op.schema.arguments]
    params += [f"{a.name}: {a.type.python()}" for a in op.reads]
    args = [a.name for a in op.schema.arguments]
    if op.layer is not None:
        args.insert(0, "_attrs(" + ", ".join(f"{a.name}={a.name}" for a in op.reads) + ")")
    call = f"{impl}({', '.join(args)})"
    single = op.schema.returns.is_single_tensor
    returns = "torch.Tensor" if single else "list[torch.Tensor]"
    return _def(name, params, returns, None, [f"return {call if single else f'_flatten({call})'}"])


def emit(manifest: m.Manifest, backend: m.Backend) -> dict[str, str]:
    """The registrations of ``backend``; in a vendor package's manifest, also those of the
    package's reference backend (the reference impls of the ops the package declares itself),
    which shares its package and so its ``register_ops.py``."""
    path = path_of(backend)
    imports: dict[str, _Import] = {}

    def module_alias(owner: m.Backend, module: str) -> str:
        alias = _alias(owner, module)
        imports[alias] = _Import(owner.package, module, alias)
        return alias

    rows = _rows(manifest, backend, module_alias)
    reference = next(
        (
            b
            for b in manifest.backends
            if b.kind == "reference" and b is not backend and b.path == backend.path
        ),
        None,
    )
    reference_rows = [] if reference is None else _rows(manifest, reference, module_alias)
    every_row = rows + reference_rows
    names = ["BackendImplKind", "DeclaredBackend", "Impl", "OpRegistry", "Registrations"]
    helpers = []
    if any(row.custom_op for row in every_row):
        names.append("CustomOp")
        helpers = ["attrs as _attrs", "flatten as _flatten"]
    text = render_file(
        "register_ops.py.j2",
        path,
        backend=backend,
        backend_fields=_backend_fields(backend),
        imports=sorted(imports.values(), key=lambda i: i.alias),
        dispatch_names=sorted(names) + helpers,
        rows=rows,
        reference=reference,
        reference_fields=() if reference is None else _backend_fields(reference),
        reference_rows=reference_rows,
        functions=[f for row in every_row for f in row.functions],
        adapters=any(row.functions for row in rows),
        custom_ops=any(row.custom_op for row in rows),
        eager=any(impl.eager is not None for _, impl in manifest.backend_ops(backend.name)),
    )
    return {path: text}


def _supports(supports: tuple[tuple[str, tuple[object, ...]], ...]) -> str:
    """``{"activation": ("silu",), "w1_bias": (None,)}``: the row's ``supports`` literal."""
    items = ", ".join(f"{name!r}: {_tuple([repr(v) for v in values])}" for name, values in supports)
    return "{" + items + "}"


def _rows(
    manifest: m.Manifest, backend: m.Backend, module_alias: Callable[[m.Backend, str], str]
) -> list[_Row]:
    """One row per op ``backend`` implements, its modules imported through ``module_alias``."""
    rows: list[_Row] = []
    for op, impl in manifest.backend_ops(backend.name):
        fn = f"{module_alias(backend, impl.module)}.{impl.function}"
        fields = [repr(op.name), fn]
        functions: list[str] = []
        if impl.priority is not None:
            fields.append(f"priority={impl.priority}")
        if impl.requires:
            fields.append(f"requires={_tuple([repr(r) for r in impl.requires])}")
        if impl.supports:
            fields.append(f"supports={_supports(impl.supports)}")
        custom_op = backend.opaque and op.opaque_ok
        eager = None
        if impl.eager is not None:
            eager = f"{module_alias(backend, impl.eager[0])}.{impl.eager[1]}"
            fields.append(f"eager={eager}")
        if custom_op or eager is not None:
            functions.append(_adapter(backend, op, fn, eager, custom_op))
            fields.append(f"adapter={op.name}")
        if custom_op:
            reference = manifest.reference_of(op)
            ref_impl = manifest.reference_impl(op)
            assert reference is not None and ref_impl is not None  # checked by the loader
            fake = f"{module_alias(reference, ref_impl.module)}.{ref_impl.function}"
            functions.append(_kernel(op, kernel_name(op), fn))
            functions.append(_kernel(op, fake_name(op), fake))
            fields.append(f"custom_op=CustomOp({kernel_name(op)}, {fake_name(op)})")
        rows.append(_Row(tuple(fields), tuple(functions), custom_op))
    return rows
