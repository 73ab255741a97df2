"""Every backend's ``register_ops.py``: one ``OpImpl`` per op it implements, the
``torch.library`` custom op and adapter of each op an opaque backend wraps, and the adapters
that pick an impl's in-place eager variant outside a torch.compile trace."""

from __future__ import annotations

from dataclasses import dataclass

from codegen import model as m
from codegen.render import render_file

NAME = "register_ops.py"


def path_of(backend: m.Backend) -> str:
    return f"{backend.path}/{NAME}"


@dataclass(frozen=True)
class _Import:
    package: str
    module: str
    alias: str


@dataclass(frozen=True)
class _Wrapped:
    op: m.Op
    custom_name: str
    kernel_params: str
    kernel_return: str
    kernel_call: str
    fake_call: str
    direct_call: str
    adapter_params: str
    op_args: str
    decode: str | None
    eager: str | None  # the eager variant, ``alias.function``
    functional: str  # the functional impl, ``alias.function``


@dataclass(frozen=True)
class _EagerAdapter:
    """A non-opaque impl with an eager variant: the variant outside a trace, else the impl."""

    op: m.Op
    adapter_params: str
    eager_call: str
    functional_call: str
    eager: str
    functional: str


@dataclass(frozen=True)
class _Reg:
    op: m.Op
    fn: str
    priority: int
    available: str
    custom_name: str | None


def _alias(backend: m.Backend, module: str) -> str:
    return f"_{backend.name}_{module}"


def _probe(requires: tuple[str, ...], device: str | None) -> str:
    args = []
    if requires:
        args.append(f"requires={_tuple(requires)}")
    if device:
        args.append(f"device={device!r}")
    return f"Probe({', '.join(args)})"


def _tuple(items: tuple[str, ...]) -> str:
    return "(" + ", ".join(repr(i) for i in items) + ("," if len(items) == 1 else "") + ")"


def _backend_available(backend: m.Backend) -> str:
    parts = []
    if backend.requires or backend.device:
        parts.append(_probe(backend.requires, backend.device))
    if backend.probe:
        parts.append("_backend_probe")
    if not parts:
        return "None"
    return parts[0] if len(parts) == 1 else f"Probe.all({', '.join(parts)})"


def _call(alias: str, function: str, op: m.Op, listed: bool) -> str:
    args = list(op.schema.arg_names)
    if op.layer is not None:
        reads = ", ".join(f"{a.name}={a.name}" for a in op.reads)
        args.insert(0, f"_opaque.attrs({reads})")
    call = f"{alias}.{function}({', '.join(args)})"
    return f"_opaque.flatten({call})" if listed else call


def _decode(op: m.Op) -> str | None:
    returns = op.schema.returns
    if returns.is_single_tensor:
        return None
    table = returns.tensor_list_decoding()
    expr = table[-1][1]
    for length, branch in reversed(table[:-1]):
        expr = f"{branch} if len(out) == {length} else {expr}"
    return expr


def emit(manifest: m.Manifest, backend: m.Backend) -> dict[str, str]:
    """The registrations of ``backend``."""
    path = path_of(backend)
    available = _backend_available(backend)
    reference = manifest.reference
    imports: dict[str, _Import] = {}
    wrapped: list[_Wrapped] = []
    regs: list[_Reg] = []
    eager_adapters: list[_EagerAdapter] = []
    probe_used = available.startswith("Probe")
    for op, impl in manifest.backend_ops(backend.name):
        alias = _alias(backend, impl.module)
        imports[alias] = _Import(backend.package, impl.module, alias)
        eager = None
        if impl.eager is not None:
            eager_alias = _alias(backend, impl.eager[0])
            imports[eager_alias] = _Import(backend.package, impl.eager[0], eager_alias)
            eager = f"{eager_alias}.{impl.eager[1]}"
        adapter = [a.python() for a in op.schema.arguments]
        if op.layer is not None:
            adapter.insert(0, "self")
        adapter_args = ", ".join(
            (["self"] if op.layer is not None else []) + list(op.schema.arg_names)
        )
        priority = backend.priority if impl.priority is None else impl.priority
        impl_available = available
        if impl.requires:
            probe_used = True
            extra = _probe(impl.requires, None)
            impl_available = extra if available == "None" else f"Probe.all(available, {extra})"
        elif available != "None":
            impl_available = "available"
        fn = f"{alias}.{impl.function}"
        custom_name = None
        if backend.opaque and op.opaque_ok:
            ref_impl = manifest.reference_impl(op)
            assert reference is not None and ref_impl is not None  # checked by the loader
            ref_alias = _alias(reference, ref_impl.module)
            imports[ref_alias] = _Import(reference.package, ref_impl.module, ref_alias)
            custom_name = f"{backend.name}_{op.name}"
            listed = not op.schema.returns.is_single_tensor
            params = [f"{a.name}: {a.type.python()}" for a in op.schema.arguments]
            params += [f"{a.name}: {a.type.python()}" for a in op.reads]
            op_args = list(op.schema.arg_names) + [f"self.{a.name}" for a in op.reads]
            wrapped.append(
                _Wrapped(
                    op=op,
                    custom_name=custom_name,
                    kernel_params=", ".join(params),
                    kernel_return="list[torch.Tensor]" if listed else "torch.Tensor",
                    kernel_call=_call(alias, impl.function, op, listed),
                    fake_call=_call(ref_alias, ref_impl.function, op, listed),
                    direct_call=f"{eager or fn}({adapter_args})",
                    adapter_params=", ".join(adapter),
                    op_args=", ".join(op_args),
                    decode=_decode(op),
                    eager=eager,
                    functional=fn,
                )
            )
            fn = op.name
        elif eager is not None:
            eager_adapters.append(
                _EagerAdapter(
                    op=op,
                    adapter_params=", ".join(adapter),
                    eager_call=f"{eager}({adapter_args})",
                    functional_call=f"{fn}({adapter_args})",
                    eager=eager,
                    functional=fn,
                )
            )
            fn = op.name
        regs.append(_Reg(op, fn, priority, impl_available, custom_name))
    text = render_file(
        "register_ops.py.j2",
        path,
        backend=backend,
        imports=sorted(imports.values(), key=lambda i: i.alias),
        wrapped=wrapped,
        eager_adapters=eager_adapters,
        regs=regs,
        backend_available=available,
        probe_used=probe_used,
    )
    return {path: text}
