"""Every backend's ``register_ops.py``: a table, one row per op the backend implements (its impl,
priority, availability and, where the backend registers an adapter, the op's signature, eager
variant and custom op), which ``vllm_fl.dispatch.runtime.registration`` turns into ``OpImpl``
objects, adapters and ``torch.library`` custom ops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import model as m
from ..render import render_file
from ..signature import Argument

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
    """The arguments of one ``Impl(...)`` row, as Python source."""

    fields: tuple[str, ...]
    adapter: bool
    custom_op: bool


def _alias(backend: m.Backend, module: str) -> str:
    return f"_{backend.name}_{module}"


def _tuple(items: list[str]) -> str:
    """A tuple display of source ``items``: ``(a,)``, ``(a, b)``."""
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _arg(name: str, type_: str, default: str | None = None) -> str:
    parts = [repr(name), repr(type_)] + ([] if default is None else [default])
    return f"Arg({', '.join(parts)})"


def _signature_arg(arg: Argument) -> str:
    return _arg(arg.name, str(arg.type), arg.default)


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
    names = ["DeclaredBackend", "Impl", "Registrations"]
    if any(row.adapter for row in every_row):
        names.append("Arg")
    if any(row.custom_op for row in every_row):
        names.append("CustomOp")
    text = render_file(
        "register_ops.py.j2",
        path,
        backend=backend,
        backend_fields=_backend_fields(backend),
        imports=sorted(imports.values(), key=lambda i: i.alias),
        registration_names=sorted(names),
        rows=rows,
        reference=reference,
        reference_fields=() if reference is None else _backend_fields(reference),
        reference_rows=reference_rows,
        adapters=any(row.adapter for row in rows),
        custom_ops=any(row.custom_op for row in rows),
        eager=any(impl.eager is not None for _, impl in manifest.backend_ops(backend.name)),
    )
    return {path: text}


def _rows(
    manifest: m.Manifest, backend: m.Backend, module_alias: Callable[[m.Backend, str], str]
) -> list[_Row]:
    """One row per op ``backend`` implements, its modules imported through ``module_alias``."""
    rows: list[_Row] = []
    for op, impl in manifest.backend_ops(backend.name):
        fields = [repr(op.name), f"{module_alias(backend, impl.module)}.{impl.function}"]
        if impl.priority is not None:
            fields.append(f"priority={impl.priority}")
        if impl.requires:
            fields.append(f"requires={_tuple([repr(r) for r in impl.requires])}")
        custom_op = backend.opaque and op.opaque_ok
        adapter = custom_op or impl.eager is not None
        if adapter:
            if op.layer is not None:
                fields.append("layer=True")
            fields.append(f"args={_tuple([_signature_arg(a) for a in op.schema.arguments])}")
            forms = [str(form) for form in op.schema.returns.forms]
            if forms != ["Tensor"]:
                fields.append(f"returns={_tuple([repr(f) for f in forms])}")
        if impl.eager is not None:
            fields.append(f"eager={module_alias(backend, impl.eager[0])}.{impl.eager[1]}")
        if custom_op:
            reference = manifest.reference_of(op)
            ref_impl = manifest.reference_impl(op)
            assert reference is not None and ref_impl is not None  # checked by the loader
            fake = f"{module_alias(reference, ref_impl.module)}.{ref_impl.function}"
            parts = [fake]
            if op.reads:
                reads = [_arg(a.name, str(a.type)) for a in op.reads]
                parts.append(f"reads={_tuple(reads)}")
            fields.append(f"custom_op=CustomOp({', '.join(parts)})")
        rows.append(_Row(tuple(fields), adapter, custom_op))
    return rows
