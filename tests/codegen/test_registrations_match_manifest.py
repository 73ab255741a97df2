"""Every backend's generated register_ops registers what ops.yaml declares for it: the ops, each
with the backend's impl id, kind and vendor, its priority and availability; the impl function
itself where nothing wraps it, else an adapter carrying it (and the eager variant); a custom op
exactly for an opaque backend's tensor-returning ops, its schema the op's arguments and then the
layer attributes it reads, typed as in ops.yaml."""

from __future__ import annotations

import importlib

import pytest
import torch

from codegen import model as m
from codegen.manifest import project_manifest
from codegen.signature import Type
from vllm_fl.dispatch import BackendImplKind, OpRegistry
from vllm_fl.dispatch.runtime import registration

#: ops.yaml's types as torch.library writes them in a schema
SCHEMA_TYPES = {
    "Tensor": "Tensor",
    "int": "SymInt",
    "int[]": "SymInt[]",
    "float": "float",
    "bool": "bool",
    "str": "str",
}


def _schema_type(type_: Type) -> str:
    return SCHEMA_TYPES[type_.base] + ("?" if type_.optional else "")


def _function(backend: m.Backend, module: str, function: str):
    return getattr(importlib.import_module(f"{backend.package}.impl.{module}"), function)


def _availability(backend: m.Backend, impl: m.Impl) -> str:
    """The repr of the availability check ops.yaml declares: the backend package's probe (only
    the flagcx backend has one), or the Probe of its requires and device."""
    if backend.probe is not None:
        assert not (backend.requires or backend.device or impl.requires)
        package = importlib.import_module(backend.package)
        return repr(getattr(package, backend.probe))
    base = None
    if backend.requires or backend.device:
        base = f"Probe(requires={backend.requires!r}, device={backend.device!r})"
    if not impl.requires:
        return repr(base) if base is None else base
    extra = f"Probe(requires={impl.requires!r}, device=None)"
    return extra if base is None else f"Probe.all({base}, {extra})"


@pytest.mark.parametrize("name", [backend.name for backend in project_manifest().backends])
def test_register_ops_registers_what_the_manifest_declares(name):
    manifest = project_manifest()
    backend = manifest.backend(name)
    register_ops = importlib.import_module(f"{backend.package}.register_ops")
    registry = OpRegistry()
    register_ops.register(registry)
    declared = manifest.backend_ops(name)
    assert [op for op in registry.list_operators() if registry.get_impl(op, backend.impl_id)] == (
        sorted(op.name for op, _ in declared)
    )
    for op, impl in declared:
        got = registry.get_impl(op.name, backend.impl_id)
        where = f"{backend.name} {op.name}"
        assert got.kind is BackendImplKind[m.KINDS[backend.kind]], where
        assert got.vendor == backend.vendor, where
        assert got.priority == (backend.priority if impl.priority is None else impl.priority)
        assert repr(got.available) == _availability(backend, impl), where
        function = _function(backend, impl.module, impl.function)
        custom_op = backend.opaque and op.opaque_ok
        if custom_op or impl.eager is not None:
            assert got.fn.__module__ == register_ops.__name__, where
            assert getattr(register_ops, op.name) is got.fn, where
            assert got.fn.functional is function, where
            if impl.eager is not None:
                assert got.fn.eager is _function(backend, *impl.eager), where
        else:
            assert got.fn is function, where
        qualname = f"vllm_fl::{backend.name}_{op.name}"
        if not custom_op:
            assert qualname not in registration.defined(), where
            continue
        params = ", ".join(
            f"{_schema_type(arg.type)} {arg.name}" for arg in (*op.schema.arguments, *op.reads)
        )
        returns = "Tensor" if op.schema.returns.is_single_tensor else "Tensor[]"
        schema = getattr(torch.ops.vllm_fl, f"{backend.name}_{op.name}").default._schema
        assert str(schema) == f"{qualname}({params}) -> {returns}", where
