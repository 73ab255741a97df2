"""The generated register_ops of an opaque backend, run for real: custom ops defined once,
adapters restoring the return form, fakes (the reference) letting torch.compile trace it whole;
plain rows registering the impl itself; a non-opaque backend's eager adapter."""

from __future__ import annotations

import inspect
import shutil
from types import SimpleNamespace

import pytest
import torch

from tests.support.codegen_trees import FIXTURES, importing, registered
from vllm_fl.dispatch import OpRegistry
from vllm_fl.dispatch.runtime import registration


@pytest.fixture(scope="module")
def fast_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("opaque") / "tree"
    shutil.copytree(FIXTURES / "expected", root)
    with importing(root):
        yield root


@pytest.fixture(scope="module")
def fast_registry(fast_tree):
    from fxpkg.fast import register_ops

    registry = OpRegistry()
    register_ops.register(registry)
    register_ops.register(OpRegistry())  # a second registration defines nothing twice
    return registry


def _layer():
    generator = torch.Generator().manual_seed(0)
    return SimpleNamespace(weight=torch.randn(16, generator=generator), variance_epsilon=1e-6)


def test_opaque_backend_registers_custom_op_adapters(fast_registry):
    from fxpkg.fast import register_ops

    impl = fast_registry.get_impl("rms_norm", "default.flagos")
    assert (impl.kind.value, impl.vendor, impl.priority) == ("flagos", None, 150)
    assert impl.is_available() and repr(impl.available) == "Probe(requires=('math',), device=None)"
    assert impl.fn.__module__ == "fxpkg.fast.register_ops" and impl.fn.__qualname__ == "rms_norm"
    assert register_ops.rms_norm is impl.fn  # the name explain shows resolves to the adapter
    assert "vllm_fl::fast_rms_norm" in registration.defined()
    # the schema comes from ops.yaml's types: the op's arguments, then the attributes it reads
    assert str(torch.ops.vllm_fl.fast_rms_norm.default._schema) == (
        "vllm_fl::fast_rms_norm(Tensor x, Tensor? residual, Tensor weight, float "
        "variance_epsilon) -> Tensor[]"
    )
    assert str(torch.ops.vllm_fl.fast_silu_and_mul.default._schema) == (
        "vllm_fl::fast_silu_and_mul(Tensor x) -> Tensor"
    )


def test_plain_rows_register_the_impl_itself(fast_registry):
    """An op no custom op wraps (it returns a str, or writes into its arguments) and without an
    eager variant: the registered function is the impl, no adapter frame in between."""
    from fxpkg.fast import register_ops
    from fxpkg.fast.impl import act, attention

    assert fast_registry.get_impl("pick_backend", "default.flagos").fn is attention.pick_backend
    assert fast_registry.get_impl("scale_into", "default.flagos").fn is act.scale_into
    with pytest.raises(AttributeError, match="has no attribute 'pick_backend'"):
        register_ops.pick_backend


def test_adapters_have_the_signature_of_the_impl(fast_registry):
    """The dispatch's trampoline mirrors the signature of what it calls: an adapter has the
    impl's exact parameters (names, kinds, defaults, annotations) and return annotation."""
    for op in ("rms_norm", "silu_and_mul"):
        fn = fast_registry.get_impl(op, "default.flagos").fn
        assert inspect.signature(fn) == inspect.signature(fn.functional), op


def test_adapters_are_built_once_and_probes_for_each_registration(fast_registry):
    from fxpkg.fast import register_ops

    again = OpRegistry()
    register_ops.register(again)
    first = fast_registry.get_impl("rms_norm", "default.flagos")
    second = again.get_impl("rms_norm", "default.flagos")
    assert second.fn is first.fn
    assert second.available is not first.available  # a probe caches its answer


def test_adapter_restores_each_return_form(fast_registry):
    from fxpkg.reference.impl.norm import rms_norm as reference

    fn = fast_registry.get_impl("rms_norm", "default.flagos").fn
    layer, x, residual = _layer(), torch.randn(3, 16), torch.randn(3, 16)
    out = fn(layer, x)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, reference(layer, x))
    expected = reference(layer, x, residual)
    out, summed = fn(layer, x.clone(), residual.clone())
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(summed, expected[1])


def test_custom_op_traces_whole_under_torch_compile(fast_registry):
    fn = fast_registry.get_impl("rms_norm", "default.flagos").fn
    layer = _layer()
    compiled = torch.compile(lambda x, r: fn(layer, x, r), fullgraph=True, backend="eager")
    x, residual = torch.randn(3, 16), torch.randn(3, 16)
    x0, residual0 = x.clone(), residual.clone()
    out, summed = compiled(x, residual)
    # under the trace the functional impl runs (through the custom op): nothing is overwritten
    assert torch.equal(x, x0) and torch.equal(residual, residual0)
    torch.testing.assert_close(summed, x + residual)
    torch.testing.assert_close(out, fn(layer, x.clone(), residual.clone())[0])


def test_adapter_runs_the_eager_variant_in_place_outside_a_trace(fast_registry):
    from fxpkg.fast.impl import norm
    from fxpkg.reference.impl.norm import rms_norm as reference

    fn = fast_registry.get_impl("rms_norm", "default.flagos").fn
    assert fn.eager is norm.rms_norm_inplace and fn.functional is norm.rms_norm
    layer, x, residual = _layer(), torch.randn(3, 16), torch.randn(3, 16)
    expected = reference(layer, x, residual)
    out, summed = fn(layer, x, residual)
    assert out is x and summed is residual  # overwritten and returned, as vLLM's kernels do
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(summed, expected[1])


def test_non_opaque_backend_gets_an_eager_adapter(generated):
    registry = registered(generated, "fxpkg.vendor.acme")
    impl = registry.get_impl("rms_norm", "vendor.acme")
    fn = impl.fn
    assert (impl.priority, fn.__module__) == (120, "fxpkg.vendor.acme.register_ops")
    assert repr(impl.available) == (
        "Probe.all(Probe(requires=('acme_runtime',), device='cuda'), "
        "Probe(requires=('acme_extra',), device=None))"
    )
    assert fn.eager.__qualname__ == "rms_norm_inplace" and fn.functional.__qualname__ == "rms_norm"
    assert inspect.signature(fn) == inspect.signature(fn.functional)
    layer = SimpleNamespace()
    with pytest.raises(NotImplementedError, match="acme rms_norm: write the in-place eager"):
        fn(layer, torch.ones(2))  # outside a trace: the eager variant
    fn.__globals__["_is_compiling"] = lambda: True  # what Dynamo folds it to while tracing
    with pytest.raises(NotImplementedError, match="acme rms_norm: write the kernel here"):
        fn(layer, torch.ones(2))  # under a trace: the functional impl
    pick = registry.get_impl("pick_backend", "vendor.acme")
    assert pick.fn.__module__ == "fxpkg.vendor.acme.impl.attention"


def test_stub_kernel_fails_loudly(fast_registry):
    fn = fast_registry.get_impl("silu_and_mul", "default.flagos").fn
    with pytest.raises(NotImplementedError, match="fast silu_and_mul: write the kernel here"):
        fn(SimpleNamespace(), torch.randn(2, 8))
