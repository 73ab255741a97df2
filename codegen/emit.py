"""Emitters: functions from the model to ``{path: text}``, grouped by destination.

Views computed here (call expressions, import aliases, availability expressions) keep the
templates free of logic: the model computes, the template lays out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from codegen import model as m
from codegen.render import render, render_file

OPS_PY = "vllm_fl/dispatch/ops.py"
BACKENDS_INIT = "vllm_fl/dispatch/backends/__init__.py"
OOT_DIR = "vllm_fl/ops"
TESTS_DIR = "tests/generated"
DOCS = "docs/operators.md"
README = "README.md"
TABLE_BEGIN = "<!-- BEGIN GENERATED: operator-table -->"
TABLE_END = "<!-- END GENERATED: operator-table -->"
SEED = 20240601


def emit_all(manifest: m.Manifest, root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    out[OPS_PY] = render_file("ops.py.j2", OPS_PY, ops=manifest.ops)
    out[BACKENDS_INIT] = render_file(
        "backends_init.py.j2", BACKENDS_INIT, backends=manifest.backends
    )
    for backend in manifest.backends:
        out.update(emit_register_ops(manifest, backend))
    out.update(emit_oot(manifest))
    out.update(emit_tests(manifest))
    out.update(emit_docs(manifest, root))
    return out


# -- register_ops.py -------------------------------------------------------------------------


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


def emit_register_ops(manifest: m.Manifest, backend: m.Backend) -> dict[str, str]:
    path = f"{backend.path}/register_ops.py"
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


# -- vllm_fl/ops -----------------------------------------------------------------------------


def emit_oot(manifest: m.Manifest) -> dict[str, str]:
    layered = [op for op in manifest.ops if op.layer is not None]
    groups: dict[str, list[m.Op]] = {}
    for op in layered:
        assert op.layer is not None
        groups.setdefault(op.layer.short_module, []).append(op)
    out = {}
    init = f"{OOT_DIR}/__init__.py"
    functions = [op for op in manifest.ops if op.function is not None]
    out[init] = render_file("oot_init.py.j2", init, ops=layered, functions=functions)
    for short, ops in groups.items():
        path = f"{OOT_DIR}/{short}.py"
        assert ops[0].layer is not None
        out[path] = render_file("oot_module.py.j2", path, module=ops[0].layer.module, ops=ops)
    return out


# -- tests/generated -------------------------------------------------------------------------


@dataclass(frozen=True)
class _CaseView:
    id: str
    init: dict
    inputs: dict


def _case_view(index: int, case: m.Case) -> _CaseView:
    parts = []
    inputs: dict[str, dict] = {}
    for name, spec in case.inputs:
        if isinstance(spec, m.TensorInput):
            item: dict[str, object] = {"shape": spec.shape, "dtype": spec.dtype}
            if spec.high is not None:
                item["high"] = spec.high
            if spec.scale is not None:
                item["scale"] = spec.scale
            inputs[name] = item
            parts.append(name + "x".join(str(d) for d in spec.shape))
        else:
            inputs[name] = {"value": spec.value}
            parts.append(f"{name}={spec.value}")
    ident = re.sub(r"[^A-Za-z0-9_.=-]", "_", "-".join([f"case{index}"] + parts))
    return _CaseView(ident, dict(case.init), inputs)


def emit_tests(manifest: m.Manifest) -> dict[str, str]:
    out = {}
    reference = manifest.reference
    tested = [op for op in manifest.ops if op.tests is not None]
    if not tested:
        return out
    assert reference is not None
    conftest = f"{TESTS_DIR}/conftest.py"
    out[conftest] = render_file(
        "parity_conftest.py.j2", conftest, seed=SEED, reference_id=reference.impl_id
    )
    for op in tested:
        assert op.tests is not None
        path = f"{TESTS_DIR}/test_parity_{op.name}.py"
        backends = [manifest.backend(impl.backend) for impl in op.impls]
        eager = [manifest.backend(impl.backend) for impl in op.impls if impl.eager is not None]
        cases = [_case_view(i, c) for i, c in enumerate(op.tests.cases)]
        canonical = None
        if op.tests.canonical is not None:
            module, function = op.tests.canonical
            canonical = f"{reference.package}.impl.{module}:{function}"
        # keyword arguments of parity.check beyond the common ones
        check_options = ("" if not op.mutates else ", mutates=MUTATES") + (
            "" if canonical is None else ", canonical=CANONICAL"
        )
        out[path] = render_file(
            "test_parity.py.j2",
            path,
            op=op,
            backends=backends,
            eager=eager,
            cases=cases,
            canonical=canonical,
            check_options=check_options,
        )
    return out


# -- docs ------------------------------------------------------------------------------------


def emit_docs(manifest: m.Manifest, root: Path) -> dict[str, str]:
    table = render("operator_table.md.j2", ops=manifest.ops, backends=manifest.backends)
    out = {
        DOCS: render_file(
            "operators.md.j2",
            DOCS,
            ops=manifest.ops,
            backends=manifest.backends,
            unwrapped={
                op.name
                for op in manifest.ops
                if not op.opaque_ok and any(manifest.backend(i.backend).opaque for i in op.impls)
            },
            backends_by_name={b.name: b for b in manifest.backends},
            table=table,
        ),
    }
    readme = root / README
    if readme.exists():
        text = readme.read_text()
        begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
        if 0 <= begin < end:
            region = (
                f"{TABLE_BEGIN}\n<!-- generated from ops.yaml by `make codegen`; do not edit -->\n"
                f"{table}\nPer-op details: [docs/operators.md](docs/operators.md).\n"
            )
            out[README] = text[:begin] + region + text[end:]
    return out
